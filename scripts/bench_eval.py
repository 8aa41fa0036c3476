"""Batched contract evaluation against one-example-at-a-time generation, on the same suite and model.

Run: make bench   (or: python scripts/bench_eval.py [--base smollm2-135m] [--examples 16] [--batch 16])

Both runs generate the same greedy outputs for the same prompts (the genui held-out suite);
only the batch size differs. Goal (issue #4): batched at least 4x faster.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

from mint.base import load_base
from mint.harness import HarnessSettings, harness_for
from mint.mol.generate import generate_batches

ROOT = Path(__file__).resolve().parent.parent
GOAL = 4.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--examples", type=int, default=16)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=48)
    args = parser.parse_args()

    records = [json.loads(line) for line in open(ROOT / "examples/heldout/genui.jsonl")]
    records = (records * (args.examples // len(records) + 1))[:args.examples]
    settings = HarnessSettings(max_new_tokens=args.max_new_tokens, batch_size=args.batch)
    harness = harness_for("genui", settings)
    conversations = [harness.messages(r) for r in records]
    loaded = load_base(args.base)

    generate_batches(loaded.model, loaded.tokenizer, conversations[:2], dataclasses.replace(settings, batch_size=2))
    began = time.perf_counter()
    batched, _ = generate_batches(loaded.model, loaded.tokenizer, conversations, settings)
    batched_s = time.perf_counter() - began
    began = time.perf_counter()
    single, _ = generate_batches(loaded.model, loaded.tokenizer, conversations,
                                 dataclasses.replace(settings, batch_size=1))
    single_s = time.perf_counter() - began

    same = sum(a == b for a, b in zip(batched, single))
    ratio = single_s / batched_s
    print(f"base {args.base}, {len(conversations)} genui prompts, greedy, max_new_tokens {args.max_new_tokens}")
    print(f"{'mode':<22} {'seconds':>8} {'examples/s':>11}")
    print(f"{'one at a time':<22} {single_s:>8.2f} {len(conversations) / single_s:>11.2f}")
    print(f"{f'batched ({args.batch})':<22} {batched_s:>8.2f} {len(conversations) / batched_s:>11.2f}")
    print(f"\nspeed-up: {ratio:.2f}x (goal >= {GOAL:g}x): {'MET' if ratio >= GOAL else 'MISSED'}")
    print(f"identical outputs: {same}/{len(conversations)} (left padding can change a greedy tie in float32)")


if __name__ == "__main__":
    main()
