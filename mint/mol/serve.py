"""`mint serve`: an OpenAI-compatible HTTP server over the mixture (FastAPI + uvicorn).

Requests from concurrent clients are batched: the batcher thread waits up to ``window_ms`` after the first
queued turn (or until ``max_batch`` are queued) and answers them in one mixed-adapter batch. A poller
thread re-reads the registry's champion aliases every ``poll_s`` seconds and hot-swaps what moved. Every
request body is checked here, so a malformed request gets a 4xx in OpenAI's error shape, never a 5xx.

Streaming (``stream: true``) sends server-sent events in OpenAI's chunk format while the batch decodes: a
role delta once the turn's batch starts, a content delta as each piece of text is decoded, a last chunk
with the finish reason, then ``data: [DONE]``. The streaming row is still one row of a mixed batch: the
runtime's decode loop hands each step's text to the row's listener (a ``Relay``), which passes it to the
request's event loop. A client that disconnects marks its relay gone; the runtime then stops that row
(``cancelled``, not logged) and the rest of the batch goes on.

Tools follow OpenAI's shape both ways. A client's history of ``tool_calls`` is written into the assistant
turn as training renders it (``<tool_call>`` blocks); an answer that calls only the offered tools comes back
as ``message.tool_calls`` with ``finish_reason: tool_calls``. A streamed turn that offers tools is sent
whole when it ends, since a call cannot be told from words until the answer is complete.

Facing clients (``Access``, ``Limits``): with API keys set, every ``/v1/*`` route needs ``Authorization: Bearer
KEY`` (401 otherwise; ``/health`` then says only ok / not ok without one); a request whose ``Host`` is not
allowed gets 403 and a POST whose ``Content-Type`` is not ``application/json`` 415, so a web page can reach
the server neither by a cross-origin form post nor by DNS rebinding. A body over ``max_body_bytes`` gets 413
before it is parsed; too many messages or too much text get 400 before anything is tokenized; a full queue or a
key with too many requests in flight gets 429 with ``Retry-After``. A non-streamed request whose client leaves
stops its row like a streamed one. Slow clients are cut off: headers that take longer than
``header_timeout_s`` and bodies slower than ``body_timeout_s`` (408).

Named adapters: ``POST /v1/load_lora_adapter {lora_name, lora_path}`` and ``/v1/unload_lora_adapter {lora_name}``
answer as vLLM's runtime LoRA API does (plain-text 200, errors typed InvalidUserInput / NotFoundError /
BadRequestError), loading the adapter into one of the runtime's named slots; a request that names it in
``model`` is answered by it. So a second `mint serve` can stand in for vLLM behind the gateway
(``mint.mol.gateway``), which reuses this module's checks, errors and streaming.
"""
from __future__ import annotations

import asyncio
import dataclasses
import errno
import json
import queue
import socket
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Collection

from fastapi import Request   # at module level: FastAPI resolves the handlers' (postponed) annotations here

from mint.errors import BadInput, MintError
from mint.mol.admission import Access, Limits
from mint.harness.agent import parse_tool_calls
from mint.mol.mixture import Answer, Mixture, Turn
from mint.generation.engine import CANCELLED
from mint.generation.text import StopFlag, TextListener
from mint.mol.runtime import Decoding
from mint.render import render_message, tool_descriptions
from mint.text import check_unicode

MODEL = "mint"
MAX_TOKENS_LIMIT = 4096
ROLES = ("system", "user", "assistant", "tool")
# the body fields a chat completion may have; any other is refused (400 naming it), never ignored silently
CHAT_FIELDS = frozenset({"model", "messages", "tools", "tool_choice", "stream", "max_tokens",
                         "max_completion_tokens", "temperature", "top_p", "seed", "n", "user"})
MESSAGE_FIELDS = frozenset({"role", "content", "name", "tool_calls", "tool_call_id"})


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


