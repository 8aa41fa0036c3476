"""Batched generation for contract evaluation: one adapter (or none) for the whole suite.

What makes contract evaluation fast; the last two are a contract's choice (its decoding block), because they
can change what it measures:

- the suite runs as one stream (``engine="stream"``, the default): a row leaves the batch as soon as it has
  finished (EOS, its answer's end, ``max_new_tokens``) and a waiting prompt takes its slot, so no row pays
  for the longest one in its batch. Greedy and sampled outputs are HF ``generate``'s token for token (each
  sample draws from its own seeded generator, so an output does not depend on which rows it ran beside);
  ``engine="hf"`` is HF ``generate`` on length-sorted batches (the old path, kept for the benchmark);
- the stream's KV cache lives in buffers with room for ``KV_ROOM`` more columns, so a step writes its column
  in place instead of copying the whole cache (DynamicCache's torch.cat);
- a greedy fp32 candidate (a PEFT model) runs on a copy with its adapter merged in, checked against the
  unmerged model by teacher forcing on the first prompts (the check is the parity; a mismatch regenerates);
- ``decoding: {stop_at_answer_end: true}`` ends each row once its answer is complete (a JSON value, a
  closed code fence, closed ``<tool_call>`` blocks, by harness) instead of running to ``max_new_tokens``;
- ``decoding: {prompt_lookup: N}`` lets each greedy row draft up to N tokens from its own text so far (the
  tokens that followed the last earlier occurrence of its latest 1-3 tokens: prompt lookup decoding) and
  checks them all in one step; it keeps the drafted tokens the model picks and one more. Drafts only fill
  the rows finished sequences have left empty (rows x (1 + draft) stays within ``batch_size``), so a full
  batch decodes as before and its tail, where a few long answers run on alone, takes several tokens a step;
- ``decoding: {precision: bf16 | int8}`` generates with a bf16 copy of the model (or an int8 dynamically
  quantized copy of its Linear layers, the adapter merged in first). ``auto`` is not resolved here: a
  contract resolves it once per base, host and contract by measurement (mint.contract.precision, which
  times and compares the two with ``compare_precisions``), so a candidate and its baseline always decode
  at one precision and no evaluation pays for a parity check.
"""
from __future__ import annotations

import copy
import functools
import time
import weakref
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from mint.harness.base import HarnessSettings
from mint.harness.genui import json_bracket_end
from mint.render import Renderer

PRECISIONS = ("fp32", "bf16", "int8", "auto")
ENGINES = ("stream", "hf")
# the kinds of answer end each harness's scorer reads (see answer_complete); others stop at EOS only
ANSWER_ENDS = {"genui": ("json", "fence"), "agent": ("json", "fence", "tool_call"), "coding": ("fence",)}
# columns of KV cache allocated ahead of the rows: a decode step writes its column into this room instead of
# copying the whole cache (DynamicCache's torch.cat, ~9% of a step at batch 16 with 150 tokens cached); 0 keeps
# HF's DynamicCache (the benchmark compares the two)
KV_ROOM = 64
# greedy fp32 evaluation of a PEFT model on a copy with its adapter merged in (no LoRA matmuls per step),
# checked against the unmerged model on the first prompts by teacher forcing (recorded as the parity)
MERGE_ADAPTER = True
PARITY_PROMPTS = 4
_CLOSERS = ("}", "]", "`", ">")
# prompt lookup: a row's draft follows the last earlier occurrence of its longest recent n-gram, n <= this
LOOKUP_NGRAM = 3
# HF logits processors that transform each row of scores alone, without reading the tokens so far
_ROW_WISE_PROCESSORS = {"TemperatureLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper", "MinPLogitsWarper"}

_precision_copies: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # model -> {precision: (state, copy)}


@dataclass
class Generation:
    outputs: list[list[str]]       # settings.samples outputs per conversation, in the caller's order
    latencies_ms: list[float]      # each conversation's time in the batch (stream: first admitted to last done)
    new_tokens: int                # tokens generated (not counting EOS or padding after a row ended)
    seconds: float                 # time inside the decode loop (or model.generate)
    precision: str                 # "fp32", "bf16" or "int8": what generated the outputs
    precision_reason: str
    parity: dict | None            # the merged adapter vs the unmerged model on the first prompts, when merged
    row_tokens: list[int] = field(default_factory=list)   # tokens generated per conversation (all its samples)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def answer_ends(harness_name: str, settings: HarnessSettings) -> tuple[str, ...]:
    """The answer ends to stop at: only where the contract asks (``decoding.stop_at_answer_end``), since
    cutting what follows a complete answer can change its score (trailing text fails a strict parse)."""
    return ANSWER_ENDS.get(harness_name, ()) if settings.stop_at_answer_end else ()


