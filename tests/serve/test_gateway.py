"""mint serve --upstream: the router as a gateway in front of a second `mint serve` (the upstream, as vLLM would
be), both on 127.0.0.1 threads; and the local server's vLLM-shaped /v1/load_lora_adapter and /v1/unload_lora_adapter."""
from __future__ import annotations

import asyncio
import json
import threading
import time

import pytest

from mint.project import DEFAULT_PROJECT, Project

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)
UPSTREAM_KEY = "upstream-key-0001"
CODING_TURN = [{"role": "user", "content": "Write a Python function that adds two numbers."}]


def wait_for(condition, what: str, limit_s: float = 120.0):
    """Polls a condition (the poller runs on its own clock); the limit only catches a hang."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def auth(key: str = UPSTREAM_KEY) -> dict:
    return {"authorization": f"Bearer {key}"}


class Upstream:
    """A second `mint serve` with a workspace of its own (no registry: it serves what it is told to load)."""

    def __init__(self, home) -> None:
        from mint.workspace import workspace

        self.ws = workspace(home)
        self.running = None

    def start(self, port: int = 0) -> "Upstream":
        from mint.serve.admission import Access
        from mint.mol.mixture import Mixture
        from mint.serve.app import create_app
        from mint.serve.local import LocalBackend
        from mint.serve.server import start_background

        app = create_app(LocalBackend(Mixture.open(self.ws, TINY_PROJECT, named_slots=4), window_ms=5, poll_s=0.1),
                         access=Access((UPSTREAM_KEY,)))
        self.running = start_background(app, start_limit_s=120, port=port)
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.running.port}"

    def models(self) -> list[str]:
        import httpx

        return [m["id"] for m in httpx.get(f"{self.url}/v1/models", headers=auth()).json()["data"]]

    def stop(self) -> None:
        self.running.stop()


@pytest.fixture
def upstream(tmp_path):
    running = Upstream(tmp_path / "upstream-home").start()
    yield running
    running.stop()


@pytest.fixture
def start_gateway(ws):
    """start_gateway(url, timeout_s=30) -> the gateway's base URL (stopped after the test)."""
    from mint.serve.app import create_app
    from mint.serve.gateway import Gateway, GatewayBackend
    from mint.generation.upstream import Upstream as UpstreamSpec
    from mint.serve.server import start_background

    started = []

    def start(url: str, timeout_s: float = 30.0) -> str:
        gateway = Gateway.open(ws, TINY_PROJECT, UpstreamSpec(url, UPSTREAM_KEY, timeout_s))
        running = start_background(create_app(GatewayBackend(gateway, poll_s=0.1)), start_limit_s=120)
        started.append(running)
        return f"http://127.0.0.1:{running.port}"

    yield start
    for running in started:
        running.stop()


def client(url):
    from openai import OpenAI
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=60)


def local_answer(ws, messages, max_tokens: int):
    """The same turn answered by the local runtime, with the workspace's champions."""
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding

    mixture = Mixture.open(ws, TINY_PROJECT)
    [answer] = mixture.answer([Turn(messages, decoding=Decoding(max_tokens))])
    return answer


# --- the gateway ----------------------------------------------------------------------------------

def test_a_turn_through_the_gateway_equals_the_local_answer_of_the_same_revision(ws, crown, tiny_loras, upstream,
                                                                                  start_gateway):
    crown("coding", tiny_loras["coding"])
    gateway = start_gateway(upstream.url)
    assert "coding-v1" in upstream.models()              # published under the revision's name at start
    reply = client(gateway).chat.completions.create(model="mint", messages=CODING_TURN, max_tokens=12)
    local = local_answer(ws, CODING_TURN, 12)
    assert local.served_by == "coding:v1"
    assert reply.model_extra["mint"]["specialist"] == local.specialist == "coding"
    assert reply.model_extra["mint"]["served_by"] == "coding:v1"
    assert reply.choices[0].message.content == local.text and local.text


