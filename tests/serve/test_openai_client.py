"""The official openai client (sync and async) against `mint serve` on the tiny base, and against the gateway
(`mint serve --upstream` in front of a second `mint serve`): what a client reads of answers, streams, tools, JSON
answers, models and errors. Every check runs against both; the servers start once for the module."""
from __future__ import annotations

import asyncio
import json

import pytest

from mint.project import DEFAULT_PROJECT, Project

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)
KEY, UPSTREAM_KEY = "client-key-0001", "upstream-key-0001"
ASK = [{"role": "user", "content": "Write a Python function that adds two numbers."}]
WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather of a city on a date",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "maxLength": 12},
                                                    "date": {"type": "string", "enum": ["today", "tomorrow"]}},
                   "required": ["city", "date"], "additionalProperties": False}}}]
VERDICT = {"type": "object", "properties": {"answer": {"type": "string", "enum": ["yes", "no"]}},
           "required": ["answer"], "additionalProperties": False}


def _crowned(home, lora):
    """A workspace whose coding champion is ``lora``."""
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    ws = workspace(home)
    promote(ws, register(ws, lora, specialist="coding", base="tiny-random", method="sft").ref, force=True, why="test")
    return ws


@pytest.fixture(scope="module")
def servers(tmp_path_factory, tiny_loras):
    """{"local": (url, app), "gateway": (url, app)}: a `mint serve` and a gateway in front of a second one, both
    with coding:v1 as champion and an API key."""
    from mint.mol.mixture import Mixture
    from mint.serve.admission import Access
    from mint.serve.app import create_app
    from mint.serve.gateway import Gateway, GatewayBackend
    from mint.serve.local import LocalBackend
    from mint.serve.server import start_background
    from mint.generation.upstream import Upstream
    from mint.workspace import workspace

    root = tmp_path_factory.mktemp("clients")
    running, apps = [], {}

    def start(app):
        running.append(start_background(app, start_limit_s=120))
        return f"http://127.0.0.1:{running[-1].port}"

    try:
        local = create_app(LocalBackend(Mixture.open(_crowned(root / "local", tiny_loras["coding"]), TINY_PROJECT),
                                        window_ms=5, poll_s=60), access=Access((KEY,)))
        apps["local"] = (start(local), local)
        upstream = create_app(LocalBackend(Mixture.open(workspace(root / "upstream"), TINY_PROJECT, named_slots=2),
                                           window_ms=5, poll_s=60), access=Access((UPSTREAM_KEY,)))
        upstream_url = start(upstream)
        gateway = Gateway.open(_crowned(root / "gateway", tiny_loras["coding"]), TINY_PROJECT,
                               Upstream(upstream_url, UPSTREAM_KEY, 60.0))
        assert gateway.published["coding"].name == "coding-v1"
        gateway_app = create_app(GatewayBackend(gateway, poll_s=60), access=Access((KEY,)))
        apps["gateway"] = (start(gateway_app), gateway_app)
        yield apps
    finally:
        for server in reversed(running):
            server.stop()


@pytest.fixture(params=["local", "gateway"])
def target(request, servers):
    """(base_url, app) of one server."""
    return servers[request.param]


@pytest.fixture
def local(servers):
    return servers["local"]


def client(url: str, key: str = KEY):
    from openai import OpenAI

    return OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=120)


def create(url: str, **asked):
    return client(url).chat.completions.create(**{"model": "mint/coding", "messages": ASK, "max_tokens": 6, **asked})


def streamed(url: str, **asked) -> list:
    return list(create(url, stream=True, **asked))


def text_of(chunks) -> str:
    return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)


# --- answers -------------------------------------------------------------------------------------

def test_models_are_listed_and_retrieved_and_an_unknown_one_is_not_found(target):
    import openai

    url, _app = target
    ids = {m.id for m in client(url).models.list()}
    assert {"mint", "mint/chat", "mint/agent", "mint/coding", "mint/genui"} <= ids
    model = client(url).models.retrieve("mint/coding")
    assert (model.id, model.object, model.owned_by) == ("mint/coding", "model", "mint")
    with pytest.raises(openai.NotFoundError):
        client(url).models.retrieve("gpt-4o")