def answer_complete(text: str, kinds: tuple[str, ...]) -> bool:
    """Whether ``text`` so far is one whole answer of a kind in ``kinds``, so more tokens cannot improve it:
    a JSON value (the text starts with ``{`` or ``[``), a fenced block (starts with a fence), or
    ``<tool_call>`` blocks followed by something that does not open another. Text before the answer
    (prose first) never counts as complete: the model may still be on its way to it."""
    stripped = text.lstrip()
    if not stripped:
        return False
    if "json" in kinds and stripped[0] in "{[":
        return json_bracket_end(stripped) is not None
    if "fence" in kinds and stripped.startswith("```"):
        opened = stripped.find("\n")   # the fence's own line (```python) ends here; the block closes after it
        return opened != -1 and "```" in stripped[opened:]
    if "tool_call" in kinds and stripped.startswith("<tool_call>"):
        rest = stripped
        while rest.startswith("<tool_call>"):
            end = rest.find("</tool_call>")
            if end == -1:
                return False
            rest = rest[end + len("</tool_call>"):].lstrip()
        # another call may follow; only a character that cannot start one ends the answer
        return bool(rest) and not "<tool_call>".startswith(rest[:len("<tool_call>")])
    return False


def _closing_tokens(tokenizer) -> Callable[[int], bool]:
    """Whether a token carries a closing character: only such a token can complete an answer, so the
    (decoding) answer check runs only after one."""
    closing: dict[int, bool] = {}

    def closes(token_id: int) -> bool:
        if token_id not in closing:
            closing[token_id] = any(c in tokenizer.decode([token_id]) for c in _CLOSERS)
        return closing[token_id]

    return closes


