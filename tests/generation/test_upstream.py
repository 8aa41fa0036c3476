"""The upstream client alone, against a fake OpenAI-compatible server: answers whole and streamed, and every way an
upstream fails mapped to a 502 or a 504, never a hang."""
from __future__ import annotations

import asyncio
import json
import time

import pytest
from fastapi import Request   # at module level: FastAPI resolves the fake's (postponed) annotations here

KEY = "upstream-key-0001"
BODY = {"model": "coding-v1", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}


def chunk(delta: dict | None = None, finish: str | None = None, **extra) -> str:
    return "data: " + json.dumps({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}],
                                  **extra}) + "\n\n"


class FakeUpstream:
    """An OpenAI-compatible server whose chat completions answer as ``self.mode`` says."""

    def __init__(self) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse, PlainTextResponse, StreamingResponse

        from mint.serve.server import start_background

        self.mode, self.seen, self.loaded = "ok", [], []
        app = FastAPI()

        @app.post("/v1/chat/completions")
        async def completions(request: Request):
            body = await request.json()
            self.seen.append((request.headers.get("authorization"), body))
            if self.mode == "error":
                return JSONResponse({"error": {"message": "model coding-v1 is not loaded"}}, 404)
            if self.mode == "stall":
                await asyncio.sleep(3)
            if self.mode == "not a completion":
                return JSONResponse({"data": []})
            if not body.get("stream"):
                return {"choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there."},
                                     "finish_reason": "length"}], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}

            async def events():
                yield chunk({"role": "assistant", "content": ""})
                yield chunk({"content": "Hello"})
                if self.mode == "fails mid-answer":
                    yield "data: " + json.dumps({"error": {"message": "out of memory"}}) + "\n\n"
                    return
                if self.mode == "stalls mid-answer":
                    await asyncio.sleep(3)
                yield chunk({"content": " there."})
                yield chunk({}, "stop", usage={"prompt_tokens": 5, "completion_tokens": 2})
                yield "data: [DONE]\n\n"

            return StreamingResponse(events(), media_type="text/event-stream")

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": "base-model", "parent": None},
                                               {"id": "coding-v1", "parent": "base-model"}, {"no": "id"}]}

        @app.get("/health")
        async def health():
            return {"status": "ok", "max_rank": 16}

        @app.post("/v1/load_lora_adapter")
        async def load(request: Request):
            body = await request.json()
            if body["lora_name"] in self.loaded:
                return PlainTextResponse(f"The lora adapter '{body['lora_name']}' has already been loaded.", 400)
            self.loaded.append(body["lora_name"])
            return PlainTextResponse("Success")

        @app.post("/v1/unload_lora_adapter")
        async def unload(request: Request):
            body = await request.json()
            if body["lora_name"] not in self.loaded:
                return JSONResponse({"error": {"message": "not found"}}, 404 if self.mode == "ok" else 500)
            self.loaded.remove(body["lora_name"])
            return PlainTextResponse("Success")

        self.running = start_background(app, start_limit_s=60)
        self.url = f"http://127.0.0.1:{self.running.port}"


@pytest.fixture(scope="module")
def fake():
    server = FakeUpstream()
    yield server
    server.running.stop()


@pytest.fixture
def upstream(fake):
    fake.mode = "ok"
    fake.seen.clear()
    return fake


def asking(url: str, call, timeout_s: float = 30.0):
    """``call(client)`` run on an event loop with an open client of ``url``."""
    from mint.generation.upstream import Upstream, UpstreamClient

    async def go():
        client = UpstreamClient(Upstream(url, KEY, timeout_s))
        await client.open()
        try:
            return await call(client)
        finally:
            await client.aclose()
            client.close()
    return asyncio.run(go())


def test_a_whole_answer_comes_back_with_its_finish_reason_and_usage_and_the_key_is_sent(upstream):
    done = asking(upstream.url, lambda client: client.complete({**BODY, "stream": True}))
    assert (done.text, done.finish_reason, done.usage) == ("Hello there.", "length",
                                                         {"prompt_tokens": 5, "completion_tokens": 3})
    [(authorization, sent)] = upstream.seen
    assert authorization == f"Bearer {KEY}" and sent == {**BODY, "stream": False}


def test_a_streamed_answer_hands_each_delta_to_the_listener_after_an_empty_start(upstream):
    heard = []
    done = asking(upstream.url, lambda client: client.stream(BODY, lambda delta: heard.append(delta) or True))
    assert heard == ["", "Hello", " there."]
    assert (done.text, done.finish_reason, done.usage["completion_tokens"]) == ("Hello there.", "stop", 2)
    assert upstream.seen[0][1]["stream"] is True