def parse_chat_request(body, specialists: tuple[str, ...], limits: Limits = Limits(),
                       max_prompt_chars: int | None = None, adapters: Collection[str] = ()) -> tuple[Turn, bool, str]:
    """(turn, stream, model) from a /v1/chat/completions body; RequestError (4xx) for anything malformed, for a
    field this server does not implement, and for more messages or text than ``limits`` allow (checked before
    anything is tokenized). A ``model`` among ``adapters`` (loaded by name) is answered by that adapter."""
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    for key in body:
        if key not in CHAT_FIELDS:
            raise RequestError(400, f"{key!r} is not supported by this server (it takes "
                                    f"{', '.join(sorted(CHAT_FIELDS))})", key, "unsupported_parameter")
    if body.get("tool_choice") not in (None, "auto"):
        raise RequestError(400, "tool_choice: only 'auto' is supported", "tool_choice", "unsupported_parameter")
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
    if _number(body, "n", 1, 1, 1, integer=True) != 1:
        raise RequestError(400, "n must be 1", "n")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise RequestError(400, "stream must be true or false", "stream")
    max_tokens = _number(body, "max_completion_tokens", 1, MAX_TOKENS_LIMIT, None, integer=True)
    max_tokens = max_tokens or _number(body, "max_tokens", 1, MAX_TOKENS_LIMIT, 64, integer=True)
    decoding = Decoding(max_new_tokens=max_tokens, temperature=float(_number(body, "temperature", 0, 2, 0.0)),
                        top_p=float(_number(body, "top_p", 0.01, 1, 1.0)),
                        seed=int(_number(body, "seed", -(2 ** 63), 2 ** 63 - 1, 0, integer=True)))
    session = body.get("user") if isinstance(body.get("user"), str) else None
    check_unicode(session, "user")     # Turn checks messages and tools; its name for this one is `session`
    return Turn(messages, tools, forced, decoding, session, adapter=adapter), stream, model


# --- batching -----------------------------------------------------------------------------

class QueueFull(Exception):
    """More turns are waiting or generating than the server takes."""


@dataclass
class _Job:
    turn: Turn
    future: Future
    listener: TextListener | None = None
    owner: str | None = None


class Batcher:
    """Collects turns from many clients and answers them together (windowed batching), at most ``max_queue``
    waiting or generating at once."""

    def __init__(self, mixture: Mixture, *, window_ms: float = 10.0, max_batch: int = 16,
                 max_queue: int | None = None) -> None:
        self.mixture, self.window_s, self.max_batch = mixture, window_ms / 1000, max_batch
        self.max_queue = max_queue
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.batch_sizes: list[int] = []
        self.cancelled = 0        # turns whose client went away before the answer ended
        self.outstanding = 0      # turns submitted and not answered yet
        self._count_lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="mint-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=60)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def submit(self, turn: Turn, listener: TextListener | None = None, owner: str | None = None) -> Future:
        """The turn's future; QueueFull when ``max_queue`` turns are waiting or generating already."""
        with self._count_lock:
            if self.max_queue is not None and self.outstanding >= self.max_queue:
                raise QueueFull(f"{self.outstanding} turns are queued, the most this server takes")
            self.outstanding += 1
        job = _Job(turn, Future(), listener, owner)
        job.future.add_done_callback(self._done)
        self.jobs.put(job)
        return job.future

    def _done(self, _future: Future) -> None:
        with self._count_lock:
            self.outstanding -= 1

    def _run(self) -> None:
        while True:
            first = self.jobs.get()
            if first is None:
                return
            batch, deadline, stopping = [first], time.monotonic() + self.window_s, False
            while len(batch) < self.max_batch:
                try:
                    job = self.jobs.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if job is None:
                    stopping = True
                    break
                batch.append(job)
            self.batch_sizes.append(len(batch))
            self._answer(batch)
            if stopping:
                return

    def _answer(self, batch: list[_Job]) -> None:
        streamed = [False] * len(batch)

        def watch(index: int, listener: TextListener | None):
            if listener is None:
                return None
            if not getattr(listener, "wants_text", True):
                return listener

            def heard(*args, **kwargs):
                streamed[index] = True
                return listener(*args, **kwargs)
            return heard

        try:
            results = self.mixture.answer_each([job.turn for job in batch],
                                               listeners=[watch(i, job.listener) for i, job in enumerate(batch)],
                                               owners=[job.owner for job in batch])
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request(s)
            unstreamed = [job for job, began in zip(batch, streamed) if not began]
            if len(batch) > 1 and unstreamed:
                # a failure of the whole batch cannot be pinned on one turn: the turns whose client has no text
                # yet are answered again each alone, so only a bad one gets its error (a streamed turn with text
                # out cannot be retried without sending it twice: it alone gets the error)
                for job, began in zip(batch, streamed):
                    if began:
                        job.future.set_exception(exc)
                for job in unstreamed:
                    self._answer([job])
                return
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)
            return
        for job, result in zip(batch, results):
            if isinstance(result, BaseException):
                job.future.set_exception(result)
            else:
                self.cancelled += result.finish_reason == CANCELLED
                job.future.set_result(result)


