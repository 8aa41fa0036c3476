"""The served mixture: runtime + router + champions from the registry + the turn log.

``answer`` takes a batch of turns (from one chat user or many HTTP clients), routes the ones that do not
force a specialist and generates them in one mixed-adapter batch (each row with its own decoding and seed);
``answer_each`` also lets turns join the running batch (a server's turns that arrive meanwhile) and tells each
turn's answer as its row finishes. Each answered turn is appended to the turn log as an episode at once (as its
row finishes); feedback that arrives within
``feedback_window_s``, from the key that asked, is appended later as a line of its own (``upstream_id`` +
``feedback``), which ingest merges into the turn. The training target of a logged turn is the answer
generated here: the client's history is logged as context, its assistant turns with ``weight: 0``. A turn may
stream: its listener receives the answer's text as it is decoded (see ``mint.mol.runtime``); a turn whose
listener's receiver went away ends ``cancelled`` and is not logged (its answer was cut short, and nobody read
it). ``sync`` picks up promotions (the specialists' and the router's) without a restart.
"""
from __future__ import annotations

import threading
import time
import uuid
from collections import Counter, OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Sequence

from mint.data.schema import Episode, Message, ServedRoute
from mint.data.scrub import scrub_episode, scrub_text, scrub_value
from mint.errors import BadInput
from mint.routing.router import PROMPT, Probe, Route, Router, probe_features, starter_router
from mint.generation.engine import CANCELLED
from mint.generation.text import TextListener
from mint.mol.runtime import Ask, Handoff, MixtureRuntime, PrefillRoute, RowsFailed
from mint.mol.runtime import Decoding
from mint.mol.turnlog import TurnLog
from mint.project import Project
from mint.render import conversation
from mint.registry.store import now
from mint.text import check_unicode, closest
from mint.workspace import Workspace

DEFAULT_FEEDBACK_WINDOW_S = 600.0


@dataclass(frozen=True)
class Turn:
    messages: list[dict]
    tools: list[dict] = field(default_factory=list)
    specialist: str | None = None          # forced (model `mint/coding`, `/specialist coding`); None routes
    decoding: Decoding = Decoding()
    session: str | None = None
    id: str | None = None                  # the answer's id, when the caller must know it first (a stream)
    adapter: str | None = None             # an adapter loaded by name (``runtime.load_named``) answers it

    def __post_init__(self) -> None:
        # a lone surrogate fails the tokenizer mid-batch and the log's UTF-8 write: refused before either
        check_unicode(self.messages, "messages")
        check_unicode(self.tools, "tools")
        check_unicode(self.session, "session")


def prompt_of(turn: Turn) -> list[dict]:
    """The conversation the runtime answers: a turn's tools are listed in its system turn, as the agent was
    trained and evaluated seeing them."""
    return conversation(turn.messages, turn.tools)


@dataclass(frozen=True)
class Answer:
    id: str
    specialist: str
    served_by: str
    text: str
    route: Route
    latency_ms: float
    route_ms: float
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class Asked:
    """A turn that joins a running ``Mixture.answer_each`` (its ``joining``)."""
    turn: Turn
    listener: TextListener | None = None
    owner: str | None = None


@dataclass
class _PrefillRouting:
    route: PrefillRoute | None = None
    routes: dict[int, Route] = field(default_factory=dict)     # row of the generation -> its route
    ms: float = 0.0


