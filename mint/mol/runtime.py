"""The mixture runtime: the base loaded once, each specialist's champion in its own preallocated LoRA slot.

``generate`` answers a batch of conversations with one specialist per row, decoded by the engine
(``mint.generation.engine``) in one mixed-adapter batch: the same decode loop, stops and sampling as contract
evaluation, so a served answer is the answer a contract scored. A row may carry a listener: the decode loop hands
it the row's new text after every step (whole characters, see ``mint.generation.text``), and the row stops alone
when the listener says its receiver is gone; each row also stops at its own token limit. Rows may join a running
``generate`` (``joining``: a server's turns that arrive while it decodes) and each row's generation is told as
it finishes (``on_generated``).

``load_adapter`` copies a new adapter into its slot in place (the adapter-only handoff, ``mint.generation.slots``),
and ``sync_champions`` does that for every champion alias that moved in the registry. Loading (or clearing) a
slot and decoding exclude each other (``lock``): a running row's adapter never changes under it. A load that
waits says so (``swap_waiting``): a stream then takes no more joining rows, so it ends once its rows are done
(each within its token limit) and the load goes next, however busy the server is.
"""
from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from mint.base import LoadedBase
from mint.errors import BadInput, MintError, Refused
from mint.text import closest
from mint.generation.constrain import Structure
from mint.generation.slots import DEFAULT_MAX_RANK
from mint.generation.text import StopAt, TextListener
from mint.workspace import Workspace


class RowsFailed(BadInput):
    """Some rows of a batch cannot be generated (``errors``: row -> its error); nothing was generated."""

    def __init__(self, errors: dict[int, Exception]) -> None:
        first = errors[min(errors)]
        super().__init__(str(first), field=getattr(first, "field", None))
        self.errors = errors


@dataclass(frozen=True)
class Slot:
    specialist: str
    index: int
    revision_id: str | None = None
    ref: str | None = None          # e.g. coding:v3; None while the slot is empty (the bare base answers)
    rank: int = 0


@dataclass(frozen=True)
class Decoding:
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    seed: int = 0
    stop: tuple[str, ...] = ()               # the answer ends before the first of these (OpenAI's ``stop``)
    structure: Structure | None = None       # a shape the answer must take (constrained decoding)


@dataclass(frozen=True)
class Generation:
    specialist: str | None
    served_by: str                  # the revision (coding:v3) or "base"
    text: str
    token_ids: list[int]
    prompt_tokens: int
    finish_reason: str              # stop | length | cancelled
    seconds: float                  # from entering the stream (its start, or joining it) to finishing


@dataclass(frozen=True)
class Ask:
    """A row that joins a running ``generate`` (see its ``joining``)."""
    conversation: list[dict]
    specialist: str | None = None   # None: the bare base, or the stream's route names it (``routed``)
    decoding: Decoding = Decoding()
    listener: TextListener | None = None
    routed: bool = False            # named inside its prefill by the stream's ``route``


@dataclass(frozen=True)
class PrefillRoute:
    """Routing inside the prefill: after ``layers[-1]`` decoder layers (states the base and every loaded adapter
    share, see ``MixtureRuntime.shared_layers``), ``decide(rows, features)`` names the specialist of each of
    ``rows`` from its features (the states after each of ``layers``, mean-pooled over the span of its last user
    message and side by side); the prefill goes on from there with each row's adapter."""
    layers: tuple[int, ...]
    rows: tuple[int, ...]
    decide: Callable[[list[int], object], list[str]]


@dataclass(frozen=True)
class Handoff:
    specialist: str
    old: str | None
    new: str | None
    seconds: float