def test_a_streamed_turn_through_the_gateway_equals_the_local_answer(ws, crown, tiny_loras, upstream, start_gateway):
    crown("coding", tiny_loras["coding"])
    gateway = start_gateway(upstream.url)
    chunks = list(client(gateway).chat.completions.create(model="mint", messages=CODING_TURN, max_tokens=12,
                                                          stream=True))
    text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
    assert len([c for c in chunks if c.choices and c.choices[0].delta.content]) > 1     # streamed, not whole
    assert chunks[-1].model_extra["mint"]["served_by"] == "coding:v1"
    assert text == local_answer(ws, CODING_TURN, 12).text


def test_a_promotion_is_published_to_the_running_upstream_and_the_next_turn_names_it(ws, crown, tiny_loras,
                                                                                      upstream, start_gateway):
    import httpx

    from mint.mol.turnlog import read_turns

    crown("coding", tiny_loras["coding"])
    gateway = start_gateway(upstream.url)
    crown("coding", tiny_loras["agent"])                 # coding:v2, while the gateway runs
    wait_for(lambda: httpx.get(f"{gateway}/health").json()["specialists"]["coding"]["adapter"] == "coding-v2",
             "the gateway never switched to coding-v2")
    served = upstream.models()
    assert "coding-v2" in served and "coding-v1" not in served     # loaded, and the old one unloaded
    reply = client(gateway).chat.completions.create(model="mint/coding", messages=CODING_TURN, max_tokens=4)
    assert reply.model_extra["mint"]["served_by"] == "coding:v2"
    assert read_turns(upstream.ws)[-1]["served_by"] == "coding:v2"   # the upstream answered with the new adapter


def test_a_promotion_and_a_rollback_while_the_gateway_streams_only_append_to_the_registry_log(
        ws, crown, tiny_loras, upstream, start_gateway):
    """A server keeps the registry open while it runs, so a promotion or a rollback beside it syncs the disk once:
    the registry's log (registry.sqlite-wal) is appended to, never checkpointed into the database and deleted on
    close, then made again by the next write (five syncs where one does; beside vLLM's CPU build a promotion sat
    7-9 s in them). The stream in flight meanwhile is answered whole."""
    import httpx

    from mint.registry import store
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote, rollback

    crown("coding", tiny_loras["coding"])
    v2 = register(ws, tiny_loras["agent"], specialist="coding", base="tiny-random", method="sft")
    gateway = start_gateway(upstream.url)
    wait_for(lambda: httpx.get(f"{gateway}/health").json()["poller"]["last_poll"], "the poller never polled")
    database = store.db_path(ws)
    log = database.with_name(database.name + "-wal")
    before = (log.exists() and log.stat().st_ino, database.stat().st_mtime_ns, database.stat().st_size)
    lines, began = [], threading.Event()

    def long_turn():
        with httpx.stream("POST", f"{gateway}/v1/chat/completions", timeout=120,
                          json={"model": "mint/coding", "messages": CODING_TURN, "max_tokens": 1024,
                                "stream": True}) as reply:
            lines.append(reply.status_code)
            for line in reply.iter_lines():
                began.set()
                lines.append(line)

    streaming = threading.Thread(target=long_turn)
    streaming.start()
    assert began.wait(60), "the long turn's stream never began"
    for move in (lambda: promote(ws, v2.ref, force=True, why="a promotion while the gateway streams"),
                 lambda: rollback(ws, "coding", why="a rollback while the gateway streams")) * 2:
        move()
        assert log.exists() and log.stat().st_ino == before[0], "the registry's log was deleted and made again"
    assert (database.stat().st_mtime_ns, database.stat().st_size) == before[1:], \
        "a promotion checkpointed the log into the database on close"
    streaming.join(120)
    events = [json.loads(line[5:]) for line in lines[1:] if line.startswith("data:") and line != "data: [DONE]"]
    assert lines[0] == 200 and not any("error" in event for event in events)
    assert events[-1]["choices"][0]["finish_reason"] == "length" and events[-1]["mint"]["served_by"] == "coding:v1"


