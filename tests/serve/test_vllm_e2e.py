"""The gateway in front of a real vLLM (its CPU build, `make vllm`), started by the launch script `mint export
vllm` writes: routing reaches each champion's adapter, promotions and rollbacks go through vLLM's runtime LoRA API
and drain, streaming, tool calls, feedback, and vLLM killed mid-answer and back.

One vLLM serves the whole module (started once; the last test kills it and starts it again). The base is a toy
llama vLLM's CPU attention runs (scripts/vllm_toys.py) and the adapters say who they are: a signature adapter
answers one known text to any turn (the agent's is a tool call in SmolLM2's format), a noise adapter answers
long random text (a turn that stays in flight). Skipped, with the reason, where no vLLM is installed.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from mint.mol.export import find_vllm

RUNNER = find_vllm()
pytestmark = pytest.mark.skipif(not RUNNER.found, reason="no vLLM installed here (make vllm, or MINT_VLLM_VENV)")

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"
SIGNATURES = {"coding": "I am the coding adapter, version one.", "genui": "I am the genui adapter.",
              "agent": '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'}
WEATHER_TOOL = {"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                                 "parameters": {"type": "object", "properties": {
                                                     "city": {"type": "string"}}, "required": ["city"]}}}
LONG = 3000          # a noise adapter's answer this long takes vLLM 15-20 s on two cores


def wait_for(condition, what: str, limit_s: float = 120.0):
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Vllm:
    """vLLM started as an operator starts it: the exported launch.sh, with the host's own arguments."""

    def __init__(self, launch: Path, log: Path) -> None:
        self.launch, self.log, self.port, self.process = launch, log, _free_port(), None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self, limit_s: float = 300.0) -> None:
        import httpx

        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
        with open(self.log, "ab") as out:
            self.process = subprocess.Popen(
                [str(self.launch), "--host", "127.0.0.1", "--port", str(self.port), "--dtype", "float32",
                 "--max-model-len", "4096", "--max-num-seqs", "32"],
                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + limit_s
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/models", timeout=5).status_code == 200:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.kill()
                pytest.fail(f"vLLM did not start from launch.sh; the end of its log:\n{self.log.read_text()[-3000:]}")
            time.sleep(0.5)

    def signal(self, number: int) -> None:
        os.killpg(self.process.pid, number)

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(30)

    def models(self) -> list[str]:
        import httpx

        return [m["id"] for m in httpx.get(f"{self.url}/models", timeout=10).json()["data"]]

    def answer(self, model: str, messages: list, max_tokens: int) -> str:
        """vLLM's own greedy answer (what the gateway should pass through)."""
        import httpx

        reply = httpx.post(f"{self.url}/chat/completions", timeout=120, json={
            "model": model, "messages": messages, "max_tokens": max_tokens, "temperature": 0.0})
        assert reply.status_code == 200, reply.text
        return reply.json()["choices"][0]["message"]["content"]


class Served:
    """The module's world: a workspace with champions, vLLM from its export, the gateway in front of it."""

    def __init__(self, root: Path) -> None:
        sys.path.insert(0, str(SCRIPTS))
        try:
            from vllm_toys import noise_adapter, signature_adapter, toy_base
        finally:
            sys.path.remove(str(SCRIPTS))
        from mint.project import DEFAULT_PROJECT, Project
        from mint.workspace import workspace

        self.root = root
        self.ws = workspace(root / "home")
        base = toy_base(root / "toy-base")
        self.project = Project(base=str(base), specialists=DEFAULT_PROJECT.specialists)
        # the agent's answers its turns with tools too (the tools listed in the system turn, as the gateway sends)
        with_tools = tuple(upstream_messages(user(text), [WEATHER_TOOL]) for text in (
            "What's the weather in Paris tomorrow?", "Is it raining in Paris?", "hi"))
        self.adapters = {name: signature_adapter(base, root / f"{name}-lora", text, seed=i,
                                                 conversations=with_tools if name == "agent" else ())
                         for i, (name, text) in enumerate(SIGNATURES.items())}
        self.adapters["chat"] = noise_adapter(base, root / "chat-lora-1", seed=11)
        self.adapters["chat-2"] = noise_adapter(base, root / "chat-lora-2", seed=12)
        self.gateway_url = None
        self.running = None

    def crown(self, specialist: str, directory: Path):
        from mint.registry.artifacts import register
        from mint.registry.promotion import promote

        revision = register(self.ws, directory, specialist=specialist, base=self.project.base, method="sft")
        promote(self.ws, revision.ref, force=True, why="test")
        return revision

    def export_and_start(self) -> None:
        from mint.mol.export import export_vllm

        for name in SIGNATURES:
            self.crown(name, self.adapters[name])
        self.export = export_vllm(self.ws, self.project, self.root / "vllm-out")
        # crowned after the export: the gateway publishes it through vLLM's runtime LoRA API
        self.crown("chat", self.adapters["chat"])
        self.vllm = Vllm(Path(self.export.out) / "launch.sh", self.root / "vllm.log")
        self.vllm.start()

    def start_gateway(self) -> None:
        from mint.serve.app import create_app
        from mint.serve.gateway import Gateway, GatewayBackend
        from mint.serve.server import start_background
        from mint.generation.upstream import Upstream

        self.gateway = Gateway.open(self.ws, self.project, Upstream(self.vllm.url, None, 30.0),
                                    max_rank=self.export.max_lora_rank)
        # the champion poller syncs when the tests say (``poll``), so that a move of the registry lands between
        # a turn's start and its end however long the move takes on a busy machine
        self.backend = GatewayBackend(self.gateway, poll_s=3600)
        self.running = start_background(create_app(self.backend), start_limit_s=120)
        self.gateway_url = f"http://127.0.0.1:{self.running.port}"

    def close(self) -> None:
        if self.running is not None:
            self.running.stop()
        self.vllm.kill()

    def poll(self) -> None:
        """One sync of the gateway's champion poller, as its thread runs every poll_s."""
        self.backend.poller.poll()

    def health(self) -> dict:
        import httpx

        return httpx.get(f"{self.gateway_url}/health", timeout=10).json()

    def chat(self, model: str, messages: list, max_tokens: int, **extra):
        import httpx

        return httpx.post(f"{self.gateway_url}/v1/chat/completions", timeout=120,
                          json={"model": model, "messages": messages, "max_tokens": max_tokens, **extra})


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    world = Served(tmp_path_factory.mktemp("vllm-e2e"))
    try:
        world.export_and_start()
        world.start_gateway()
        yield world
    finally:
        if hasattr(world, "vllm"):
            world.close()


def user(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def upstream_messages(messages: list, tools=None) -> list[dict]:
    from mint.mol.mixture import Turn, prompt_of

    return prompt_of(Turn(messages, tools=tools or []))


def streamed(reply_lines) -> tuple[str, list[dict]]:
    """(the streamed text, every event's data)."""
    events = [json.loads(line[5:]) for line in reply_lines if line.startswith("data:") and line != "data: [DONE]"]
    text = "".join((e["choices"][0]["delta"].get("content") or "") for e in events if e.get("choices"))
    return text, events


# --- the launch script, routing, logging --------------------------------------------------------

def test_the_exported_launch_script_starts_vllm_with_the_champions_and_runtime_updating(served):
    launch = (Path(served.export.out) / "launch.sh").read_text()
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in launch
    assert served.export.model == str(served.project.base)          # the base's local files
    listed = served.vllm.models()
    assert listed[0] == served.project.base                          # served under the base's name
    assert {"coding-v1", "genui-v1", "agent-v1"} <= set(listed)     # the exported champions, as --lora-modules
    assert "chat-v1" in listed                                       # published by the gateway at its start
    assert served.health()["status"] == "ok"


def test_a_routed_turn_is_answered_by_its_champions_adapter_on_vllm(served):
    for text in ("Write a Python function that adds two numbers.", "Make a signup form with a name field",
                 "Tell me a fun fact about octopuses."):
        reply = served.chat("mint", user(text), 12)
        assert reply.status_code == 200, reply.text
        mint = reply.json()["mint"]
        specialist, content = mint["specialist"], reply.json()["choices"][0]["message"]["content"]
        assert mint["served_by"] == f"{specialist}:v1"
        adapter = f"{specialist}-v1"
        expected = served.vllm.answer(adapter, upstream_messages(user(text)), 12)
        assert content == expected and content != served.vllm.answer(served.project.base,
                                                                     upstream_messages(user(text)), 12)
        if specialist in SIGNATURES and specialist != "agent":
            assert content == SIGNATURES[specialist]


def test_the_gateways_logged_turn_is_the_one_the_local_runtime_logs(served):
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.mol.turnlog import read_turns

    messages = user("Write a Python function that adds two numbers.")
    reply = served.chat("mint/coding", messages, 16, user="s-1").json()
    through_gateway = next(t for t in read_turns(served.ws) if t["upstream_id"] == reply["id"])
    mixture = Mixture.open(served.ws, served.project)
    [local] = mixture.answer([Turn(messages, specialist="coding", decoding=Decoding(16))])
    answered_locally = next(t for t in read_turns(served.ws) if t["upstream_id"] == local.id)

    def comparable(episode: dict) -> dict:
        return {k: v for k, v in episode.items()
                if k not in ("id", "upstream_id", "ts", "latency_ms", "route_ms", "session")}

    assert set(through_gateway) == set(answered_locally)
    assert comparable(through_gateway) == comparable(answered_locally)
    assert through_gateway["served_by"] == "coding:v1" and through_gateway["session"] == "s-1"
    assert reply["choices"][0]["message"]["content"] == SIGNATURES["coding"] == local.text


def test_a_streamed_turn_arrives_in_pieces_with_the_adapters_answer(served):
    import httpx

    with httpx.stream("POST", f"{served.gateway_url}/v1/chat/completions", timeout=120,
                      json={"model": "mint/coding", "messages": user("hi"), "max_tokens": 16,
                            "stream": True}) as reply:
        assert reply.status_code == 200
        text, events = streamed(list(reply.iter_lines()))
    assert text == SIGNATURES["coding"]
    assert len([e for e in events if e.get("choices") and e["choices"][0]["delta"].get("content")]) > 1
    assert events[-1]["mint"]["served_by"] == "coding:v1"


@pytest.mark.parametrize("stream", [False, True])
def test_a_tool_call_from_vllm_is_parsed_by_the_gateway(served, stream):
    import httpx

    body = {"model": "mint/agent", "messages": user("What's the weather in Paris tomorrow?"), "max_tokens": 48,
            "tools": [WEATHER_TOOL], "stream": stream}
    if not stream:
        reply = httpx.post(f"{served.gateway_url}/v1/chat/completions", json=body, timeout=120).json()
        choice = reply["choices"][0]
        assert "tool_calls" in choice["message"], reply
        calls = choice["message"]["tool_calls"]
    else:
        with httpx.stream("POST", f"{served.gateway_url}/v1/chat/completions", json=body, timeout=120) as reply:
            _text, events = streamed(list(reply.iter_lines()))
        calls = [c for e in events if e.get("choices") for c in e["choices"][0]["delta"].get("tool_calls") or ()]
        choice = events[-1]["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == \
        [("get_weather", {"city": "Paris"})]


def test_feedback_on_a_turn_vllm_answered_is_logged(served):
    import httpx

    from mint.mol.turnlog import read_turns

    reply = served.chat("mint/genui", user("Make a signup form"), 16).json()
    given = httpx.post(f"{served.gateway_url}/v1/feedback", timeout=30,
                       json={"id": reply["id"], "rating": -1, "correction": "a form"})
    assert given.status_code == 200 and given.json() == {"id": reply["id"], "logged": True}
    turn = next(t for t in read_turns(served.ws) if t["upstream_id"] == reply["id"])
    assert turn["feedback"]["rating"] == -1 and turn["feedback"]["correction"] == "a form"
    assert httpx.post(f"{served.gateway_url}/v1/feedback", json={"id": "chatcmpl-none", "rating": 1},
                      timeout=30).status_code == 404


# --- promotion and rollback, live ---------------------------------------------------------------

class LongTurn:
    """A streamed chat turn long enough to stay in flight while the champion moves. It counts as started once its
    stream has begun (vLLM accepted it, the gateway answered 200): on a loaded CPU vLLM may send no word of an
    answer until the whole of it is made (measured: 3000 tokens, then all at once), so waiting for its first
    words would wait for its end."""

    def __init__(self, served) -> None:
        import httpx

        self.lines, self.status = [], None

        def run():
            with httpx.stream("POST", f"{served.gateway_url}/v1/chat/completions", timeout=120,
                              json={"model": "mint/chat", "messages": user("Tell me a long story."),
                                    "max_tokens": LONG, "stream": True}) as reply:
                self.status = reply.status_code
                self.lines.extend(reply.iter_lines())

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        wait_for(lambda: self.status is not None or not self.thread.is_alive(), "the long turn's stream never began")

    def finish(self) -> tuple[str, list[dict]]:
        self.thread.join(180)
        assert not self.thread.is_alive(), "the long turn never ended"
        assert self.status == 200
        return streamed(self.lines)


def switch_while_a_turn_is_in_flight(served, move, old: str, new: str, new_ref: str, old_ref: str):
    """``move()`` the chat champion from ``old`` to ``new`` in the registry, start a turn on ``old``, sync: new
    turns get ``new``, and ``old`` stays loaded on vLLM until that turn is answered, then is unloaded."""
    move()
    turn = LongTurn(served)                                         # the gateway has not synced yet: on ``old``
    assert served.gateway.in_flight.get(old) == 1
    served.poll()                                                   # publishes ``new``, routing switches to it
    # (the turn's answer is still coming from vLLM: syncs unload only between polls, so ``old`` must be there)
    assert served.gateway.in_flight.get(old) == 1, "the long turn ended during the sync: it must stay in flight"
    assert old in served.vllm.models() and new in served.vllm.models(), served.health()
    assert served.health()["specialists"]["chat"]["adapter"] == new
    quick = []                  # vLLM may schedule it only once the long turn's batch ends: its answer is read last
    asked = threading.Thread(target=lambda: quick.append(served.chat("mint/chat", user("hi"), 6)))
    asked.start()
    _text, events = turn.finish()
    assert events[-1]["mint"]["served_by"] == old_ref and events[-1]["choices"][0]["finish_reason"] == "length"
    wait_for(lambda: served.poll() or old not in served.vllm.models(),
             f"{old} was not unloaded once its turn was answered", 30)
    asked.join(120)
    assert quick[0].status_code == 200 and quick[0].json()["mint"]["served_by"] == new_ref
    assert quick[0].json()["choices"][0]["message"]["content"] == \
        served.vllm.answer(new, upstream_messages(user("hi")), 6)


def test_a_promotion_loads_the_new_adapter_and_unloads_the_old_once_its_turns_are_answered(served):
    switch_while_a_turn_is_in_flight(served, lambda: served.crown("chat", served.adapters["chat-2"]),
                                     "chat-v1", "chat-v2", "chat:v2", "chat:v1")


def test_a_rollback_does_the_same_in_reverse(served):
    from mint.registry.promotion import rollback

    switch_while_a_turn_is_in_flight(served, lambda: rollback(served.ws, "chat", why="test"),
                                     "chat-v2", "chat-v1", "chat:v1", "chat:v2")


def test_with_a_trained_router_champion_the_gateway_routes_on_its_probe_and_forwards(served):
    """A router revision as training makes one (a probe reading one layer of the base), promoted while the
    gateway runs: turns are routed on it and answered by the chosen specialist's adapter on vLLM."""
    import torch

    from mint.routing.router import Probe
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote

    names, width = served.project.names, 128                         # the toy base's hidden size
    generator = torch.Generator().manual_seed(0)
    probe = Probe(tuple(names), 1, torch.randn(len(names), width, generator=generator), torch.zeros(len(names)),
                  torch.zeros(width), torch.ones(width), reads="prompt")
    probe.save(served.root / "probe", base=served.project.base)
    revision = register(served.ws, served.root / "probe", specialist=served.project.router,
                        base=served.project.base)
    promote(served.ws, revision.ref, force=True, why="a trained router champion in front of vLLM")
    served.poll()
    assert served.health()["router"] == revision.ref and served.health()["status"] == "ok"
    for text in ("zzzz qqqq", "Tell me a fun fact about octopuses.", "Plan a trip to Lisbon."):
        reply = served.chat("mint", user(text), 8)
        assert reply.status_code == 200, reply.text
        mint = reply.json()["mint"]
        assert mint["route"]["revision"] == revision.ref
        champion = served.health()["specialists"][mint["specialist"]]["adapter"]
        assert reply.json()["choices"][0]["message"]["content"] == \
            served.vllm.answer(champion, upstream_messages(user(text)), 8)


# --- contracts evaluated on vLLM (mint eval --engine URL) -----------------------------------------

def test_a_contract_evaluated_on_vllm_scores_the_answers_the_gateway_serves(served, tmp_path):
    """The genui champion evaluated with vLLM as the engine: loaded under its revision's name for the evaluation
    and unloaded after, and every answer the report scored is the one the gateway serves for that request."""
    from mint.contract.evaluate import evaluate, evaluation_conversations
    from mint.contract.schema import load_contract
    from mint.contract.served import served_name
    from mint.registry.artifacts import load_revision

    rows = [{"messages": [{"role": "user", "content": text}], "reference": {"type": "Card", "props": {}}}
            for text in ("Make a signup form with a name field", "Show a card titled Hello", "hi")]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "genui.yaml").write_text(
        "contract: genui-served\nversion: 1\nspecialist: genui\nharness:\n  system: \"Answer with JSON.\"\n"
        "  decoding: {max_new_tokens: 16}\nsuites:\n  - {name: core, data: core.jsonl}\n"
        "gates:\n  - {metric: core.parse_rate, min: 0.0}\npromotion: {min_examples: 1}\n")
    revision, _directory = load_revision(served.ws, "genui:champion")
    result = evaluate(served.ws, revision.ref, tmp_path / "genui.yaml", base=served.project.base,
                      engine=served.vllm.url)
    assert result.report.generation["core"]["engine"]["kind"] == "served"
    assert served_name(revision) not in served.vllm.models() and "genui-v1" in served.vllm.models()
    contract = load_contract(tmp_path / "genui.yaml")
    scored = [json.loads(line)["outputs"][0] for line in open(result.predictions_path)]
    for conversation, answer in zip(evaluation_conversations(contract.harness(), [(None, rows)]), scored):
        reply = served.chat("mint/genui", conversation, 16)
        assert reply.status_code == 200 and reply.json()["mint"]["served_by"] == "genui:v1"
        assert answer == reply.json()["choices"][0]["message"]["content"]
    # the candidate's answers, not the bare base's (a signature adapter answers its text to most requests; the
    # toy base answers noise)
    assert SIGNATURES["genui"] in scored


# --- vLLM killed mid-answer, and back (last: it restarts vLLM) ------------------------------------

def test_vllm_killed_mid_answer_ends_the_turn_with_an_error_and_the_gateway_recovers(served):
    # vLLM is frozen with the turn's stream begun, then killed: a turn whose answer vLLM had already sent whole
    # (it can make one faster than a loaded CPU relays it) is thawed, read and asked again
    for _attempt in range(3):
        turn = LongTurn(served)
        served.vllm.signal(signal.SIGSTOP)
        time.sleep(2)                                               # what vLLM had sent reaches the gateway
        if served.gateway.in_flight:
            break
        served.vllm.signal(signal.SIGCONT)
        turn.finish()
    else:
        pytest.fail("vLLM had answered the long turn whole before it was frozen, three times")
    served.vllm.kill()
    _text, events = turn.finish()                                   # ended, not hung
    assert "error" in events[-1] and "mint" not in events[-1]       # not an answer's last chunk
    refused = served.chat("mint/coding", user("hi"), 4)
    assert refused.status_code == 502 and refused.json()["error"]["code"] == "upstream_error"
    served.poll()
    assert served.health()["status"] == "not ok"
    served.vllm.start()                                             # back: launch.sh's adapters, not chat's
    wait_for(lambda: served.poll() or served.health()["status"] == "ok", "the gateway never recovered", 120)
    assert "chat-v1" in served.vllm.models()                         # published again by the gateway
    answered = served.chat("mint/chat", user("hi"), 6)
    assert answered.status_code == 200 and answered.json()["mint"]["served_by"] == "chat:v1"
    assert answered.json()["choices"][0]["message"]["content"] == served.vllm.answer(
        "chat-v1", upstream_messages(user("hi")), 6)
