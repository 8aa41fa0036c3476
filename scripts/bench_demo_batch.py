"""Agent-contract evaluation in the demo: decoding batch 8 against batch 16, side by side.

Run: python scripts/bench_demo_batch.py [--base smollm2-135m] [--examples 12] [--repeats 3]
Smoke run: python scripts/bench_demo_batch.py --quick   (tiny-random, 4 prompts, 16 tokens, 1 run per mode)

The prompts are contracts/agent.yaml's core suite (the demo evaluates its first 12) under the contract's
harness and decoding (greedy, each answer ends where it is complete), on the bare base: generation 0 is the
evaluation that runs longest, since the base rarely ends an answer before max_new_tokens. Modes are
alternated (8 16 8 16 ...) on one loaded model after one warm-up each. Checks that batch 16 returns the
same outputs and says how much faster it is.
"""
from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--examples", type=int, default=12)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the contract's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny-random, 4 prompts, 1 run per mode")
    args = parser.parse_args()
    if args.quick:
        args.base, args.examples, args.repeats = "tiny-random", 4, 1
        args.max_new_tokens = args.max_new_tokens or 16

    from mint.base import load_base
    from mint.contract.schema import load_contract, read_suite
    from mint.generation.engine import generate
    from mint.harness import answer_ends

    contract = load_contract(ROOT / "contracts/agent.yaml")
    records = read_suite(contract, contract.suites[0], args.examples)
    harness = contract.harness()
    conversations = [harness.messages(r) for r in records]
    settings = dataclasses.replace(contract.settings,
                                   max_new_tokens=args.max_new_tokens or contract.settings.max_new_tokens)
    stop = answer_ends(contract.harness_name, settings)
    loaded = load_base(args.base)
    modes = {size: (lambda size=size: generate(loaded.model, loaded.tokenizer, conversations,
                                               dataclasses.replace(settings, batch_size=size), answer_end=stop))
             for size in (8, 16)}
    if not args.quick:
        for size, mode in modes.items():
            print(f"  warm-up: batch {size}", file=sys.stderr)
            mode()
    runs: dict[int, list] = {size: [] for size in modes}
    for round_number in range(args.repeats):
        for size, mode in modes.items():
            print(f"  round {round_number + 1}/{args.repeats}: batch {size}", file=sys.stderr)
            began = time.perf_counter()
            generation = mode()
            runs[size].append((time.perf_counter() - began, generation))

    print(f"base {args.base}, {len(conversations)} agent prompts, greedy, max_new_tokens {settings.max_new_tokens}; "
          f"{args.repeats} alternated runs per batch size{'' if args.quick else ' after a warm-up'}")
    median = {}
    for size, results in runs.items():
        seconds = [s for s, _ in results]
        median[size] = statistics.median(seconds)
        print(f"batch {size:>2}: seconds min {min(seconds):.2f} median {median[size]:.2f}, "
              f"{results[0][1].new_tokens} new tokens")
    same = sum(a == b for a, b in zip(runs[8][0][1].outputs, runs[16][0][1].outputs))
    print(f"batch 16 / batch 8 time: {median[16] / median[8]:.2f} (below 1 is faster); "
          f"outputs identical: {same}/{len(conversations)}")


if __name__ == "__main__":
    main()