def test_an_upstream_that_dies_gives_502s_and_the_gateway_recovers_when_it_returns(ws, crown, tiny_loras, upstream,
                                                                                   start_gateway):
    import httpx

    crown("coding", tiny_loras["coding"])
    gateway = start_gateway(upstream.url)
    port = upstream.running.port
    upstream.stop()
    body = {"model": "mint/coding", "messages": CODING_TURN, "max_tokens": 4}
    for stream in (False, True):
        refused = httpx.post(f"{gateway}/v1/chat/completions", json={**body, "stream": stream}, timeout=60)
        assert refused.status_code == 502
        assert refused.json()["error"]["code"] == "upstream_error"
    wait_for(lambda: httpx.get(f"{gateway}/health").status_code == 503, "health did not say the upstream is gone")
    upstream.start(port)                                 # back, without the adapters it had loaded
    wait_for(lambda: "coding-v1" in upstream.models(), "the gateway did not publish coding-v1 again")
    answered = httpx.post(f"{gateway}/v1/chat/completions", json=body, timeout=60)
    assert answered.status_code == 200 and answered.json()["mint"]["served_by"] == "coding:v1"


def stalling_upstream(release: threading.Event):
    """An upstream that lists a base model and never answers a chat completion (until ``release``)."""
    from fastapi import FastAPI

    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "stub-base", "object": "model", "parent": None}]}

    @app.post("/v1/chat/completions")
    async def stall():
        while not release.is_set():
            await asyncio.sleep(0.05)
        return {}

    return app


def test_an_upstream_that_stalls_gives_504_within_the_timeout(ws, start_gateway):
    import httpx

    from mint.serve.server import start_background

    release = threading.Event()
    stalled = start_background(stalling_upstream(release), start_limit_s=60)
    try:
        gateway = start_gateway(f"http://127.0.0.1:{stalled.port}", timeout_s=1.0)
        for stream in (False, True):
            started = time.monotonic()
            reply = httpx.post(f"{gateway}/v1/chat/completions", timeout=30,
                               json={"messages": [{"role": "user", "content": "hi"}], "stream": stream})
            assert reply.status_code == 504 and reply.json()["error"]["code"] == "upstream_timeout"
            assert time.monotonic() - started < 1.0 + 5.0      # the timeout, and a margin for a busy machine
    finally:
        release.set()
        stalled.stop()


def test_the_gateways_logged_turn_is_the_local_runtimes_and_ingests(ws, crown, tiny_loras, upstream, start_gateway):
    from mint.data.datasets import iter_episodes
    from mint.data.ingest import ingest
    from mint.mol.turnlog import logs_dir, read_turns

    crown("coding", tiny_loras["coding"])
    gateway = start_gateway(upstream.url)
    history = [*CODING_TURN, {"role": "assistant", "content": "def add(a, b): ..."},
               {"role": "user", "content": "Now write it with type hints."}]
    reply = client(gateway).chat.completions.create(model="mint", messages=history, max_tokens=8, user="s-1")
    [through_gateway] = read_turns(ws)
    assert through_gateway["upstream_id"] == reply.id
    local_answer(ws, history, 8)
    [_, answered_locally] = read_turns(ws)

    def comparable(episode: dict) -> dict:
        # the answer's id is each its own; the content hash (id) is the same
        return {k: v for k, v in episode.items() if k not in ("upstream_id", "ts", "latency_ms", "route_ms", "session")}

    assert set(through_gateway) == set(answered_locally)
    assert comparable(through_gateway) == comparable(answered_locally)
    assert through_gateway["session"] == "s-1"
    ingest(ws, [logs_dir(ws)], dataset="served", project=DEFAULT_PROJECT, workers=0)
    [episode, *_] = [e for e in iter_episodes(ws, "served") if e["messages"][-1]["content"] == reply.choices[0].message.content]
    assert episode["specialist"] == "coding" and episode["served_by"] == "coding:v1"
    assert [m.get("weight") for m in episode["messages"] if m["role"] == "assistant"][0] == 0   # history: context


