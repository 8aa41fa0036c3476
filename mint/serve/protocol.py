"""The OpenAI-compatible surface of `mint serve`: request checks, answers and streamed events, OpenAI's errors.

Every request body is checked here, so a malformed request gets a 4xx in OpenAI's error shape, never a 5xx. The
app (``mint.serve.app``) answers through a backend (``mint.serve.backend``): the local mixture or an upstream
server; both are spoken to in the shapes of this module, so a client cannot tell them apart.

Streaming (``stream: true``) sends server-sent events in OpenAI's chunk format while the answer is decoded: a
role delta once the turn starts, a content delta as each piece of text is decoded, a last chunk with the finish
reason, then ``data: [DONE]``. The backend hands each piece of text to the turn's listener (a ``Relay``), which
passes it to the request's event loop. A client that disconnects marks its relay gone; the backend then stops
that turn (``cancelled``, not logged) and the other turns go on.

Tools follow OpenAI's shape both ways. A client's history of ``tool_calls`` is written into the assistant
turn as training renders it (``<tool_call>`` blocks); an answer that calls only the offered tools comes back
as ``message.tool_calls`` with ``finish_reason: tool_calls``. A streamed turn that offers tools is sent
whole when it ends, since a call cannot be told from words until the answer is complete.

Facing clients (``Access``, ``Limits``): with API keys set, every ``/v1/*`` route needs ``Authorization: Bearer
KEY`` (401 otherwise; ``/health`` then says only ok / not ok without one); a request whose ``Host`` is not
allowed gets 403 and a POST whose ``Content-Type`` is not ``application/json`` 415, so a web page can reach
the server neither by a cross-origin form post nor by DNS rebinding. A body over ``max_body_bytes`` gets 413
before it is parsed; too many messages or too much text get 400 before anything is tokenized. Slow clients are
cut off: bodies slower than ``body_timeout_s`` get 408 (headers: ``mint.serve.server``).

Named adapters: ``POST /v1/load_lora_adapter {lora_name, lora_path}`` and ``/v1/unload_lora_adapter {lora_name}``
are checked here as vLLM's runtime LoRA API checks them, and refused in its shapes (``AdapterError``).
"""
from __future__ import annotations

import asyncio
import dataclasses
import json
import time
import uuid
from typing import Collection

from fastapi import Request   # at module level: FastAPI resolves the handlers' (postponed) annotations here

from mint.errors import BadInput, MintError
from mint.harness.agent import parse_tool_calls
from mint.generation.constrain import Structure, check_structure, json_structure, tool_call_structure
from mint.mol.mixture import Answer, Turn
from mint.mol.runtime import Decoding
from mint.render import render_message, tool_descriptions
from mint.serve.admission import Access, Limits
from mint.text import check_unicode

MODEL = "mint"
MAX_TOKENS_LIMIT = 4096
ROLES = ("system", "user", "assistant", "tool")
# the body fields a chat completion may have; any other is refused (400 naming it), never ignored silently
CHAT_FIELDS = frozenset({"model", "messages", "tools", "tool_choice", "stream", "stream_options", "max_tokens",
                         "max_completion_tokens", "temperature", "top_p", "seed", "n", "user", "stop",
                         "response_format"})
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})
MAX_STOPS = 4               # OpenAI's limit on `stop`


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code
        self.headers = headers


# --- request parsing --------------------------------------------------------------------

def _number(body: dict, key: str, low: float, high: float, default, *, integer: bool = False):
    value = body.get(key)
    if value is None:
        return default
    kinds = (int,) if integer else (int, float)
    if isinstance(value, bool) or not isinstance(value, kinds) or not low <= value <= high:
        kind = "an integer" if integer else "a number"
        raise RequestError(400, f"{key} must be {kind} from {low} to {high}", key)
    return value


def _content(value, where: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):   # [{"type": "text", "text": ...}]: text parts only
        parts = []
        for i, part in enumerate(value):
            if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
                raise RequestError(400, f"{where}[{i}] must be a text part {{type: text, text: ...}}", where)
            parts.append(part["text"])
        return "".join(parts)
    raise RequestError(400, f"{where} must be a string, a list of text parts or null", where)


