"""The mixture runtime: the base loaded once, each specialist's champion in its own preallocated LoRA slot.

``generate`` answers a batch of conversations with one specialist per row in one batch (see
``mint.mol.lora``). A row may carry a listener: the decode loop hands it the row's new text after every
step (decoded incrementally, so a multi-byte character or a word piece is sent once it is whole), and the
row stops when the listener says its receiver is gone; each row also stops at its own token limit. Rows
that stop are padded by ``model.generate`` until the whole batch ends (they stay in the batch's tensors,
but nothing more is decoded or sent for them). ``load_adapter`` copies a new adapter into its slot in place (the adapter-only
handoff), and ``sync_champions`` does that for every champion alias that moved in the registry.
"""
from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from mint.base import LoadedBase
from mint.errors import BadInput, MintError, Refused
from mint.workspace import Workspace

DEFAULT_MAX_RANK = 16
CANCELLED = "cancelled"     # the finish reason of a row whose listener's receiver went away

# called after every decode step of its row with the text that became final (often ""); False: stop the row
TextListener = Callable[[str], bool]


class StopFlag:
    """A listener that wants no text, only a way to stop its row: a non-streamed request whose client left
    calls ``stop`` and the row ends ``cancelled`` at its next step (nothing is decoded for it meanwhile)."""

    wants_text = False

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def __call__(self, _delta: str) -> bool:
        return not self.stopped


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