# turns the tiny base's starter probe decides (no rule or keyword does), among three specialists
PROBE_TURNS = ["whats big O of binary search", "how do i undo my last commit", "I feel a bit tired today.",
               "Summarize the plot of Hamlet.", "Why is the sky blue?", "Plan a trip to Lisbon."]


def test_turns_routed_together_in_one_probe_pass_get_the_routes_each_gets_alone(ws):
    from mint.serve.gateway import Gateway
    from mint.generation.upstream import Upstream as UpstreamSpec
    from mint.mol.mixture import Turn

    # no upstream answers: routing needs none
    gateway = Gateway.open(ws, TINY_PROJECT, UpstreamSpec("http://127.0.0.1:9", timeout_s=2.0))
    turns = [Turn([{"role": "user", "content": text}]) for text in PROBE_TURNS]
    alone = [gateway.route(turn)[0] for turn in turns]
    assert {route.decided_by for route in alone} == {"probe"}
    assert len({route.specialist for route in alone}) >= 3          # rows that were mixed up would show
    batcher, compute = gateway.features, gateway.features.compute
    first_pass_may_end, sizes = threading.Event(), []

    def held(conversations, layers, reads):    # the first pass lasts until every other turn waits behind it
        sizes.append(len(conversations))
        if len(sizes) == 1:
            first_pass_may_end.wait(60)
        return compute(conversations, layers, reads)

    batcher.compute = held
    together: list = [None] * len(turns)

    def route(i: int) -> None:
        together[i] = gateway.route(turns[i])[0]

    threads = [threading.Thread(target=route, args=(0,))]
    threads[0].start()
    wait_for(lambda: sizes, "the first turn's pass never began")
    threads += [threading.Thread(target=route, args=(i,)) for i in range(1, len(turns))]
    for thread in threads[1:]:
        thread.start()
    wait_for(lambda: batcher.waiting == len(turns) - 1, "the other turns did not queue for the next pass")
    first_pass_may_end.set()
    for thread in threads:
        thread.join(60)
    assert sizes == [1, len(turns) - 1]                              # the five waiting turns: one pass
    for one, batched in zip(alone, together):
        assert batched.specialist == one.specialist and batched.decided_by == "probe"
        assert batched.probabilities == pytest.approx(one.probabilities, abs=1e-4)
    gateway.close()


def test_the_gateway_holds_the_bases_first_layers_and_no_head():
    from mint.base import TINY, decoder_layers, load_base, probe_layers
    from mint.serve.gateway import routing_base

    whole = load_base(TINY)
    held, depth = routing_base(TINY)
    assert depth == len(decoder_layers(whole.model)) == 2
    assert len(decoder_layers(held.model)) == max(probe_layers(whole.model)) == 1
    assert held.model.get_output_embeddings() is None
    assert sum(p.numel() for p in held.model.parameters()) < sum(p.numel() for p in whole.model.parameters())


def test_the_gateway_announces_the_rank_a_mint_upstream_loads_and_promote_keeps_to_it(ws, tiny_loras, upstream):
    from mint.errors import Refused
    from mint.serve.gateway import Gateway
    from mint.generation.upstream import Upstream as UpstreamSpec
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.registry.servers import running_servers

    gateway = Gateway.open(ws, TINY_PROJECT, UpstreamSpec(upstream.url, UPSTREAM_KEY))
    assert gateway.max_rank == 16                                    # the upstream's /health said so
    gateway.announce("http://127.0.0.1:8000")
    assert [s["max_rank"] for s in running_servers(ws)] == [16]
    wide = register(ws, tiny_loras["wide"], specialist="coding", base="tiny-random", method="sft")   # rank 32
    with pytest.raises(Refused, match="rank 32, above the rank 16"):
        promote(ws, wide.ref)
    gateway.close()
    assert running_servers(ws) == []
    given = Gateway.open(ws, TINY_PROJECT, UpstreamSpec(upstream.url, UPSTREAM_KEY), max_rank=8)
    given.announce("http://127.0.0.1:8000")                          # vLLM's --max-lora-rank, as the operator says
    assert [s["max_rank"] for s in running_servers(ws)] == [8]
    given.close()