def _arguments(value, where: str) -> dict:
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else {}
        except (ValueError, RecursionError):
            raise RequestError(400, f"{where} must be a JSON object or its text", where) from None
    if not isinstance(value, dict):
        raise RequestError(400, f"{where} must be a JSON object or its text", where)
    return value


def _history_calls(raw, where: str) -> list[dict]:
    """An assistant message's ``tool_calls`` from the client's history, as the episodes store them."""
    if not isinstance(raw, list):
        raise RequestError(400, f"{where} must be a list", where)
    calls = []
    for i, call in enumerate(raw):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str) or not function["name"]:
            raise RequestError(400, f"{where}[{i}] must be {{type: function, function: {{name, arguments}}}}",
                               f"{where}[{i}]")
        calls.append({"type": "function", "function": {
            "name": function["name"], "arguments": _arguments(function.get("arguments", {}),
                                                              f"{where}[{i}].function.arguments")}})
    return calls


def answer_tool_calls(text: str, tools: list[dict]) -> tuple[str | None, list[dict]] | None:
    """(the text before the calls or None, OpenAI ``tool_calls``) when a turn offered ``tools`` and its answer
    calls only those tools, as ``<tool_call>`` blocks or JSON (what the agent is trained and asked to write);
    None when it answered in words."""
    names = {d["name"] for d in tool_descriptions(tools)}
    calls = parse_tool_calls(text) if names else None
    if not calls or any(name not in names for name, _args in calls):
        return None
    before = text.split("<tool_call>", 1)[0].strip() if "<tool_call>" in text else ""
    return before or None, [{"id": f"call_{uuid.uuid4().hex[:24]}", "type": "function",
                             "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}
                            for name, arguments in calls]


def _stop(value) -> tuple[str, ...]:
    """``stop``: a string or up to MAX_STOPS of them."""
    stops = [value] if isinstance(value, str) else value if value is not None else []
    if not isinstance(stops, list) or len(stops) > MAX_STOPS or \
            not all(isinstance(s, str) and s for s in stops):
        raise RequestError(400, f"stop must be a non-empty string or a list of at most {MAX_STOPS} of them", "stop")
    check_unicode(stops, "stop")
    return tuple(stops)


def _response_format(value) -> Structure | None:
    """``response_format``: text (no shape), ``json_object`` or ``json_schema`` (decoded constrained)."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise RequestError(400, "response_format must be {type: text | json_object | json_schema, ...}",
                           "response_format")
    kind = value.get("type")
    if kind == "text":
        return None
    if kind == "json_object":
        return json_structure(None)
    if kind != "json_schema":
        raise RequestError(400, "response_format.type must be text, json_object or json_schema",
                           "response_format.type")
    spec = value.get("json_schema")
    if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
        raise RequestError(400, "response_format.json_schema must be {name, schema, strict?, description?}",
                           "response_format.json_schema")
    schema = spec.get("schema", {})
    if not isinstance(schema, dict):
        raise RequestError(400, "response_format.json_schema.schema must be a JSON schema object",
                           "response_format.json_schema.schema")
    check_unicode(schema, "response_format.json_schema.schema")
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        raise RequestError(400, f"response_format.json_schema.schema is not a JSON schema: {exc.message}",
                           "response_format.json_schema.schema") from None
    structure = json_structure(schema, spec["name"])
    problem = check_structure(structure)
    if problem:
        raise RequestError(400, f"response_format.json_schema.schema cannot be decoded to: {problem}",
                           "response_format.json_schema.schema", "unsupported_schema")
    return structure


def _tool_choice(value, tools: list[dict]) -> tuple[list[dict], Structure | None]:
    """(the tools the turn offers, the shape its answer must take) for ``tool_choice``: ``auto`` offers them,
    ``none`` offers none (the answer is words), ``required`` forces a call of one, ``{"type": "function",
    "function": {"name"}}`` a call of that one (decoded constrained)."""
    if value in (None, "auto"):
        return tools, None
    if value == "none":
        return [], None
    if not tools:
        raise RequestError(400, "tool_choice other than auto or none needs tools", "tool_choice")
    functions = tool_descriptions(tools)
    if value != "required":
        name = value.get("function").get("name") if isinstance(value, dict) and value.get("type") == "function" \
            and isinstance(value.get("function"), dict) else None
        if not isinstance(name, str):
            raise RequestError(400, "tool_choice must be auto, none, required or {type: function, function: "
                                    "{name}}", "tool_choice")
        functions = [f for f in functions if f["name"] == name]
        if not functions:
            raise RequestError(400, f"tool_choice names {name!r}, which is not among the tools", "tool_choice")
    if any(f["parameters"] is not None and not isinstance(f["parameters"], dict) for f in functions):
        raise RequestError(400, "a tool's function.parameters must be a JSON schema object", "tools")
    structure = tool_call_structure(functions)
    problem = check_structure(structure)
    if problem:
        raise RequestError(400, f"the tools' parameters cannot be decoded to: {problem}", "tools",
                           "unsupported_schema")
    return tools, structure


@dataclasses.dataclass(frozen=True)
class ChatRequest:
    """A checked /v1/chat/completions body."""
    turn: Turn
    stream: bool
    model: str
    include_usage: bool = False      # stream_options.include_usage: a last chunk with the usage


def parse_chat_request(body, specialists: tuple[str, ...], limits: Limits = Limits(),
                       max_prompt_chars: int | None = None, adapters: Collection[str] = ()) -> ChatRequest:
    """The checked request of a /v1/chat/completions body; RequestError (4xx) for anything malformed, for a
    field this server does not implement, and for more messages or text than ``limits`` allow (checked before
    anything is tokenized). A ``model`` among ``adapters`` (loaded by name) is answered by that adapter."""
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    for key in body:
        if key not in CHAT_FIELDS:
            raise RequestError(400, f"{key!r} is not supported by this server (it takes "
                                    f"{', '.join(sorted(CHAT_FIELDS))})", key, "unsupported_parameter")
    model = body.get("model", MODEL)
    if not isinstance(model, str):
        raise RequestError(400, "model must be a string", "model")
    forced = adapter = None
    if model in adapters:
        adapter = model
    elif model != MODEL:
        prefix, _, name = model.partition("/")
        if prefix != MODEL or name not in specialists:
            raise RequestError(404, f"model {model!r} does not exist; use {MODEL} (routed), "
                                    f"{', '.join(f'{MODEL}/{s}' for s in specialists)} or a loaded adapter's name",
                               "model", "model_not_found")
        forced = name
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError(400, "tools must be a list of objects", "tools")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError(400, "messages must be a non-empty list", "messages")
    if len(raw) > limits.max_messages:
        raise RequestError(400, f"messages: {len(raw)} messages, more than the {limits.max_messages} this server "
                                "takes", "messages", "too_many_messages")
    messages = []
    chars = len(json.dumps(tools, ensure_ascii=False)) if tools else 0
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestError(400, f"{where} must be an object", where)
        unknown = sorted(set(message) - MESSAGE_FIELDS)
        if unknown:
            raise RequestError(400, f"{where}.{unknown[0]} is not supported by this server", f"{where}.{unknown[0]}",
                               "unsupported_parameter")
        role = message.get("role")
        if role not in ROLES:
            raise RequestError(400, f"{where}.role must be one of {', '.join(ROLES)}", f"{where}.role")
        content = _content(message.get("content"), f"{where}.content")
        if content is None and role != "assistant":
            raise RequestError(400, f"{where}.content is missing", f"{where}.content")
        if message.get("tool_calls") is not None:
            if role != "assistant":
                raise RequestError(400, f"{where}.tool_calls: only assistant messages make tool calls",
                                   f"{where}.tool_calls")
            # the calls the agent made, written into its turn as training renders them
            content = render_message({"role": role, "content": content or "",
                                      "tool_calls": _history_calls(message["tool_calls"], f"{where}.tool_calls")},
                                     tools)["content"]
        messages.append({"role": role, "content": content or ""})
        chars += len(content or "")
        if max_prompt_chars is not None and chars > max_prompt_chars:
            raise RequestError(400, f"messages: more than {max_prompt_chars} characters, past what the base's "
                                    "context can hold", "messages", "context_length_exceeded")
    if not any(m["role"] == "user" for m in messages):
        raise RequestError(400, "messages need at least one user message", "messages")
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or n != 1):
        # a range "from 1 to 1" would say nothing: say what the limit is and how to get several answers
        raise RequestError(400, f"n={json.dumps(n)}: this server answers one choice a request (n=1); for "
                                "several answers, send the request several times (with temperature above 0)", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "stream must be true or false", "stream")
    options = body.get("stream_options")
    if options is not None and (not stream or not isinstance(options, dict) or set(options) - {"include_usage"}
                                or not isinstance(options.get("include_usage", False), bool)):
        raise RequestError(400, "stream_options must be {include_usage: true|false}, with stream: true",
                           "stream_options")
    max_tokens = _number(body, "max_completion_tokens", 1, MAX_TOKENS_LIMIT, None, integer=True)
    max_tokens = max_tokens or _number(body, "max_tokens", 1, MAX_TOKENS_LIMIT, 64, integer=True)
    tools, forced_call = _tool_choice(body.get("tool_choice"), tools)
    structure = _response_format(body.get("response_format"))
    if forced_call is not None and structure is not None:
        raise RequestError(400, "a tool_choice that forces a call and a response_format cannot both shape one "
                                "answer", "response_format")
    decoding = Decoding(max_new_tokens=max_tokens, temperature=float(_number(body, "temperature", 0, 2, 0.0)),
                        top_p=float(_number(body, "top_p", 0.01, 1, 1.0)),
                        seed=int(_number(body, "seed", -(2 ** 63), 2 ** 63 - 1, 0, integer=True)),
                        stop=_stop(body.get("stop")), structure=forced_call or structure)
    session = body.get("user") if isinstance(body.get("user"), str) else None
    check_unicode(session, "user")     # Turn checks messages and tools; its name for this one is `session`
    return ChatRequest(Turn(messages, tools, forced, decoding, session, adapter=adapter), stream, model,
                       bool((options or {}).get("include_usage")))


# --- answers ------------------------------------------------------------------------------

def _reply(answer: Answer, tools: list[dict]) -> tuple[str | None, list[dict] | None, str]:
    """(content, tool_calls or None, finish_reason) of an answer to a turn that offered ``tools``."""
    called = answer_tool_calls(answer.text, tools)
    return (answer.text, None, answer.finish_reason) if called is None else (*called, "tool_calls")


def _usage(answer: Answer) -> dict:
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens}


def completion_body(answer: Answer, model: str, tools: list[dict]) -> dict:
    content, calls, finish = _reply(answer, tools)
    message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
    return {
        "id": answer.id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": _usage(answer),
        "mint": {"specialist": answer.specialist, "served_by": answer.served_by,
                 "route": {"probabilities": answer.route.probabilities, "decided_by": answer.route.decided_by,
                           "revision": answer.route.revision}, "latency_ms": answer.latency_ms},
    }


END = object()   # the relay's last item: the turn's answer is done


class Relay:
    """One streaming turn's text, from whoever decodes it (``__call__``, a listener: the batcher's thread, or an
    upstream's reader) to the request's event loop (``queue``). The first call, when the turn starts, queues ""
    so the stream can start. ``leave`` says the client is gone: the listener refuses from then on, and each
    callback given to ``when_gone`` runs (an upstream's reader stops at once)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.queue: asyncio.Queue
        self.loop, self.queue = loop, asyncio.Queue()
        self.gone = False
        self._started = False
        self._when_gone: list = []

    def __call__(self, delta: str) -> bool:
        if self.gone:
            return False
        if delta or not self._started:
            self._started = True
            self.loop.call_soon_threadsafe(self.queue.put_nowait, delta)   # raises once the loop is closed
        return True

    def leave(self) -> None:
        self.gone = True
        callbacks, self._when_gone = self._when_gone, []
        for callback in callbacks:
            callback()

    def when_gone(self, callback) -> None:
        if self.gone:
            callback()
        else:
            self._when_gone.append(callback)

    def end(self, _future) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, END)
        except RuntimeError:    # the server's loop has closed: nobody is left to tell
            pass


async def stream_events(relay: Relay, future, first, answer_id: str, model: str, tools: list[dict],
                        include_usage: bool = False):
    """The server-sent events of one streaming turn; ``first`` is the relay's first item. A turn that offers
    tools is sent whole when it ends: as ``tool_calls`` if it calls them, else as one content delta. With
    ``include_usage`` every chunk has ``usage: null`` and a last chunk without choices has the usage."""
    created = int(time.time())

    def event(delta: dict, finish: str | None = None, answer: Answer | None = None) -> str:
        chunk = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if include_usage:
            chunk["usage"] = None
        if answer is not None:
            chunk["mint"] = {"specialist": answer.specialist, "served_by": answer.served_by}
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    try:
        yield event({"role": "assistant", "content": ""})
        item = first
        while item is not END:
            if item and not tools:
                yield event({"content": item})
            item = await relay.queue.get()
        try:
            answer = future.result()
        except Exception as exc:  # noqa: BLE001 - the batch failed after the stream began: say so in the stream
            message = str(exc) if isinstance(exc, MintError) else f"internal error: {type(exc).__name__}"
            yield f"data: {json.dumps({'error': {'message': message, 'type': 'server_error'}})}\n\n"
            return
        content, calls, finish = _reply(answer, tools)
        if tools and content:     # held back while decoding: sent whole now
            yield event({"content": content})
        if calls:
            yield event({"tool_calls": [{"index": i, **call} for i, call in enumerate(calls)]})
        yield event({}, finish, answer)
        if include_usage:
            usage = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": model,
                     "choices": [], "usage": _usage(answer)}
            yield f"data: {json.dumps(usage)}\n\n"
        yield "data: [DONE]\n\n"
    finally:   # a disconnect cancels this generator: the backend stops the turn (a row: at its next step)
        relay.leave()


