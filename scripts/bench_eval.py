"""Contract-evaluation generation: the old path against the new one, batched against one at a time.

Run: make bench   (or: python scripts/bench_eval.py [--base smollm2-135m] [--examples 32] [--repeats 3])
Smoke run: python scripts/bench_eval.py --quick   (tiny-random, 6 prompts, 1 run per mode, no warm-up)

The prompts are the GenUI contract's held-out suite under its harness (contracts/genui.yaml), greedy. Every
mode runs on the same model and prompts in one process, alternated (A B C ... A B C ...) after a warm-up:
  today            the old path: HF generate on length-sorted batches of 16, fp32, every row to max_new_tokens
  hf + answer end  the old path with stop_at_answer_end (finished rows still ride until their batch ends)
  hf + static KV   the same with HF's static KV cache
  stream           the new path: mint's decode loop, batch 16, finished rows leave and waiting prompts take
                   their slots, stop_at_answer_end, fp32 (outputs identical to hf + answer end)
  stream int8      the same with precision int8 (dynamic quantization; parity vs fp32 printed)
  stream 1-by-1    the new path with batch 1 (one prompt at a time)
Goals (issue 14): stream >= 8x stream 1-by-1 (wall time, same suite); stream tokens/s >= 2x today's.
On a machine shared with other work, read the cpu-time ratios (this process's CPU seconds; run with
--threads 1 --no-warm-up): wall times there measure the neighbours.
torch.compile is not measured: compiling takes longer than a whole demo evaluation (12 prompts) on a CPU,
and the stream's batch shape changes every few steps (each new shape recompiles).
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
# name: (engine, settings changed from the old path's, kv_cache)
MODES = {
    "today": ("hf", {}, None),
    "hf + answer end": ("hf", {"stop_at_answer_end": True}, None),
    "hf + static KV": ("hf", {"stop_at_answer_end": True}, "static"),
    "stream": ("stream", {"stop_at_answer_end": True}, None),
    "stream int8": ("stream", {"stop_at_answer_end": True, "precision": "int8"}, None),
    "stream 1-by-1": ("stream", {"stop_at_answer_end": True, "batch_size": 1}, None),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--examples", type=int, default=32)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the contract's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--modes", default=",".join(MODES), help=f"comma-separated, of: {', '.join(MODES)}")
    parser.add_argument("--no-warm-up", action="store_true", help="time from the first run (a contended machine)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny-random, 6 prompts, 1 run per mode")
    args = parser.parse_args()
    if args.quick:
        args.base, args.examples, args.batch, args.repeats = "tiny-random", 6, 4, 1
        args.max_new_tokens = args.max_new_tokens or 16
    chosen = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        sys.exit(f"error: --modes: unknown mode {unknown[0]!r} (modes: {', '.join(MODES)})")

    import torch

    from mint.base import load_base
    from mint.contract.schema import load_contract, read_suite
    from mint.hardware import detect
    from mint.mol.generate import answer_ends, generate

    if args.threads:
        torch.set_num_threads(args.threads)
    contract = load_contract(ROOT / "contracts/genui.yaml")
    records = read_suite(contract, contract.suites[0], None)
    records = (records * (args.examples // len(records) + 1))[:args.examples]
    harness = contract.harness()
    conversations = [harness.messages(r) for r in records]
    today = dataclasses.replace(contract.settings, batch_size=args.batch, precision="fp32", stop_at_answer_end=False,
                                max_new_tokens=args.max_new_tokens or contract.settings.max_new_tokens)
    loaded = load_base(args.base)
    hardware = detect()

    def run(name):
        engine, changes, kv_cache = MODES[name]
        settings = dataclasses.replace(today, **changes)
        return generate(loaded.model, loaded.tokenizer, conversations, settings, engine=engine, kv_cache=kv_cache,
                        answer_end=answer_ends(contract.harness_name, settings))

    warm_up = not (args.quick or args.no_warm_up)
    if warm_up:
        for name in chosen:
            print(f"  warm-up: {name}", file=sys.stderr)
            run(name)
    results: dict[str, list] = {name: [] for name in chosen}
    # this process's CPU time: on a machine shared with other work it tracks quiet wall time better than
    # wall time does (with --threads 1 most closely)
    cpu_seconds: dict[str, list[float]] = {name: [] for name in chosen}
    for round_number in range(args.repeats):
        for name in chosen:
            print(f"  round {round_number + 1}/{args.repeats}: {name}", file=sys.stderr)
            began, began_cpu = time.perf_counter(), time.process_time()
            generation = run(name)
            results[name].append((time.perf_counter() - began, generation))
            cpu_seconds[name].append(time.process_time() - began_cpu)

    print(f"hardware: {hardware.device} {hardware.device_name}, {hardware.cores} cores, torch threads "
          f"{torch.get_num_threads()}, flags {', '.join(hardware.cpu_flags) or '-'}; bf16: {hardware.bf16} "
          f"({hardware.bf16_reason})")
    print(f"base {args.base}, {len(conversations)} genui prompts, greedy, max_new_tokens {today.max_new_tokens}, "
          f"batch {args.batch}; {args.repeats} alternated runs per mode{' after a warm-up' if warm_up else ', no warm-up'}")
    print(f"\n{'mode':<16} {'precision':>9} {'seconds min/median':>19} {'cpu s median':>12} {'tokens':>7} "
          f"{'tokens/s min/median':>20}")
    median_s, median_tps, median_cpu = {}, {}, {}
    for name, runs in results.items():
        seconds = [s for s, _ in runs]
        tps = [g.tokens_per_s for _, g in runs]
        median_s[name], median_tps[name] = statistics.median(seconds), statistics.median(tps)
        generation = runs[0][1]
        median_cpu[name] = statistics.median(cpu_seconds[name])
        print(f"{name:<16} {generation.precision:>9} {min(seconds):>9.2f}/{median_s[name]:<9.2f} "
              f"{median_cpu[name]:>12.2f} {generation.new_tokens:>7} {min(tps):>9.1f}/{median_tps[name]:<10.1f}")

    def ratio(label, value, goal=None):
        verdict = f" (goal >= {goal:g}x: {'MET' if value >= goal else 'MISSED'})" if goal else ""
        print(f"{label}: {value:.2f}x{verdict}")

    print()
    if {"stream", "stream 1-by-1"} <= results.keys():
        ratio("batched / one-by-one, wall time (stream / stream 1-by-1)",
              median_s["stream 1-by-1"] / median_s["stream"], BATCH_GOAL)
    if {"stream", "today"} <= results.keys():
        ratio("tokens/s, stream / today", median_tps["stream"] / median_tps["today"], TOKENS_GOAL)
        ratio("wall time, today / stream", median_s["today"] / median_s["stream"])
    if {"stream int8", "today"} <= results.keys():
        ratio("tokens/s, stream int8 / today", median_tps["stream int8"] / median_tps["today"], TOKENS_GOAL)
        ratio("wall time, today / stream int8", median_s["today"] / median_s["stream int8"])
    if {"stream", "stream 1-by-1", "today"} <= results.keys():
        ratio("cpu time: stream 1-by-1 / stream", median_cpu["stream 1-by-1"] / median_cpu["stream"], BATCH_GOAL)
        ratio("cpu time per token: today / stream", median_cpu["today"] / results["today"][0][1].new_tokens
              / (median_cpu["stream"] / results["stream"][0][1].new_tokens), TOKENS_GOAL)
    if {"stream", "hf + answer end"} <= results.keys():
        ratio("dropping finished rows, wall time (hf + answer end / stream)",
              median_s["hf + answer end"] / median_s["stream"])
    if {"hf + static KV", "hf + answer end"} <= results.keys():
        ratio("static KV cache, wall time (hf + answer end / hf + static KV)",
              median_s["hf + answer end"] / median_s["hf + static KV"])
    if {"stream", "stream int8"} <= results.keys():
        ratio("int8, wall time (stream / stream int8)", median_s["stream"] / median_s["stream int8"])
        parity = results["stream int8"][0][1].parity
        print(f"int8/fp32 parity: {json.dumps({k: v for k, v in parity.items() if k != 'mismatches'})}")
    print()
    first = {name: runs[0][1].outputs for name, runs in results.items()}
    for name, outputs in first.items():
        if name == "today":
            continue
        if "hf + answer end" in first and name != "hf + answer end":
            same = sum(a == b for a, b in zip(first["hf + answer end"], outputs))
            print(f"outputs of {name}: {same}/{len(outputs)} identical to hf + answer end's")
        if "today" in first:
            cut = sum(a[0].startswith(b[0]) for a, b in zip(first["today"], outputs))
            print(f"outputs of {name}: {cut}/{len(outputs)} are today's, cut at the answer's end or identical")


if __name__ == "__main__":
    main()
