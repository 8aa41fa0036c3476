"""`mint serve --upstream URL`: the router as a gateway in front of an OpenAI-compatible multi-LoRA server (vLLM).

Each turn is routed as the local runtime routes it (``mint.yaml``'s rules, then the router champion's probe, or
the starter probe) and forwarded to the upstream with ``model`` set to its specialist's champion adapter, named
immutably after the revision (``coding-v3``: ``mint.mol.export.adapter_name``, the names `mint export vllm`
gives); a specialist without a champion is answered by the upstream's base model. The gateway holds only what
routing reads: the base's embeddings and the decoder layers up to the deepest one its probes read (a third of
SmolLM2's), never the rest or the LM head.

The gateway sends the upstream the conversation the runtime would answer (``prompt_of``: tools listed in the
system turn, the client's tool-call history written as training renders it) with the turn's decoding, and
answers the client in the local server's shapes (tool calls parsed from the answer, the ``mint`` field), so a
client cannot tell the two apart. Every answered turn is logged as the local runtime logs it (``TurnBook``),
so `mint ingest` and the loop read it unchanged.

The champion poller publishes each new champion to the upstream (``POST /v1/load_lora_adapter``, vLLM's runtime
LoRA API) before routing switches to it, then unloads the one it replaced; an adapter the upstream lost (it
restarted) is published again at the next poll. An upstream that cannot be reached or answers an error gives
the client a 502, one that does not answer within ``timeout_s`` a 504 (a stream that stalls ends with an error
event), never a hang.
"""
from __future__ import annotations

import asyncio
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from fastapi import Request   # at module level: FastAPI resolves the handlers' (postponed) annotations here

from mint.errors import BadInput, MintError
from mint.mol.admission import Access, Limits
from mint.mol.mixture import Answer, Turn, TurnBook, prompt_of
from mint.mol.router import Route, Router, probe_features, starter_router
from mint.mol.runtime import Handoff
from mint.project import Project
from mint.workspace import Workspace

DEFAULT_UPSTREAM_TIMEOUT_S = 60.0


class UpstreamError(MintError):
    """The upstream failed a turn: ``status`` 502 (unreachable, or it answered an error) or 504 (no answer in
    time)."""

    def __init__(self, message: str, status: int = 502) -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Upstream:
    """An OpenAI-compatible server: ``url`` (with or without ``/v1``), its API key, the seconds a request may wait
    for it (to connect, and between any two pieces of an answer)."""
    url: str
    key: str | None = None
    timeout_s: float = DEFAULT_UPSTREAM_TIMEOUT_S

    def __post_init__(self) -> None:
        from urllib.parse import urlsplit

        parts = urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise BadInput(f"{self.url!r} is not an http(s) URL", field="--upstream")
        if not self.timeout_s > 0:
            raise BadInput("must be more than 0", field="--upstream-timeout")

    @property
    def api(self) -> str:
        """The URL that ``/chat/completions`` and ``/models`` follow."""
        url = self.url.rstrip("/")
        return url if url.endswith("/v1") else f"{url}/v1"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"} if self.key else {}


@dataclass(frozen=True)
class Published:
    """A champion as the upstream serves it."""
    name: str               # the adapter name requests give as ``model`` (coding-v3)
    ref: str                # the revision (coding:v3)
    revision_id: str


@dataclass
class _FeatureRequest:
    """One caller's conversations, waiting for a pass; ``wake`` is set when its rows are ready (``rows`` or
    ``error``) or when it is to run the next pass itself."""
    conversations: list
    layers: tuple[int, ...]
    reads: str
    wake: threading.Event
    done: bool = False
    rows: object = None
    error: BaseException | None = None