@dataclass(frozen=True)
class Generation:
    specialist: str | None
    served_by: str                  # the revision (coding:v3) or "base"
    text: str
    token_ids: list[int]
    prompt_tokens: int
    finish_reason: str              # stop | length | cancelled
    seconds: float                  # the batch's generation time


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
        from mint.mol.lora import SlotTable, install_slots

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
        self.table = SlotTable()
        self.modules = install_slots(self.model, len(specialists) + 1 + named_slots, max_rank, self.table)
        self.slots = {name: Slot(name, i + 1) for i, name in enumerate(specialists)}
        self.named: dict[str, Slot] = {}    # adapter name -> its slot (``specialist``: what its mint.json says)
        self._free_named = list(range(len(specialists) + 1, len(specialists) + 1 + named_slots))
        self.layer_of = {name: _layer_index(name) for name in self.modules}
        self.lock = threading.RLock()
        self._layouts: dict = {}        # (safetensors header, LoRA settings) -> its checked AdapterLayout
        self._targets: dict = {}        # AdapterLayout -> (the slotted modules it fills, those it leaves empty)
        self._plans: dict = {}          # (AdapterLayout, slot index) -> its LoadPlan (see mint.mol.lora.load_plan)
        self.sync_errors: dict[str, str] = {}          # specialist -> why its champion is not loaded
        self._failed_target: dict[str, str] = {}       # specialist -> the champion that failed to load
        if self.tokenizer.pad_token is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.tokenizer.padding_side = "left"   # new tokens must follow every prompt directly

    # --- slots ------------------------------------------------------------------------

    def _slot(self, specialist: str) -> Slot:
        if specialist in self.named:
            return self.named[specialist]
        if specialist not in self.slots:
            raise BadInput(f"unknown specialist {specialist!r} (this runtime serves {', '.join(self.slots)})",
                           field="specialist")
        return self.slots[specialist]

    def _checked_weights(self, directory: Path, name: str):
        """The LoRA weights at ``directory``, checked against the slots' rank and the base's layers, and where
        they go (see ``_targets_of``; checked once per layout: see ``mint.mol.lora.AdapterLayout``)."""
        from mint.mol.lora import read_adapter
        from mint.registry.artifacts import check_adapter_dir

        weights = read_adapter(directory, check_adapter_dir(directory), self._layouts)
        if weights.rank > self.max_rank:
            raise Refused(f"{name} has LoRA rank {weights.rank}, above the runtime's slot rank {self.max_rank}; "
                          f"start the runtime with --max-rank {weights.rank} or more")
        placement = self._targets.get(weights.layout)
        if placement is None:
            if len(self._targets) >= 32:
                self._targets.clear()
            placement = self._targets[weights.layout] = self._targets_of(weights.layout, name, directory)
        return weights, placement

    def _targets_of(self, layout, name: str, directory: Path) -> tuple[list, list]:
        """The slotted modules a layout's modules go into (in its order), and those it leaves empty; BadInput
        when a module is not a linear layer of the base or its shape is not the base's."""
        targets = []
        for module, (a, b, _scale) in layout.modules.items():
            target = self.modules.get(module)
            if target is None:
                raise BadInput(f"{name} adapts {module}, which is not a linear layer of base "
                               f"{self.loaded.name}", file=str(directory))
            if a.shape[1] != target.base.in_features or b.shape[0] != target.base.out_features:
                raise BadInput(f"{name}: {module} is {target.base.in_features}->{target.base.out_features} in base "
                               f"{self.loaded.name}, but the adapter's LoRA is {a.shape[1]}->{b.shape[0]}",
                               file=str(directory))
            targets.append(target)
        untouched = [module for module_name, module in self.modules.items() if module_name not in layout.modules]
        return targets, untouched

    def _copy_into(self, index: int, weights, placement: tuple[list, list]) -> None:
        from mint.mol.lora import load_plan, load_slots, plan_is_current

        targets, untouched = placement
        loaded = list(weights.modules.values())
        plan = self._plans.get((weights.layout, index))
        if plan is None or not plan_is_current(plan):
            if len(self._plans) >= 64:
                self._plans.clear()
            plan = self._plans[(weights.layout, index)] = load_plan(
                index, [(target, a.shape[0]) for target, (a, _b, _scale) in zip(targets, loaded)])
        load_slots(plan, [tensor for a, b, _scale in loaded for tensor in (a, b)], [scale for *_, scale in loaded])
        for module in untouched:
            if module.ranks[index]:
                module.clear_slot(index)

    def _specialist_slot(self, specialist: str) -> Slot:
        """A specialist's own slot (a named adapter's is loaded and freed by load_named and unload_named only)."""
        if specialist not in self.slots:
            raise BadInput(f"unknown specialist {specialist!r} (this runtime serves {', '.join(self.slots)})",
                           field="specialist")
        return self.slots[specialist]

    def load_adapter(self, specialist: str, directory: Path, *, revision_id: str | None = None,
                     ref: str | None = None) -> Handoff:
        """Copy the PEFT LoRA at ``directory`` into ``specialist``'s slot; all checks happen before any copy."""
        started = time.perf_counter()
        slot = self._specialist_slot(specialist)
        name = ref or str(directory)
        weights, placement = self._checked_weights(directory, name)
        with self.lock:
            self._copy_into(slot.index, weights, placement)
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
        weights, placement = self._checked_weights(Path(directory), name)
        with self.lock:
            if name in self.named:
                raise BadInput(f"the lora adapter {name!r} has already been loaded", field="lora_name")
            if not self._free_named:
                raise Refused(f"all {len(self.named)} named adapter slots are taken; unload one first or start the "
                              "server with a larger --max-loras")
            index = self._free_named.pop(0)
            self._copy_into(index, weights, placement)
            self.named[name] = Slot(specialist, index, revision_id, ref, weights.rank)
        return self.named[name]

    def unload_named(self, name: str) -> None:
        """Free the named slot of ``name``; BadInput (field lora_name) when no adapter of that name is loaded."""
        with self.lock:
            slot = self.named.pop(name, None)
            if slot is None:
                raise BadInput(f"the lora adapter {name!r} cannot be found", field="lora_name")
            for module in self.modules.values():
                module.clear_slot(slot.index)
            self._free_named.append(slot.index)

    def clear(self, specialist: str) -> None:
        slot = self._specialist_slot(specialist)
        with self.lock:
            for module in self.modules.values():
                module.clear_slot(slot.index)
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
        slots = [*self.slots.values(), *self.named.values()]
        changed = [self.layer_of[name] for name, module in self.modules.items()
                   if any(module.ranks[slot.index] for slot in slots)]
        changed = [layer for layer in changed if layer is not None]
        return min(changed, default=len(self.model.get_decoder().layers))

    def served_by(self, specialist: str | None) -> str:
        slot = self._slot(specialist) if specialist else None
        return (slot.ref if slot and slot.ref else None) or "base"

    # --- generation -------------------------------------------------------------------

    def context_limit(self) -> int | None:
        """How many tokens (prompt and answer) the base takes in all; None when its config does not say."""
        return getattr(self.model.config, "max_position_embeddings", None)

    def encode(self, conversations: Sequence[list[dict]]) -> list[list[int]]:
        """The prompt token ids of each conversation (chat template, generation prompt)."""
        from mint.mol.generate import prompt_ids

        return prompt_ids(self.tokenizer, list(conversations))

    def generate(self, conversations: Sequence[list[dict]], specialists: Sequence[str | None],
                 decoding: Decoding = Decoding(), *, limits: Sequence[int] | None = None,
                 listeners: Sequence[TextListener | None] | None = None,
                 route: PrefillRoute | None = None, rows: Sequence[Decoding] | None = None) -> list[Generation]:
        """One reply per conversation, row i answered by ``specialists[i]`` (None: the bare base), in one batch.

        ``rows[i]``, where given, is row i's own decoding (its token limit, temperature, top_p and seed: a
        sampled row draws from a generator of its own seed, so rows that differ in them share the batch);
        ``decoding`` is then ignored. ``limits[i]`` caps row i's new tokens (default: ``decoding.max_new_tokens``);
        ``listeners[i]``, where given, receives row i's text as it is decoded (see the module's docstring);
        ``route``, where given, names the specialists of its rows inside the prefill (their ``specialists[i]``
        are ignored).
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
        slots = [self._slot(s).index if s is not None and i not in routed else 0 for i, s in enumerate(specialists)]
        spans = None
        if route:     # the same ids, and where each last user message lies in them (for the probe)
            from mint.mol.router import prompt_tokens

            encoded = [prompt_tokens(self.tokenizer, conversation) for conversation in conversations]
            prompts, spans = [ids for ids, _span in encoded], [span for _ids, span in encoded]
        else:
            prompts = self.encode(conversations)
        limit = self.context_limit()
        too_long = {i: BadInput(f"the conversation is {len(p)} tokens and {limits[i]} more were asked for; base "
                                f"{self.loaded.name} takes at most {limit} in all", field="messages")
                    for i, p in enumerate(prompts) if limit and len(p) + limits[i] > limit}
        if too_long:
            raise RowsFailed(too_long)
        return self.generate_ids(prompts, slots, decoding, specialists, limits=limits, listeners=listeners,
                                 route=route, spans=spans, rows=rows)

    def generate_ids(self, prompts: list[list[int]], slots: list[int], decoding: Decoding,
                     specialists: Sequence[str | None] | None = None, *, limits: Sequence[int] | None = None,
                     listeners: Sequence[TextListener | None] | None = None, route: PrefillRoute | None = None,
                     spans: Sequence[tuple[int, int]] | None = None,
                     rows: Sequence[Decoding] | None = None) -> list[Generation]:
        import torch
        from transformers import LogitsProcessorList, StoppingCriteriaList

        width = max(len(p) for p in prompts)
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], dtype=torch.long)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
        row_decodings = rows
        rows = _RowStops(self.tokenizer, limits or [decoding.max_new_tokens] * len(prompts),
                         set(_eos_ids(self.model, self.tokenizer)), listeners or [None] * len(prompts))
        options = dict(max_new_tokens=decoding.max_new_tokens, pad_token_id=pad,
                       do_sample=decoding.temperature > 0 and row_decodings is None,
                       stopping_criteria=StoppingCriteriaList([rows]))
        if row_decodings is not None:   # greedy decoding picks the token each sampled row's sampler chose
            options.update(logits_processor=LogitsProcessorList([_RowSampler(row_decodings)]))
        elif decoding.temperature > 0:
            options.update(temperature=decoding.temperature, top_p=decoding.top_p, top_k=0)
        specialists = list(specialists or [None] * len(prompts))
        slots = list(slots)
        with self.lock:
            self.table.set_rows(slots)
            hooks = self._route_in_prefill(route, prompts, spans, width, slots, specialists) if route else []
            try:
                if decoding.temperature > 0 and row_decodings is None:
                    torch.manual_seed(decoding.seed)
                started = time.perf_counter()
                with torch.inference_mode():
                    self.model.generate(input_ids=input_ids, attention_mask=attention, **options)
                seconds = time.perf_counter() - started
            finally:
                for hook in hooks:
                    hook.remove()
                self.table.set_rows([0])
            if route and any(specialists[i] is None for i in route.rows):
                raise RuntimeError("the prefill ended before its rows were routed")
            served = [self.served_by(s) for s in specialists]
        results = []
        for row, prompt in enumerate(prompts):
            tokens, text = rows.tokens[row], rows.finish(row)
            results.append(Generation(
                specialist=specialists[row], served_by=served[row], text=text,
                token_ids=tokens, prompt_tokens=len(prompt), finish_reason=rows.reasons[row] or "length",
                seconds=seconds))
        return results


    def _route_in_prefill(self, route: PrefillRoute, prompts, spans, width: int, slots: list[int],
                          specialists: list) -> list:
        """Hooks that route ``route.rows`` once the prefill has run ``route.layers[-1]`` decoder layers, then
        set each routed row's slot (in ``slots`` and the slot table) and specialist, so the prefill's later
        layers and every decode step run that row's adapter. They fire on the prefill only."""
        import torch

        from mint.mol.router import pool_span

        if route.layers[-1] > self.shared_layers():
            raise Refused(f"an adapter changes decoder layer {self.shared_layers()}, below the router's layer "
                          f"{route.layers[-1]}: the turn's prefill cannot be routed")
        if spans is None:
            raise BadInput("routing inside the prefill needs each prompt's span")
        layers = self.model.get_decoder().layers
        rows = list(route.rows)
        offsets = [width - len(prompts[i]) for i in rows]
        captured: dict[int, object] = {}

        def capture(layer: int):
            def hook(_module, _inputs, output):
                if layer in captured:
                    return            # a decode step: the prefill was routed already
                captured[layer] = pool_span((output[0] if isinstance(output, tuple) else output)[rows],
                                            [spans[i] for i in rows], offsets)
                if layer == route.layers[-1]:
                    features = torch.cat([captured[n] for n in route.layers], dim=-1)
                    for row, name in zip(rows, route.decide(rows, features)):
                        specialists[row], slots[row] = name, self._slot(name).index
                    self.table.set_rows(slots)
            return hook

        return [layers[n - 1].register_forward_hook(capture(n)) for n in route.layers]