def holding_upstream(release: threading.Event, loaded: list, unloaded: list, asked: list, before_load=None):
    """An upstream with vLLM's runtime LoRA API that answers a chat completion once ``release`` is set, and
    404 for an adapter it does not hold then (as vLLM does); ``before_load()`` runs (in a thread) before each
    load."""
    from fastapi import FastAPI
    from fastapi.responses import JSONResponse, PlainTextResponse

    app = FastAPI()

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": [{"id": "stub-base", "object": "model", "parent": None},
                                           *({"id": n, "object": "model", "parent": "stub-base"} for n in loaded)]}

    @app.post("/v1/load_lora_adapter")
    async def load(body: dict):
        if before_load is not None:
            await asyncio.to_thread(before_load)
        loaded.append(body["lora_name"])
        return PlainTextResponse("Success")

    @app.post("/v1/unload_lora_adapter")
    async def unload(body: dict):
        loaded.remove(body["lora_name"])
        unloaded.append(body["lora_name"])
        return PlainTextResponse("Success")

    @app.post("/v1/chat/completions")
    async def chat(body: dict):
        asked.append(body["model"])
        while not release.is_set():
            await asyncio.sleep(0.02)
        if body["model"] not in [*loaded, "stub-base"]:
            return JSONResponse({"error": {"message": f"model {body['model']} does not exist"}}, 404)
        return {"choices": [{"message": {"role": "assistant", "content": "done"}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1}}

    return app


@pytest.mark.parametrize("stream", [False, True])
def test_a_replaced_adapter_stays_loaded_until_the_turns_forwarded_to_it_are_answered(ws, crown, tiny_loras,
                                                                                      start_gateway, stream):
    import httpx

    from mint.serve.server import start_background

    release, loaded, unloaded, asked = threading.Event(), [], [], []
    held = start_background(holding_upstream(release, loaded, unloaded, asked), start_limit_s=60)
    try:
        crown("coding", tiny_loras["coding"])
        gateway = start_gateway(f"http://127.0.0.1:{held.port}")
        replies = []
        turn = threading.Thread(target=lambda: replies.append(httpx.post(
            f"{gateway}/v1/chat/completions", timeout=60,
            json={"model": "mint/coding", "messages": CODING_TURN, "stream": stream})))
        turn.start()
        wait_for(lambda: asked == ["coding-v1"], "the turn never reached the upstream")
        crown("coding", tiny_loras["agent"])                         # coding:v2, while that turn is answered
        wait_for(lambda: "coding-v2" in loaded, "the gateway never published coding-v2")
        polled = httpx.get(f"{gateway}/health").json()["poller"]["last_poll"]
        wait_for(lambda: httpx.get(f"{gateway}/health").json()["poller"]["last_poll"] > polled + 0.3,
                 "the poller stopped")                               # several syncs since the switch
        assert "coding-v1" in loaded and unloaded == []
        release.set()
        turn.join(60)
        assert replies[0].status_code == 200
        if stream:
            assert '"served_by":"coding:v1"' in replies[0].text.replace(" ", "")
        else:
            assert replies[0].json()["mint"]["served_by"] == "coding:v1"
        wait_for(lambda: unloaded == ["coding-v1"], "coding-v1 was not unloaded once its turn was answered")
    finally:
        release.set()
        held.stop()


def test_health_is_not_ok_until_the_upstream_is_reached_and_the_champions_are_loaded(ws, crown, tiny_loras,
                                                                                      start_gateway):
    """An orchestrator that trusts /health sends no turn before the gateway can answer it with the champion."""
    import socket

    import httpx

    from mint.serve.server import start_background

    crown("coding", tiny_loras["coding"])
    with socket.socket() as sock:              # a port nothing listens on yet: the upstream starts there later
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    gateway = start_gateway(f"http://127.0.0.1:{port}")
    unreached = httpx.get(f"{gateway}/health")
    assert (unreached.status_code, unreached.json()["status"]) == (503, "not ok")
    assert "cannot reach" in unreached.json()["upstream"]["error"]
    release, loaded, asked = threading.Event(), [], []
    loading = threading.Event()

    def held_load():                            # the upstream answers /v1/models, and loads once released
        loading.set()
        release.wait(60)

    held = start_background(holding_upstream(threading.Event(), loaded, [], asked, before_load=held_load),
                            start_limit_s=60, port=port)
    try:
        wait_for(loading.is_set, "the gateway never asked the upstream to load coding-v1")
        for _ in range(3):                      # reached, but the champion is not loaded yet
            assert httpx.get(f"{gateway}/health").status_code == 503
            time.sleep(0.1)
        release.set()
        wait_for(lambda: httpx.get(f"{gateway}/health").status_code == 200, "health never said ok")
        assert httpx.get(f"{gateway}/health").json()["specialists"]["coding"]["adapter"] == "coding-v1"
        assert loaded == ["coding-v1"]
    finally:
        release.set()
        held.stop()


def test_health_is_not_ok_while_a_champion_cannot_be_published(ws, crown, tiny_loras, upstream, start_gateway):
    """A champion whose files fail verification is answered by the base meanwhile, and /health says so."""
    import httpx

    from mint.registry.artifacts import revision_dir

    revision = crown("coding", tiny_loras["coding"])
    weights = revision_dir(ws, revision) / "adapter_model.safetensors"
    weights.chmod(0o644)
    weights.write_bytes(weights.read_bytes()[:-1] + b"\0")          # a changed file: refused, never served
    gateway = start_gateway(upstream.url)
    health = httpx.get(f"{gateway}/health")
    assert (health.status_code, health.json()["status"]) == (503, "not ok")
    assert "failed verification" in health.json()["specialists"]["coding"]["error"]
    assert "coding-v1" not in upstream.models()


def test_serve_refuses_an_upstream_that_is_not_an_http_url_before_loading_anything(ws):
    from tests.conftest import run_mint

    result = run_mint("serve", "--port", "0", "--upstream", "gpu-host:8001")
    assert result.returncode == 2 and "--upstream" in result.stderr and "http(s) URL" in result.stderr


# --- vLLM's runtime LoRA API on the local server ----------------------------------------------------

def test_load_and_unload_lora_adapter_answer_in_vllms_shapes_behind_the_key(upstream, tiny_loras):
    import httpx

    url = upstream.url
    load = {"lora_name": "coder", "lora_path": str(tiny_loras["coding"])}
    assert httpx.post(f"{url}/v1/load_lora_adapter", json=load).status_code == 401
    loaded = httpx.post(f"{url}/v1/load_lora_adapter", json=load, headers=auth())
    assert loaded.status_code == 200 and loaded.text == "Success: LoRA adapter 'coder' added successfully."
    again = httpx.post(f"{url}/v1/load_lora_adapter", json=load, headers=auth())
    assert again.status_code == 400 and again.json()["error"]["type"] == "InvalidUserInput"
    assert again.json()["error"]["code"] == 400
    missing = httpx.post(f"{url}/v1/load_lora_adapter", headers=auth(),
                         json={"lora_name": "ghost", "lora_path": str(tiny_loras["coding"]) + "-missing"})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "NotFoundError"
    [card] = [m for m in httpx.get(f"{url}/v1/models", headers=auth()).json()["data"] if m["id"] == "coder"]
    assert card["parent"] == "mint"
    ask = {"model": "coder", "messages": CODING_TURN, "max_tokens": 4}
    answered = httpx.post(f"{url}/v1/chat/completions", json=ask, headers=auth())
    assert answered.status_code == 200 and answered.json()["mint"]["served_by"] == "coder"
    unloaded = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "coder"}, headers=auth())
    assert unloaded.status_code == 200 and unloaded.text == "Success: LoRA adapter 'coder' removed successfully."
    gone = httpx.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": "coder"}, headers=auth())
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "NotFoundError"
    assert httpx.post(f"{url}/v1/chat/completions", json=ask, headers=auth()).status_code == 404