class ChampionPoller:
    """Re-reads the champion aliases every ``poll_s`` seconds. No error stops it: a registry it cannot read is
    ``last_error``, a champion that fails to load is its specialist's (``mixture.runtime.sync_errors``)."""

    def __init__(self, mixture: Mixture, poll_s: float) -> None:
        self.mixture, self.poll_s = mixture, poll_s
        self.last_error: str | None = None
        self.last_poll: float | None = None
        self.handoffs: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mint-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def poll(self) -> None:
        try:
            self.handoffs += self.mixture.sync()
            self.last_error = None
        except Exception as exc:  # noqa: BLE001 - e.g. sqlite3.OperationalError: keep serving, say so in /health
            self.last_error = str(exc) if isinstance(exc, MintError) else f"{type(exc).__name__}: {exc}"
        self.last_poll = time.time()

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            self.poll()


class InFlight:
    """Requests in flight per key (per client address without keys), at most ``limit`` each."""

    def __init__(self, limit: int) -> None:
        self.limit, self.counts, self._lock = limit, {}, threading.Lock()

    def enter(self, who: str) -> None:
        with self._lock:
            if self.counts.get(who, 0) >= self.limit:
                raise RequestError(429, f"{self.limit} requests of this key are in flight already, the most it "
                                        "may have; retry when one ends", None, "rate_limit_exceeded",
                                   {"Retry-After": "1"})
            self.counts[who] = self.counts.get(who, 0) + 1

    def leave(self, who: str) -> None:
        with self._lock:
            self.counts[who] -= 1
            if not self.counts[who]:
                del self.counts[who]


# --- the app -------------------------------------------------------------------------------

def _reply(answer: Answer, tools: list[dict]) -> tuple[str | None, list[dict] | None, str]:
    """(content, tool_calls or None, finish_reason) of an answer to a turn that offered ``tools``."""
    called = answer_tool_calls(answer.text, tools)
    return (answer.text, None, answer.finish_reason) if called is None else (*called, "tool_calls")


def completion_body(answer: Answer, model: str, tools: list[dict]) -> dict:
    content, calls, finish = _reply(answer, tools)
    message = {"role": "assistant", "content": content, **({"tool_calls": calls} if calls else {})}
    return {
        "id": answer.id, "object": "chat.completion", "created": int(time.time()), "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                  "total_tokens": answer.prompt_tokens + answer.completion_tokens},
        "mint": {"specialist": answer.specialist, "served_by": answer.served_by,
                 "route": {"probabilities": answer.route.probabilities, "decided_by": answer.route.decided_by,
                           "revision": answer.route.revision}, "latency_ms": answer.latency_ms},
    }


_END = object()   # the relay's last item: the turn's future is done