def _layer_index(module_name: str) -> int | None:
    """The decoder layer a module belongs to (``model.layers.12.mlp.up_proj`` -> 12)."""
    import re

    found = re.search(r"(?:^|\.)layers\.(\d+)\.", module_name)
    return int(found[1]) if found else None


class IncrementalText:
    """The text of a growing token list, handed out in pieces whose concatenation is the final answer.

    The final answer is ``decode(tokens).strip()``, so leading whitespace is never sent and trailing
    whitespace waits until more text follows it; a trailing U+FFFD (an incomplete UTF-8 sequence, the rest
    of it still to come in the next token) waits too.
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.sent = ""

    def _text(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True).strip()

    def push(self, tokens: list[int]) -> str:
        """The new text that ``tokens`` make final (often "")."""
        ready = self._text(tokens).rstrip("\ufffd").rstrip()
        if not ready.startswith(self.sent):   # decoding revised earlier text: wait until it agrees again
            return ""
        delta, self.sent = ready[len(self.sent):], ready
        return delta

    def finish(self, tokens: list[int]) -> tuple[str, str]:
        """(the final text, what of it was not sent yet)."""
        final = self._text(tokens)
        return final, final[len(self.sent):] if final.startswith(self.sent) else ""


class _RowSampler:
    """A logits processor that samples each row whose decoding samples (temperature > 0) from a generator of
    its own seed, with its own temperature and top_p, and leaves only that token to greedy decoding's argmax;
    greedy rows pass unchanged. A row's draws therefore depend on its seed alone, not on its batch."""

    def __init__(self, decodings: Sequence[Decoding]) -> None:
        self.decodings = list(decodings)
        self.generators: dict[int, object] = {}

    def __call__(self, input_ids, scores):
        import torch

        for row, decoding in enumerate(self.decodings):
            if decoding.temperature <= 0:
                continue
            if row not in self.generators:
                self.generators[row] = torch.Generator(device=scores.device).manual_seed(decoding.seed)
            probs = torch.softmax(scores[row].float() / decoding.temperature, dim=-1)
            if decoding.top_p < 1:
                ordered, order = torch.sort(probs, descending=True)
                outside = ordered.cumsum(-1) - ordered > decoding.top_p   # the smallest set holding top_p stays
                probs = probs.scatter(0, order[outside], 0.0)
            token = torch.multinomial(probs, 1, generator=self.generators[row])
            scores[row] = float("-inf")
            scores[row, token] = 0.0
        return scores