class _Guard:
    """ASGI middleware that turns a request away before any handler reads it: a Host not allowed (403), a
    ``/v1/*`` call without a valid key (401), a POST that is not ``application/json`` (415) or that announces a
    body over the cap (413). It puts the caller's key fingerprint (``owner``) in the request's state."""

    def __init__(self, app, access: Access, limits: Limits) -> None:
        self.app, self.access, self.limits = app, access, limits

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {}
        for name, value in scope["headers"]:
            headers.setdefault(name.decode("latin-1"), value.decode("latin-1"))
        path = scope["path"]
        owner = self.access.owner(headers.get("authorization")) if self.access.api_keys else None
        state = scope.setdefault("state", {})
        state["owner"], state["authorized"] = owner, owner is not None or not self.access.api_keys
        refusal = None
        if not self.access.host_allowed(headers.get("host")):
            refusal = (403, f"Host {headers.get('host')!r} is not allowed; start the server with --allowed-host "
                            "NAME for the names clients use", "host_not_allowed", {})
        elif path.startswith("/v1/") and not state["authorized"]:
            refusal = (401, "a valid API key is needed: Authorization: Bearer KEY", "invalid_api_key",
                       {"WWW-Authenticate": "Bearer"})
        elif scope["method"] == "POST":
            kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
            length = headers.get("content-length", "")
            if kind != "application/json":
                refusal = (415, f"the body must be JSON sent as Content-Type: application/json, not "
                                f"{kind or 'none'!r}", "unsupported_media_type", {})
            elif length.isdigit() and int(length) > self.limits.max_body_bytes:
                refusal = (413, f"the body is {int(length)} bytes, more than the {self.limits.max_body_bytes} this "
                                "server reads", "body_too_large", {"Connection": "close"})
        if refusal is None:
            return await self.app(scope, receive, send)
        status, message, code, extra = refusal
        body = json.dumps({"error": {"message": message, "type": "invalid_request_error", "param": None,
                                     "code": code}}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                *((k.lower().encode(), v.encode()) for k, v in extra.items())]})
        await send({"type": "http.response.body", "body": body})