class MixtureRuntime:
    """One base, one LoRA slot per specialist; thread-safe (one batch at a time)."""

    def __init__(self, loaded: LoadedBase, specialists: Sequence[str], *, max_rank: int = DEFAULT_MAX_RANK,
                 named_slots: int = 0) -> None:
        from mint.generation.engine import Engine
        from mint.generation.slots import AdapterSlots

        if max_rank < 1:
            raise BadInput("must be at least 1", field="--max-rank")
        if named_slots < 0:
            raise BadInput("must be 0 or more", field="--max-loras")
        if len(set(specialists)) != len(specialists) or not specialists:
            raise BadInput(f"expected distinct specialist names, got {list(specialists)}", field="specialists")
        from mint.hardware import apply_decoding_threads

        self.loaded = loaded
        self.model, self.tokenizer = loaded.model, loaded.tokenizer
        self.threads = apply_decoding_threads()      # the hardware plan's decoding threads, with its figures
        self.model.eval()
        self.max_rank = max_rank
        self.adapters = AdapterSlots(self.model, len(specialists) + named_slots, max_rank, base_name=loaded.name)
        self.table, self.modules, self.layer_of = self.adapters.table, self.adapters.modules, self.adapters.layer_of
        self.engine = Engine(self.model, self.tokenizer)
        self.lock = self.engine.lock    # loading a slot and decoding exclude each other
        self._loads = 0                 # slot loads waiting for the lock or holding it
        self._loads_done = threading.Condition()
        self.slots = {name: Slot(name, i + 1) for i, name in enumerate(specialists)}
        self.named: dict[str, Slot] = {}    # adapter name -> its slot (``specialist``: what its mint.json says)
        self._free_named = list(range(len(specialists) + 1, len(specialists) + 1 + named_slots))
        self.sync_errors: dict[str, str] = {}          # specialist -> why its champion is not loaded
        self._failed_target: dict[str, str] = {}       # specialist -> the champion that failed to load

    # --- slots ------------------------------------------------------------------------

    @contextmanager
    def _loading(self):
        """``lock`` for a change of the slots, announced while it waits (``swap_waiting``)."""
        with self._loads_done:
            self._loads += 1
        try:
            with self.lock:
                yield
        finally:
            with self._loads_done:
                self._loads -= 1
                self._loads_done.notify_all()

    @property
    def swap_waiting(self) -> bool:
        """Whether a change of the slots waits for (or holds) the lock: a running stream takes no joining rows."""
        return self._loads > 0

    def wait_for_swaps(self) -> None:
        """Return once no change of the slots waits: a server starts its next stream after them. Never call it
        holding ``lock``."""
        with self._loads_done:
            self._loads_done.wait_for(lambda: self._loads == 0)

    def _slot(self, specialist: str) -> Slot:
        if specialist in self.named:
            return self.named[specialist]
        if specialist not in self.slots:
            raise BadInput(f"unknown specialist {specialist!r}{closest(specialist, self.slots)} (this runtime serves {', '.join(self.slots)})",
                           field="specialist")
        return self.slots[specialist]

    def _specialist_slot(self, specialist: str) -> Slot:
        """A specialist's own slot (a named adapter's is loaded and freed by load_named and unload_named only)."""
        if specialist not in self.slots:
            raise BadInput(f"unknown specialist {specialist!r}{closest(specialist, self.slots)} (this runtime serves {', '.join(self.slots)})",
                           field="specialist")
        return self.slots[specialist]

    def load_adapter(self, specialist: str, directory: Path, *, revision_id: str | None = None,
                     ref: str | None = None) -> Handoff:
        """Copy the PEFT LoRA at ``directory`` into ``specialist``'s slot; all checks happen before any copy."""
        started = time.perf_counter()
        slot = self._specialist_slot(specialist)
        name = ref or str(directory)
        weights, placement = self.adapters.check(Path(directory), name)
        with self._loading():
            self.adapters.copy_into(slot.index, weights, placement)
            self.slots[specialist] = Slot(specialist, slot.index, revision_id, name, weights.rank)
        return Handoff(specialist, slot.ref, name, time.perf_counter() - started)

    def load_named(self, name: str, directory: Path) -> Slot:
        """Load the adapter at ``directory`` into a free named slot as ``name`` (vLLM's runtime LoRA loading).
        A revision directory (with ``mint.json``) is verified file by file and must be of this base; its slot
        then says its specialist and revision, so a turn it answers is logged as that revision's."""
        from mint.registry.artifacts import MINT_JSON, hash_files

        if name in self.slots or name in self.named:
            raise BadInput(f"the lora adapter {name!r} has already been loaded", field="lora_name")
        specialist, ref, revision_id = name, name, None
        manifest_path = Path(directory) / MINT_JSON
        if manifest_path.is_file():
            import json

            try:
                manifest = json.loads(manifest_path.read_text())
                specialist, version = manifest["specialist"], int(manifest["version"])
                files, fingerprint = manifest["files"], manifest.get("base_fingerprint")
            except (ValueError, KeyError, TypeError) as exc:
                raise BadInput(f"not a revision's manifest: {exc}", file=str(manifest_path)) from None
            if hash_files(Path(directory)) != files:
                raise Refused(f"{directory}: its files differ from those its {MINT_JSON} lists")
            if fingerprint and fingerprint != self.loaded.fingerprint:
                raise Refused(f"{directory} was trained on another base, not the loaded {self.loaded.name}")
            specialist, ref, revision_id = specialist, f"{specialist}:v{version}", manifest.get("id")
        weights, placement = self.adapters.check(Path(directory), name)
        with self._loading():
            if name in self.named:
                raise BadInput(f"the lora adapter {name!r} has already been loaded", field="lora_name")
            if not self._free_named:
                raise Refused(f"all {len(self.named)} named adapter slots are taken; unload one first or start the "
                              "server with a larger --max-loras")
            index = self._free_named.pop(0)
            self.adapters.copy_into(index, weights, placement)
            self.named[name] = Slot(specialist, index, revision_id, ref, weights.rank)
        return self.named[name]

    def unload_named(self, name: str) -> None:
        """Free the named slot of ``name``; BadInput (field lora_name) when no adapter of that name is loaded."""
        with self._loading():
            slot = self.named.pop(name, None)
            if slot is None:
                raise BadInput(f"the lora adapter {name!r} cannot be found", field="lora_name")
            self.adapters.clear(slot.index)
            self._free_named.append(slot.index)

    def clear(self, specialist: str) -> None:
        slot = self._specialist_slot(specialist)
        with self._loading():
            self.adapters.clear(slot.index)
            self.slots[specialist] = Slot(specialist, slot.index)
        self.sync_errors.pop(specialist, None)      # the next sync tries its champion afresh
        self._failed_target.pop(specialist, None)

    def sync_champions(self, ws: Workspace) -> list[Handoff]:
        """Load every specialist's champion whose alias moved since the last call (the registry is polled).

        Each specialist is loaded on its own: one that fails keeps serving what it served, its error is kept in
        ``sync_errors`` (specialist -> message) and that revision is not tried again until its alias moves, so a
        bad champion of one specialist never holds back another's."""
        from mint.registry import store
        from mint.registry.artifacts import load_revision

        if not store.exists(ws):
            return []
        conn = store.open_store(ws, create=False)
        try:
            targets = {name: store.alias_target(conn, name, "champion") for name in self.slots}
        finally:
            conn.close()
        moves = []
        for name, target in targets.items():
            if target == self.slots[name].revision_id or target is None:
                self.sync_errors.pop(name, None)
                continue
            if name in self.sync_errors and self._failed_target.get(name) == target:
                continue
            try:
                revision, directory = load_revision(ws, target)
                fingerprint = revision.base_fingerprint
                if fingerprint and fingerprint != self.loaded.fingerprint:
                    raise Refused(f"{revision.ref} was trained on another base "
                                  f"({revision.base or fingerprint[:19]}), not the loaded {self.loaded.name}")
                moves.append(self.load_adapter(name, directory, revision_id=revision.id, ref=revision.ref))
            except Exception as exc:  # noqa: BLE001 - any failure of one champion is that specialist's alone
                self.sync_errors[name] = str(exc) if isinstance(exc, MintError) else f"{type(exc).__name__}: {exc}"
                self._failed_target[name] = target
            else:
                self.sync_errors.pop(name, None)
                self._failed_target.pop(name, None)
        return moves

    def shared_layers(self) -> int:
        """How many decoder layers, from the first, no loaded adapter changes: there every slot computes the
        bare base's states (all of them when no adapter is loaded)."""
        return self.adapters.shared_layers([slot.index for slot in (*self.slots.values(), *self.named.values())])

    def served_by(self, specialist: str | None) -> str:
        slot = self._slot(specialist) if specialist else None
        return (slot.ref if slot and slot.ref else None) or "base"

    # --- generation -------------------------------------------------------------------

    def context_limit(self) -> int | None:
        """How many tokens (prompt and answer) the base takes in all; None when its config does not say."""
        return getattr(self.model.config, "max_position_embeddings", None)

    def encode(self, conversations: Sequence[list[dict]]) -> list[list[int]]:
        """The prompt token ids of each conversation (chat template, generation prompt)."""
        from mint.generation.engine import prompt_ids

        return prompt_ids(self.tokenizer, list(conversations))

    def generate(self, conversations: Sequence[list[dict]], specialists: Sequence[str | None],
                 decoding: Decoding = Decoding(), *, limits: Sequence[int] | None = None,
                 listeners: Sequence[TextListener | None] | None = None,
                 route: PrefillRoute | None = None, rows: Sequence[Decoding] | None = None,
                 joining: Callable[[int], Sequence[Ask]] | None = None,
                 on_generated: Callable[[int, Generation | Exception], None] | None = None,
                 batch_size: int | None = None) -> list[Generation | Exception]:
        """One reply per conversation, row i answered by ``specialists[i]`` (None: the bare base), in one batch.

        ``rows[i]``, where given, is row i's own decoding (its token limit, temperature, top_p and seed: a
        sampled row draws from a generator of its own seed, so rows that differ in them share the batch);
        ``decoding`` is then ignored. ``limits[i]`` caps row i's new tokens (default: ``decoding.max_new_tokens``);
        ``listeners[i]``, where given, receives row i's text as it is decoded (see the module's docstring);
        ``route``, where given, names the specialists of its rows inside the prefill (their ``specialists[i]``
        are ignored). A row the base cannot take raises ``RowsFailed`` before anything is generated.

        ``joining(room)``, where given, is asked between steps for at most ``room`` rows (``Ask``) to join the
        stream, at most ``batch_size`` rows running at once; they are rows ``len(conversations)`` on, in the
        order given, and one the base cannot take gets its error alone (``on_generated``, and in the result).
        ``on_generated(row, generation)`` is told each row's generation (or its error) as it finishes, while
        the others decode on. Nothing waiting to load a slot joins (``swap_waiting``).
        """
        if len(conversations) != len(specialists):
            raise BadInput(f"{len(conversations)} conversations but {len(specialists)} specialists")
        if not conversations:
            return []
        if rows is not None:
            if len(rows) != len(conversations) or limits is not None:
                raise BadInput(f"{len(conversations)} conversations but {len(rows)} row decodings")
            limits = [row.max_new_tokens for row in rows]
            decoding = Decoding(max(limits))
        if decoding.max_new_tokens < 1:
            raise BadInput("must be at least 1", field="max_new_tokens")
        limits = list(limits) if limits is not None else [decoding.max_new_tokens] * len(conversations)
        if len(limits) != len(conversations) or any(not 1 <= n <= decoding.max_new_tokens for n in limits):
            raise BadInput(f"expected one limit from 1 to {decoding.max_new_tokens} per conversation, got {limits}",
                           field="max_new_tokens")
        if listeners is not None and len(listeners) != len(conversations):
            raise BadInput(f"{len(conversations)} conversations but {len(listeners)} listeners")
        routed = set(route.rows) if route else set()
        spans: list = [None] * len(conversations)
        if route:     # the same ids, and where each last user message lies in them (for the probe)
            from mint.routing.router import prompt_tokens

            encoded = [prompt_tokens(self.tokenizer, conversation) for conversation in conversations]
            prompts, spans = [ids for ids, _span in encoded], [span for _ids, span in encoded]
        else:
            prompts = self.encode(conversations)
        too_long: dict[int, Exception]
        too_long = {i: exc for i, p in enumerate(prompts) if (exc := self._too_long(p, limits[i]))}
        if too_long:
            raise RowsFailed(too_long)
        from mint.generation.constrain import constraint_for
        from mint.generation.engine import Request

        row_decodings = list(rows) if rows is not None else [decoding] * len(conversations)
        listeners = list(listeners) if listeners is not None else [None] * len(conversations)
        specialists = list(specialists)
        began = time.perf_counter()
        started = [began] * len(conversations)           # row -> when it entered the stream
        results: list = [None] * len(conversations)      # row -> its Generation, or its error
        request_rows = list(range(len(conversations)))   # the engine's request -> its row

        def deliver(row: int, result) -> None:
            results[row] = result
            if on_generated is not None:
                on_generated(row, result)

        stops: dict[int, StopAt] = {}        # row -> the stop strings' watch over its text

        def request(row: int, prompt: list[int], limit: int, slot, decoding: Decoding, listener, span) -> Request:
            if decoding.stop:
                listener = stops[row] = StopAt(decoding.stop, listener)
            constraint = None if decoding.structure is None else constraint_for(
                self.tokenizer, self.model.config.vocab_size, self.engine.eos, decoding.structure)
            return Request(prompt, limit, slot, decoding.temperature, decoding.top_p, decoding.seed,
                           listener=listener, span=span, constraint=constraint)

        def join(room: int) -> list:
            if self.swap_waiting:     # a slot load waits for this stream: let it end
                return []
            joined = []
            for ask in list(joining(room))[:room]:
                row = len(specialists)
                specialists.append(ask.specialist)
                started.append(time.perf_counter())
                results.append(None)
                prompts.append([])
                spans.append(None)
                try:
                    if ask.decoding.max_new_tokens < 1:
                        raise BadInput("must be at least 1", field="max_new_tokens")
                    if ask.routed and route is None:
                        raise BadInput("a routed row joins only a stream that routes in its prefill")
                    if ask.routed:
                        from mint.routing.router import prompt_tokens

                        prompt, span = prompt_tokens(self.tokenizer, ask.conversation)
                    else:
                        [prompt], span = self.encode([ask.conversation]), None
                    prompts[row], spans[row] = prompt, span
                    failed = self._too_long(prompt, ask.decoding.max_new_tokens)
                    if failed:
                        raise failed
                    slot = None if ask.routed else (self._slot(ask.specialist).index if ask.specialist else 0)
                    joining_request = request(row, prompt, ask.decoding.max_new_tokens, slot, ask.decoding,
                                              ask.listener, span)
                except MintError as exc:      # this row's trouble is its own
                    deliver(row, exc)
                    continue
                request_rows.append(row)
                joined.append(joining_request)
            return joined

        def done(index: int, out) -> None:
            row = request_rows[index]
            text, reason = out.text, out.finish_reason
            watch = stops.get(row)
            if watch is not None and watch.cut is not None:    # it stopped at a stop: the text before it
                text, reason = watch.text[:watch.cut], "stop"
            elif watch is not None:
                watch.flush()
            deliver(row, Generation(specialist=specialists[row], served_by=self.served_by(specialists[row]),
                                    text=text, token_ids=out.tokens, prompt_tokens=len(prompts[row]),
                                    finish_reason=reason, seconds=out.finished - started[row]))

        with self.lock:
            requests = [request(i, prompt, limits[i], None if i in routed else
                                (self._slot(specialists[i]).index if specialists[i] is not None else 0),
                                row_decodings[i], listeners[i], spans[i]) for i, prompt in enumerate(prompts)]
            router = self._prefill_router(route, spans, specialists, request_rows) if route else None
            self.engine.decode(requests, router=router, on_done=done, batch_size=batch_size,
                               joining=join if joining is not None else None)
        return results

    def _too_long(self, prompt: list[int], asked: int) -> BadInput | None:
        limit = self.context_limit()
        if limit and len(prompt) + asked > limit:
            return BadInput(f"the conversation is {len(prompt)} tokens and {asked} more were asked for; base "
                            f"{self.loaded.name} takes at most {limit} in all", field="messages")
        return None

    def _prefill_router(self, route: PrefillRoute, spans, specialists: list, request_rows: list[int]):
        """The engine's router for ``route``: the states its rows' prefill computed after each of ``route.layers``,
        pooled over each row's last user message and side by side, name each row's specialist (kept in
        ``specialists``) and so its slot (``request_rows``: the engine's request -> its row)."""
        import torch

        from mint.generation.engine import PrefillRouter
        from mint.routing.router import pool_span

        if route.layers[-1] > self.shared_layers():
            raise Refused(f"an adapter changes decoder layer {self.shared_layers()}, below the router's layer "
                          f"{route.layers[-1]}: the turn's prefill cannot be routed")

        def decide(requests: list[int], states: dict, padding: list[int]) -> list[int]:
            rows = [request_rows[i] for i in requests]
            features = torch.cat([pool_span(states[n], [spans[i] for i in rows], padding) for n in route.layers],
                                 dim=-1)
            names = route.decide(rows, features)
            for row, name in zip(rows, names):
                specialists[row] = name
            return [self._slot(name).index for name in names]

        return PrefillRouter(tuple(route.layers), decide)