class TurnBook:
    """The served turns' log and their feedback window: what the mixture and the gateway (``mint.serve.gateway``)
    share, so a turn answered either way is logged as the same episode."""

    def __init__(self, ws: Workspace, project: Project, *, feedback_window_s: float = DEFAULT_FEEDBACK_WINDOW_S,
                 log: TurnLog | None = None, scrub_logs: bool = False) -> None:
        self.ws, self.project = ws, project
        self.feedback_window_s = feedback_window_s
        self.log = log or TurnLog(ws, heldout=project.traffic_heldout, heldout_at=project.traffic_at)
        self.scrub_logs = scrub_logs
        self._pending: OrderedDict[str, tuple[float, str | None]] = OrderedDict()   # id -> (answered, owner)
        self._pending_lock = threading.Lock()

    def record(self, turn: Turn, answer: Answer, owner: str | None, *, keep_for_feedback: bool = True) -> None:
        """Log an answered turn (on disk before the client hears the answer); with ``keep_for_feedback`` it takes
        feedback from ``owner`` for ``feedback_window_s``."""
        self.log.append(self._episode(turn, answer))
        if keep_for_feedback:
            with self._pending_lock:
                self._pending[answer.id] = (time.monotonic(), owner)

    def _episode(self, turn: Turn, answer: Answer) -> Episode:
        # the training target is the answer generated here; the client's history, its assistant turns
        # included, is context it wrote itself (weight 0: shown to the model, never trained on)
        history = [Message.from_dict({**m, "weight": 0} if m["role"] == "assistant" else m) for m in turn.messages]
        route = answer.route
        episode = Episode(messages=(*history, Message("assistant", answer.text)), tools=tuple(turn.tools),
                          specialist=answer.specialist, session=turn.session, ts=now(), served_by=answer.served_by,
                          upstream_id=answer.id, served=ServedRoute(route.probabilities, route.decided_by,
                                                                    route.revision, round(answer.latency_ms, 3),
                                                                    round(answer.route_ms, 3)))
        return scrub_episode(episode, Counter()) if self.scrub_logs else episode

    def _scrubbed(self, record: dict) -> dict:
        """``record`` with PII replaced by placeholders in every text a client gave (``--scrub-logs``)."""
        found: Counter = Counter()
        record = dict(record)
        if "messages" in record:
            record["messages"] = [{**m, "content": scrub_text(m["content"], found)} for m in record["messages"]]
        if record.get("tools"):
            record["tools"] = scrub_value(record["tools"], found)
        if record.get("session"):
            record["session"] = scrub_text(record["session"], found)
        if record.get("feedback", {}).get("correction"):
            record["feedback"] = {**record["feedback"],
                                  "correction": scrub_text(record["feedback"]["correction"], found)}
        return record

    # --- feedback ------------------------------------------------------------------------

    def feedback(self, answer_id: str, *, rating: int | None = None, correction: str | None = None,
                 owner: str | None = None) -> dict:
        """Attach a rating (-1, 0, 1) and/or a correction to a turn answered for ``owner`` (the key that asked)
        within the feedback window; it is appended to the log as its own line, which ingest merges into the
        turn. Another owner's turn is as unknown as one never answered."""
        if rating is None and correction is None:
            raise BadInput("give a rating (-1, 0 or 1) or a correction", field="feedback")
        if rating is not None and (isinstance(rating, bool) or rating not in (-1, 0, 1)):
            raise BadInput(f"{rating!r} is not -1, 0 or 1", field="rating")
        if correction is not None and (not isinstance(correction, str) or not correction.strip()):
            raise BadInput("expected non-empty text", field="correction")
        check_unicode(correction, "correction")
        self.expire_pending()
        with self._pending_lock:
            entry = self._pending.get(answer_id)
            if entry is not None and entry[1] == owner:
                del self._pending[answer_id]
            else:
                entry = None
        if entry is None:
            raise BadInput(f"no answered turn {answer_id!r} awaits feedback (unknown, already rated, or asked "
                           "for with another key)", field="id")
        event = {"upstream_id": answer_id, "ts": now(),
                 "feedback": {"rating": rating, "correction": correction.strip() if correction else None}}
        event = self._scrubbed(event) if self.scrub_logs else event
        self.log.append(event)
        return event

    def expire_pending(self, *, all_of_them: bool = False) -> int:
        """Close the feedback window of the turns whose window has passed (of every turn with ``all_of_them``);
        they were logged when answered."""
        cutoff = time.monotonic() - self.feedback_window_s
        expired = 0
        with self._pending_lock:
            for answer_id, (created, _owner) in list(self._pending.items()):
                if not all_of_them and created > cutoff:
                    break
                expired += 1
                del self._pending[answer_id]
        return expired

    def close(self) -> None:
        self.expire_pending(all_of_them=True)