async def client_left(request: Request) -> None:
    """Returns once the client of ``request`` (whose body was read) has disconnected."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def error_response(status: int, message: str, param: str | None = None, code=None, headers: dict | None = None,
                   kind: str | None = None):
    """A JSON error in OpenAI's shape (``{"error": {message, type, param, code}}``)."""
    from fastapi.responses import JSONResponse

    kind = kind or ("invalid_request_error" if status < 500 else "server_error")
    # either may quote a lone surrogate (a field named with one), which UTF-8 cannot write
    message, param = (text.encode("utf-8", "backslashreplace").decode("utf-8") if text is not None else None
                      for text in (message, param))
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status,
                        headers=headers)


def openai_app(lifespan, access: Access, limits: Limits):
    """(app, body_of): a FastAPI app behind the guard (``_Guard``) whose errors all answer in OpenAI's shape, and
    the coroutine that reads a request's JSON body within ``limits``; ``mint.serve.app`` adds the routes."""
    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from starlette.exceptions import HTTPException
    from starlette.requests import ClientDisconnect

    app = FastAPI(title="mint", lifespan=lifespan)
    app.add_middleware(_Guard, access=access, limits=limits)

    @app.exception_handler(RequestError)
    async def _request_error(_request, exc: RequestError):
        return error_response(exc.status, exc.message, exc.param, exc.code, exc.headers)

    @app.exception_handler(AdapterError)
    async def _adapter_error(_request, exc: AdapterError):
        return error_response(exc.status, exc.message, exc.param, exc.status, kind=exc.kind)

    @app.exception_handler(BadInput)
    async def _bad_input(_request, exc: BadInput):
        return error_response(400, str(exc), exc.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request, exc: RequestValidationError):
        return error_response(400, f"invalid request: {exc.errors()[:1]}")

    @app.exception_handler(HTTPException)
    async def _http(_request, exc: HTTPException):
        return error_response(exc.status_code, str(exc.detail))

    async def read_body(request: Request) -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:    # a body sent without Content-Length (chunked)
                raise RequestError(413, f"the body is more than the {limits.max_body_bytes} bytes this server "
                                        "reads", None, "body_too_large", {"Connection": "close"})
            chunks.append(chunk)
        return b"".join(chunks)

    async def body_of(request: Request):
        try:
            raw = await asyncio.wait_for(read_body(request), limits.body_timeout_s)
        except asyncio.TimeoutError:
            raise RequestError(408, f"the body did not arrive within {limits.body_timeout_s:g} s", None,
                               "request_timeout", {"Connection": "close"}) from None
        except ClientDisconnect:   # the client left mid-upload: nobody to answer, nothing to log
            raise RequestError(400, "the client disconnected before its body ended") from None
        try:    # JSON between systems is UTF-8 (RFC 8259): bytes that are not (a raw surrogate) are refused here
            return json.loads(raw.decode("utf-8"))
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"the body is not JSON: {exc}") from None
        except RecursionError:   # json.loads recurses once per level of nesting
            raise RequestError(400, "the body is nested too deeply to read") from None

    return app, body_of