def test_a_completion_has_openais_shape_and_counts_its_tokens(target):
    url, _app = target
    reply = create(url, max_tokens=5)
    [choice] = reply.choices
    assert (reply.object, choice.index, choice.message.role) == ("chat.completion", 0, "assistant")
    assert reply.id.startswith("chatcmpl-") and reply.model == "mint/coding"
    assert choice.finish_reason in ("stop", "length") and choice.message.content
    assert 0 < reply.usage.completion_tokens <= 5
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens
    assert reply.model_extra["mint"]["served_by"] == "coding:v1"


def test_max_completion_tokens_caps_the_answer_as_max_tokens_does(target):
    url, _app = target
    capped = create(url, max_tokens=None, max_completion_tokens=3)
    assert capped.usage.completion_tokens == 3 and capped.choices[0].finish_reason == "length"
    assert capped.choices[0].message.content == create(url, max_tokens=3).choices[0].message.content


def test_a_stream_has_chunks_of_one_answer_its_finish_reason_and_usage_last(target):
    url, _app = target
    whole = create(url)
    chunks = streamed(url, stream_options={"include_usage": True})
    *answer, last = chunks
    assert {c.object for c in chunks} == {"chat.completion.chunk"} and len({c.id for c in chunks}) == 1
    assert answer[0].choices[0].delta.role == "assistant"
    assert text_of(answer) == whole.choices[0].message.content
    assert answer[-1].choices[0].finish_reason == whole.choices[0].finish_reason
    assert [c.choices[0].finish_reason for c in answer[:-1]] == [None] * (len(answer) - 1)
    assert all(c.usage is None for c in answer)
    assert last.choices == [] and last.usage.model_dump() == whole.usage.model_dump()
    assert streamed(url)[-1].choices            # without include_usage: no usage chunk