class Relay:
    """One streaming turn's text, from the batcher thread (``__call__``, a runtime listener) to the request's
    event loop (``queue``). The first call, when the row's batch begins, queues "" so the stream can start."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop, self.queue = loop, asyncio.Queue()
        self.gone = False
        self._started = False

    def __call__(self, delta: str) -> bool:
        if self.gone:
            return False
        if delta or not self._started:
            self._started = True
            self.loop.call_soon_threadsafe(self.queue.put_nowait, delta)   # raises once the loop is closed
        return True

    def leave(self) -> None:
        self.gone = True

    def end(self, _future: Future) -> None:
        try:
            self.loop.call_soon_threadsafe(self.queue.put_nowait, _END)
        except RuntimeError:    # the server's loop has closed: nobody is left to tell
            pass


async def stream_events(relay: Relay, future: Future, first, answer_id: str, model: str, tools: list[dict]):
    """The server-sent events of one streaming turn; ``first`` is the relay's first item. A turn that offers
    tools is sent whole when it ends: as ``tool_calls`` if it calls them, else as one content delta."""
    created = int(time.time())

    def event(delta: dict, finish: str | None = None, answer: Answer | None = None) -> str:
        chunk = {"id": answer_id, "object": "chat.completion.chunk", "created": created, "model": model,
                 "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if answer is not None:
            chunk["mint"] = {"specialist": answer.specialist, "served_by": answer.served_by}
        return f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n"

    try:
        yield event({"role": "assistant", "content": ""})
        item = first
        while item is not _END:
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
        yield "data: [DONE]\n\n"
    finally:   # a disconnect cancels this generator: the runtime stops the row at its next step
        relay.gone = True


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


async def _client_left(request: Request) -> None:
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
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")   # it may quote a lone surrogate
    return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status,
                        headers=headers)


def openai_app(lifespan, access: Access, limits: Limits):
    """(app, body_of): a FastAPI app behind the guard (``_Guard``) whose errors all answer in OpenAI's shape, and
    the coroutine that reads a request's JSON body within ``limits``. The local server and the gateway
    (``mint.mol.gateway``) add their routes to it."""
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
        try:
            return json.loads(raw)
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


def add_feedback_route(app, book, body_of) -> None:
    """POST /v1/feedback: a rating or correction of a turn ``book`` (a ``TurnBook``) answered for this key."""

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        body = await body_of(request)
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise RequestError(400, "the body must be {id: COMPLETION_ID, rating: -1|0|1, correction: TEXT}", "id")
        unknown = sorted(set(body) - {"id", "rating", "correction"})
        if unknown:
            raise RequestError(400, f"{unknown[0]!r} is not a feedback field (id, rating, correction)", unknown[0])
        try:
            book.feedback(body["id"], rating=body.get("rating"), correction=body.get("correction"),
                          owner=request.scope["state"]["owner"])
        except BadInput as exc:
            status = 404 if exc.field == "id" else 400
            raise RequestError(status, str(exc), exc.field) from None
        return {"id": body["id"], "logged": True}


def create_app(mixture: Mixture, *, window_ms: float = 10.0, max_batch: int = 16, poll_s: float = 2.0,
               access: Access = Access(), limits: Limits = Limits()):
    from contextlib import asynccontextmanager

    from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.background import BackgroundTask

    batcher = Batcher(mixture, window_ms=window_ms, max_batch=max_batch, max_queue=limits.max_queue)
    poller = ChampionPoller(mixture, poll_s)
    in_flight = InFlight(limits.max_per_key)
    context = mixture.runtime.context_limit()
    max_prompt_chars = limits.max_prompt_chars or (8 * context if context else None)

    @asynccontextmanager
    async def lifespan(_app):
        batcher.start()
        poller.start()
        try:
            yield
        finally:
            poller.stop()
            batcher.stop()
            mixture.close()

    app, body_of = openai_app(lifespan, access, limits)
    app.state.batcher, app.state.poller, app.state.mixture = batcher, poller, mixture

    def healthy() -> tuple[bool, dict]:
        errors = dict(mixture.runtime.sync_errors)
        ok = poller.alive and poller.last_error is None and not errors and batcher.alive
        return ok, errors

    @app.get("/health")
    async def health(request: Request):
        ok, errors = healthy()
        status = "ok" if ok else "not ok"
        if not request.scope["state"]["authorized"]:
            return JSONResponse({"status": status}, 200 if ok else 503)
        revisions = mixture.revisions()
        specialists = {name: {"served": revisions[name], "rank": slot.rank, "error": errors.get(name)}
                       for name, slot in mixture.runtime.slots.items()}
        return JSONResponse({"status": status, "revisions": revisions, "specialists": specialists,
                             "router": revisions.get(mixture.project.router), "max_rank": mixture.runtime.max_rank,
                             "adapters": {name: {"served": slot.ref, "specialist": slot.specialist, "rank": slot.rank}
                                          for name, slot in mixture.runtime.named.items()},
                             "batches": len(batcher.batch_sizes), "cancelled": batcher.cancelled,
                             "queue": {"outstanding": batcher.outstanding, "limit": limits.max_queue},
                             "poller": {"alive": poller.alive, "last_poll": poller.last_poll},
                             "sync_error": poller.last_error}, 200 if ok else 503)

    @app.get("/v1/models")
    async def models():
        ids = [MODEL, *(f"{MODEL}/{name}" for name in mixture.project.names)]
        # a loaded adapter is listed as vLLM lists one: with the model it adapts as its parent
        return {"object": "list", "data": [
            *({"id": i, "object": "model", "created": 0, "owned_by": "mint", "parent": None} for i in ids),
            *({"id": name, "object": "model", "created": 0, "owned_by": "mint", "parent": MODEL,
               "root": slot.ref} for name, slot in list(mixture.runtime.named.items()))]}

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request):
        name, path = parse_adapter_request(await body_of(request), load=True)
        try:
            await asyncio.to_thread(mixture.runtime.load_named, name, Path(path))
        except BadInput as exc:
            missing = exc.field != "lora_name" and not Path(path).is_dir()
            raise AdapterError(404 if missing else 400, "NotFoundError" if missing else "InvalidUserInput",
                               str(exc), "lora_path" if exc.field != "lora_name" else "lora_name") from None
        except MintError as exc:
            raise AdapterError(400, "BadRequestError", str(exc), "lora_path") from None
        return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

    @app.post("/v1/unload_lora_adapter")
    async def unload_lora_adapter(request: Request):
        name, _path = parse_adapter_request(await body_of(request), load=False)
        try:
            await asyncio.to_thread(mixture.runtime.unload_named, name)
        except BadInput as exc:
            raise AdapterError(404, "NotFoundError", str(exc), "lora_name") from None
        return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    def submit(request: Request, turn: Turn, listener: TextListener) -> Future:
        owner = request.scope["state"]["owner"]
        who = owner or f"address {request.client.host if request.client else '?'}"
        in_flight.enter(who)
        try:
            future = batcher.submit(turn, listener, owner)
        except QueueFull as exc:
            in_flight.leave(who)
            raise RequestError(429, f"{exc}; retry shortly", None, "server_busy", {"Retry-After": "1"}) from None
        future.add_done_callback(lambda _f: in_flight.leave(who))
        return future

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        turn, stream, model = parse_chat_request(await body_of(request), mixture.project.names, limits,
                                                 max_prompt_chars, adapters=tuple(mixture.runtime.named))
        if not stream:
            flag = StopFlag()
            waiting = asyncio.wrap_future(submit(request, turn, flag))
            left = asyncio.ensure_future(_client_left(request))
            try:
                await asyncio.wait({waiting, left}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                left.cancel()
            if not waiting.done():      # the client went away: its row stops at the next step, unlogged
                flag.stop()
                return Response(status_code=499)
            return completion_body(waiting.result(), model, turn.tools)
        answer_id = f"chatcmpl-{uuid.uuid4().hex}"
        relay = Relay(asyncio.get_running_loop())
        future = submit(request, dataclasses.replace(turn, id=answer_id), relay)
        future.add_done_callback(relay.end)
        try:
            first = await relay.queue.get()   # the batch began (or failed: then answer as a plain error)
        except asyncio.CancelledError:
            relay.gone = True
            raise
        if first is _END and future.exception() is not None:
            relay.gone = True
            raise future.exception()
        # the background task runs however the response ends, even if the generator never started
        return StreamingResponse(stream_events(relay, future, first, answer_id, model, turn.tools),
                                 media_type="text/event-stream",
                                 background=BackgroundTask(relay.leave))

    add_feedback_route(app, mixture, body_of)
    return app


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a host that does not resolve, a port in use or one
    this user may not open is bad input naming its option, not a uvicorn error after a long load. Port 0
    takes a free port (``getsockname()`` says which)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise BadInput("must be from 0 to 65535", field="--port")
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                 flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise BadInput(f"{host!r} is not an address to listen on ({exc})", field="--host") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        field = "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field=field) from None
    return sock


def _timed_protocol(header_timeout_s: float):
    """uvicorn's h11 protocol, with a deadline for each request's headers: a client that sends part of them
    and stalls is disconnected after ``header_timeout_s`` (uvicorn's own timeout covers idle keep-alive only)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _header_deadline = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._await_headers()

        def _await_headers(self) -> None:
            if self._header_deadline is None:
                self._header_deadline = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _headers_too_slow(self) -> None:
            self._header_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before and self._header_deadline is not None:   # a request's headers are in
                self._header_deadline.cancel()
                self._header_deadline = None
            elif self.cycle is None or self.cycle.response_complete:            # the next request began
                self._await_headers()

        def connection_lost(self, exc) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None
            super().connection_lost(exc)

    return TimedH11Protocol


def server_config(app, limits: Limits = Limits(), **options):
    """The uvicorn config ``serve`` runs ``app`` with: slow clients are cut off (see ``Limits``)."""
    import uvicorn

    options = {"log_level": "warning", **options}
    return uvicorn.Config(app, http=_timed_protocol(limits.header_timeout_s), timeout_keep_alive=limits.keep_alive_s,
                          h11_max_incomplete_event_size=64 << 10, **options)


class BackgroundServer:
    """``app`` served by uvicorn on a thread (``start_background``): for a step that drives the server as its
    clients would, and for tests. ``stop`` waits for the thread."""

    def __init__(self, server, thread: threading.Thread, sock: socket.socket) -> None:
        self.server, self.thread, self.sock = server, thread, sock
        self.port = sock.getsockname()[1]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()


def start_background(app, limits: Limits = Limits(), *, host: str = "127.0.0.1", port: int = 0,
                     start_limit_s: float = 300.0) -> BackgroundServer:
    """Serve ``app`` on ``host:port`` (0: a free port) from a thread, once uvicorn says it has started; a server
    that does not start within ``start_limit_s`` is stopped and BadInput, never a hang."""
    import uvicorn

    sock = listening_socket(host, port)
    server = uvicorn.Server(server_config(app, limits, log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    running = BackgroundServer(server, thread, sock)
    deadline = time.monotonic() + start_limit_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            running.stop()
            raise BadInput(f"the server did not start within {start_limit_s:.0f} s", field="serve")
        time.sleep(0.05)
    return running


def serve(mixture: Mixture, sock: socket.socket, *, window_ms: float = 10.0, max_batch: int = 16,
          poll_s: float = 2.0, access: Access = Access(), limits: Limits = Limits()) -> None:
    """Serve on ``sock`` (``listening_socket``) until interrupted (blocking). While it runs, the workspace knows
    its slot rank (``mint.registry.servers``), so `mint promote` refuses a champion it could not load."""
    import uvicorn

    from mint.registry.servers import announce, withdraw

    app = create_app(mixture, window_ms=window_ms, max_batch=max_batch, poll_s=poll_s, access=access,
                     limits=limits)
    host, port = sock.getsockname()[:2]
    announcement = announce(mixture.ws, max_rank=mixture.runtime.max_rank,
                            url=f"http://{f'[{host}]' if ':' in host else host}:{port}")
    try:
        uvicorn.Server(server_config(app, limits)).run(sockets=[sock])
    finally:
        withdraw(announcement)