# --- vLLM's runtime LoRA API: /v1/load_lora_adapter, /v1/unload_lora_adapter ----------------------------------

class AdapterError(Exception):
    """An adapter request refused in vLLM's shape: ``{"error": {message, type, param, code: status}}`` with
    vLLM's types (InvalidUserInput, NotFoundError, BadRequestError)."""

    def __init__(self, status: int, kind: str, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.param = status, kind, message, param


def parse_adapter_request(body, *, load: bool) -> tuple[str, str | None]:
    """(lora_name, lora_path) of a load (``load``) or unload request body, as vLLM takes them."""
    fields = {"lora_name", "lora_path"} if load else {"lora_name", "lora_int_id"}
    if not isinstance(body, dict):
        raise AdapterError(400, "InvalidUserInput", "the body must be a JSON object")
    unknown = sorted(set(body) - fields)
    if unknown:
        raise AdapterError(400, "InvalidUserInput", f"{unknown[0]!r} is not a field of this request (it takes "
                                                    f"{', '.join(sorted(fields))})", unknown[0])
    name, path = body.get("lora_name"), body.get("lora_path")
    if load and not (isinstance(name, str) and name and isinstance(path, str) and path):
        raise AdapterError(400, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
    if not load and not (isinstance(name, str) and name):
        raise AdapterError(400, "InvalidUserInput", "'lora_name' must be provided.", "lora_name")
    if name == MODEL or name.startswith(f"{MODEL}/"):
        raise AdapterError(400, "InvalidUserInput", f"{name!r} is a name this server gives its own models",
                           "lora_name")
    check_unicode(name, "lora_name")
    return name, path