def test_stop_ends_the_answer_before_the_stop_whole_and_streamed(target):
    url, _app = target
    full = create(url, max_tokens=12).choices[0].message.content
    stop = full[len(full) // 2:len(full) // 2 + 2]
    assert stop.strip() and len(full) > 4, f"precondition: an answer to cut, got {full!r}"
    reply = create(url, max_tokens=12, stop=[stop, "never in it"]).choices[0]
    assert (reply.message.content, reply.finish_reason) == (full[:full.index(stop)], "stop")
    chunks = streamed(url, max_tokens=12, stop=stop)
    assert text_of(chunks) == full[:full.index(stop)] and chunks[-1].choices[0].finish_reason == "stop"


def test_a_seed_repeats_a_sampled_answer_and_another_seed_changes_it(target):
    url, _app = target
    sampled = [create(url, temperature=1.0, seed=seed, max_tokens=8).choices[0].message.content
               for seed in (7, 7, 8)]
    assert sampled[0] == sampled[1] != sampled[2]
    greedy = create(url, max_tokens=8).choices[0].message.content
    assert create(url, temperature=0, seed=99, max_tokens=8).choices[0].message.content == greedy != sampled[0]


def test_n_above_one_is_refused_by_name(target):
    import openai

    url, _app = target
    assert len(create(url, n=1).choices) == 1
    with pytest.raises(openai.BadRequestError) as refused:
        create(url, n=2)
    assert refused.value.param == "n"


# --- tools and JSON --------------------------------------------------------------------------------

def test_tool_choice_naming_a_function_answers_a_call_of_it_whole_and_streamed(local):
    url, _app = local
    asked = {"model": "mint", "messages": [{"role": "user", "content": "Weather in Paris today?"}],
             "tools": WEATHER, "tool_choice": {"type": "function", "function": {"name": "get_weather"}},
             "max_tokens": 40}
    reply = create(url, **asked).choices[0]
    assert reply.finish_reason == "tool_calls" and reply.message.content is None
    [call] = reply.message.tool_calls
    assert call.type == "function" and call.function.name == "get_weather"
    arguments = json.loads(call.function.arguments)
    assert set(arguments) == {"city", "date"} and arguments["date"] in ("today", "tomorrow")
    chunks = streamed(url, **asked)
    [made] = [t for c in chunks if c.choices for t in c.choices[0].delta.tool_calls or []]
    assert (made.function.name, json.loads(made.function.arguments)) == ("get_weather", arguments)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"
    required = create(url, **{**asked, "tool_choice": "required"}).choices[0]
    assert required.finish_reason == "tool_calls" and required.message.tool_calls[0].function.name == "get_weather"


def test_tool_choice_none_answers_in_words_as_if_no_tools_were_offered(target):
    url, _app = target
    asked = {"model": "mint", "messages": [{"role": "user", "content": "Weather in Paris today?"}], "max_tokens": 6}
    reply, plain = create(url, tools=WEATHER, tool_choice="none", **asked), create(url, **asked)
    assert reply.choices[0].message.tool_calls is None
    assert reply.choices[0].message.content == plain.choices[0].message.content
    # the tools are not listed in the prompt at all (listed, they take their own tokens)
    assert reply.usage.prompt_tokens == plain.usage.prompt_tokens
    assert create(url, tools=WEATHER, **asked).usage.prompt_tokens > plain.usage.prompt_tokens


def test_the_gateway_refuses_a_forced_tool_call_by_name(servers):
    import openai

    url, _app = servers["gateway"]
    with pytest.raises(openai.BadRequestError) as refused:
        create(url, tools=WEATHER, tool_choice={"type": "function", "function": {"name": "get_weather"}})
    assert refused.value.param == "tool_choice" and "gateway" in refused.value.message


def test_a_json_schema_answer_is_json_of_that_schema(target):
    import jsonschema

    url, _app = target
    response_format = {"type": "json_schema", "json_schema": {"name": "verdict", "schema": VERDICT, "strict": True}}
    reply = create(url, response_format=response_format, max_tokens=20).choices[0]
    assert reply.finish_reason == "stop"
    jsonschema.validate(json.loads(reply.message.content), VERDICT)
    assert text_of(streamed(url, response_format=response_format, max_tokens=20)) == reply.message.content


def test_a_json_object_answer_is_a_json_object_or_its_start_when_cut(target):
    url, _app = target
    reply = create(url, response_format={"type": "json_object"}, max_tokens=24).choices[0]
    text = reply.message.content
    assert text.startswith("{")
    if reply.finish_reason == "stop":
        assert isinstance(json.loads(text), dict)
    else:       # cut at its token limit: what there is, is the start of an object
        assert reply.finish_reason == "length" and json_prefix(text), text


def json_prefix(text: str) -> bool:
    """Whether ``text`` is the start of a JSON value: closing its open string and brackets (after a value
    where one is due) makes JSON."""
    stack, in_string, escaped = [], False, False
    for char in text:
        if in_string:
            escaped, in_string = (not escaped and char == "\\"), in_string and (escaped or char != '"')
        elif char == '"':
            in_string = True
        elif char in "[{":
            stack.append("]" if char == "[" else "}")
        elif char in "]}" and (not stack or stack.pop() != char):
            return False
    head = text + ('"' if in_string else "")
    closing = "".join(reversed(stack))
    return any(_parses(head + middle + closing) for middle in ("", ": null", " null", "null")) or \
        _parses(head.rstrip().rstrip(",") + closing)


def _parses(text: str) -> bool:
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def test_a_schema_that_cannot_be_decoded_is_refused_by_its_field(target):
    import openai

    url, _app = target
    for schema in ({"type": "strin"}, {"type": "object", "properties": {"a": {"type": 5}}}):
        with pytest.raises(openai.BadRequestError) as refused:
            create(url, response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        assert refused.value.param == "response_format.json_schema.schema"


# --- errors -----------------------------------------------------------------------------------------

def test_a_wrong_key_is_an_authentication_error(target):
    import openai

    url, _app = target
    with pytest.raises(openai.AuthenticationError) as refused:
        client(url, key="not-the-key-0000").chat.completions.create(model="mint", messages=ASK, max_tokens=2)
    assert refused.value.status_code == 401 and refused.value.code == "invalid_api_key"
    with pytest.raises(openai.AuthenticationError):
        client(url, key="not-the-key-0000").models.list()


def test_a_malformed_request_is_a_bad_request_with_openais_error_object(target):
    import httpx
    import openai

    url, _app = target
    for asked, param in [({"messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
                         ({"temperature": 5}, "temperature"), ({"max_tokens": 0}, "max_tokens"),
                         ({"stop": ["a", "b", "c", "d", "e"]}, "stop"),
                         ({"stream_options": {"include_usage": True}}, "stream_options"),
                         ({"response_format": {"type": "yaml"}}, "response_format.type"),
                         ({"tool_choice": "required"}, "tool_choice")]:
        with pytest.raises(openai.BadRequestError) as refused:
            create(url, **asked)
        assert refused.value.status_code == 400 and refused.value.param == param, (asked, refused.value)
        assert refused.value.type == "invalid_request_error" and refused.value.message
    raw = httpx.post(f"{url}/v1/chat/completions", content=b'{"messages": [', timeout=30,
                     headers={"authorization": f"Bearer {KEY}", "content-type": "application/json"})
    assert raw.status_code == 400 and set(raw.json()["error"]) == {"message", "type", "param", "code"}


def test_an_unknown_model_is_not_found(target):
    import openai

    url, _app = target
    with pytest.raises(openai.NotFoundError) as refused:
        create(url, model="gpt-4o")
    assert refused.value.code == "model_not_found" and refused.value.param == "model"


def test_a_full_queue_is_a_rate_limit_with_retry_after(target, monkeypatch):
    import openai

    url, app = target
    admission = app.state.admission
    monkeypatch.setattr(admission, "outstanding", admission.limits.max_queue)
    with pytest.raises(openai.RateLimitError) as refused:
        create(url)
    assert refused.value.status_code == 429 and refused.value.response.headers["retry-after"] == "1"
    monkeypatch.undo()
    assert create(url).choices[0].message.content


@pytest.mark.parametrize("asked", [{"logprobs": True}, {"top_logprobs": 2}, {"presence_penalty": 0.5},
                                   {"frequency_penalty": 0.5}, {"logit_bias": {"42": 5}},
                                   {"parallel_tool_calls": False}])
def test_a_parameter_the_server_does_not_implement_is_refused_by_name(target, asked):
    import openai

    url, _app = target
    with pytest.raises(openai.BadRequestError) as refused:
        create(url, **asked)
    [name] = asked
    assert refused.value.param == name and refused.value.code == "unsupported_parameter"


# --- many clients at once -----------------------------------------------------------------------

def test_twenty_concurrent_async_streams_each_get_their_own_answer_whole(target):
    from openai import AsyncOpenAI

    url, _app = target
    asks = [[{"role": "user", "content": f"Write a Python function number {i} that adds {i} to a list."}]
            for i in range(20)]
    alone = [create(url, messages=ask).choices[0] for ask in asks]
    assert len({a.message.content for a in alone}) > 1, "precondition: the prompts are answered differently"

    async def stream_all():
        async with AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0, timeout=120) as aclient:
            async def one(ask):
                stream = await aclient.chat.completions.create(model="mint/coding", messages=ask, max_tokens=6,
                                                               stream=True)
                return [chunk async for chunk in stream]
            return await asyncio.gather(*(one(ask) for ask in asks))

    for chunks, expected in zip(asyncio.run(stream_all()), alone):
        assert len({c.id for c in chunks}) == 1
        assert text_of(chunks) == expected.message.content
        assert chunks[-1].choices[0].finish_reason == expected.finish_reason
