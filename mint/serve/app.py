"""`mint serve`'s one app: OpenAI's chat completions (whole or streamed), /v1/models, /v1/feedback and /health,
over a backend (``mint.serve.backend``): the local mixture, or an upstream OpenAI-compatible server (the gateway).

The app checks every request (``mint.serve.protocol``), admits it (``Admission``: the queue and each key's
requests in flight, counted here for every backend: a full queue or a key with too many requests gets 429 with
``Retry-After``), and answers it through the backend. A non-streamed request whose client leaves gets no answer
(499) and its turn is stopped where the backend can stop it (a row of the local batch, at its next step); a
streamed one stops the same way when its client disconnects. A backend that loads adapters by name also answers
vLLM's runtime LoRA API (``/v1/load_lora_adapter``, ``/v1/unload_lora_adapter``).
"""
from __future__ import annotations

import asyncio
import dataclasses
import threading
import uuid

from fastapi import Request   # at module level: FastAPI resolves the handlers' (postponed) annotations here

from mint.errors import BadInput
from mint.generation.constrain import TOOL_CALL
from mint.generation.text import StopFlag
from mint.serve.admission import Access, Limits
from mint.serve.backend import Backend
from mint.serve.protocol import (END, MODEL, Relay, RequestError, client_left, completion_body, error_response,
                                 openai_app, parse_adapter_request, parse_chat_request, stream_events)


class Admission:
    """The turns queued or in flight (at most ``max_queue``) and each key's requests in flight (at most
    ``max_per_key``; per client address without keys): one count for every backend."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.outstanding = 0
        self.counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def enter(self, who: str) -> None:
        """Count a turn of ``who`` in; RequestError 429 when the queue or ``who``'s share is full."""
        with self._lock:
            if self.outstanding >= self.limits.max_queue:
                raise RequestError(429, f"{self.outstanding} turns are queued or in flight, the most this server "
                                        "takes; retry shortly", None, "server_busy", {"Retry-After": "1"})
            if self.counts.get(who, 0) >= self.limits.max_per_key:
                raise RequestError(429, f"{self.limits.max_per_key} requests of this key are in flight already, the "
                                        "most it may have; retry when one ends", None, "rate_limit_exceeded",
                                   {"Retry-After": "1"})
            self.outstanding += 1
            self.counts[who] = self.counts.get(who, 0) + 1

    def leave(self, who: str) -> None:
        with self._lock:
            self.outstanding -= 1
            self.counts[who] -= 1
            if not self.counts[who]:
                del self.counts[who]

    def state(self) -> dict:
        return {"outstanding": self.outstanding, "limit": self.limits.max_queue}


