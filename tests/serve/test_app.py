"""mint serve: the official openai client against 127.0.0.1; hot swap; malformed requests are 4xx."""
from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from mint.project import DEFAULT_PROJECT, Project

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)


@pytest.fixture
def server(ws, crown, tiny_loras):
    """A running server on the tiny base with coding:v1 as champion; yields (base_url, app)."""
    from mint.mol.mixture import Mixture
    from mint.serve.app import create_app
    from mint.serve.local import LocalBackend
    from mint.serve.server import start_background

    crown("coding", tiny_loras["coding"])
    mixture = Mixture.open(ws, TINY_PROJECT)
    app = create_app(LocalBackend(mixture, window_ms=20, poll_s=0.1))
    running = start_background(app, start_limit_s=120)
    yield f"http://127.0.0.1:{running.port}", app
    running.stop()


def client(url):
    from openai import OpenAI
    return OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=120)


def wait_for(condition, what: str, limit_s: float = 120.0):
    """Polls a condition (the server's poller runs on its own clock); the limit only catches a hang."""
    deadline = time.monotonic() + limit_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_models_lists_the_routed_model_and_one_per_specialist(server):
    url, _app = server
    ids = {m.id for m in client(url).models.list()}
    assert ids == {"mint", "mint/chat", "mint/agent", "mint/coding", "mint/genui"}


def test_completion_answers_with_the_forced_champion_and_stream_matches(server):
    url, _app = server
    openai = client(url)
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    reply = openai.chat.completions.create(model="mint/coding", messages=messages, max_tokens=6)
    assert reply.model_extra["mint"]["served_by"] == "coding:v1"
    assert reply.choices[0].finish_reason in ("stop", "length") and reply.usage.completion_tokens <= 6
    streamed = openai.chat.completions.create(model="mint/coding", messages=messages, max_tokens=6, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in streamed if chunk.choices)
    assert text == reply.choices[0].message.content


def test_a_promotion_during_serve_changes_the_serving_revision(server, crown, tiny_loras):
    import httpx

    url, _app = server
    crown("coding", tiny_loras["agent"])
    wait_for(lambda: httpx.get(f"{url}/health").json()["revisions"]["coding"] == "coding:v2", "no hot swap")
    reply = client(url).chat.completions.create(model="mint/coding", max_tokens=2,
                                                messages=[{"role": "user", "content": "hi"}])
    assert reply.model_extra["mint"]["served_by"] == "coding:v2"