def test_a_named_adapter_answers_as_the_same_adapter_in_a_specialists_slot(tiny_loras):
    from mint.base import TINY, load_base
    from mint.mol.runtime import MixtureRuntime
    from tests.conftest import CONVERSATIONS

    runtime = MixtureRuntime(load_base(TINY), TINY_PROJECT.names, max_rank=16, named_slots=1)
    runtime.load_named("coder", tiny_loras["coding"])
    runtime.load_adapter("coding", tiny_loras["coding"])
    named, slotted, bare = runtime.generate([CONVERSATIONS[0]] * 3, ["coder", "coding", None])
    assert named.token_ids == slotted.token_ids != bare.token_ids


def register_one_layer_probe(ws, tmp_path, seed: int = 0):
    """A router revision as training makes one: a probe reading one layer (no shallower ones), so its
    feature_layers is that layer's number alone."""
    import torch

    from mint.routing.router import Probe
    from mint.registry.artifacts import register

    names, width = TINY_PROJECT.names, 64            # the tiny base's hidden size
    generator = torch.Generator().manual_seed(seed)
    probe = Probe(tuple(names), 1, torch.randn(len(names), width, generator=generator), torch.zeros(len(names)),
                  torch.zeros(width), torch.ones(width), reads="prompt")
    probe.save(tmp_path / f"probe-{seed}", base="tiny-random")
    return register(ws, tmp_path / f"probe-{seed}", specialist=TINY_PROJECT.router, base="tiny-random")