def create_app(backend: Backend, *, access: Access = Access(), limits: Limits = Limits()):
    """The app answering through ``backend`` (started and stopped with the app)."""
    from contextlib import asynccontextmanager

    from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
    from starlette.background import BackgroundTask

    from mint.serve.gateway import UpstreamError

    admission = Admission(limits)
    context = backend.context_limit()
    max_prompt_chars = limits.max_prompt_chars or (8 * context if context else None)

    @asynccontextmanager
    async def lifespan(_app):
        await backend.start()
        try:
            yield
        finally:
            await backend.stop()
            backend.close()

    app, body_of = openai_app(lifespan, access, limits)
    app.state.backend, app.state.admission = backend, admission

    @app.exception_handler(UpstreamError)
    async def _upstream(_request, exc: UpstreamError):
        return error_response(exc.status, str(exc), None, {504: "upstream_timeout", 400: "upstream_refused"}.get(
            exc.status, "upstream_error"))

    @app.get("/health")
    async def health(request: Request):
        ok, details = backend.health()
        status = "ok" if ok else "not ok"
        if not request.scope["state"]["authorized"]:
            return JSONResponse({"status": status}, 200 if ok else 503)
        return JSONResponse({"status": status, **details, "queue": admission.state()}, 200 if ok else 503)

    def model_list() -> list[dict]:
        ids = [MODEL, *(f"{MODEL}/{name}" for name in backend.names)]
        return [*({"id": i, "object": "model", "created": 0, "owned_by": "mint", "parent": None} for i in ids),
                *backend.models()]

    @app.get("/v1/models")
    async def models():
        return {"object": "list", "data": model_list()}

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str):
        found = [m for m in model_list() if m["id"] == model_id]
        if not found:
            raise RequestError(404, f"model {model_id!r} does not exist", "model", "model_not_found")
        return found[0]

    if backend.loads_adapters:
        @app.post("/v1/load_lora_adapter")
        async def load_lora_adapter(request: Request):
            name, path = parse_adapter_request(await body_of(request), load=True)
            await asyncio.to_thread(backend.load_adapter, name, path)
            return PlainTextResponse(f"Success: LoRA adapter '{name}' added successfully.")

        @app.post("/v1/unload_lora_adapter")
        async def unload_lora_adapter(request: Request):
            name, _path = parse_adapter_request(await body_of(request), load=False)
            await asyncio.to_thread(backend.unload_adapter, name)
            return PlainTextResponse(f"Success: LoRA adapter '{name}' removed successfully.")

    @app.post("/v1/feedback")
    async def feedback(request: Request):
        """A rating or correction of a turn the backend answered for this key."""
        body = await body_of(request)
        if not isinstance(body, dict) or not isinstance(body.get("id"), str):
            raise RequestError(400, "the body must be {id: COMPLETION_ID, rating: -1|0|1, correction: TEXT}", "id")
        unknown = sorted(set(body) - {"id", "rating", "correction"})
        if unknown:
            raise RequestError(400, f"{unknown[0]!r} is not a feedback field (id, rating, correction)", unknown[0])
        try:
            backend.turns.feedback(body["id"], rating=body.get("rating"), correction=body.get("correction"),
                                   owner=request.scope["state"]["owner"])
        except BadInput as exc:
            status = 404 if exc.field == "id" else 400
            raise RequestError(status, str(exc), exc.field) from None
        return {"id": body["id"], "logged": True}

    def answering(request: Request, turn, listener) -> asyncio.Task:
        """The backend answering ``turn``, counted in the admission until its answer is done."""
        owner = request.scope["state"]["owner"]
        who = owner or f"address {request.client.host if request.client else '?'}"
        admission.enter(who)
        task = asyncio.ensure_future(backend.answer(turn, owner, listener))
        task.add_done_callback(lambda _task: admission.leave(who))
        return task

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        asked = parse_chat_request(await body_of(request), backend.names, limits, max_prompt_chars,
                                   adapters=backend.adapter_names())
        turn, model = asked.turn, asked.model
        structure = turn.decoding.structure
        if structure is not None and structure.kind not in backend.structures:
            raise RequestError(400, f"{backend.kind} cannot shape an answer as a {structure.kind.replace('_', ' ')}"
                                    f" (it can: {', '.join(backend.structures) or 'none'})",
                               "tool_choice" if structure.kind == TOOL_CALL else "response_format",
                               "unsupported_parameter")
        if not asked.stream:
            flag = StopFlag()
            waiting = answering(request, turn, flag)
            left = asyncio.ensure_future(client_left(request))
            try:
                await asyncio.wait({waiting, left}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                left.cancel()
            if not waiting.done():      # the client went away: its turn stops where it can, unlogged
                flag.stop()
                return Response(status_code=499)
            return completion_body(waiting.result(), model, turn.tools)
        answer_id = f"chatcmpl-{uuid.uuid4().hex}"
        relay = Relay(asyncio.get_running_loop())
        task = answering(request, dataclasses.replace(turn, id=answer_id), relay)
        task.add_done_callback(relay.end)
        try:
            first = await relay.queue.get()   # the turn began (or failed: then answer as a plain error)
        except asyncio.CancelledError:
            relay.leave()
            raise
        if first is END and task.exception() is not None:
            relay.leave()
            raise task.exception()
        # the background task runs however the response ends, even if the generator never started
        events = stream_events(relay, task, first, answer_id, model, turn.tools, asked.include_usage)
        return StreamingResponse(events, media_type="text/event-stream", background=BackgroundTask(relay.leave))

    return app