@pytest.mark.parametrize("streamed", [False, True])
def test_an_upstream_error_is_a_502_saying_its_message(upstream, streamed):
    from mint.generation.upstream import UpstreamError

    upstream.mode, heard = "error", []
    with pytest.raises(UpstreamError) as failed:
        asking(upstream.url, lambda client: client.stream(BODY, heard.append) if streamed else client.complete(BODY))
    assert failed.value.status == 502
    assert str(failed.value) == "the upstream answered 404: model coding-v1 is not loaded"
    assert heard == []          # nothing started: the app answers a plain error, not a broken stream


@pytest.mark.parametrize("streamed", [False, True])
def test_an_upstream_that_does_not_answer_in_time_is_a_504_within_the_timeout(upstream, streamed):
    from mint.generation.upstream import UpstreamError

    upstream.mode = "stall"
    started = time.monotonic()
    with pytest.raises(UpstreamError) as failed:
        asking(upstream.url, lambda client: client.stream(BODY, lambda _d: True) if streamed
               else client.complete(BODY), timeout_s=0.5)
    assert failed.value.status == 504 and "did not answer within 0.5 s" in str(failed.value)
    assert time.monotonic() - started < 2.5


def test_an_upstream_that_cannot_be_reached_is_a_502():
    import socket

    from mint.generation.upstream import UpstreamError

    with socket.socket() as sock:        # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises(UpstreamError) as failed:
        asking(f"http://127.0.0.1:{port}", lambda client: client.complete(BODY))
    assert failed.value.status == 502 and str(failed.value).startswith(f"cannot reach http://127.0.0.1:{port}/v1/")


def test_an_answer_that_is_not_a_completion_is_a_502(upstream):
    from mint.generation.upstream import UpstreamError

    upstream.mode = "not a completion"
    with pytest.raises(UpstreamError, match="answered something other than a chat completion") as failed:
        asking(upstream.url, lambda client: client.complete(BODY))
    assert failed.value.status == 502


def test_a_stream_that_fails_mid_answer_is_a_502_after_what_it_sent(upstream):
    from mint.generation.upstream import UpstreamError

    upstream.mode, heard = "fails mid-answer", []
    with pytest.raises(UpstreamError, match="failed mid-answer: out of memory") as failed:
        asking(upstream.url, lambda client: client.stream(BODY, lambda delta: heard.append(delta) or True))
    assert failed.value.status == 502 and heard == ["", "Hello"]


def test_a_stream_that_stalls_mid_answer_is_a_504(upstream):
    from mint.generation.upstream import UpstreamError

    upstream.mode = "stalls mid-answer"
    started = time.monotonic()
    with pytest.raises(UpstreamError, match="sent nothing for 0.5 s mid-answer") as failed:
        asking(upstream.url, lambda client: client.stream(BODY, lambda _delta: True), timeout_s=0.5)
    assert failed.value.status == 504 and time.monotonic() - started < 2.5


def test_a_listener_that_refuses_stops_the_reading(upstream):
    from mint.generation.upstream import UpstreamError

    heard = []
    with pytest.raises(UpstreamError, match="the client left"):
        asking(upstream.url, lambda client: client.stream(BODY, lambda delta: heard.append(delta) or not delta))
    assert heard == ["", "Hello"]


def test_models_health_and_adapters_are_read_and_loaded_in_vllms_shapes(upstream):
    from mint.generation.upstream import Upstream, UpstreamClient, UpstreamError

    client = UpstreamClient(Upstream(f"{upstream.url}/v1", KEY, 10.0))
    try:
        assert [m["id"] for m in client.models()] == ["base-model", "coding-v1"]
        assert client.health()["max_rank"] == 16
        client.load_adapter("coding-v2", "/adapters/coding-v2")
        client.load_adapter("coding-v2", "/adapters/coding-v2")      # loaded already: fine
        assert upstream.loaded.count("coding-v2") == 1
        client.unload_adapter("coding-v2")
        client.unload_adapter("coding-v2")                          # gone already (404): fine
        upstream.mode = "unload fails"
        with pytest.raises(UpstreamError, match="unload_lora_adapter refused coding-v9: 500"):
            client.unload_adapter("coding-v9")
    finally:
        client.close()