def test_the_gateway_opens_and_routes_with_a_trained_router_champion(ws, tmp_path):
    from mint.serve.gateway import Gateway
    from mint.generation.upstream import Upstream as UpstreamSpec
    from mint.mol.mixture import Turn
    from mint.registry.promotion import promote

    revision = register_one_layer_probe(ws, tmp_path)
    promote(ws, revision.ref, force=True, why="a trained router champion for the gateway to load")
    gateway = Gateway.open(ws, TINY_PROJECT, UpstreamSpec("http://127.0.0.1:9", timeout_s=2.0))
    try:
        route, _ms = gateway.route(Turn([{"role": "user", "content": "zzzz qqqq"}]))
        assert (route.decided_by, gateway.router.revision) == ("probe", revision.ref)
        assert route.specialist in TINY_PROJECT.names
    finally:
        gateway.close()


def test_a_router_champion_promoted_while_the_gateway_runs_is_picked_up(ws, tmp_path):
    from mint.serve.gateway import Gateway
    from mint.generation.upstream import Upstream as UpstreamSpec, UpstreamError
    from mint.mol.mixture import Turn
    from mint.registry.promotion import promote

    gateway = Gateway.open(ws, TINY_PROJECT, UpstreamSpec("http://127.0.0.1:9", timeout_s=2.0))
    try:
        assert gateway.router.revision == "starter"
        revision = register_one_layer_probe(ws, tmp_path, seed=1)
        promote(ws, revision.ref, force=True, why="a router champion promoted under a running gateway")
        with pytest.raises(UpstreamError):       # no upstream answers; the router is synced before it is asked
            gateway.sync()
        route, _ms = gateway.route(Turn([{"role": "user", "content": "zzzz qqqq"}]))
        assert (route.decided_by, gateway.router.revision) == ("probe", revision.ref)
    finally:
        gateway.close()