def test_concurrent_clients_are_answered_and_feedback_is_logged(server, ws):
    from mint.mol.turnlog import read_turns

    url, app = server
    openai = client(url)
    results = [None] * 6

    def ask(i):
        results[i] = openai.chat.completions.create(
            model="mint", max_tokens=3, messages=[{"role": "user", "content": f"tell me a joke number {i}"}])

    threads = [threading.Thread(target=ask, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.model_extra["mint"]["specialist"] == "chat" for r in results)
    import httpx

    answer = httpx.post(f"{url}/v1/feedback", json={"id": results[0].id, "rating": -1, "correction": "Knock knock."})
    assert answer.status_code == 200
    [turn] = [t for t in read_turns(ws) if t["upstream_id"] == results[0].id]
    assert turn["feedback"] == {"rating": -1, "correction": "Knock knock."}
    assert turn["served_by"] == "base" and turn["route"]["decided_by"] == "rules"


def test_the_batcher_answers_queued_turns_in_one_batch(ws):
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.serve.local import Batcher

    batcher = Batcher(Mixture.open(ws, TINY_PROJECT), window_ms=0, max_batch=8)
    futures = [batcher.submit(Turn([{"role": "user", "content": f"hello {i}"}], decoding=Decoding(2)))
               for i in range(5)]
    batcher.start()          # everything was queued before the worker looked: one batch
    answers = [f.result(timeout=120) for f in futures]
    batcher.stop()
    assert batcher.batch_sizes == [5]
    assert len({a.id for a in answers}) == 5


MALFORMED = [
    b"not json", b"[1, 2]", b"{}", b'{"messages": "hi"}', b'{"messages": []}',
    b'{"messages": [{"role": "wizard", "content": "x"}]}', b'{"messages": [{"role": "user", "content": 5}]}',
    b'{"messages": [{"role": "user"}]}', b'{"messages": [{"role": "system", "content": "only a system"}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}',
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": -1}',
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": "ten"}',
    b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 1e400}',
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
    b'{"messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    b'{"messages": [{"role": "user", "content": "x"}], "n": 3}',
    b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}',
    b'{"messages": [{"role": "user", "content": "x"}], "tools": {"a": 1}}',
    b'{"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}',
    b'{"messages": [{"role": "user", "content": "x"}], "model": "mint/poetry"}',
    b'{"messages": [{"role": "user", "content": "x"}], "model": 7}',
    b'\xff\xfe',
    # lone surrogates (a truncated emoji): the tokenizer and the log's UTF-8 write refuse them
    b'{"messages": [{"role": "user", "content": "hi \\ud83d"}]}',
    b'{"messages": [{"role": "user", "content": [{"type": "text", "text": "\\udc00"}]}], "stream": true}',
    b'{"messages": [{"role": "user", "content": "x"}], '
    b'"tools": [{"type": "function", "function": {"name": "\\ud800"}}]}',
    b'{"messages": [{"role": "user", "content": "x"}], "user": "\\ud800", "max_tokens": 2}',
]


def test_malformed_requests_get_4xx_never_5xx(server):
    import httpx

    url, _app = server
    for body in MALFORMED:
        response = httpx.post(f"{url}/v1/chat/completions", content=body,
                              headers={"content-type": "application/json"})
        assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
        assert response.json()["error"]["message"]
    for body in [b"nope", b'{"id": 5}', b'{"id": "chatcmpl-unknown", "rating": 1}', b'{"id": "x", "rating": 9}']:
        response = httpx.post(f"{url}/v1/feedback", content=body)
        assert 400 <= response.status_code < 500, (body, response.status_code, response.text)
    too_long = {"messages": [{"role": "user", "content": "word " * 3000}], "max_tokens": 8}
    response = httpx.post(f"{url}/v1/chat/completions", json=too_long)
    assert response.status_code == 400 and "at most 2048" in response.json()["error"]["message"]
    assert httpx.get(f"{url}/v1/nothing-here").status_code == 404
    assert httpx.get(f"{url}/v1/chat/completions").status_code == 405


def test_serve_refuses_an_address_it_cannot_listen_on_before_loading_the_model(ws):
    from tests.conftest import run_mint

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        in_use = taken.getsockname()[1]
        for args, field in [(["--port", str(in_use)], "--port: cannot listen on 127.0.0.1"),
                            (["--host", "no-such-host.invalid"], "--host: 'no-such-host.invalid' is not an address"),
                            (["--host", "999.1.1.1"], "--host:"), (["--port", "70000"], "--port: must be from 0")]:
            result = run_mint("serve", "--base", "tiny-random", *args)
            assert result.returncode == 2, result.stderr
            assert field in result.stderr and "Traceback" not in result.stderr, result.stderr
            assert "serving on" not in result.stderr          # refused before the model was loaded


def test_port_0_serves_on_a_free_port_and_says_which(ws):
    import os
    import re
    import subprocess
    import sys

    server = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--base", "tiny-random", "--port", "0"],
                              stderr=subprocess.PIPE, text=True, env=dict(os.environ), cwd=ws.home.parent)
    try:
        assert server.stderr.readline().startswith("decoding on cpu")   # where it will decode, first
        announced = server.stderr.readline()
        port = int(re.search(r"serving on http://127\.0\.0\.1:(\d+)/v1", announced).group(1))
        assert port > 0
        wait_for(lambda: _health(f"http://127.0.0.1:{port}") == 200, "the announced port does not answer")
    finally:
        server.terminate()
        server.wait(timeout=60)