class FeatureBatcher:
    """The probe's features for concurrent callers (the gateway's request threads), one forward pass for all
    that arrive while a pass runs: ``compute(conversations, layers, reads)`` (``probe_features``) runs in one
    caller's thread at a time, on every conversation waiting then, and each caller takes back its own rows.

    A caller finds no pass running and runs one; one that arrives during a pass waits, and the first of those
    waiting runs the next pass, on everything that queued up behind it. A pass that fails (a conversation past
    the context) is run again per caller, so each hears its own error."""

    def __init__(self, compute) -> None:
        self.compute = compute
        self._lock = threading.Lock()
        self._waiting: list[_FeatureRequest] = []
        self._running = False
        self.passes = 0              # forward passes run (each on one or more callers' conversations)

    @property
    def waiting(self) -> int:
        """Callers queued for the next pass."""
        with self._lock:
            return len(self._waiting)

    def __call__(self, conversations, layer, reads: str):
        layers = (layer,) if isinstance(layer, int) else tuple(layer)
        request = _FeatureRequest(list(conversations), layers, reads, threading.Event())
        with self._lock:
            self._waiting.append(request)
            leads = not self._running
            self._running = True
        if not leads:
            request.wake.wait()
        if not request.done:         # no pass was running, or the one that ran handed this caller the next
            with self._lock:
                batch, self._waiting = self._waiting, []
            try:
                self._run(batch)
            finally:
                with self._lock:
                    if self._waiting:
                        self._waiting[0].wake.set()
                    else:
                        self._running = False
        if request.error is not None:
            raise request.error
        return request.rows

    def _run(self, batch: list[_FeatureRequest]) -> None:
        groups: dict[tuple, list[_FeatureRequest]] = {}
        for request in batch:        # a router switch may leave callers of two probes waiting at once
            groups.setdefault((request.layers, request.reads), []).append(request)
        for (layers, reads), requests in groups.items():
            try:
                self._settle(requests, layers, reads)
            except BaseException as exc:     # noqa: BLE001 - each caller hears it, then this thread's own raises
                for request in requests:
                    if not request.done:
                        request.error, request.done = exc, True
                        request.wake.set()

    def _settle(self, requests: list[_FeatureRequest], layers: tuple[int, ...], reads: str) -> None:
        conversations = [c for request in requests for c in request.conversations]
        try:
            self.passes += 1
            rows = self.compute(conversations, list(layers), reads)
        except MintError:
            if len(requests) == 1:
                raise
            for request in requests:         # whose conversation it was: each alone
                try:
                    self._settle([request], layers, reads)
                except MintError as own:
                    request.error, request.done = own, True
                    request.wake.set()
            return
        start = 0
        for request in requests:
            request.rows = rows[start:start + len(request.conversations)]
            start += len(request.conversations)
            request.done = True
            request.wake.set()


def routing_base(name: str, layers: int | None = None):
    """The base as the gateway holds it: its first ``layers`` decoder layers (at least those the starter probe
    reads), no LM head, only their weights read (``load_base(layers=K, head=False)``). (LoadedBase, how many
    layers the full base has)."""
    from mint.base import base_depth, default_probe_layers, load_base

    depth = base_depth(name)
    keep = min(depth, max(layers or 0, *default_probe_layers(depth)))
    return load_base(name, layers=keep, head=False), depth


