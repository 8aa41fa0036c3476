"""`mint serve --upstream URL`: the router as a gateway in front of an OpenAI-compatible multi-LoRA server (vLLM).

Each turn is routed as the local runtime routes it (``mint.yaml``'s rules, then the router champion's probe, or
the starter probe) and forwarded to the upstream (``mint.generation.upstream``) with ``model`` set to its specialist's champion adapter, named
immutably after the revision (``coding-v3``: ``mint.registry.refs.adapter_name``, the names `mint export vllm`
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
event), never a hang. /health says "not ok" (503) until the upstream has been reached and every champion
published, and again while it cannot be.
"""
from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput, MintError
from mint.generation.constrain import JSON_OBJECT, JSON_SCHEMA
from mint.mol.mixture import Answer, Turn, TurnBook, prompt_of
from mint.routing.router import Route, Router, probe_features, starter_router
from mint.mol.runtime import Handoff
from mint.project import Project
from mint.serve.backend import Backend, ChampionPoller
from mint.generation.upstream import Upstream, UpstreamClient, UpstreamError
from mint.workspace import Workspace


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
        # ready once a sync has reached the upstream and published every champion (until one cannot): /health
        # says "not ok" before, so an orchestrator sends no turn into the gap
        self.ready = False
        self.given_max_rank = max_rank                   # the upstream's LoRA rank limit, as the operator gave it
        self.upstream_max_rank: int | None = None        # ... as the upstream said it (a mint upstream's /health)
        self.announcement: tuple[Path | None, str] | None = None  # where the workspace hears that limit (``announce``)
        self.base_model: str | None = None               # the upstream's base (its first model without a parent)
        self.in_flight: dict[str, int] = {}              # upstream model -> turns forwarded to it, not yet answered
        self.retired: set[str] = set()                   # replaced adapters, unloaded once their turns are answered
        self._turns_lock = threading.Lock()              # a turn takes its model and counts in one step
        # one probe pass at a time (it hooks the layers), on the conversations of every turn waiting for one
        self.features = FeatureBatcher(lambda conversations, layers, reads: probe_features(
            self.model, self.tokenizer, conversations, layers, reads))
        self.client = UpstreamClient(upstream)

    @property
    def max_rank(self) -> int | None:
        """The largest LoRA rank the upstream loads, if known: ``--max-rank`` (vLLM's ``--max-lora-rank``, which
        vLLM does not tell its clients), else what a mint upstream's /health says."""
        return self.given_max_rank if self.given_max_rank is not None else self.upstream_max_rank

    @classmethod
    def open(cls, ws: Workspace, project: Project, upstream: Upstream, *, base: str | None = None,
             **options) -> "Gateway":
        from mint.routing.router import champion_router

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

    def learn_max_rank(self) -> None:
        """``upstream_max_rank`` from the upstream's /health (a mint upstream says ``max_rank`` to a key; vLLM
        says nothing), and the announcement updated when it changed."""
        said = (self.client.health() or {}).get("max_rank")
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
        self.client.load_adapter(name, str(directory))

    def withdraw(self, name: str) -> None:
        self.client.unload_adapter(name)

    def sync(self) -> list[Handoff]:
        """Publish every champion the upstream does not serve yet (a promotion, or an upstream that restarted),
        switch routing to it, unload the one it replaced; pick up a new router champion. The first error of
        the upstream is ``upstream_error`` (and stops this sync); one champion's is its specialist's."""
        from mint.registry.refs import adapter_name
        from mint.routing.router import Probe
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
            serves = self.client.models()
        except UpstreamError as exc:
            self.upstream_error, self.ready = str(exc), False
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
                self.ready = False
                raise
            except Exception as exc:  # noqa: BLE001 - one champion's failure is its specialist's alone
                self.sync_errors[name] = str(exc) if isinstance(exc, MintError) else f"{type(exc).__name__}: {exc}"
                continue
            self.sync_errors.pop(name, None)
            moves.append(Handoff(name, old.ref if old else None, revision.ref, time.perf_counter() - started))
        self.ready = not self.sync_errors
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
        self.client.close()

    # --- forwarding ------------------------------------------------------------------------

    def upstream_body(self, turn: Turn, model: str) -> dict:
        """The request the upstream answers: the conversation the runtime would answer, with the turn's decoding."""
        decoding = turn.decoding
        body = {"model": model, "messages": prompt_of(turn), "max_tokens": decoding.max_new_tokens,
                "temperature": decoding.temperature, "top_p": decoding.top_p, "seed": decoding.seed}
        if decoding.stop:
            body["stop"] = list(decoding.stop)
        structure = decoding.structure
        if structure is not None and structure.kind == JSON_OBJECT:
            body["response_format"] = {"type": "json_object"}
        elif structure is not None:
            body["response_format"] = {"type": "json_schema", "json_schema": {
                "name": structure.name or "answer", "schema": json.loads(structure.schema)}}
        return body