def _health(url: str) -> int | None:
    import httpx

    try:
        return httpx.get(f"{url}/health", timeout=5).status_code
    except httpx.TransportError:
        return None


def test_a_lone_surrogate_is_refused_by_field_and_spares_the_batch_and_the_feedback(server, ws):
    import httpx

    from mint.mol.turnlog import read_turns

    url, _app = server
    good = {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 2}
    bad = {"messages": [{"role": "user", "content": "ok"}, {"role": "assistant", "content": "yes"},
                        {"role": "user", "content": "an emoji cut in half: \ud83d"}], "max_tokens": 2}
    responses = {}

    def post(name, body):   # json.dumps escapes the surrogate as a client's JSON would (httpx's json= cannot)
        responses[name] = httpx.post(f"{url}/v1/chat/completions", content=json.dumps(body), timeout=120,
                                     headers={"content-type": "application/json"})

    threads = [threading.Thread(target=post, args=(name, body))
               for name, body in (("good-1", good), ("bad", bad), ("good-2", good))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert responses["bad"].status_code == 400
    assert responses["bad"].json()["error"]["param"] == "messages[2].content"
    assert responses["good-1"].status_code == 200 and responses["good-2"].status_code == 200

    answer_id = responses["good-1"].json()["id"]
    refused = httpx.post(f"{url}/v1/feedback", content=json.dumps({"id": answer_id, "correction": "half \udc00"}),
                         headers={"content-type": "application/json"})
    assert refused.status_code == 400 and refused.json()["error"]["param"] == "correction"
    assert httpx.post(f"{url}/v1/feedback", json={"id": answer_id, "rating": 1}).status_code == 200
    [turn] = [t for t in read_turns(ws) if t["upstream_id"] == answer_id]
    assert turn["feedback"] == {"rating": 1, "correction": None}


# --- tools -------------------------------------------------------------------------------------

WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                                           "date": {"type": "string"}},
                                          "required": ["city", "date"]}}}]


def _answers_with(text: str):
    """A stand-in for Mixture.answer_each that answers every turn with ``text``, through its listener as well."""
    from mint.mol.mixture import Answer
    from mint.routing.router import Route

    def answer(turns, *, keep_for_feedback=True, listeners=None, owners=None, **_joining):
        answers = []
        for turn, listener in zip(turns, listeners or [None] * len(turns)):
            if listener is not None:
                listener("")
                listener(text)
            answers.append(Answer(turn.id or "chatcmpl-test", "agent", "agent:v1", text,
                                  Route("agent", {"agent": 1.0}, "rules", None), 1.0, 0.0, 5, 9, "stop"))
        return answers
    return answer