class Gateway(TurnBook):
    """Routes turns on the base's early layers and forwards them to ``upstream`` (see the module's docstring)."""

    def __init__(self, ws: Workspace, project: Project, loaded, upstream: Upstream, *, depth: int | None = None,
                 max_rank: int | None = None, **options) -> None:
        import httpx

        super().__init__(ws, project, **options)
        self.loaded, self.upstream = loaded, upstream
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.depth = depth
        self.router = Router(project)
        self.router_revision_id: str | None = None
        self.published: dict[str, Published] = {}        # specialist -> its champion, as the upstream serves it
        self.sync_errors: dict[str, str] = {}            # specialist -> why its champion is not published
        self.upstream_models: list[str] = []             # what the upstream said it serves, at the last poll
        self.upstream_error: str | None = None
        self.given_max_rank = max_rank                   # the upstream's LoRA rank limit, as the operator gave it
        self.upstream_max_rank: int | None = None        # ... as the upstream said it (a mint upstream's /health)
        self.announcement = None                         # where the workspace hears that limit (``announce``)
        self.base_model: str | None = None               # the upstream's base (its first model without a parent)
        self.in_flight: dict[str, int] = {}              # upstream model -> turns forwarded to it, not yet answered
        self.retired: set[str] = set()                   # replaced adapters, unloaded once their turns are answered
        self._turns_lock = threading.Lock()              # a turn takes its model and counts in one step
        # one probe pass at a time (it hooks the layers), on the conversations of every turn waiting for one
        self.features = FeatureBatcher(lambda conversations, layers, reads: probe_features(
            self.model, self.tokenizer, conversations, layers, reads))
        self._http = httpx.Client(timeout=upstream.timeout_s)

    @property
    def max_rank(self) -> int | None:
        """The largest LoRA rank the upstream loads, if known: ``--max-rank`` (vLLM's ``--max-lora-rank``, which
        vLLM does not tell its clients), else what a mint upstream's /health says."""
        return self.given_max_rank if self.given_max_rank is not None else self.upstream_max_rank

    @classmethod
    def open(cls, ws: Workspace, project: Project, upstream: Upstream, *, base: str | None = None,
             **options) -> "Gateway":
        from mint.mol.router import champion_router

        router, _probe_base = champion_router(ws, project)
        layers = router.probe.layer if router.probe is not None else 0     # the deepest layer it reads
        loaded, depth = routing_base(base or project.base, layers)
        gateway = cls(ws, project, loaded, upstream, depth=depth, **options)
        try:
            gateway.sync()
        except UpstreamError:    # kept in upstream_error (/health says so); the poller tries again
            pass
        return gateway

    # --- routing ---------------------------------------------------------------------------

    def route(self, turn: Turn) -> tuple[Route, float]:
        """The turn's route (a forced one for ``mint/NAME``) and the milliseconds routing took."""
        started = time.perf_counter()
        if turn.specialist is not None:
            route = Route(turn.specialist, {n: float(n == turn.specialist) for n in self.project.names}, "forced",
                          None)
        else:
            route = self.router.route([prompt_of(turn)], [bool(turn.tools)], self.features)[0]
        return route, (time.perf_counter() - started) * 1000

    def target(self, specialist: str) -> tuple[str, str]:
        """(the upstream model that answers ``specialist``, the revision it serves or "base")."""
        published = self.published.get(specialist)
        if published is not None:
            return published.name, published.ref
        if self.base_model is None:
            raise UpstreamError(f"{self.upstream.api} has not said which models it serves"
                                + (f" ({self.upstream_error})" if self.upstream_error else ""))
        return self.base_model, "base"

    def begin_turn(self, specialist: str) -> tuple[str, str]:
        """``target(specialist)``, counted in flight on that model until ``end_turn``: an adapter a promotion
        replaced stays loaded on the upstream while a turn forwarded to it is still being answered."""
        with self._turns_lock:
            model, served_by = self.target(specialist)
            self.in_flight[model] = self.in_flight.get(model, 0) + 1
        return model, served_by

    def end_turn(self, model: str) -> None:
        with self._turns_lock:
            self.in_flight[model] -= 1
            if not self.in_flight[model]:
                del self.in_flight[model]

    def withdraw_drained(self) -> None:
        """Unload every replaced adapter that no turn in flight is using any more."""
        with self._turns_lock:
            drained = {name for name in self.retired if name not in self.in_flight}
            self.retired -= drained
        for name in sorted(drained):
            try:
                self.withdraw(name)
            except UpstreamError:
                with self._turns_lock:
                    self.retired.add(name)      # the next sync tries again
                raise
            if name in self.upstream_models:
                self.upstream_models.remove(name)

    def revisions(self) -> dict[str, str]:
        served = {name: self.published[name].ref if name in self.published else "base" for name in self.project.names}
        return {**served, self.project.router: self.router.revision or "rules"}

    # --- champions -------------------------------------------------------------------------

    def _upstream_call(self, method: str, path: str, body: dict | None = None):
        import httpx

        try:
            return self._http.request(method, f"{self.upstream.api}{path}", json=body, headers=self.upstream.headers())
        except httpx.TimeoutException:
            raise UpstreamError(f"{self.upstream.api}{path} did not answer within {self.upstream.timeout_s:g} s",
                                504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {self.upstream.api}{path}: {exc}") from None

    def upstream_serves(self) -> list[dict]:
        """The upstream's /v1/models entries."""
        reply = self._upstream_call("GET", "/models")
        if reply.status_code != 200:
            raise UpstreamError(f"{self.upstream.api}/models answered {reply.status_code}: {reply.text[:300]}")
        try:
            return [m for m in reply.json()["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
        except (ValueError, KeyError, TypeError):
            raise UpstreamError(f"{self.upstream.api}/models did not answer a model list") from None

    def learn_max_rank(self) -> None:
        """``upstream_max_rank`` from the upstream's /health (a mint upstream says ``max_rank`` to a key; vLLM
        says nothing), and the announcement updated when it changed."""
        import httpx

        try:
            reply = self._http.get(f"{self.upstream.api.removesuffix('/v1')}/health", headers=self.upstream.headers())
            said = reply.json().get("max_rank") if reply.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            said = None
        if isinstance(said, int) and not isinstance(said, bool) and said != self.upstream_max_rank:
            self.upstream_max_rank = said
            if self.announcement is not None:
                self.announce(self.announcement[1])

    def announce(self, url: str) -> None:
        """Tell the workspace the upstream's rank limit (``mint.registry.servers``), so `mint promote` refuses a
        champion the upstream could not load; nothing while the limit is unknown."""
        from mint.registry.servers import announce

        path = announce(self.ws, max_rank=self.max_rank, url=url) if self.max_rank is not None else None
        self.announcement = (path, url)

    def publish(self, name: str, directory) -> None:
        """Load the adapter at ``directory`` on the upstream as ``name`` (vLLM's runtime LoRA loading; its
        filesystem must see ``directory``, the shared artifacts)."""
        reply = self._upstream_call("POST", "/load_lora_adapter", {"lora_name": name, "lora_path": str(directory)})
        if reply.status_code != 200 and "already been loaded" not in reply.text:
            raise UpstreamError(f"{self.upstream.api}/load_lora_adapter refused {name}: {reply.status_code} "
                                f"{reply.text[:300]}")

    def withdraw(self, name: str) -> None:
        reply = self._upstream_call("POST", "/unload_lora_adapter", {"lora_name": name})
        if reply.status_code not in (200, 404):     # 404: it is gone already
            raise UpstreamError(f"{self.upstream.api}/unload_lora_adapter refused {name}: {reply.status_code} "
                                f"{reply.text[:300]}")

    def sync(self) -> list[Handoff]:
        """Publish every champion the upstream does not serve yet (a promotion, or an upstream that restarted),
        switch routing to it, unload the one it replaced; pick up a new router champion. The first error of
        the upstream is ``upstream_error`` (and stops this sync); one champion's is its specialist's."""
        from mint.mol.export import adapter_name
        from mint.mol.router import Probe
        from mint.registry import store
        from mint.registry.artifacts import load_revision

        if not store.exists(self.ws):
            targets, router_target = {}, None
        else:
            conn = store.open_store(self.ws, create=False)
            try:
                targets = {name: store.alias_target(conn, name, "champion") for name in self.project.names}
                router_target = store.alias_target(conn, self.project.router, "champion")
            finally:
                conn.close()
        moves = self._sync_router(router_target, Probe, load_revision)
        try:
            serves = self.upstream_serves()
        except UpstreamError as exc:
            self.upstream_error = str(exc)
            raise
        self.upstream_models = [m["id"] for m in serves]
        if self.given_max_rank is None:
            self.learn_max_rank()
        self.base_model = next((m["id"] for m in serves if not m.get("parent")), None)
        self.upstream_error = None
        for name, target in targets.items():
            if target is None:
                continue
            old = self.published.get(name)
            if old is not None and old.revision_id == target and old.name in self.upstream_models:
                continue
            started = time.perf_counter()
            try:
                revision, directory = load_revision(self.ws, target)
                adapter = adapter_name(revision.ref)
                if adapter not in self.upstream_models:
                    self.publish(adapter, directory)
                    self.upstream_models.append(adapter)
                with self._turns_lock:          # routing switches here
                    self.published[name] = Published(adapter, revision.ref, revision.id)
                    self.retired.discard(adapter)       # a rollback to an adapter not unloaded yet
                    if old is not None and old.name != adapter and old.name in self.upstream_models:
                        self.retired.add(old.name)
            except UpstreamError as exc:
                self.sync_errors[name] = self.upstream_error = str(exc)
                raise
            except Exception as exc:  # noqa: BLE001 - one champion's failure is its specialist's alone
                self.sync_errors[name] = str(exc) if isinstance(exc, MintError) else f"{type(exc).__name__}: {exc}"
                continue
            self.sync_errors.pop(name, None)
            moves.append(Handoff(name, old.ref if old else None, revision.ref, time.perf_counter() - started))
        self.withdraw_drained()
        return moves

    def _sync_router(self, target: str | None, probe_type, load_revision) -> list[Handoff]:
        moves = []
        if target and target != self.router_revision_id:
            started = time.perf_counter()
            revision, directory = load_revision(self.ws, target)
            probe = probe_type.load(directory)
            held = len(self.model.get_decoder().layers)
            if probe.layer > held:
                raise BadInput(f"router {revision.ref} reads decoder layer {probe.layer}, and this "
                               f"gateway holds {held}: restart it to load them", field="router")
            old = self.router.revision
            self.router = Router(self.project, probe, revision.ref)
            self.router_revision_id = revision.id
            moves.append(Handoff(self.project.router, old, revision.ref, time.perf_counter() - started))
        self.router = starter_router(self.project, self.router, self.model, self.features)
        return moves

    def withdraw_announcement(self) -> None:
        from mint.registry.servers import withdraw

        if self.announcement is not None and self.announcement[0] is not None:
            withdraw(self.announcement[0])
        self.announcement = None

    def close(self) -> None:
        self.withdraw_announcement()
        super().close()
        self._http.close()

    # --- forwarding ------------------------------------------------------------------------

    def upstream_body(self, turn: Turn, model: str, stream: bool) -> dict:
        """The request the upstream answers: the conversation the runtime would answer, with the turn's decoding."""
        decoding = turn.decoding
        return {"model": model, "messages": prompt_of(turn), "max_tokens": decoding.max_new_tokens,
                "temperature": decoding.temperature, "top_p": decoding.top_p, "seed": decoding.seed,
                "stream": stream}


def _upstream_message(status: int, text: str) -> str:
    import json

    try:
        message = json.loads(text)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        message = text[:300]
    return f"the upstream answered {status}: {message}"


def create_gateway_app(gateway: Gateway, *, poll_s: float = 2.0, access: Access = Access(),
                       limits: Limits = Limits()):
    """The gateway's app: the local server's routes and checks (``mint.mol.serve``), answered through the
    upstream."""
    import json
    from contextlib import asynccontextmanager

    import httpx
    from fastapi.responses import JSONResponse, StreamingResponse
    from starlette.background import BackgroundTask

    from mint.mol.serve import (MODEL, ChampionPoller, RequestError, completion_body, stream_events, InFlight, Relay,
                                add_feedback_route, error_response, openai_app, parse_chat_request)

    poller = ChampionPoller(gateway, poll_s)
    # routing and logging run off the event loop, on threads of their own: the default pool has a few per core,
    # and a turn waiting for a probe pass holds one while it waits
    blocking = ThreadPoolExecutor(max_workers=64, thread_name_prefix="mint-gateway")

    async def off_loop(fn, *args):
        return await asyncio.get_running_loop().run_in_executor(blocking, fn, *args)

    in_flight = InFlight(limits.max_per_key)
    state = {"outstanding": 0}
    timeout = httpx.Timeout(gateway.upstream.timeout_s)
    clients: list = []
    context = getattr(gateway.model.config, "max_position_embeddings", None)
    max_prompt_chars = limits.max_prompt_chars or (8 * context if context else None)

    @asynccontextmanager
    async def lifespan(_app):
        clients.append(httpx.AsyncClient(timeout=timeout))
        poller.start()
        try:
            yield
        finally:
            poller.stop()
            await clients[0].aclose()
            blocking.shutdown(wait=True)
            gateway.close()

    app, body_of = openai_app(lifespan, access, limits)
    app.state.poller, app.state.gateway = poller, gateway

    @app.exception_handler(UpstreamError)
    async def _upstream(_request, exc: UpstreamError):
        return error_response(exc.status, str(exc), None, "upstream_timeout" if exc.status == 504 else
                              "upstream_error")

    def healthy() -> bool:
        return poller.alive and poller.last_error is None and gateway.upstream_error is None

    @app.get("/health")
    async def health(request: Request):
        ok = healthy()
        status = "ok" if ok else "not ok"
        if not request.scope["state"]["authorized"]:
            return JSONResponse({"status": status}, 200 if ok else 503)
        specialists = {name: {"served": gateway.revisions()[name],
                              "adapter": gateway.published[name].name if name in gateway.published else None,
                              "error": gateway.sync_errors.get(name)} for name in gateway.project.names}
        return JSONResponse({"status": status, "revisions": gateway.revisions(), "specialists": specialists,
                             "router": gateway.router.revision or "rules",
                             "upstream": {"url": gateway.upstream.api, "serves": gateway.upstream_models,
                                          "base_model": gateway.base_model, "error": gateway.upstream_error,
                                          "max_rank": gateway.max_rank},
                             "queue": {"outstanding": state["outstanding"], "limit": limits.max_queue},
                             "poller": {"alive": poller.alive, "last_poll": poller.last_poll},
                             "sync_error": poller.last_error}, 200 if ok else 503)

    @app.get("/v1/models")
    async def models():
        ids = [MODEL, *(f"{MODEL}/{name}" for name in gateway.project.names)]
        return {"object": "list", "data": [{"id": i, "object": "model", "created": 0, "owned_by": "mint"}
                                           for i in ids]}

    add_feedback_route(app, gateway, body_of)

    def admit(request: Request) -> str:
        owner = request.scope["state"]["owner"]
        who = owner or f"address {request.client.host if request.client else '?'}"
        if limits.max_queue is not None and state["outstanding"] >= limits.max_queue:
            raise RequestError(429, f"{state['outstanding']} turns are in flight, the most this server takes; "
                                    "retry shortly", None, "server_busy", {"Retry-After": "1"})
        in_flight.enter(who)
        state["outstanding"] += 1
        return who

    def done(who: str) -> None:
        state["outstanding"] -= 1
        in_flight.leave(who)

    def answer_of(turn: Turn, answer_id: str, route: Route, served_by: str, text: str, finish: str, usage: dict,
                  started: float, route_ms: float) -> Answer:
        usage = usage if isinstance(usage, dict) else {}
        return Answer(answer_id, route.specialist, served_by, text, route, (time.perf_counter() - started) * 1000,
                      route_ms, int(usage.get("prompt_tokens") or 0), int(usage.get("completion_tokens") or 0),
                      finish or "stop")

    async def forward(request: Request, turn: Turn):
        started = time.perf_counter()
        route, route_ms = await off_loop(gateway.route, turn)
        upstream_model, served_by = gateway.begin_turn(route.specialist)
        url = f"{gateway.upstream.api}/chat/completions"
        body = gateway.upstream_body(turn, upstream_model, stream=False)
        try:
            reply = await asyncio.wait_for(clients[0].post(url, json=body, headers=gateway.upstream.headers()),
                                           gateway.upstream.timeout_s)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise UpstreamError(f"{url} did not answer within {gateway.upstream.timeout_s:g} s", 504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {url}: {exc}") from None
        finally:
            gateway.end_turn(upstream_model)
        if reply.status_code != 200:
            raise UpstreamError(_upstream_message(reply.status_code, reply.text))
        try:
            data = reply.json()
            choice = data["choices"][0]
            text, finish = choice["message"]["content"] or "", choice.get("finish_reason")
        except (ValueError, KeyError, IndexError, TypeError):
            raise UpstreamError(f"{url} answered something other than a chat completion") from None
        answer = answer_of(turn, f"chatcmpl-{uuid.uuid4().hex}", route, served_by, text, finish, data.get("usage"),
                           started, route_ms)
        # on disk before the client hears it, written off the event loop (it fsyncs)
        await off_loop(gateway.record, turn, answer, request.scope["state"]["owner"])
        return answer

    async def pump(reply, relay: Relay, future: Future, turn: Turn, answer_id: str, route: Route, served_by: str,
                   started: float, route_ms: float, owner: str | None) -> None:
        """Reads the upstream's events into ``relay``; the turn is logged, then ``future`` says how it ended."""
        pieces, finish, usage = [], None, {}
        try:
            async for line in reply.aiter_lines():
                if relay.gone:          # the client left: stop the upstream's answer too, log nothing
                    raise UpstreamError("the client left")
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                chunk = json.loads(data)
                if "error" in chunk:
                    raise UpstreamError(f"the upstream failed mid-answer: {chunk['error'].get('message')}")
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices") or ():
                    delta = (choice.get("delta") or {}).get("content") or ""
                    if delta:
                        pieces.append(delta)
                        relay(delta)
                    finish = choice.get("finish_reason") or finish
            answer = answer_of(turn, answer_id, route, served_by, "".join(pieces), finish, usage, started, route_ms)
            await off_loop(gateway.record, turn, answer, owner)
            future.set_result(answer)
        except httpx.TimeoutException:
            future.set_exception(UpstreamError(f"the upstream sent nothing for {gateway.upstream.timeout_s:g} s "
                                               "mid-answer", 504))
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            future.set_exception(UpstreamError(f"the upstream's stream broke off: {type(exc).__name__}: {exc}"))
        except UpstreamError as exc:
            future.set_exception(exc)
        finally:
            await reply.aclose()

    async def stream(request: Request, turn: Turn, model: str, on_end):
        started = time.perf_counter()
        route, route_ms = await off_loop(gateway.route, turn)
        upstream_model, served_by = gateway.begin_turn(route.specialist)
        try:
            return await relayed(request, turn, model, on_end, started, route, route_ms, upstream_model, served_by)
        except BaseException:
            gateway.end_turn(upstream_model)
            raise

    async def relayed(request: Request, turn: Turn, model: str, on_end, started: float, route: Route,
                      route_ms: float, upstream_model: str, served_by: str):
        """The streamed answer of ``upstream_model``; the turn ends (``end_turn``) when the relay's task does."""
        url = f"{gateway.upstream.api}/chat/completions"
        outgoing = clients[0].build_request("POST", url, json=gateway.upstream_body(turn, upstream_model, stream=True),
                                            headers=gateway.upstream.headers())
        try:
            reply = await asyncio.wait_for(clients[0].send(outgoing, stream=True), gateway.upstream.timeout_s)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            raise UpstreamError(f"{url} did not answer within {gateway.upstream.timeout_s:g} s", 504) from None
        except httpx.HTTPError as exc:
            raise UpstreamError(f"cannot reach {url}: {exc}") from None
        if reply.status_code != 200:
            try:
                text = (await asyncio.wait_for(reply.aread(), gateway.upstream.timeout_s)).decode("utf-8", "replace")
            except (asyncio.TimeoutError, httpx.HTTPError):
                text = ""
            finally:
                await reply.aclose()
            raise UpstreamError(_upstream_message(reply.status_code, text))
        answer_id = f"chatcmpl-{uuid.uuid4().hex}"
        relay, future = Relay(asyncio.get_running_loop()), Future()
        future.add_done_callback(relay.end)
        relay("")        # the stream starts now: the role delta goes out before the first word
        first = await relay.queue.get()
        task = asyncio.ensure_future(pump(reply, relay, future, turn, answer_id, route, served_by, started,
                                          route_ms, request.scope["state"]["owner"]))
        # runs however the task ends, even cancelled before its first step (when no finally in it would run)
        task.add_done_callback(lambda _task: gateway.end_turn(upstream_model))

        def leave() -> None:
            relay.leave()
            if not task.done():
                task.cancel()
            on_end()

        return StreamingResponse(stream_events(relay, future, first, answer_id, model, turn.tools),
                                 media_type="text/event-stream", background=BackgroundTask(leave))

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request):
        turn, streamed, model = parse_chat_request(await body_of(request), gateway.project.names, limits,
                                                   max_prompt_chars)
        who = admit(request)
        if not streamed:
            try:
                return completion_body(await forward(request, turn), model, turn.tools)
            finally:
                done(who)
        try:
            return await stream(request, turn, model, lambda: done(who))
        except BaseException:
            done(who)
            raise

    return app


def serve_gateway(gateway: Gateway, sock, *, poll_s: float = 2.0, access: Access = Access(),
                  limits: Limits = Limits()) -> None:
    """Serve the gateway on ``sock`` until interrupted (blocking). While it runs, the workspace knows the
    upstream's LoRA rank limit when the gateway does (``Gateway.max_rank``)."""
    import uvicorn

    from mint.mol.serve import server_config

    app = create_gateway_app(gateway, poll_s=poll_s, access=access, limits=limits)
    host, port = sock.getsockname()[:2]
    gateway.announce(f"http://{f'[{host}]' if ':' in host else host}:{port}")
    try:
        uvicorn.Server(server_config(app, limits)).run(sockets=[sock])
    finally:
        gateway.withdraw_announcement()

