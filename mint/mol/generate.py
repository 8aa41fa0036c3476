"""Batched generation: left-padded batches, one adapter (or none) for the whole batch."""
from __future__ import annotations

import time
from typing import Callable

from mint.harness.base import HarnessSettings


def generate_batches(model, tokenizer, conversations: list[list[dict]], settings: HarnessSettings,
                     progress: Callable[[int], None] | None = None) -> tuple[list[list[str]], list[float]]:
    """``settings.samples`` outputs per conversation, and each conversation's latency in ms (its batch's time)."""
    import torch

    tokenizer.padding_side = "left"   # decoder-only: new tokens must follow every prompt directly
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    sampling = settings.temperature > 0
    options = dict(max_new_tokens=settings.max_new_tokens, do_sample=sampling,
                   num_return_sequences=settings.samples, pad_token_id=tokenizer.pad_token_id)
    if sampling:
        options.update(temperature=settings.temperature, top_p=settings.top_p)
        torch.manual_seed(0)
    outputs: list[list[str]] = []
    latencies: list[float] = []
    for start in range(0, len(conversations), settings.batch_size):
        batch = conversations[start:start + settings.batch_size]
        texts = [tokenizer.apply_chat_template(c, add_generation_prompt=True, tokenize=False) for c in batch]
        encoded = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        began = time.perf_counter()
        with torch.inference_mode():
            generated = model.generate(**encoded, **options)
        elapsed_ms = (time.perf_counter() - began) * 1000
        new = generated[:, encoded["input_ids"].shape[1]:]
        texts_out = tokenizer.batch_decode(new, skip_special_tokens=True)
        for i in range(len(batch)):
            outputs.append([t.strip() for t in texts_out[i * settings.samples:(i + 1) * settings.samples]])
            latencies.append(elapsed_ms)
        if progress:
            progress(len(batch))
    return outputs, latencies