def test_an_answer_that_calls_an_offered_tool_comes_back_as_tool_calls(server, monkeypatch):
    url, app = server
    openai = client(url)
    ask = {"model": "mint", "messages": [{"role": "user", "content": "Weather in Paris today?"}], "tools": WEATHER}
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "date": "today"}}</tool_call>'
    monkeypatch.setattr(app.state.backend.mixture, "answer_each", _answers_with(call))
    reply = openai.chat.completions.create(**ask).choices[0]
    assert reply.finish_reason == "tool_calls" and reply.message.content is None
    [made] = reply.message.tool_calls
    assert made.type == "function" and made.id.startswith("call_") and made.function.name == "get_weather"
    assert json.loads(made.function.arguments) == {"city": "Paris", "date": "today"}
    chunks = list(openai.chat.completions.create(**ask, stream=True))
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == ""
    [streamed] = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert (streamed.index, streamed.function.name) == (0, "get_weather")
    assert json.loads(streamed.function.arguments) == {"city": "Paris", "date": "today"}
    assert chunks[-1].choices[0].finish_reason == "tool_calls"

    # words, a call of a tool not offered, or no tools offered at all: the text, as it was written
    for text, tools in [("It is sunny.", WEATHER), ('{"name": "launch_rocket", "arguments": {}}', WEATHER),
                        (call, None)]:
        monkeypatch.setattr(app.state.backend.mixture, "answer_each", _answers_with(text))
        request = {**ask, "tools": tools} if tools else {k: v for k, v in ask.items() if k != "tools"}
        reply = openai.chat.completions.create(**request).choices[0]
        assert (reply.message.content, reply.message.tool_calls, reply.finish_reason) == (text, None, "stop")
        chunks = list(openai.chat.completions.create(**request, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text


def test_the_clients_tool_call_history_is_written_as_the_agent_was_trained():
    from mint.serve.protocol import RequestError, parse_chat_request
    from mint.render import render_message

    calls = [{"id": "call_1", "type": "function",
              "function": {"name": "get_weather", "arguments": '{"date": "today", "city": "Paris"}'}}]
    body = {"tools": WEATHER, "messages": [
        {"role": "user", "content": "Weather in Paris?"}, {"role": "assistant", "content": None, "tool_calls": calls},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}, {"role": "user", "content": "And so?"}]}
    turn = parse_chat_request(body, ("chat", "agent")).turn
    trained = render_message({"role": "assistant", "content": "", "tool_calls": [
        {"type": "function", "function": {"name": "get_weather", "arguments": {"date": "today", "city": "Paris"}}}]},
        WEATHER)["content"]
    assert turn.messages[1] == {"role": "assistant", "content": trained}
    assert trained == '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", "date": "today"}}</tool_call>'
    assert turn.messages[2] == {"role": "tool", "content": "sunny"}
    for message, param in [({"role": "user", "content": "x", "tool_calls": calls}, "messages[1].tool_calls"),
                           ({"role": "assistant", "tool_calls": {"a": 1}}, "messages[1].tool_calls"),
                           ({"role": "assistant", "tool_calls": [{"function": {}}]}, "messages[1].tool_calls[0]"),
                           ({"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": "{oops"}}]},
                            "messages[1].tool_calls[0].function.arguments")]:
        with pytest.raises(RequestError) as refused:
            parse_chat_request({"messages": [{"role": "user", "content": "hi"}, message]}, ("chat",))
        assert (refused.value.status, refused.value.param) == (400, param)


# --- streaming ---------------------------------------------------------------------------------

def _gate_forward(model, at_call: int, until, record: list):
    """Makes the model's ``at_call``-th forward from now wait until ``until()`` holds (up to 60 s; a stream
    that sends nothing before its batch ends would wait that long and record False)."""
    original, calls = model.forward, [0]

    def gated(*args, **kwargs):
        calls[0] += 1
        if calls[0] == at_call:
            deadline = time.monotonic() + 60
            while not until() and time.monotonic() < deadline:
                time.sleep(0.01)
            record.append(until())
        return original(*args, **kwargs)

    model.forward = gated
    return lambda: setattr(model, "forward", original)


def test_stream_sends_text_while_the_turn_is_still_decoding_and_logs_it_once(server, ws):
    import httpx

    from mint.generation.text import IncrementalText
    from mint.mol.runtime import Decoding
    from mint.mol.turnlog import read_turns

    url, app = server
    runtime, openai = app.state.backend.mixture.runtime, client(url)
    messages = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
    reply = openai.chat.completions.create(model="mint/coding", messages=messages, max_tokens=12)
    tokens = runtime.generate([messages], ["coding"], Decoding(12))[0].token_ids
    assert len(tokens) == 12 and IncrementalText(runtime.tokenizer).push(tokens[:-1]), \
        "precondition: text is decoded before the last token"
    seen_content, waited = threading.Event(), []
    restore = _gate_forward(runtime.model, 12, seen_content.is_set, waited)   # the forward of the last token
    try:
        chunks = []
        for chunk in openai.chat.completions.create(model="mint/coding", messages=messages, max_tokens=12,
                                                    stream=True):
            chunks.append(chunk)
            if chunk.choices and chunk.choices[0].delta.content:
                seen_content.set()
    finally:
        restore()
    assert waited == [True], "no content arrived while the last token was still to be generated"
    assert chunks[0].choices[0].delta.role == "assistant"
    assert "".join(c.choices[0].delta.content or "" for c in chunks) == reply.choices[0].message.content
    assert [c.choices[0].finish_reason for c in chunks][-1] == reply.choices[0].finish_reason
    assert len({c.id for c in chunks}) == 1
    assert httpx.post(f"{url}/v1/feedback", json={"id": chunks[0].id, "rating": 1}).status_code == 200
    assert [t["messages"][-1]["content"] for t in read_turns(ws) if t["upstream_id"] == chunks[0].id] == \
        [reply.choices[0].message.content]


