"""The one decoding engine: every answer mint gives (contract evaluation, experience sampling, `mint chat`,
`mint serve`) is decoded by ``Engine.decode``, so the answer a contract scored is the answer users get.

A ``Request`` is a prompt's token ids, the LoRA slot that answers it (0: the bare base; see
``mint.generation.slots``), its decoding (token limit, temperature, top_p, seed) and its stops. ``decode`` runs
requests as one stream through a decode loop of its own (prefill, then one token a step, the KV cache in buffers
with room to grow: ``mint.generation.cache``):

- rows join and leave: a row leaves the batch as soon as it has finished (EOS, its answer's end, its token
  limit, its listener gone) and waiting requests (longest prompt first) are prefilled together into the freed
  places, so no row pays for the longest one in its batch; a group of very different prompt lengths is prefilled
  in runs of similar length (``prefill_buckets``), so no prompt is padded to a far longer one's;
- requests join a running stream: ``joining(room)``, where given, is asked between steps, while the stream has
  room, for at most ``room`` more requests, which wait and are prefilled like the first ones (continuous
  batching across callers, as vLLM does: a server's new turn need not wait for the stream to end); and
  ``on_done(i, decoded)`` hears each request's result as its row finishes, not when the stream ends;
- one LoRA slot per row: the slot table says which slot each row of the batch reads, so adapters share a batch
  unmerged (a batch of one slot runs PEFT's own arithmetic, see ``mint.generation.lora``);
- one EOS rule (``mint.generation.stops.eos_ids``) and, where a request asks, answer-end stops;
- a request may carry a constraint (``mint.generation.constrain``: a JSON schema, a tool call): the tokens that
  would leave its shape are masked out of its logits before it picks, and it ends once the shape is complete;
- a sampled row draws from a generator of its own seed with HF generate's processors (temperature, the base's
  top_k, top_p), so its output depends on its seed alone, never on the rows beside it (on a CPU the draw and
  top-p are ``mint.generation.sampling``'s: torch's and HF's results without their cost); greedy rows are HF
  generate's token for token, and may draft tokens from their own text (``lookup``, prompt lookup decoding)
  into the places finished rows left: rows x (1 + draft) stays within the batch;
- a listener hears its row's text as it is decoded (whole characters: ``mint.generation.text``) and stops the
  row, alone, by saying its receiver is gone (``cancelled``);
- a request without a slot is routed inside its own prefill (``PrefillRouter``): after the router's layers,
  which no loaded adapter changes, their states pick the slot that runs the rest of the prefill and every step;
- ``precision`` bf16 or int8 decodes on a copy (``mint.generation.precision``), as a contract fixes it.

``generate`` and ``generate_each`` are the harness-level calls (a contract's or an experience step's settings:
samples per conversation, seeds, batch size, precision, prompt lookup), over any causal LM: the bare base, or
a base with adapters in slots (``mint.generation.slots.attach_adapters``).
"""
from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from mint.generation import cache as kv
from mint.generation.constrain import Constraint, constraint_for, json_structure
from mint.generation import lookup as drafts
from mint.generation import sampling
from mint.generation.precision import PARITY_PROMPTS, precision_copy, resolve_precision
from mint.generation.stops import answer_complete, closing_tokens, eos_ids
from mint.generation.settings import HarnessSettings
from mint.generation.text import IncrementalText, TextListener, final_text
from mint.render import Renderer

BASE_SLOT = 0
CANCELLED = "cancelled"     # the finish reason of a row whose listener's receiver went away
# HF logits processors that transform each row of scores alone, without reading the tokens so far
_ROW_WISE_PROCESSORS = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper"}


@dataclass
class Request:
    """One answer to decode."""

    prompt: list[int]                       # token ids (the chat template with the generation prompt)
    max_new_tokens: int
    slot: int | None = BASE_SLOT            # the LoRA slot that answers; None: routed in its prefill
    temperature: float = 0.0                # 0: greedy
    top_p: float = 1.0
    seed: int = 0                           # a sampled row's generator
    answer_end: tuple[str, ...] = ()        # answer kinds that end the row once complete (mint.generation.stops)
    lookup: int = 0                         # greedy: tokens it may draft a step (prompt lookup)
    listener: TextListener | None = None
    span: tuple[int, int] | None = None     # routed: the [start, end) positions its router pools (last user turn)
    constraint: Constraint | None = None        # a shape its answer must take (mint.generation.constrain.Constraint)


