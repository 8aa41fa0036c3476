"""Batched generation: left-padded batches of similar length, one adapter (or none) for the whole batch.

Three things make contract evaluation faster; the last two are a contract's choice (its decoding block),
because they can change what it measures:

- prompts are batched by length (less left padding), and outputs come back in the caller's order;
- ``decoding: {stop_at_answer_end: true}`` ends each row once its answer is complete (a JSON value, a
  closed code fence, closed ``<tool_call>`` blocks, by harness) instead of running to ``max_new_tokens``;
- ``decoding: {precision: bf16 | auto}`` generates with a bf16 copy of the model, and a greedy parity
  check against fp32 on the first prompts is returned with the outputs (``auto`` keeps fp32 when the
  hardware has no native bf16 or the check disagrees).
"""
from __future__ import annotations

import copy
import time
import weakref
from dataclasses import dataclass
from typing import Callable

from mint.harness.base import HarnessSettings

PRECISIONS = ("fp32", "bf16", "auto")
# the kinds of answer end each harness's scorer reads (see answer_complete); others stop at EOS only
ANSWER_ENDS = {"genui": ("json", "fence"), "agent": ("json", "fence", "tool_call"), "coding": ("fence",)}
PARITY_PROMPTS = 4
PARITY_MIN_AGREEMENT = 0.75   # auto keeps bf16 only if at least this share of greedy outputs match fp32
_CLOSERS = ("}", "]", "`", ">")

_bf16_models: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_parity_checks: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


@dataclass
class Generation:
    outputs: list[list[str]]       # settings.samples outputs per conversation, in the caller's order
    latencies_ms: list[float]      # each conversation's batch time
    new_tokens: int                # tokens generated (not counting padding after a row ended)
    seconds: float                 # time inside model.generate
    precision: str                 # "fp32" or "bf16": what generated the outputs
    precision_reason: str
    parity: dict | None            # bf16 vs fp32 greedy outputs on the first prompts, when bf16 was considered

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
        return _json_value_end(stripped) is not None
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


def _json_value_end(text: str) -> int | None:
    """Index just past the JSON object or array that opens ``text``, when its brackets close."""
    depth, in_string, escaped = 0, False, False
    for index, char in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return index + 1
    return None


def _answer_end_criteria(tokenizer, prompt_length: int, kinds: tuple[str, ...]):
    """A StoppingCriteria that ends each row when its answer is complete (rows end independently)."""
    import torch
    from transformers import StoppingCriteria

    closing: dict[int, bool] = {}

    def closes(token_id: int) -> bool:   # only a token with a closing character can complete an answer
        if token_id not in closing:
            closing[token_id] = any(c in tokenizer.decode([token_id]) for c in _CLOSERS)
        return closing[token_id]

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
    """(fp32 or bf16, why) for a contract's ``decoding.precision``."""
    if requested == "fp32":
        return "fp32", "the contract asks for fp32"
    if requested == "bf16":
        return "bf16", "the contract asks for bf16"
    from mint.hardware import detect

    found = detect(cuda=device.startswith("cuda"))
    return ("bf16" if found.bf16 else "fp32"), f"auto: {found.bf16_reason}"


def _weights_state(model) -> tuple:
    """Changes when the model's weights do (in place too: a tensor's version counter) or another adapter is
    attached or made active, so a cached bf16 copy or parity check is never stale."""
    return (str(getattr(model, "active_adapter", None)),
            tuple((id(p), p._version) for p in model.parameters()))


def bf16_copy(model):
    """A bf16 copy of ``model``, made once per state of its weights (the fp32 original stays untouched)."""
    import torch

    state = _weights_state(model)
    cached = _bf16_models.get(model)
    if cached is None or cached[0] != state:
        _bf16_models[model] = (state, copy.deepcopy(model).to(torch.bfloat16).eval())
    return _bf16_models[model][1]


def generate(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
             progress: Callable[[int], None] | None = None, *, answer_end: tuple[str, ...] = (),
             kv_cache: str | None = None) -> Generation:
    """Generate ``settings.samples`` outputs per conversation. ``answer_end`` (see ``answer_ends``) stops
    each row at the end of its answer; ``kv_cache="static"`` preallocates the KV cache."""
    precision, reason = resolve_precision(settings.precision, str(model.device))
    parity = None
    if precision == "bf16" and conversations:
        parity = _parity(model, tokenizer, conversations, settings, answer_end)
        if settings.precision == "auto" and parity["agreement"] < PARITY_MIN_AGREEMENT:
            precision, reason = "fp32", (f"auto: bf16 greedy outputs matched fp32 on {parity['identical']}/"
                                         f"{parity['examples']} prompts (< {PARITY_MIN_AGREEMENT:.0%})")
    runner = bf16_copy(model) if precision == "bf16" else model
    outputs, latencies, tokens, seconds = _run(runner, tokenizer, conversations, settings, progress, answer_end,
                                               kv_cache)
    return Generation(outputs, latencies, tokens, seconds, precision, reason, parity)


def generate_batches(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
                     progress: Callable[[int], None] | None = None, *, answer_end: tuple[str, ...] = ()
                     ) -> tuple[list[list[str]], list[float]]:
    """``settings.samples`` outputs per conversation, and each conversation's latency in ms (its batch's time)."""
    result = generate(model, tokenizer, conversations, settings, progress, answer_end=answer_end)
    return result.outputs, result.latencies_ms


def _parity(model, tokenizer, conversations, settings: HarnessSettings, answer_end) -> dict:
    """Greedy fp32 and bf16 outputs on the first prompts, compared (once per model: the check's cost is
    paid by the first suite of an evaluation)."""
    import dataclasses

    state = _weights_state(model)
    if model in _parity_checks and _parity_checks[model][0] == state:
        return _parity_checks[model][1]
    prompts = conversations[:PARITY_PROMPTS]
    greedy = dataclasses.replace(settings, temperature=0.0, samples=1)
    reference, _, _, _ = _run(model, tokenizer, prompts, greedy, None, answer_end, None)
    candidate, _, _, _ = _run(bf16_copy(model), tokenizer, prompts, greedy, None, answer_end, None)
    same = [a[0] == b[0] for a, b in zip(reference, candidate)]
    record = {"compared": "greedy bf16 vs fp32", "examples": len(prompts), "identical": sum(same),
              "agreement": sum(same) / len(prompts),
              "mismatches": [{"prompt": i, "fp32": reference[i][0][:300], "bf16": candidate[i][0][:300]}
                             for i, ok in enumerate(same) if not ok]}
    _parity_checks[model] = (state, record)
    return record


def _run(model, tokenizer, conversations, settings: HarnessSettings, progress, answer_end, kv_cache):
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
    texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in conversations]
    lengths = [len(ids) for ids in tokenizer(texts, add_special_tokens=False)["input_ids"]] if texts else []
    # longest first: similar lengths share a batch (less padding), and the largest batch comes first
    order = sorted(range(len(texts)), key=lambda i: -lengths[i])
    outputs: list[list[str] | None] = [None] * len(texts)
    latencies: list[float] = [0.0] * len(texts)
    tokens, seconds = 0, 0.0
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
        tokens += int((new != tokenizer.pad_token_id).sum())
        decoded = tokenizer.batch_decode(new, skip_special_tokens=True)
        for position, index in enumerate(batch):
            outputs[index] = [t.strip() for t in decoded[position * settings.samples:(position + 1) * settings.samples]]
            latencies[index] = elapsed * 1000
        if progress:
            progress(len(batch))
    return outputs, latencies, tokens, seconds
