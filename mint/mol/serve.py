"""`mint serve`: an OpenAI-compatible HTTP server over the mixture (FastAPI + uvicorn).

Requests from concurrent clients are batched: the batcher thread waits up to ``window_ms`` after the first
queued turn (or until ``max_batch`` are queued) and answers them in one mixed-adapter batch. A poller
thread re-reads the registry's champion aliases every ``poll_s`` seconds and hot-swaps what moved. Every
request body is checked here, so a malformed request gets a 4xx in OpenAI's error shape, never a 5xx.

Streaming (``stream: true``) sends server-sent events in OpenAI's chunk format while the batch decodes: a
role delta once the turn's batch starts, a content delta as each piece of text is decoded, a last chunk
with the finish reason, then ``data: [DONE]``. The streaming row is still one row of a mixed batch: the
runtime's decode loop hands each step's text to the row's listener (a ``_Relay``), which passes it to the
request's event loop. A client that disconnects marks its relay gone; the runtime then stops that row
(``cancelled``, not logged) and the rest of the batch goes on.

Tools follow OpenAI's shape both ways. A client's history of ``tool_calls`` is written into the assistant
turn as training renders it (``<tool_call>`` blocks); an answer that calls only the offered tools comes back
as ``message.tool_calls`` with ``finish_reason: tool_calls``. A streamed turn that offers tools is sent
whole when it ends, since a call cannot be told from words until the answer is complete.
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

from fastapi import Request   # at module level: FastAPI resolves the handlers' (postponed) annotations here

from mint.errors import BadInput, MintError
from mint.harness.agent import parse_tool_calls, tool_descriptions
from mint.mol.mixture import Answer, Mixture, Turn
from mint.mol.runtime import CANCELLED, Decoding, TextListener
from mint.text import check_unicode
from mint.train.examples import render_message

MODEL = "mint"
MAX_TOKENS_LIMIT = 4096
ROLES = ("system", "user", "assistant", "tool")


class RequestError(Exception):
    def __init__(self, status: int, message: str, param: str | None = None, code: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code


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


def parse_chat_request(body, specialists: tuple[str, ...]) -> tuple[Turn, bool, str]:
    """(turn, stream, model) from a /v1/chat/completions body; RequestError (4xx) for anything malformed."""
    if not isinstance(body, dict):
        raise RequestError(400, "the body must be a JSON object")
    model = body.get("model", MODEL)
    if not isinstance(model, str):
        raise RequestError(400, "model must be a string", "model")
    forced = None
    if model != MODEL:
        prefix, _, name = model.partition("/")
        if prefix != MODEL or name not in specialists:
            raise RequestError(404, f"model {model!r} does not exist; use {MODEL} (routed) or "
                                    f"{', '.join(f'{MODEL}/{s}' for s in specialists)}", "model", "model_not_found")
        forced = name
    tools = body.get("tools") or []
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        raise RequestError(400, "tools must be a list of objects", "tools")
    raw = body.get("messages")
    if not isinstance(raw, list) or not raw:
        raise RequestError(400, "messages must be a non-empty list", "messages")
    messages = []
    for i, message in enumerate(raw):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            raise RequestError(400, f"{where} must be an object", where)
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
    return Turn(messages, tools, forced, decoding, session), stream, model


# --- batching -----------------------------------------------------------------------------

@dataclass
class _Job:
    turn: Turn
    future: Future
    listener: TextListener | None = None


class Batcher:
    """Collects turns from many clients and answers them together (windowed batching)."""

    def __init__(self, mixture: Mixture, *, window_ms: float = 10.0, max_batch: int = 16) -> None:
        self.mixture, self.window_s, self.max_batch = mixture, window_ms / 1000, max_batch
        self.jobs: queue.Queue[_Job | None] = queue.Queue()
        self.batch_sizes: list[int] = []
        self.cancelled = 0        # streamed turns whose client went away before the answer ended
        self._thread = threading.Thread(target=self._run, name="mint-batcher", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self.jobs.put(None)
        self._thread.join(timeout=60)

    def submit(self, turn: Turn, listener: TextListener | None = None) -> Future:
        job = _Job(turn, Future(), listener)
        self.jobs.put(job)
        return job.future

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

            def heard(*args, **kwargs):
                streamed[index] = True
                return listener(*args, **kwargs)
            return heard

        try:
            answers = self.mixture.answer([job.turn for job in batch],
                                          listeners=[watch(i, job.listener) for i, job in enumerate(batch)])
            self.cancelled += sum(answer.finish_reason == CANCELLED for answer in answers)
            for job, answer in zip(batch, answers):
                job.future.set_result(answer)
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting request(s)
            if len(batch) > 1 and not any(streamed):
                # one bad turn (say, longer than the base's context) must not fail the turns that shared
                # its batch: answer each alone, so only the bad one gets the error (nothing was logged or
                # streamed yet; once a client has text, a retry would send it twice)
                for job in batch:
                    self._answer([job])
                return
            for job in batch:
                if not job.future.done():
                    job.future.set_exception(exc)


class ChampionPoller:
    """Re-reads the champion aliases every ``poll_s`` seconds; a failed load is reported, not fatal."""

    def __init__(self, mixture: Mixture, poll_s: float) -> None:
        self.mixture, self.poll_s = mixture, poll_s
        self.last_error: str | None = None
        self.handoffs: list = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mint-poller", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=60)

    def _run(self) -> None:
        while not self._stop.wait(self.poll_s):
            try:
                self.handoffs += self.mixture.sync()
                self.last_error = None
            except MintError as exc:    # e.g. a champion of another base: keep serving the old one
                self.last_error = str(exc)


# --- the app -------------------------------------------------------------------------------

def _reply(answer: Answer, tools: list[dict]) -> tuple[str | None, list[dict] | None, str]:
    """(content, tool_calls or None, finish_reason) of an answer to a turn that offered ``tools``."""
    called = answer_tool_calls(answer.text, tools)
    return (answer.text, None, answer.finish_reason) if called is None else (*called, "tool_calls")


def _completion(answer: Answer, model: str, tools: list[dict]) -> dict:
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


class _Relay:
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


async def _events(relay: _Relay, future: Future, first, answer_id: str, model: str, tools: list[dict]):
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


def create_app(mixture: Mixture, *, window_ms: float = 10.0, max_batch: int = 16, poll_s: float = 2.0):
    from contextlib import asynccontextmanager

    from fastapi import FastAPI
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.background import BackgroundTask
    from starlette.exceptions import HTTPException

    batcher = Batcher(mixture, window_ms=window_ms, max_batch=max_batch)
    poller = ChampionPoller(mixture, poll_s)

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

    app = FastAPI(title="mint", lifespan=lifespan)
    app.state.batcher, app.state.poller, app.state.mixture = batcher, poller, mixture

    def error(status: int, message: str, param: str | None = None, code: str | None = None) -> JSONResponse:
        kind = "invalid_request_error" if status < 500 else "server_error"
        message = message.encode("utf-8", "backslashreplace").decode("utf-8")   # it may quote a lone surrogate
        return JSONResponse({"error": {"message": message, "type": kind, "param": param, "code": code}}, status)

    @app.exception_handler(RequestError)
    async def _request_error(_request, exc: RequestError):
        return error(exc.status, exc.message, exc.param, exc.code)

    @app.exception_handler(BadInput)
    async def _bad_input(_request, exc: BadInput):
        return error(400, str(exc), exc.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_request, exc: RequestValidationError):
        return error(400, f"invalid request: {exc.errors()[:1]}")

    @app.exception_handler(HTTPException)
    async def _http(_request, exc: HTTPException):
        return error(exc.status_code, str(exc.detail))

    async def body_of(request: Request):
        raw = await request.body()
        try:
            return json.loads(raw)
        except (ValueError, UnicodeDecodeError) as exc:
            raise RequestError(400, f"the body is not JSON: {exc}") from None
        except RecursionError:   # json.loads recurses once per level of nesting
            raise RequestError(400, "the body is nested too deeply to read") from None

    @app.get("/health")
    async def health():
        return {"status": "ok", "revisions": mixture.revisions(), "batches": len(batcher.batch_sizes),
                "sync_error": poller.last_error}

    @app.get("/v1/models")
    async def models():
        ids = [MODEL, *(f"{MODEL}/{name}" for name in mixture.project.names)]
        return {"object": "list", "data": [{"id": i, "object": "model", "created": 0, "owned_by": "mint"}
                                           for i in ids]}

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        turn, stream, model = parse_chat_request(await body_of(request), mixture.project.names)
        if not stream:
            return _completion(await asyncio.wrap_future(batcher.submit(turn)), model, turn.tools)
        answer_id = f"chatcmpl-{uuid.uuid4().hex}"
        relay = _Relay(asyncio.get_running_loop())
        future = batcher.submit(dataclasses.replace(turn, id=answer_id), relay)
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
        return StreamingResponse(_events(relay, future, first, answer_id, model, turn.tools),
                                 media_type="text/event-stream",
                                 background=BackgroundTask(relay.leave))

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        body = await body_of(request)
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise RequestError(400, "the body must be {id: COMPLETION_ID, rating: -1|0|1, correction: TEXT}", "id")
        try:
            mixture.feedback(body["id"], rating=body.get("rating"), correction=body.get("correction"))
        except BadInput as exc:
            status = 404 if exc.field == "id" else 400
            raise RequestError(status, str(exc), exc.field) from None
        return {"id": body["id"], "logged": True}

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


def serve(mixture: Mixture, sock: socket.socket, *, window_ms: float = 10.0, max_batch: int = 16,
          poll_s: float = 2.0) -> None:
    """Serve on ``sock`` (``listening_socket``) until interrupted (blocking)."""
    import uvicorn

    app = create_app(mixture, window_ms=window_ms, max_batch=max_batch, poll_s=poll_s)
    uvicorn.Server(uvicorn.Config(app, log_level="warning")).run(sockets=[sock])