@dataclass(frozen=True)
class Decoded:
    tokens: list[int]                       # without the EOS that ended it
    text: str
    finish_reason: str                      # stop | length | cancelled
    slot: int                               # the slot that answered (a routed row's, once routed)
    admitted: float                         # perf_counter() when its prefill began
    finished: float


@dataclass(frozen=True)
class DecodeRun:
    results: list[Decoded]                  # in the requests' order
    seconds: float                          # inside the decode loop
    precision: str

    @property
    def new_tokens(self) -> int:
        return sum(len(r.tokens) for r in self.results)


@dataclass(frozen=True)
class PrefillRouter:
    """Routing inside the prefill: after ``layers[-1]`` decoder layers (states every loaded adapter leaves to the
    base), ``decide(requests, states, padding)`` names the slot of each routed request from ``states`` (layer ->
    its rows' hidden states [rows, positions, hidden], left-padded by ``padding[i]`` positions)."""
    layers: tuple[int, ...]
    decide: Callable[[list[int], dict, list[int]], list[int]]


class _Row:
    """A request being decoded."""

    __slots__ = ("index", "request", "slot", "generator", "tokens", "reason", "lookup", "text", "listener",
                 "admitted", "processors")

    def __init__(self, index: int, request: Request, generator, text, processors) -> None:
        self.index, self.request, self.slot = index, request, request.slot
        self.generator, self.text, self.processors = generator, text, processors
        self.listener = request.listener
        self.tokens: list[int] = []
        self.reason: str | None = None
        self.lookup = drafts.Lookup(request.prompt) \
            if request.lookup and request.temperature <= 0 and request.constraint is None else None
        self.admitted = 0.0

    @property
    def sampling(self) -> bool:
        return self.request.temperature > 0

    @property
    def picked_alone(self) -> bool:
        """Whether its token is drawn by ``_choose`` rather than taken from the step's argmax: sampled or
        constrained."""
        return self.request.temperature > 0 or self.request.constraint is not None


def _row_wise(processors, scores):
    """HF's row-wise processors on ``scores`` in their order, top-p by ``mint.generation.sampling`` where its
    replica was found exact (the same scores, without sorting the vocabulary)."""
    fast = sampling.replicates_on(scores.device)
    for processor in processors:
        scores = sampling.top_p_filtered(processor, scores) \
            if fast and type(processor).__name__ == "TopPLogitsWarper" else processor(None, scores)
    return scores


PREFILL_PADDING = 4 / 3     # a prefill pads no prompt past this many times its own length


def prefill_buckets(group: list[_Row]) -> list[list[_Row]]:
    """``group``, longest prompt first, cut into runs whose shortest prompt is at least 1 / PREFILL_PADDING of
    their longest: each run is prefilled alone, so a short prompt is not padded to a long one's length (one
    prefill of the agent contract's 72 prompts, 140 to 375 tokens, padded 13,582 tokens to 23,250)."""
    ordered = sorted(group, key=lambda row: -len(row.request.prompt))
    buckets: list[list[_Row]] = []
    for row in ordered:
        if buckets and len(row.request.prompt) * PREFILL_PADDING >= len(buckets[-1][0].request.prompt):
            buckets[-1].append(row)
        else:
            buckets.append([row])
    return buckets