class GatewayBackend(Backend):
    """``gateway`` answering the app's turns: each routed off the event loop, forwarded to the upstream (whole or
    streamed) and logged as the local runtime logs it."""

    kind = "the gateway"
    # JSON is asked of the upstream (response_format); a forced tool call is not: the upstream is sent the
    # conversation with the tools written into its system turn, not as tools it could be made to call
    structures = (JSON_OBJECT, JSON_SCHEMA)

    def __init__(self, gateway: Gateway, *, poll_s: float = 2.0) -> None:
        super().__init__(gateway, gateway.project.names, ChampionPoller(gateway, poll_s))
        self.gateway = gateway
        # routing and logging run off the event loop, on threads of their own: the default pool has a few per
        # core, and a turn waiting for a probe pass holds one while it waits
        self._blocking = ThreadPoolExecutor(max_workers=64, thread_name_prefix="mint-gateway")

    async def start(self) -> None:
        await self.gateway.client.open()
        await super().start()

    async def stop(self) -> None:
        await super().stop()
        await self.gateway.client.aclose()
        self._blocking.shutdown(wait=True)

    def context_limit(self) -> int | None:
        return getattr(self.gateway.model.config, "max_position_embeddings", None)

    def health(self) -> tuple[bool, dict]:
        gateway, poller = self.gateway, self.poller
        ok = poller.alive and poller.last_error is None and gateway.upstream_error is None and gateway.ready
        revisions = gateway.revisions()
        specialists = {name: {"served": revisions[name],
                              "adapter": gateway.published[name].name if name in gateway.published else None,
                              "error": gateway.sync_errors.get(name)} for name in gateway.project.names}
        return ok, {"revisions": revisions, "specialists": specialists, "router": gateway.router.revision or "rules",
                    "upstream": {"url": gateway.upstream.api, "serves": gateway.upstream_models,
                                 "base_model": gateway.base_model, "error": gateway.upstream_error,
                                 "max_rank": gateway.max_rank},
                    "poller": poller.state(), "sync_error": poller.last_error}

    async def _off_loop(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._blocking, fn, *args)

    async def answer(self, turn: Turn, owner: str | None, listener) -> Answer:
        """Routed, forwarded (streamed where ``listener`` wants text), logged; a stream whose client leaves stops
        reading the upstream at once and logs nothing."""
        started = time.perf_counter()
        gateway = self.gateway
        route, route_ms = await self._off_loop(gateway.route, turn)
        model, served_by = gateway.begin_turn(route.specialist)
        try:
            body = gateway.upstream_body(turn, model)
            if getattr(listener, "wants_text", True):
                task = asyncio.current_task()
                listener.when_gone(lambda: task.get_loop().call_soon_threadsafe(task.cancel))
                done = await gateway.client.stream(body, listener)
            else:
                done = await gateway.client.complete(body)
        finally:
            gateway.end_turn(model)
        usage = done.usage
        answer = Answer(turn.id or f"chatcmpl-{uuid.uuid4().hex}", route.specialist, served_by, done.text, route,
                        (time.perf_counter() - started) * 1000, route_ms, int(usage.get("prompt_tokens") or 0),
                        int(usage.get("completion_tokens") or 0), done.finish_reason or "stop")
        # on disk before the client hears it, written off the event loop (it fsyncs)
        await self._off_loop(gateway.record, turn, answer, owner)
        return answer

    def announce(self, url: str) -> None:
        self.gateway.announce(url)

    def withdraw(self) -> None:
        self.gateway.withdraw_announcement()