def _answer_end_criteria(tokenizer, prompt_length: int, kinds: tuple[str, ...]):
    """A StoppingCriteria that ends each row when its answer is complete (rows end independently)."""
    import torch
    from transformers import StoppingCriteria

    closes = _closing_tokens(tokenizer)

    class AnswerEnd(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            for row in range(input_ids.shape[0]):
                if closes(int(input_ids[row, -1])):
                    text = tokenizer.decode(input_ids[row, prompt_length:], skip_special_tokens=True)
                    done[row] = answer_complete(text, kinds)
            return done

    return AnswerEnd()


def resolve_precision(requested: str, device: str = "cpu") -> tuple[str, str]:
    """(fp32, bf16 or int8, why) for a contract's ``decoding.precision`` once ``auto`` is resolved."""
    if requested == "auto":
        raise ValueError("precision auto is resolved per contract (mint.contract.precision), not per generation")
    if requested == "fp32":
        return "fp32", "fp32, as the settings ask"
    if requested == "bf16":
        return "bf16", "bf16 (a bf16 copy of the model), as the settings ask"
    if requested == "int8":
        if device.startswith("cuda"):   # torch's dynamic quantization runs on CPUs only
            return "fp32", "int8 is asked for, which mint runs on CPUs only; fp32 on a GPU"
        import torch

        engines = torch.backends.quantized.supported_engines
        if not {"x86", "fbgemm", "qnnpack"} & set(engines):
            return "fp32", f"int8 is asked for, but this torch has no quantized CPU kernels ({engines}); fp32"
        return "int8", "int8 (dynamic quantization of Linear layers), as the settings ask"
    raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {requested!r}")


def _weights_state(model) -> tuple:
    """Changes when the model's weights do (in place too: a tensor's version counter) or another adapter is
    attached or made active, so a cached copy or parity check is never stale."""
    return (str(getattr(model, "active_adapter", None)),
            tuple((id(p), p._version) for p in model.parameters()))


def precision_copy(model, precision: str):
    """A bf16, int8 or merged copy of ``model``, made once per state of its weights (the original stays
    untouched). int8: a PEFT adapter is merged into the copy first, then every Linear layer (the LM head
    too) is dynamically quantized (int8 weights, activations quantized per call). merged: an fp32 copy with
    the PEFT adapter merged into the base weights (no LoRA matmuls per step)."""
    import torch

    state = _weights_state(model)
    copies = _precision_copies.setdefault(model, {})
    if precision not in copies or copies[precision][0] != state:
        copies.pop(precision, None)   # free the stale copy before making the new one
        clone = copy.deepcopy(model)
        if precision == "bf16":
            clone = clone.to(torch.bfloat16)
        elif precision == "merged":
            clone = clone.merge_and_unload()
        else:
            if hasattr(clone, "merge_and_unload"):
                clone = clone.merge_and_unload()
            clone = torch.ao.quantization.quantize_dynamic(clone, {torch.nn.Linear}, dtype=torch.qint8)
        copies[precision] = (state, clone.eval())
    return copies[precision][1]


def generate(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
             progress: Callable[[int], None] | None = None, *, answer_end: tuple[str, ...] = (),
             engine: str = "stream", kv_cache: str | None = None,
             on_done: Callable[[int], None] | None = None) -> Generation:
    """Generate ``settings.samples`` outputs per conversation. ``answer_end`` (see ``answer_ends``) stops
    each row at the end of its answer; ``engine`` is ``stream`` (mint's decode loop) or ``hf`` (HF generate
    per batch, where ``kv_cache="static"`` preallocates the KV cache). ``progress(n)`` is told how many
    more conversations are done, ``on_done(i)`` which one."""
    if engine not in ENGINES:
        raise ValueError(f"engine: expected one of {', '.join(ENGINES)}, got {engine!r}")
    precision, reason = resolve_precision(settings.precision, str(model.device))
    parity = None
    runner = precision_copy(model, precision) if precision != "fp32" else model
    merged = (precision == "fp32" and MERGE_ADAPTER and engine == "stream" and settings.temperature == 0
              and hasattr(model, "merge_and_unload") and bool(conversations))
    if merged:
        runner = precision_copy(model, "merged")
    if progress is not None:
        on_done = _also_counting(progress, on_done)
    if engine == "stream":
        generated: dict = {}
        outputs, latencies, row_tokens, seconds = _stream(runner, tokenizer, conversations, settings, on_done,
                                                          answer_end, generated)
        if merged:
            parity = _merged_parity(model, tokenizer, conversations, generated)
            reason += "; adapter merged into a copy"
            if parity["identical"] < parity["examples"]:   # never report what the unmerged model would not say
                reason += f" disagreed on {parity['examples'] - parity['identical']} prompts: generated unmerged"
                outputs, latencies, row_tokens, seconds = _stream(model, tokenizer, conversations, settings, None,
                                                                  answer_end)
    else:
        outputs, latencies, row_tokens, seconds = _run(runner, tokenizer, conversations, settings, on_done,
                                                       answer_end, kv_cache)
    return Generation(outputs, latencies, sum(row_tokens), seconds, precision, reason, parity, row_tokens)


def _also_counting(progress: Callable[[int], None], on_done: Callable[[int], None] | None) -> Callable[[int], None]:
    def done(index: int) -> None:
        progress(1)
        if on_done:
            on_done(index)
    return done


def generate_batches(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
                     progress: Callable[[int], None] | None = None, *, answer_end: tuple[str, ...] = ()
                     ) -> tuple[list[list[str]], list[float]]:
    """``settings.samples`` outputs per conversation, and each conversation's latency in ms."""
    result = generate(model, tokenizer, conversations, settings, progress, answer_end=answer_end)
    return result.outputs, result.latencies_ms


def compare_precisions(model, tokenizer, conversations, settings: HarnessSettings, answer_end=(),
                       precision: str = "bf16") -> dict:
    """fp32 and ``precision`` greedy on the first ``PARITY_PROMPTS`` conversations: each one's tokens/s (after
    a two-token warm-up, so a first call's one-off costs are not timed) and whether their outputs are
    identical. What a contract's ``precision: auto`` is resolved from, and what the benchmark prints."""
    import dataclasses

    prompts = conversations[:PARITY_PROMPTS]
    greedy = dataclasses.replace(settings, temperature=0.0, samples=1, precision="fp32")
    warm_up = dataclasses.replace(greedy, max_new_tokens=2)
    runs = {}
    for name in ("fp32", precision):
        runner = model if name == "fp32" else precision_copy(model, name)
        _stream(runner, tokenizer, prompts[:1], warm_up, None, answer_end)
        outputs, _latencies, row_tokens, seconds = _stream(runner, tokenizer, prompts, greedy, None, answer_end)
        runs[name] = {"outputs": outputs, "new_tokens": sum(row_tokens), "seconds": round(seconds, 4),
                      "tokens_per_s": round(sum(row_tokens) / seconds, 2) if seconds > 0 else 0.0}
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


def prompt_ids(tokenizer, conversations) -> list[list[int]]:
    """Each conversation's prompt token ids: its chat template with the generation prompt."""
    return [prompt.ids for prompt in Renderer(tokenizer).prompts(conversations)]


@dataclass
class _Row:
    """One output being generated: a conversation's ``sample``-th draw."""

    conversation: int
    sample: int
    prompt: list[int]
    generator: object | None          # torch.Generator when sampling
    tokens: list[int] = field(default_factory=list)
    eos: int | None = None            # the EOS token that ended the row, if one did (not in ``tokens``)
    lookup: "_Lookup | None" = None   # greedy with prompt lookup: where its text's n-grams last occurred


class _Lookup:
    """Where each n-gram (n = 1..LOOKUP_NGRAM) of a row's text (prompt and tokens) last occurred with a token
    after it, kept as the text grows, so a draft costs a dict lookup per n, not a search of the text."""

    def __init__(self, ids: list[int]):
        self.ids: list[int] = []
        self.after: dict[tuple[int, ...], int] = {}   # n-gram -> where the text continued after it, last seen
        self.extend(ids)

    def extend(self, tokens) -> None:
        for token in tokens:
            self.ids.append(token)
            end = len(self.ids) - 1   # the n-grams ending just before the new token are now followed by it
            for n in range(1, min(LOOKUP_NGRAM, end) + 1):
                self.after[tuple(self.ids[end - n:end])] = end

    def draft(self, limit: int) -> list[int]:
        """Up to ``limit`` tokens: what followed the last earlier occurrence of the longest suffix n-gram."""
        if limit <= 0:
            return []
        for n in range(min(LOOKUP_NGRAM, len(self.ids)), 0, -1):
            start = self.after.get(tuple(self.ids[-n:]))
            if start is not None:
                return self.ids[start:start + limit]
        return []


def _logits_processors(model, settings: HarnessSettings):
    """The logits processors HF generate would apply for these settings (temperature, top-k/top-p from the
    model's generation config too), so that sampling draws from exactly HF's distribution."""
    config, _ = model._prepare_generation_config(None, do_sample=True, temperature=settings.temperature,
                                                 top_p=settings.top_p, max_new_tokens=settings.max_new_tokens)
    return model._get_logits_processor(generation_config=config, device=str(model.device))


def _eos_ids(model, tokenizer) -> set[int]:
    eos = getattr(model.generation_config, "eos_token_id", None)
    eos = eos if eos is not None else tokenizer.eos_token_id
    return set(eos) if isinstance(eos, (list, tuple)) else {eos}


def _merged_parity(model, tokenizer, conversations, generated: dict) -> dict:
    """Whether ``model`` (the unmerged PEFT model) picks, greedy, every token the merged copy generated for the
    first prompts: one forward pass over each prompt and its tokens (teacher forcing), so the check costs a
    prefill per prompt, not a second generation."""
    import torch

    checked = sorted(generated)[:PARITY_PROMPTS]
    prompts = prompt_ids(tokenizer, [conversations[i] for i in checked])
    same = []
    with torch.inference_mode():
        for prompt, index in zip(prompts, checked):
            tokens = generated[index]
            ids = torch.tensor([prompt + tokens], device=model.device)
            picked = model(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(tokens)].argmax(-1)
            same.append(picked.tolist() == tokens)
    return {"compared": "greedy merged adapter vs unmerged (teacher-forced)", "examples": len(checked),
            "identical": sum(same), "agreement": sum(same) / len(checked) if checked else 1.0,
            "mismatches": [{"prompt": i} for i, ok in zip(checked, same) if not ok]}


def _stream(model, tokenizer, conversations, settings: HarnessSettings, on_done, answer_end,
            generated: dict | None = None):
    """The whole suite as one stream of rows through a decode loop (prefill, then one token per step with a
    DynamicCache): a finished row is dropped from the batch and its cache (index_select), and waiting
    prompts (longest first) are prefilled together and join the batch in the freed slots. Each row keeps
    its own attention mask and positions, so its left padding never reaches its outputs."""
    import torch

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    eos = _eos_ids(model, tokenizer)
    sampling = settings.temperature > 0
    processors = _logits_processors(model, settings) if sampling else None
    row_wise = sampling and all(type(p).__name__ in _ROW_WISE_PROCESSORS for p in processors)
    closes = _closing_tokens(tokenizer) if answer_end else None
    lookup = settings.prompt_lookup if not sampling else 0   # a draft is checked against the greedy pick
    prompts = prompt_ids(tokenizer, conversations)
    # longest first (similar lengths are prefilled together); a conversation's samples are adjacent
    waiting = deque((c, s) for c in sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
                    for s in range(settings.samples))
    outputs = [[""] * settings.samples for _ in prompts]
    first_admitted, finished_at = [0.0] * len(prompts), [0.0] * len(prompts)
    samples_left = [settings.samples] * len(prompts)
    row_tokens = [0] * len(prompts)
    running: list[_Row] = []
    cache = mask = None
    began = time.perf_counter()

    def choose(logits, rows) -> list[int]:
        logits = logits.float()
        if not sampling:
            return logits.argmax(-1).tolist()
        if row_wise:   # these processors read no history: one call for the whole batch gives each row's own
            probs = torch.softmax(processors(None, logits), dim=-1)
        else:
            probs = torch.cat([torch.softmax(processors(torch.tensor([row.prompt + row.tokens], device=logits.device),
                                                        scores[None]), dim=-1) for row, scores in zip(rows, logits)])
        return [int(torch.multinomial(p[None], 1, generator=row.generator)) for row, p in zip(rows, probs)]

    def finished(row: _Row, token: int) -> bool:
        if token in eos:
            row.eos = token
            return True
        row.tokens.append(token)
        if row.lookup is not None:
            row.lookup.extend((token,))
        if len(row.tokens) >= settings.max_new_tokens:
            return True
        return bool(answer_end) and closes(token) and answer_complete(
            tokenizer.decode(row.tokens, skip_special_tokens=True), answer_end)

    with torch.inference_mode():
        while waiting or running:
            if waiting and len(running) < settings.batch_size:
                group = [waiting.popleft() for _ in range(min(settings.batch_size - len(running), len(waiting)))]
                now = time.perf_counter()
                rows = []
                for conversation, sample in group:
                    generator = None
                    if sampling:   # one seed per output: it does not depend on the rows beside it
                        generator = torch.Generator(device=model.device)
                        generator.manual_seed(conversation * settings.samples + sample)
                    if sample == 0:
                        first_admitted[conversation] = now
                    rows.append(_Row(conversation, sample, prompts[conversation], generator,
                                     lookup=_Lookup(prompts[conversation]) if lookup else None))
                logits, group_cache, group_mask = _prefill(model, [r.prompt for r in rows], pad)
                cache, mask = _join(cache, mask, group_cache, group_mask)
                running += rows
                new_tokens = choose(logits, rows)
                done = [finished(row, token) for row, token in zip(rows, new_tokens)]
                done = [False] * (len(running) - len(rows)) + done
            else:
                # drafts fill only the rows that finished sequences left: rows x (1 + draft) <= batch_size
                per_row = min(lookup, settings.batch_size // len(running) - 1) if lookup else 0
                drafts = [row.lookup.draft(min(per_row, settings.max_new_tokens - len(row.tokens) - 1))
                          for row in running] if per_row > 0 else []
                width = 1 + max(map(len, drafts), default=0)
                fed = torch.tensor([[row.tokens[-1], *draft, *[pad] * (width - 1 - len(draft))]
                                    for row, draft in zip(running, drafts or [[]] * len(running))],
                                   device=model.device)
                start = [len(row.prompt) + len(row.tokens) - 1 for row in running]
                positions = torch.tensor([[p + j for j in range(width)] for p in start], device=model.device)
                mask = torch.cat([mask, mask.new_ones((len(running), width))], dim=1)
                out = model(input_ids=fed, attention_mask=mask, position_ids=positions, cache=cache, use_cache=True)
                if width == 1:
                    done = [finished(row, token) for row, token in zip(running, choose(out.logits[:, -1], running))]
                else:
                    done = [_take_checked(row, draft, picks, finished, mask, index, width)
                            for index, (row, draft, picks) in
                            enumerate(zip(running, drafts, out.logits.float().argmax(-1).tolist()))]
            if any(done):
                now = time.perf_counter()
                for row in (r for r, d in zip(running, done) if d):
                    if generated is not None and row.sample == 0:   # the tokens the unmerged model must pick
                        generated[row.conversation] = row.tokens + ([row.eos] if row.eos is not None else [])
                    row_tokens[row.conversation] += len(row.tokens)
                    outputs[row.conversation][row.sample] = tokenizer.decode(row.tokens,
                                                                             skip_special_tokens=True).strip()
                    samples_left[row.conversation] -= 1
                    if samples_left[row.conversation] == 0:
                        finished_at[row.conversation] = now
                        if on_done:
                            on_done(row.conversation)
                keep = [i for i, d in enumerate(done) if not d]
                running = [running[i] for i in keep]
                cache, mask = _select(cache, mask, keep)
    seconds = time.perf_counter() - began
    latencies = [(end - start) * 1000 for start, end in zip(first_admitted, finished_at)]
    return outputs, latencies, row_tokens, seconds


def _take_checked(row: _Row, draft: list[int], picks: list[int], finished, mask, index: int, width: int) -> bool:
    """Take a row's greedy picks after one step over its last token and ``draft``: ``picks[j]`` is the
    model's choice after column j, so it counts while every drafted token before it was the one picked. The
    columns of drafted tokens not taken are masked out for good (the cache keeps them, no step reads them).
    Whether the row finished."""
    taken = 0
    for token in picks:
        taken += 1
        if finished(row, token):
            return True
        if taken > len(draft) or draft[taken - 1] != token:
            break
    if taken < width:
        mask[index, mask.shape[1] - width + taken:] = 0
    return False


def _prefill(model, prompts: list[list[int]], pad: int):
    """Last-position logits, cache and attention mask of left-padded ``prompts`` (positions as HF generate
    gives them: counted over real tokens only)."""
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts], device=model.device)
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=model.device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    out = model(input_ids=ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    return out.logits[:, -1], _with_room(out.cache), mask


def _with_room(cache):
    """``cache`` with each plain DynamicLayer (full attention; sliding-window layers are left as they are)
    replaced by one that holds its keys and values in a buffer with ``KV_ROOM`` free columns."""
    from transformers.cache_utils import DynamicLayer

    if KV_ROOM > 0:
        cache.layers = [_roomy_layer_class().around(layer.keys, layer.values) if type(layer) is DynamicLayer else layer
                        for layer in cache.layers]
    return cache


@functools.lru_cache(maxsize=None)
def _roomy_layer_class():
    from transformers.cache_utils import DynamicLayer

    class RoomyLayer(DynamicLayer):
        """A DynamicLayer whose ``keys``/``values`` are views of the first ``length`` columns of a larger buffer:
        an update writes the new columns in place (no copy of the cache) and only a full buffer is copied into
        a new one with ``KV_ROOM`` more columns. The attention reads the same values as with torch.cat."""

        @classmethod
        def around(cls, keys, values):
            layer = cls()
            layer.device, layer.is_initialized = keys.device, True
            layer._fill(keys, values)
            return layer

        def _fill(self, keys, values, needed: int = 0):
            batch, heads, length, width = keys.shape
            room = max(KV_ROOM, needed)
            self.key_buffer = keys.new_empty((batch, heads, length + room, width))
            self.value_buffer = values.new_empty((batch, heads, length + room, values.shape[-1]))
            self.key_buffer[:, :, :length] = keys
            self.value_buffer[:, :, :length] = values
            self._expose(length)

        def _expose(self, length: int):
            self.length = length
            self.keys = self.key_buffer[:, :, :length]
            self.values = self.value_buffer[:, :, :length]

        def update(self, key_states, value_states, *args, **kwargs):
            new = key_states.shape[-2]
            if self.length + new > self.key_buffer.shape[-2]:
                self._fill(self.keys, self.values, new)
            self.key_buffer[:, :, self.length:self.length + new] = key_states
            self.value_buffer[:, :, self.length:self.length + new] = value_states
            self._expose(self.length + new)
            return self.keys, self.values

    return RoomyLayer


def _join(cache, mask, new_cache, new_mask):
    """The running batch's cache and mask with a newly prefilled group appended (rows below), the shorter
    side left-padded with masked zeros so both have one length."""
    import torch

    if cache is None:
        return new_cache, new_mask
    width = max(mask.shape[1], new_mask.shape[1])

    def widen(tensor, dim):   # left-pad along ``dim`` to ``width``
        missing = width - tensor.shape[dim]
        if missing == 0:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = missing
        return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)

    for layer, new_layer in zip(cache.layers, new_cache.layers):
        _replace(layer, torch.cat([widen(layer.keys, 2), widen(new_layer.keys, 2)]),
                 torch.cat([widen(layer.values, 2), widen(new_layer.values, 2)]))
    return cache, torch.cat([widen(mask, 1), widen(new_mask, 1)])