class Engine:
    """Decodes requests on ``model`` (a causal LM, with LoRA slots or without) one batch at a time (``lock``)."""

    def __init__(self, model, tokenizer) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.lock = threading.RLock()
        self.eos = eos_ids(model, tokenizer)
        self.pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        self.closes = closing_tokens(tokenizer)
        self._processors: dict = {}         # (model, temperature, top_p) -> (HF processors, whether row-wise)

    def decode(self, requests: Sequence[Request], *, batch_size: int | None = None, precision: str = "fp32",
               on_done: Callable[[int, Decoded], None] | None = None, router: PrefillRouter | None = None,
               joining: Callable[[int], Sequence[Request]] | None = None,
               on_step: Callable[[float], None] | None = None) -> DecodeRun:
        """Every request decoded, at most ``batch_size`` rows at once (default: all), ``on_done(i, decoded)``
        told as request i finishes. ``on_step(share)`` hears after every step the share of the stream's token
        budget spent (a finished row spends its whole ``max_new_tokens``): rows of one batch finish together near
        the end, so the count of finished rows says little of the time left, and this share does. ``joining(room)``, where given, is asked before every step that has room
        for at most ``room`` more requests (never one that would wait); those it gives take the indices after
        the ones so far, and the stream ends once nothing runs, waits or joins. It runs in the decoding thread
        holding ``lock``, and may itself run the model (the slot table is set again after it)."""
        from mint.generation.lora import slot_table

        if not requests:
            return DecodeRun([], 0.0, precision)
        if joining is not None and not batch_size:
            raise ValueError("a stream that requests join needs a batch_size")
        with self.lock:
            runner = self.model if precision == "fp32" else precision_copy(self.model, precision)
            table = slot_table(runner)
            self._check(requests, router, table)
            try:
                return self._stream(runner, table, list(requests), batch_size or len(requests), precision, on_done,
                                    router, joining, on_step)
            finally:
                if table is not None:
                    table.set_rows([BASE_SLOT])

    @staticmethod
    def _check(requests: Sequence[Request], router: PrefillRouter | None, table) -> None:
        if any(r.max_new_tokens < 1 for r in requests):
            raise ValueError("every request needs max_new_tokens >= 1")
        if any(r.slot is None for r in requests) and router is None:
            raise ValueError("a request without a slot is routed in its prefill: give a router")
        if table is None and any(r.slot not in (BASE_SLOT, None) for r in requests):
            raise ValueError("this model has no LoRA slots: every request must use the base slot")

    # --- the decode loop --------------------------------------------------------------------------

    def _stream(self, runner, table, requests: list[Request], batch_size: int, precision: str, on_done,
                router, joining, on_step=None) -> DecodeRun:
        import torch

        device = runner.device
        # longest first (similar lengths are prefilled together); the callers' order among equal lengths
        waiting = deque(sorted(range(len(requests)), key=lambda i: -len(requests[i].prompt)))
        results: list[Decoded | None] = [None] * len(requests)
        running: list[_Row] = []
        cache = mask = None
        began = time.perf_counter()
        with torch.inference_mode():
            while True:
                room = batch_size - len(running) - len(waiting)
                if joining is not None and room > 0:
                    joined = list(joining(room))[:room]
                    self._set_rows(table, running)     # the source may have run the model (a routing pass)
                    if joined:
                        self._check(joined, router, table)
                        waiting.extend(range(len(requests), len(requests) + len(joined)))
                        requests += joined
                        results += [None] * len(joined)
                if not (waiting or running):
                    break
                if waiting and len(running) < batch_size:
                    group = [self._row(i, requests[i], runner, device)
                             for i in (waiting.popleft() for _ in range(min(batch_size - len(running), len(waiting))))]
                    done = [False] * len(running)
                    for bucket in prefill_buckets(group):
                        logits, bucket_cache, bucket_mask = self._prefill(runner, table, bucket, router)
                        cache, mask = kv.join(cache, mask, bucket_cache, bucket_mask)
                        running += bucket
                        done += [self._finished(row, token) for row, token in zip(bucket, self._choose(logits, bucket))]
                    self._set_rows(table, running)      # once the group is in, not after each run
                else:
                    done, mask = self._step(runner, running, cache, mask, batch_size, device)
                if any(done):
                    now = time.perf_counter()
                    for row in (r for r, d in zip(running, done) if d):
                        results[row.index] = self._result(row, now)
                        if on_done:
                            on_done(row.index, results[row.index])
                    keep = [i for i, d in enumerate(done) if not d]
                    running = [running[i] for i in keep]
                    cache, mask = kv.select(cache, mask, keep)
                    self._set_rows(table, running)
                if on_step:
                    on_step(_budget_share(requests, results, running))
        return DecodeRun(results, time.perf_counter() - began, precision)  # type: ignore[arg-type]

    def _row(self, index: int, request: Request, runner, device) -> _Row:
        import torch

        generator = processors = None
        if request.temperature > 0:   # one seed per output: it does not depend on the rows beside it
            if sampling.replicates_on(device):
                generator = sampling.SeededDraws(request.seed)     # torch's draws, without their cost
            else:
                generator = torch.Generator(device=device)
                generator.manual_seed(request.seed)
            processors = self._sampling(runner, request)
        listener = request.listener
        text = IncrementalText(self.tokenizer) if listener and getattr(listener, "wants_text", True) else None
        row = _Row(index, request, generator, text, processors)
        row.admitted = time.perf_counter()
        return row

    @staticmethod
    def _set_rows(table, running: list[_Row]) -> None:
        if table is not None and running:
            table.set_rows([row.slot or BASE_SLOT for row in running])

    def _prefill(self, runner, table, group: list[_Row], router: PrefillRouter | None):
        """Last-position logits, cache and attention mask of the group's left-padded prompts (positions as HF
        generate gives them: counted over real tokens only), each row through its own slot."""
        import torch

        prompts = [row.request.prompt for row in group]
        width = max(len(p) for p in prompts)
        ids = torch.tensor([[self.pad] * (width - len(p)) + p for p in prompts], device=runner.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=runner.device)
        positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
        self._set_rows(table, group)
        routed = [k for k, row in enumerate(group) if row.slot is None]
        hooks = self._route_hooks(runner, table, group, routed, width, router) if routed else []
        try:
            out = runner(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
        finally:
            for hook in hooks:
                hook.remove()
        if any(row.slot is None for row in group):
            raise RuntimeError("the prefill ended before its rows were routed")
        return out.logits[:, -1], kv.with_room(out.cache), mask

    def _route_hooks(self, runner, table, group: list[_Row], routed: list[int], width: int,
                     router: PrefillRouter) -> list:
        """Hooks that route ``routed`` rows of the prefilling group once it has run ``router.layers[-1]`` decoder
        layers, then set their slots, so the prefill's later layers and every step run each row's adapter."""
        from mint.base import decoder_layers

        layers = decoder_layers(runner)
        captured: dict[int, object] = {}
        padding = [width - len(group[k].request.prompt) for k in routed]

        def capture(layer: int):
            def hook(_module, _inputs, output):
                captured[layer] = (output[0] if isinstance(output, tuple) else output)[routed]
                if layer == router.layers[-1]:
                    slots = router.decide([group[k].index for k in routed], dict(captured), padding)
                    for k, slot in zip(routed, slots):
                        group[k].slot = slot
                    self._set_rows(table, group)
            return hook

        return [layers[n - 1].register_forward_hook(capture(n)) for n in router.layers]

    def _step(self, runner, running: list[_Row], cache, mask, batch_size: int, device) -> tuple[list[bool], object]:
        """One decode step of the running rows (each with its drafts, if any): which rows finished, and the
        attention mask extended by the step's columns (refused drafts masked out)."""
        import torch

        # drafts fill only the rows that finished sequences left: rows x (1 + draft) <= batch_size
        room = batch_size // len(running) - 1
        row_drafts = [row.lookup.draft(min(room, row.request.lookup, row.request.max_new_tokens - len(row.tokens) - 1))
                      if row.lookup is not None and room > 0 else [] for row in running]
        width = 1 + max(map(len, row_drafts), default=0)
        fed = torch.tensor([[row.tokens[-1], *draft, *[self.pad] * (width - 1 - len(draft))]
                            for row, draft in zip(running, row_drafts)], device=device)
        start = [len(row.request.prompt) + len(row.tokens) - 1 for row in running]
        positions = torch.tensor([[p + j for j in range(width)] for p in start], device=device)
        mask = torch.cat([mask, mask.new_ones((len(running), width))], dim=1)
        out = runner(input_ids=fed, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
        if width == 1:
            return [self._finished(row, token) for row, token in zip(running, self._choose(out.logits[:, -1], running))], mask
        picks = out.logits.float().argmax(-1).tolist()
        sampled = [i for i, row in enumerate(running) if row.picked_alone]
        drawn = dict(zip(sampled, self._choose(out.logits[sampled, 0], [running[i] for i in sampled]))) \
            if sampled else {}
        done = []
        for index, (row, draft) in enumerate(zip(running, row_drafts)):
            if row.picked_alone:     # a sampled or constrained row drafts nothing: its first column is its step
                finished = self._finished(row, drawn[index])
                if not finished:
                    mask[index, mask.shape[1] - width + 1:] = 0
                done.append(finished)
            else:
                done.append(drafts.take_checked(row, draft, picks[index], self._finished, mask, index, width))
        return done, mask

    def _choose(self, logits, rows: list[_Row]) -> list[int]:
        """Each row's next token from its logits: greedy's argmax, or a draw from its own generator."""
        import torch

        logits = logits.float()
        constrained = [k for k, row in enumerate(rows) if row.request.constraint is not None]
        if constrained:     # the tokens that would leave the row's shape are never picked
            logits = logits.clone()
            for k in constrained:
                rows[k].request.constraint.mask(logits[k])
        picks = logits.argmax(-1).tolist()
        groups: dict[int, list[int]] = {}     # rows sampling with one set of processors, drawn together
        for k, row in enumerate(rows):
            if row.sampling:
                groups.setdefault(id(row.processors), []).append(k)
        for members in groups.values():
            processors, row_wise = rows[members[0]].processors
            if row_wise:   # these processors read no history: one call for the rows gives each row's own
                probs = torch.softmax(_row_wise(processors, logits[members]), dim=-1)
            else:
                probs = torch.cat([torch.softmax(processors(
                    torch.tensor([rows[k].request.prompt + rows[k].tokens], device=logits.device), logits[k][None]),
                    dim=-1) for k in members])
            for k, p in zip(members, probs):
                generator = rows[k].generator
                picks[k] = generator.draw(p) if isinstance(generator, sampling.SeededDraws) \
                    else int(torch.multinomial(p[None], 1, generator=generator))
        return picks

    def _sampling(self, runner, request: Request):
        """The logits processors HF generate applies for this request's sampling (temperature, top-k/top-p from
        the model's generation config too), so that sampling draws from exactly HF's distribution; one object
        per (temperature, top_p), which ``_choose`` groups rows by."""
        key = (id(runner), request.temperature, request.top_p)
        if key not in self._processors:
            if len(self._processors) >= 64:     # a server's clients may ask for any number of settings
                self._processors.clear()
            config, _ = runner._prepare_generation_config(None, do_sample=True, temperature=request.temperature,
                                                          top_p=request.top_p, max_new_tokens=request.max_new_tokens)
            processors = runner._get_logits_processor(generation_config=config, device=str(runner.device))
            self._processors[key] = (processors, all(type(p).__name__ in _ROW_WISE_PROCESSORS for p in processors))
        return self._processors[key]

    def _finished(self, row: _Row, token: int) -> bool:
        """Take ``token`` into the row; whether the row ends here."""
        if token in self.eos:
            row.reason = "stop"
            return True
        row.tokens.append(token)
        constraint = row.request.constraint
        if constraint is not None and not constraint.accept(token):
            row.reason = "stop"      # cannot happen for a token its mask allowed; ends the row, never the batch
            return True
        if row.lookup is not None:
            row.lookup.extend((token,))
        if row.listener is not None:
            self._tell(row, row.text.push(row.tokens) if row.text else "")
            if row.reason is not None:
                return True
        kinds = row.request.answer_end
        if kinds and self.closes(token) and answer_complete(
                self.tokenizer.decode(row.tokens, skip_special_tokens=True), kinds):
            row.reason = "stop"
            return True
        if constraint is not None and constraint.done:     # the shape is complete: only its end may follow
            row.reason = "stop"
            return True
        if len(row.tokens) >= row.request.max_new_tokens:
            row.reason = "length"
            return True
        return False

    @staticmethod
    def _tell(row: _Row, delta: str) -> None:
        """Give the listener its text; a listener that refuses or fails cancels its row, never the batch."""
        try:
            alive = row.listener(delta)
        except Exception:  # noqa: BLE001 - the receiver's trouble is the receiver's, not the other rows'
            alive = False
        if not alive:
            row.reason, row.listener = CANCELLED, None

    def _result(self, row: _Row, now: float) -> Decoded:
        if row.text is None:
            text = final_text(self.tokenizer, row.tokens)
        else:
            text, rest = row.text.finish(row.tokens)
            if rest and row.listener is not None:
                self._tell(row, rest)
        return Decoded(row.tokens, text, row.reason or "length", row.slot or BASE_SLOT, row.admitted, now)


# --- a contract's (or an experience step's) settings ---------------------------------------------

@dataclass
class Generation:
    outputs: list[list[str]]       # settings.samples outputs per conversation, in the caller's order
    latencies_ms: list[float]      # each conversation's time in the stream: first admitted to last done
    new_tokens: int                # tokens generated for these outputs (not counting EOS)
    seconds: float                 # the stream's time inside the decode loop
    precision: str                 # "fp32", "bf16" or "int8": what generated the outputs
    precision_reason: str
    row_tokens: list[int] = field(default_factory=list)   # tokens generated per conversation (all its samples)
    stream_tokens: int = 0         # tokens the whole stream generated (other slots' too)

    @property
    def tokens_per_s(self) -> float:
        """The stream's tokens/s (every slot decoded in it)."""
        return (self.stream_tokens or self.new_tokens) / self.seconds if self.seconds > 0 else 0.0


def prompt_ids(tokenizer, conversations) -> list[list[int]]:
    """Each conversation's prompt token ids: its chat template with the generation prompt."""
    return [prompt.ids for prompt in Renderer(tokenizer).prompts(conversations)]


def _budget_share(requests: Sequence[Request], results: Sequence[Decoded | None], running: Sequence[_Row]) -> float:
    """The share of the requests' token budget spent: a finished request's whole budget, a running row's tokens."""
    budget = sum(r.max_new_tokens for r in requests)
    spent = sum(r.max_new_tokens for r, d in zip(requests, results) if d is not None) + \
        sum(min(len(row.tokens), row.request.max_new_tokens) for row in running)
    return spent / budget if budget else 1.0


def generate_each(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
                  slots: Sequence[int], progress: Callable[[int], None] | None = None, *,
                  answer_end: tuple[str, ...] = (),
                  on_done: Callable[[int, int], None] | None = None,
                  subsets: Sequence[Sequence[int]] | None = None,
                  prompts: list[list[int]] | None = None,
                  shapes: Sequence[dict | None] | None = None,
                  on_step: Callable[[float], None] | None = None) -> list[Generation]:
    """``settings.samples`` outputs per conversation from each LoRA slot of ``slots``, all in one stream (one
    ``Generation`` per slot, in order). Output ``s`` of conversation ``c`` samples with seed
    ``c * samples + s`` whatever the slot, so a slot's outputs are the ones it gives decoded alone.
    ``subsets[k]``, where given, are the only conversations slot ``slots[k]`` answers (its Generation lists them
    in that order; a conversation keeps its seed). ``prompts``: the conversations' token ids, where the caller
    has rendered them already. ``shapes[c]``, where given, is a JSON schema every answer to conversation ``c``
    is decoded inside (``mint.generation.constrain``; None: unconstrained). ``answer_end`` (``mint.harness.answer_ends``) stops each row at the end
    of its answer; ``progress(n)`` is told how many more conversations are done, ``on_done(k, c)`` that slot
    ``slots[k]`` has answered conversation ``c``, ``on_step(share)`` the share of the stream's token budget spent
    (``Engine.decode``)."""
    precision, reason = resolve_precision(settings.precision, str(model.device))
    prompts = prompts if prompts is not None else prompt_ids(tokenizer, conversations)
    samples = settings.samples
    chosen = [list(range(len(prompts))) if subsets is None else list(subsets[k]) for k in range(len(slots))]
    engine = Engine(model, tokenizer)
    structures = [None if shape is None else json_structure(shape) for shape in shapes] if shapes else None

    def constraint(c: int):       # a matcher of its own for every row: it follows that row's tokens
        if structures is None or structures[c] is None:
            return None
        return constraint_for(tokenizer, model.config.vocab_size, engine.eos, structures[c])

    requests, owners = [], []
    for k, slot in enumerate(slots):
        for c in chosen[k]:
            for s in range(samples):
                requests.append(Request(prompts[c], settings.max_new_tokens, slot, settings.temperature,
                                        settings.top_p, seed=c * samples + s, answer_end=tuple(answer_end),
                                        lookup=settings.prompt_lookup if settings.temperature <= 0 else 0,
                                        constraint=constraint(c)))
                owners.append((k, c))
    left = {owner: samples for owner in set(owners)}

    def done(index: int, _decoded: Decoded) -> None:
        owner = owners[index]
        left[owner] -= 1
        if left[owner] == 0:
            if progress:
                progress(1)
            if on_done:
                on_done(*owner)

    run = engine.decode(requests, batch_size=settings.batch_size, precision=precision,
                        on_done=done, on_step=on_step) if requests else DecodeRun([], 0.0, precision)
    generations, start = [], 0
    for k in range(len(slots)):
        mine = run.results[start:start + len(chosen[k]) * samples]
        start += len(chosen[k]) * samples
        per = [mine[i * samples:(i + 1) * samples] for i in range(len(chosen[k]))]
        row_tokens = [sum(len(d.tokens) for d in outs) for outs in per]
        generations.append(Generation(
            outputs=[[d.text for d in outs] for outs in per],
            latencies_ms=[(max(d.finished for d in outs) - min(d.admitted for d in outs)) * 1000 for outs in per],
            new_tokens=sum(row_tokens), seconds=run.seconds, precision=precision, precision_reason=reason,
            row_tokens=row_tokens, stream_tokens=run.new_tokens))
    return generations


def generate(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
             progress: Callable[[int], None] | None = None, *, answer_end: tuple[str, ...] = (),
             on_done: Callable[[int], None] | None = None, slot: int = BASE_SLOT,
             shapes: Sequence[dict | None] | None = None) -> Generation:
    """``settings.samples`` outputs per conversation from one slot (the bare base by default); see
    ``generate_each``. ``on_done(c)`` is told that conversation ``c`` is done."""
    return generate_each(model, tokenizer, conversations, settings, [slot], progress, answer_end=answer_end,
                         on_done=(lambda _k, c: on_done(c)) if on_done else None, shapes=shapes)[0]


def generate_batches(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
                     progress: Callable[[int], None] | None = None, *, answer_end: tuple[str, ...] = (),
                     slot: int = BASE_SLOT, shapes: Sequence[dict | None] | None = None
                     ) -> tuple[list[list[str]], list[float]]:
    """``settings.samples`` outputs per conversation, and each conversation's latency in ms."""
    result = generate(model, tokenizer, conversations, settings, progress, answer_end=answer_end, slot=slot,
                      shapes=shapes)
    return result.outputs, result.latencies_ms


def compare_precisions(model, tokenizer, conversations, settings, answer_end=(), precision: str = "bf16") -> dict:
    """fp32 and ``precision`` greedy on the first ``PARITY_PROMPTS`` conversations: each one's tokens/s (after
    a two-token warm-up, so a first call's one-off costs are not timed) and whether their outputs are
    identical. What a contract's ``precision: auto`` is resolved from, and what the benchmark prints."""
    import dataclasses

    prompts = conversations[:PARITY_PROMPTS]
    greedy = dataclasses.replace(settings, temperature=0.0, samples=1, precision="fp32")
    runs: dict[str, dict[str, Any]] = {}
    for name in ("fp32", precision):
        at = dataclasses.replace(greedy, precision=name)
        generate(model, tokenizer, prompts[:1], dataclasses.replace(at, max_new_tokens=2), answer_end=answer_end)
        result = generate(model, tokenizer, prompts, at, answer_end=answer_end)
        runs[name] = {"outputs": result.outputs, "new_tokens": result.new_tokens, "seconds": round(result.seconds, 4),
                      "tokens_per_s": round(result.new_tokens / result.seconds, 2) if result.seconds > 0 else 0.0}
    same = [a[0] == b[0] for a, b in zip(runs["fp32"]["outputs"], runs[precision]["outputs"])]
    parity = {"compared": f"greedy {precision} vs fp32", "examples": len(prompts), "identical": sum(same),
              "agreement": sum(same) / len(prompts) if prompts else 1.0,
              "mismatches": [{"prompt": i, "fp32": runs["fp32"]["outputs"][i][0][:300],
                              precision: runs[precision]["outputs"][i][0][:300]}
                             for i, ok in enumerate(same) if not ok]}
    fp32_speed = runs["fp32"]["tokens_per_s"]
    return {"parity": parity,
            "speed": {name: {k: v for k, v in run.items() if k != "outputs"} for name, run in runs.items()},
            "speedup": round(runs[precision]["tokens_per_s"] / fp32_speed, 3) if fp32_speed else 0.0}