def test_a_client_that_leaves_mid_stream_stops_its_row_and_the_server_goes_on(server, ws, monkeypatch):
    import httpx

    from mint.serve import protocol as serve_module
    from mint.mol.turnlog import read_turns

    url, app = server
    relays = []
    original_init = serve_module.Relay.__init__

    def spying_init(self, loop):
        original_init(self, loop)
        relays.append(self)

    monkeypatch.setattr(serve_module.Relay, "__init__", spying_init)
    left, waited = threading.Event(), []
    # the stream starts after the 1st forward; the 2nd waits until the server has noticed the client left
    restore = _gate_forward(app.state.backend.mixture.runtime.model, 2,
                            lambda: left.is_set() and all(r.gone for r in relays), waited)
    body = {"model": "mint/coding", "max_tokens": 200, "stream": True,
            "messages": [{"role": "user", "content": "Write a long Python program."}]}
    try:
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=120) as response:
            assert response.status_code == 200
            first = next(response.iter_lines())
            assert first.startswith("data: ") and '"role": "assistant"' in first
        left.set()
        wait_for(lambda: app.state.backend.batcher.cancelled == 1, "the left row was not cancelled")
    finally:
        restore()
    assert waited == [True]
    app.state.backend.mixture.expire_pending(all_of_them=True)
    answer_id = json.loads(first[len("data: "):])["id"]
    assert not [t for t in read_turns(ws) if t["upstream_id"] == answer_id]
    reply = client(url).chat.completions.create(model="mint/coding", max_tokens=3,
                                                messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content is not None


def test_a_short_turn_asked_during_a_long_decode_joins_it_and_is_answered_and_logged_first(ws):
    """Continuous batching across clients: a turn queued while another decodes joins the running stream at its
    next step and is answered (and logged) as its own row finishes, as it would be alone, the long one still
    decoding."""
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.mol.turnlog import read_turns
    from mint.serve.local import Batcher

    mixture = Mixture.open(ws, TINY_PROJECT)
    short_turn = Turn([{"role": "user", "content": "hello there"}], decoding=Decoding(3))
    alone = mixture.answer([short_turn], keep_for_feedback=False)[0]
    long_steps, seen = [], {}
    batcher = Batcher(mixture, window_ms=0, max_batch=4)

    def answered(future):         # told in the thread that answered it, as its row finished
        seen.update(steps=len(long_steps), logged={t["upstream_id"] for t in read_turns(ws)})

    def long_heard(_delta):
        long_steps.append(1)
        if len(long_steps) == 2:    # the long turn is decoding: a short one is asked now
            seen["short"] = batcher.submit(short_turn)
            seen["short"].add_done_callback(answered)
        return True

    long = batcher.submit(Turn([{"role": "user", "content": "Tell me about rainy Sundays."}], specialist="chat",
                               decoding=Decoding(40)), long_heard)
    batcher.start()
    long_answer, short_answer = long.result(timeout=120), seen["short"].result(timeout=120)
    batcher.stop()
    assert (long_answer.finish_reason, long_answer.completion_tokens) == ("length", 40)   # guards the test
    assert (short_answer.text, short_answer.specialist) == (alone.text, alone.specialist)
    assert seen["steps"] < 40 // 2                       # answered while the long turn had most of its way to go
    assert short_answer.id in seen["logged"] and long_answer.id not in seen["logged"]
    assert batcher.batch_sizes == [1] and batcher.joined == 1


def test_a_bad_turn_joining_a_running_stream_gets_its_error_alone(ws):
    from mint.errors import BadInput
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.serve.local import Batcher

    batcher = Batcher(Mixture.open(ws, TINY_PROJECT), window_ms=0, max_batch=4)
    joined = {}

    def long_heard(_delta):
        if not joined:      # while the long turn decodes: a turn naming no loaded adapter, and a good one
            joined["bad"] = batcher.submit(Turn([{"role": "user", "content": "hi"}], adapter="nowhere"))
            joined["good"] = batcher.submit(Turn([{"role": "user", "content": "hello"}], decoding=Decoding(2)))
        return True

    long = batcher.submit(Turn([{"role": "user", "content": "Tell me about rainy Sundays."}], specialist="chat",
                               decoding=Decoding(12)), long_heard)
    batcher.start()
    answers = long.result(timeout=120), joined["good"].result(timeout=120)
    with pytest.raises(BadInput, match="nowhere"):
        joined["bad"].result(timeout=120)
    batcher.stop()
    assert [a.completion_tokens for a in answers] == [12, 2]
    assert batcher.batch_sizes == [1] and batcher.joined == 2      # one stream, nothing answered again


def test_a_streamed_row_and_a_plain_row_share_one_batch_and_a_leaving_row_does_not_stop_the_other(ws):
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.serve.local import Batcher

    mixture = Mixture.open(ws, TINY_PROJECT)
    ask = [{"role": "user", "content": "Tell me about rainy Sundays."}]
    alone = mixture.answer([Turn(ask, specialist="chat", decoding=Decoding(10))], keep_for_feedback=False)[0]
    pieces, calls = [], []

    def streaming(delta):
        pieces.append(delta)
        return True

    def leaving(delta):
        calls.append(delta)
        return len(calls) < 2          # the client goes away after two steps

    batcher = Batcher(mixture, window_ms=0, max_batch=8)
    streamed = batcher.submit(Turn(ask, specialist="chat", decoding=Decoding(10)), streaming)
    left = batcher.submit(Turn(ask, specialist="chat", decoding=Decoding(10)), leaving)
    plain = batcher.submit(Turn(ask, specialist="chat", decoding=Decoding(10)))
    batcher.start()
    answers = [f.result(timeout=120) for f in (streamed, left, plain)]
    batcher.stop()
    assert batcher.batch_sizes == [3]
    assert "".join(pieces) == answers[0].text == answers[2].text == alone.text
    assert answers[0].completion_tokens == alone.completion_tokens
    assert (answers[1].finish_reason, answers[1].completion_tokens, len(calls)) == ("cancelled", 2, 2)
    assert batcher.cancelled == 1


@pytest.mark.parametrize("body", [
    # the fuzzer's case: a key with a surrogate written as raw bytes, which is not UTF-8 (a 500 before)
    b'{"mess\xed\xa0\x80ages": [{"role": "user", "co\xed\xa0\x80nten\xed\xa0\x80t": "hi"}], "max_tokens": 4}',
    # the same surrogate escaped, as JSON allows: a key no field is named
    b'{"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "mess\\ud800ages": 1}',
    b'{"messages": [{"role": "user", "co\\ud800ntent": "hi"}], "max_tokens": 4}',
])
def test_a_body_that_is_not_utf8_or_names_a_field_with_a_lone_surrogate_is_a_400(server, body):
    import httpx

    url, _app = server
    response = httpx.post(f"{url}/v1/chat/completions", content=body, timeout=60,
                          headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["type"] == "invalid_request_error"