class Mixture(TurnBook):
    def __init__(self, ws: Workspace, project: Project, runtime: MixtureRuntime, **options) -> None:
        super().__init__(ws, project, **options)
        self.runtime = runtime
        self.router = Router(project)
        self.router_revision_id: str | None = None

    @classmethod
    def open(cls, ws: Workspace, project: Project, *, base: str | None = None, max_rank: int | None = None,
             named_slots: int = 0, **options) -> "Mixture":
        from mint.base import load_base
        from mint.mol.runtime import DEFAULT_MAX_RANK

        runtime = MixtureRuntime(load_base(base or project.base), project.names,
                                 max_rank=max_rank or DEFAULT_MAX_RANK, named_slots=named_slots)
        mixture = cls(ws, project, runtime, **options)
        mixture.sync()
        return mixture

    # --- champions ---------------------------------------------------------------------

    def sync(self) -> list[Handoff]:
        """Load champions (and the router champion) whose alias moved since the last call."""
        moves = self.runtime.sync_champions(self.ws)
        from mint.registry import store
        from mint.registry.artifacts import load_revision

        if store.exists(self.ws):
            conn = store.open_store(self.ws, create=False)
            try:
                target = store.alias_target(conn, self.project.router, "champion")
            finally:
                conn.close()
            if target and target != self.router_revision_id:
                started = time.perf_counter()
                revision, directory = load_revision(self.ws, target)
                old = self.router.revision
                self.router = Router(self.project, Probe.load(directory), revision.ref)
                self.router_revision_id = revision.id
                moves.append(Handoff(self.project.router, old, revision.ref, time.perf_counter() - started))
        # without a router champion, the starter probe (mint's plain turns) takes the turns the rules leave
        self.router = starter_router(self.project, self.router, self.runtime.model, self.features)
        return moves

    def revisions(self) -> dict[str, str]:
        served = {name: self.runtime.served_by(name) for name in self.project.names}
        return {**served, self.project.router: self.router.revision or "rules"}

    # --- turns ---------------------------------------------------------------------------

    def features(self, conversations: list[list[dict]], layer, reads: str):
        """The probe's features in a pass of their own on the runtime's base, every slot off; it stops at the
        probe's layer and runs no LM head. ``answer`` needs it only when an adapter changes a layer the probe
        reads (``lora.from_layer`` below the probe's layer) or for a probe that reads the last user message
        alone: otherwise the turn is routed inside its own prefill (``routes_in_prefill``)."""
        with self.runtime.lock:
            self.runtime.table.set_rows([0])
            return probe_features(self.runtime.model, self.runtime.tokenizer, conversations, layer, reads)

    def routes_in_prefill(self, router: Router | None = None) -> bool:
        """Whether the probe reads what the generation's prefill computes: the prompt's states after the
        probe's layer, which no loaded adapter changes."""
        probe = (router or self.router).probe
        return probe is not None and probe.reads == PROMPT and self.runtime.shared_layers() >= probe.layer

    def _forced(self, turns: list[Turn]) -> list[Route | None]:
        """The route of each turn that forces its specialist; None for the turns to route."""
        routes: list[Route | None] = []
        for turn in turns:
            if turn.adapter is not None:
                slot = self.runtime.named.get(turn.adapter)
                if slot is None:
                    raise BadInput(f"no adapter {turn.adapter!r} is loaded", field="model")
                routes.append(Route(slot.specialist, {n: float(n == slot.specialist) for n in self.project.names},
                                    "forced", None))
                continue
            if turn.specialist is not None and turn.specialist not in self.project.names:
                raise BadInput(f"unknown specialist {turn.specialist!r}{closest(turn.specialist, self.project.names)} (expected one of "
                               f"{', '.join(self.project.names)})", field="model")
            routes.append(None if turn.specialist is None else Route(
                turn.specialist, {n: float(n == turn.specialist) for n in self.project.names}, "forced", None))
        return routes

    def route(self, turns: list[Turn]) -> tuple[list[Route], float]:
        """Each turn's route, from a pass of the probe's own where it needs one (see ``features``)."""
        started = time.perf_counter()
        routes = self._forced(turns)
        free = [i for i, t in enumerate(turns) if t.specialist is None and t.adapter is None]
        if free:
            decided = self.router.route([prompt_of(turns[i]) for i in free], [bool(turns[i].tools) for i in free],
                                        self.features)
            for i, route in zip(free, decided):
                routes[i] = route
        return routes, (time.perf_counter() - started) * 1000

    def answer(self, turns: list[Turn], *, keep_for_feedback: bool = True,
               listeners: Sequence[TextListener | None] | None = None) -> list[Answer]:
        """Route and answer ``turns`` together; ``listeners[i]``, where given, streams turn i's text. The first
        turn that cannot be answered raises its error (``answer_each`` answers the others)."""
        results = self.answer_each(turns, keep_for_feedback=keep_for_feedback, listeners=listeners)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results  # type: ignore[return-value]

    def answer_each(self, turns: list[Turn], *, keep_for_feedback: bool = True,
                    listeners: Sequence[TextListener | None] | None = None,
                    owners: Sequence[str | None] | None = None,
                    joining: Callable[[int], Sequence[Asked]] | None = None,
                    on_answer: Callable[[int, Answer | Exception], None] | None = None,
                    max_batch: int | None = None) -> list[Answer | Exception]:
        """Each turn's answer, or the error of a turn that cannot be answered (longer than the base takes):
        one turn's error is its own, the others are answered in one mixed batch all the same. Each answered
        turn is logged at once; with ``keep_for_feedback`` it takes feedback from ``owners[i]`` (the API key
        that asked, None for none) for ``feedback_window_s``.

        ``joining(room)``, where given, is asked between decode steps for at most ``room`` more turns
        (``Asked``) to join the running batch, at most ``max_batch`` rows at once; they are turns
        ``len(turns)`` on, routed as they join. ``on_answer(i, answer)`` is told each turn's answer (or error)
        as soon as its row finishes and it is logged, while the others decode on."""
        self.expire_pending()
        if not turns:
            return []
        turns = list(turns)
        listeners = list(listeners) if listeners is not None else [None] * len(turns)
        owners = list(owners) if owners is not None else [None] * len(turns)
        if len(listeners) != len(turns) or len(owners) != len(turns):
            raise BadInput(f"{len(turns)} turns but {len(listeners)} listeners and {len(owners)} owners")
        results: list[Answer | Exception | None] = [None] * len(turns)

        def finish(i: int, result: Answer | Exception) -> None:
            if isinstance(result, Answer) and result.finish_reason != CANCELLED:
                try:
                    self.record(turns[i], result, owners[i], keep_for_feedback=keep_for_feedback)
                except Exception as exc:  # noqa: BLE001 - a turn not logged is not answered; the others go on
                    result = exc
            results[i] = result
            if on_answer is not None:
                on_answer(i, result)

        rows = list(range(len(turns)))
        # held from the check to the generation: a champion loaded in between could change a layer the probe reads
        with self.runtime.lock:
            router = self.router
            in_prefill = self.routes_in_prefill(router)
            routes, route_ms = (self._forced(turns), 0.0) if in_prefill else self.route(turns)
            turn_route_ms = [route_ms] * len(turns)
            while rows:
                generated_rows = list(rows)      # the generation's row -> its turn
                free = [k for k, i in enumerate(rows) if routes[i] is None]
                prefill = self._prefill_route(router, turns, generated_rows, free) \
                    if free or (joining is not None and in_prefill) else None

                def generated(k: int, out, prefill=prefill, generated_rows=generated_rows) -> None:
                    i = generated_rows[k]
                    if isinstance(out, Exception):
                        finish(i, out)
                        return
                    if prefill and k in prefill.routes:
                        routes[i] = prefill.routes[k]
                    # routed inside the prefill, the generation's time holds the routing's; else it is added
                    finish(i, Answer(turns[i].id or f"chatcmpl-{uuid.uuid4().hex}", routes[i].specialist,
                                     out.served_by, out.text, routes[i], out.seconds * 1000 + turn_route_ms[i],
                                     prefill.ms if prefill else turn_route_ms[i], out.prompt_tokens,
                                     len(out.token_ids), out.finish_reason))

                def join(room: int, generated_rows=generated_rows) -> list[Ask]:
                    asks = []
                    for asked in list(joining(room)):
                        i = len(turns)
                        turns.append(asked.turn)
                        listeners.append(asked.listener)
                        owners.append(asked.owner)
                        results.append(None)
                        routes.append(None)
                        turn_route_ms.append(0.0)
                        try:
                            [routes[i]] = self._forced([asked.turn])
                            if routes[i] is None and not in_prefill:
                                [routes[i]], turn_route_ms[i] = self.route([asked.turn])
                        except Exception as exc:  # noqa: BLE001 - this turn's trouble is its own
                            finish(i, exc)
                            continue
                        route = routes[i]
                        generated_rows.append(i)
                        asks.append(Ask(prompt_of(asked.turn),
                                        asked.turn.adapter or (route.specialist if route else None),
                                        asked.turn.decoding, asked.listener, routed=route is None))
                    return asks

                try:
                    self.runtime.generate(
                        [prompt_of(turns[i]) for i in rows],
                        [turns[i].adapter or (routes[i].specialist if routes[i] else None) for i in rows],
                        listeners=[listeners[i] for i in rows], route=prefill.route if prefill else None,
                        rows=[turns[i].decoding for i in rows], on_generated=generated,
                        joining=join if joining is not None else None, batch_size=max_batch)
                except RowsFailed as failed:    # those rows get their errors; the rest are generated without them
                    for k, exc in failed.errors.items():
                        finish(rows[k], exc)
                    rows = [i for k, i in enumerate(rows) if k not in failed.errors]
                    continue
                break
        return results  # type: ignore[return-value]

    def _prefill_route(self, router: Router, turns: list[Turn], generated_rows: list[int],
                       rows: list[int]) -> "_PrefillRouting":
        """What routes ``rows`` of a generation (and the rows that join it routed) inside their prefill with
        ``router``, on the states the prefill pooled (``generated_rows``: the generation's row -> its turn); it
        keeps each row's route and the time the routing took."""
        routing = _PrefillRouting()

        def decide(batch_rows: list[int], features) -> list[str]:
            started = time.perf_counter()
            asked = [prompt_of(turns[generated_rows[k]]) for k in batch_rows]
            where = {id(conversation): n for n, conversation in enumerate(asked)}
            found = router.route(asked, [bool(turns[generated_rows[k]].tools) for k in batch_rows],
                                 lambda subset, _layers, _reads: features[[where[id(c)] for c in subset]])
            routing.routes.update(zip(batch_rows, found))
            routing.ms += (time.perf_counter() - started) * 1000
            return [route.specialist for route in found]

        routing.route = PrefillRoute((*router.probe.shallower, router.probe.layer), tuple(rows), decide)
        return routing