class _RowStops:
    """A stopping criterion for ``model.generate`` that follows each row after every decode step: it
    collects the row's tokens, stops the row at EOS, at its own limit or when its listener's receiver is
    gone, and hands the listener the row's newly decoded text."""

    def __init__(self, tokenizer, limits: Sequence[int], eos: set[int],
                 listeners: Sequence[TextListener | None]) -> None:
        self.limits, self.eos, self.listeners = list(limits), eos, list(listeners)
        self.tokens: list[list[int]] = [[] for _ in limits]
        self.reasons: list[str | None] = [None] * len(limits)     # stop | length | cancelled, once stopped
        self.texts = [IncrementalText(tokenizer) if listener and getattr(listener, "wants_text", True) else None
                      for listener in listeners]
        self.tokenizer = tokenizer

    def _tell(self, row: int, delta: str) -> None:
        """Give the listener its text; a listener that refuses or fails cancels its row, never the batch."""
        try:
            alive = self.listeners[row](delta)
        except Exception:  # noqa: BLE001 - the receiver's trouble is the receiver's, not the other rows'
            alive = False
        if not alive:
            self.reasons[row], self.listeners[row] = CANCELLED, None

    def __call__(self, input_ids, scores, **kwargs):
        import torch

        newest = input_ids[:, -1].tolist()
        for row, token in enumerate(newest):
            if self.reasons[row] is not None:
                continue
            if token in self.eos:
                self.reasons[row] = "stop"
                continue
            self.tokens[row].append(token)
            if self.listeners[row] is not None:
                self._tell(row, self.texts[row].push(self.tokens[row]) if self.texts[row] else "")
            if self.reasons[row] is None and len(self.tokens[row]) >= self.limits[row]:
                self.reasons[row] = "length"
        return torch.tensor([reason is not None for reason in self.reasons], device=input_ids.device)

    def finish(self, row: int) -> str:
        """The row's final text; its listener gets what it was not sent yet."""
        if self.texts[row] is None:
            return self.tokenizer.decode(self.tokens[row], skip_special_tokens=True).strip()
        final, rest = self.texts[row].finish(self.tokens[row])
        if rest and self.listeners[row] is not None:
            self._tell(row, rest)
        return final


def _eos_ids(model, tokenizer) -> list[int]:
    configured = getattr(model.generation_config, "eos_token_id", None)
    ids = configured if isinstance(configured, list) else [configured] if configured is not None else []
    if tokenizer.eos_token_id is not None:
        ids.append(tokenizer.eos_token_id)
    return ids
