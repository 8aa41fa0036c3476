"""Contract-evaluation generation: batched against one at a time, and today's settings against the fast path.

Run: make bench   (or: python scripts/bench_eval.py [--base smollm2-135m] [--examples 32] [--repeats 3])
Smoke run: python scripts/bench_eval.py --quick   (tiny-random, 4 prompts, 1 run per mode)

The prompts are the GenUI contract's held-out suite under its harness (contracts/genui.yaml), greedy.
Modes, each timed on the same model in one process, alternated (A B C ... A B C ...) after one warm-up each:
  today            fp32, batch 16, runs every row to max_new_tokens (what evaluation did before)
  fast batched     precision auto (bf16 where the CPU has it natively), stop_at_answer_end, batch 16
  fast one-by-one  the same, batch 1
  fast static KV   fast batched with a static KV cache (kept out of mint's default unless it pays off here)
Goals (issue 14): fast batched >= 8x fast one-by-one; evaluation tokens/s >= 2x today's.
torch.compile is not measured: compiling takes longer than a whole demo evaluation (12 prompts) on a CPU.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BATCH_GOAL, TOKENS_GOAL = 8.0, 2.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the contract's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny-random, 4 prompts, 1 run per mode")
    args = parser.parse_args()
    if args.quick:
        args.base, args.examples, args.batch, args.repeats = "tiny-random", 4, 4, 1
        args.max_new_tokens = args.max_new_tokens or 16

    from mint.base import load_base
    from mint.contract.schema import load_contract, read_suite
    from mint.hardware import detect
    from mint.mol.generate import answer_ends, generate

    contract = load_contract(ROOT / "contracts/genui.yaml")
    records = read_suite(contract, contract.suites[0], None)
    records = (records * (args.examples // len(records) + 1))[:args.examples]
    harness = contract.harness()
    conversations = [harness.messages(r) for r in records]
    settings = dataclasses.replace(contract.settings, batch_size=args.batch,
                                   max_new_tokens=args.max_new_tokens or contract.settings.max_new_tokens)
    loaded = load_base(args.base)
    hardware = detect()
    fast = dataclasses.replace(settings, precision="auto", stop_at_answer_end=True)
    stop = answer_ends(contract.harness_name, fast)
    modes = {
        "today": lambda: generate(loaded.model, loaded.tokenizer, conversations,
                                  dataclasses.replace(settings, precision="fp32")),
        "fast batched": lambda: generate(loaded.model, loaded.tokenizer, conversations, fast, answer_end=stop),
        "fast one-by-one": lambda: generate(loaded.model, loaded.tokenizer, conversations,
                                            dataclasses.replace(fast, batch_size=1), answer_end=stop),
        "fast static KV": lambda: generate(loaded.model, loaded.tokenizer, conversations, fast, answer_end=stop,
                                           kv_cache="static"),
    }
    if not args.quick:
        for name, mode in modes.items():
            print(f"  warm-up: {name}", file=sys.stderr)
            mode()
    results: dict[str, list] = {name: [] for name in modes}
    for round_number in range(args.repeats):
        for name, mode in modes.items():
            print(f"  round {round_number + 1}/{args.repeats}: {name}", file=sys.stderr)
            began = time.perf_counter()
            generation = mode()
            results[name].append((time.perf_counter() - began, generation))

    print(f"hardware: {hardware.device} {hardware.device_name}, {hardware.cores} cores, "
          f"flags {', '.join(hardware.cpu_flags) or '-'}; bf16: {hardware.bf16} ({hardware.bf16_reason})")
    print(f"base {args.base}, {len(conversations)} genui prompts, greedy, max_new_tokens {settings.max_new_tokens}, "
          f"batch {args.batch}; {args.repeats} alternated runs per mode{'' if args.quick else ' after a warm-up'}")
    print(f"\n{'mode':<16} {'precision':>9} {'seconds min/median':>19} {'tokens':>7} {'tokens/s med':>12} "
          f"{'examples/s med':>14}")
    median_s, median_tps = {}, {}
    for name, runs in results.items():
        seconds = [s for s, _ in runs]
        tps = [g.tokens_per_s for _, g in runs]
        median_s[name], median_tps[name] = statistics.median(seconds), statistics.median(tps)
        generation = runs[0][1]
        print(f"{name:<16} {generation.precision:>9} {min(seconds):>9.2f}/{median_s[name]:<9.2f} "
              f"{generation.new_tokens:>7} {median_tps[name]:>12.1f} {len(conversations) / median_s[name]:>14.2f}")
    batching = median_s["fast one-by-one"] / median_s["fast batched"]
    speed = median_tps["fast batched"] / median_tps["today"]
    static = median_s["fast batched"] / median_s["fast static KV"]
    print(f"\nbatched / one-by-one (fast path): {batching:.2f}x (goal >= {BATCH_GOAL:g}x): "
          f"{'MET' if batching >= BATCH_GOAL else 'MISSED'}")
    print(f"tokens/s, fast batched / today: {speed:.2f}x (goal >= {TOKENS_GOAL:g}x): "
          f"{'MET' if speed >= TOKENS_GOAL else 'MISSED'}")
    print(f"examples/s, fast batched / today: {median_s['today'] / median_s['fast batched']:.2f}x")
    print(f"static KV cache vs dynamic: {static:.2f}x ({'pays off' if static > 1.05 else 'does not pay off'} here)")
    fast_run = results["fast batched"][0][1]
    print(f"precision: {fast_run.precision} ({fast_run.precision_reason})")
    if fast_run.parity:
        print(f"bf16/fp32 parity: {json.dumps({k: v for k, v in fast_run.parity.items() if k != 'mismatches'})}")
    today = results["today"][0][1].outputs
    same = sum(a == b for a, b in zip(today, fast_run.outputs))
    prefix = sum(a[0].startswith(b[0]) for a, b in zip(today, fast_run.outputs))
    print(f"outputs: {same}/{len(today)} identical to today's, {prefix}/{len(today)} are today's cut at the "
          f"answer's end or identical")


if __name__ == "__main__":
    main()