def _replace(layer, keys, values) -> None:
    """Give a cache layer new keys and values (into a fresh buffer with room, for a roomy layer)."""
    if hasattr(layer, "key_buffer"):
        layer._fill(keys, values)
    else:
        layer.keys, layer.values = keys, values


def _select(cache, mask, keep: list[int]):
    """Only the rows ``keep`` of the cache and mask, without the columns masked in every remaining row (left
    padding, drafts no row took): masked keys change no output, and cost a step its time."""
    import torch

    if not keep:
        return None, None
    index = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, index)
    columns = mask.any(0)
    if bool(columns.all()):
        for layer in cache.layers:
            _replace(layer, layer.keys.index_select(0, index), layer.values.index_select(0, index))
        return cache, mask
    columns = columns.nonzero().squeeze(1)
    for layer in cache.layers:
        _replace(layer, layer.keys.index_select(0, index).index_select(2, columns),
                 layer.values.index_select(0, index).index_select(2, columns))
    return cache, mask.index_select(1, columns)


def _run(model, tokenizer, conversations, settings: HarnessSettings, on_done, answer_end, kv_cache):
    import torch
    from transformers import StoppingCriteriaList

    tokenizer.padding_side = "left"   # decoder-only: new tokens must follow every prompt directly
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    sampling = settings.temperature > 0
    options = dict(max_new_tokens=settings.max_new_tokens, do_sample=sampling,
                   num_return_sequences=settings.samples, pad_token_id=tokenizer.pad_token_id)
    if kv_cache:
        options["cache_implementation"] = kv_cache
    if sampling:
        options.update(temperature=settings.temperature, top_p=settings.top_p)
        torch.manual_seed(0)
    prompts = Renderer(tokenizer).prompts(conversations)
    texts, lengths = [p.text for p in prompts], [len(p.ids) for p in prompts]
    # longest first: similar lengths share a batch (less padding), and the largest batch comes first
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    outputs: list[list[str] | None] = [None] * len(texts)
    latencies: list[float] = [0.0] * len(texts)
    row_tokens, seconds = [0] * len(texts), 0.0
    for start in range(0, len(order), settings.batch_size):
        batch = order[start:start + settings.batch_size]
        encoded = tokenizer([texts[i] for i in batch], return_tensors="pt", padding=True, add_special_tokens=False)
        encoded = encoded.to(model.device)
        prompt_length = encoded["input_ids"].shape[1]
        stopping = StoppingCriteriaList([_answer_end_criteria(tokenizer, prompt_length, answer_end)] if answer_end
                                        else [])
        began = time.perf_counter()
        with torch.inference_mode():
            generated = model.generate(**encoded, **options, stopping_criteria=stopping)
        elapsed = time.perf_counter() - began
        seconds += elapsed
        new = generated[:, prompt_length:]
        counts = (new != tokenizer.pad_token_id).sum(-1).tolist()
        decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
        for position, index in enumerate(batch):
            outputs[index] = [t.strip() for t in decoded[position * settings.samples:(position + 1) * settings.samples]]
            row_tokens[index] = int(sum(counts[position * settings.samples:(position + 1) * settings.samples]))
            latencies[index] = elapsed * 1000
            if on_done:
                on_done(index)
    return outputs, latencies, row_tokens, seconds
