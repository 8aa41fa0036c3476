"""The KV cache's row changes (rows leaving and joining a running stream): the engine's, against the same changes
made as before 2026-12-07 (a copy to pick rows and columns, another to pad, a third into a buffer with room), on two
decodes the demo runs, alternated in one process, timed, and compared answer for answer.

Run:   python scripts/bench_cache.py                   (SmolLM2, the bare base: make demo's set-up first)
       python scripts/bench_cache.py --rounds 3 --prompts 48 --samples 4
       python scripts/bench_cache.py --quick           (tiny-random: a smoke run)

Workloads (GenUI's retention suite, contracts/suites/genui_old_families.jsonl, the first --prompts requests):
  evaluation  greedy, fp32, batch 96, prompt lookup 8, answers ending where they are complete (contract genui's
              decoding)
  sampling    --samples answers a request at temperature 0.8, top_p 0.95, bf16, 32 rows side by side, at most 192
              new tokens (the experience step's)
Printed: each run's seconds and the seconds inside the row changes, each mode's best, the ratios, and whether both
modes' answers are the same (they must be: a row change moves values, it computes none). Run it quietly.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def copying_join(cache, mask, new_cache, new_mask):
    """The engine's join before: pad each side by concatenation, concatenate the rows, copy into a roomy buffer."""
    import torch

    if cache is None:
        return new_cache, new_mask
    width = max(mask.shape[1], new_mask.shape[1])

    def widen(tensor, dim):
        missing = width - tensor.shape[dim]
        if missing == 0:
            return tensor
        shape = list(tensor.shape)
        shape[dim] = missing
        return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)

    for layer, new_layer in zip(cache.layers, new_cache.layers):
        _refill(layer, torch.cat([widen(layer.keys, 2), widen(new_layer.keys, 2)]),
                torch.cat([widen(layer.values, 2), widen(new_layer.values, 2)]))
    return cache, torch.cat([widen(mask, 1), widen(new_mask, 1)])


def copying_select(cache, mask, keep):
    """The engine's select before: index_select the rows, then the columns, then copy into a roomy buffer."""
    import torch

    if not keep:
        return None, None
    index = torch.tensor(keep, device=mask.device)
    mask = mask.index_select(0, index)
    columns = mask.any(0)
    if bool(columns.all()):
        for layer in cache.layers:
            _refill(layer, layer.keys.index_select(0, index), layer.values.index_select(0, index))
        return cache, mask
    columns = columns.nonzero().squeeze(1)
    for layer in cache.layers:
        _refill(layer, layer.keys.index_select(0, index).index_select(2, columns),
                layer.values.index_select(0, index).index_select(2, columns))
    return cache, mask.index_select(1, columns)


def _refill(layer, keys, values):
    if hasattr(layer, "key_buffer"):
        layer.fill(keys, values)
    else:
        layer.keys, layer.values = keys, values


@contextlib.contextmanager
def row_changes(mode: str, spent: list[float]):
    """The engine with ``mode``'s row changes, the seconds inside them added to ``spent``."""
    from mint.generation import cache as kv

    join, select = (kv.join, kv.select) if mode == "one copy" else (copying_join, copying_select)

    def timed(function):
        def call(*args):
            began = time.perf_counter()
            try:
                return function(*args)
            finally:
                spent.append(time.perf_counter() - began)
        return call

    saved = kv.join, kv.select
    kv.join, kv.select = timed(join), timed(select)
    try:
        yield
    finally:
        kv.join, kv.select = saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--prompts", type=int, default=96)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--workloads", default="evaluation,sampling")
    parser.add_argument("--quick", action="store_true", help="tiny-random, 12 prompts, one round")
    args = parser.parse_args(argv)

    from mint.base import TINY, load_base
    from mint.generation.engine import generate
    from mint.generation.settings import HarnessSettings
    from mint.harness import answer_ends
    from mint.hardware import detect

    base, prompts, rounds = (TINY, 12, 1) if args.quick else (args.base, args.prompts, args.rounds)
    suite = ROOT / "contracts" / "suites" / "genui_old_families.jsonl"
    conversations = [json.loads(line)["messages"] for line in suite.read_text().splitlines()[:prompts]]
    settings = {
        "evaluation": HarnessSettings(max_new_tokens=256, temperature=0.0, batch_size=96, precision="fp32",
                                      stop_at_answer_end=True, prompt_lookup=8),
        "sampling": HarnessSettings(max_new_tokens=192, temperature=0.8, top_p=0.95, samples=args.samples,
                                    batch_size=32, precision="bf16", stop_at_answer_end=True),
    }
    hardware = detect()
    print(f"host: {hardware.device_name}, {hardware.cores} cores, flags {', '.join(hardware.cpu_flags) or '-'}")
    loaded = load_base(base)
    modes = ("copies", "one copy")
    for workload in args.workloads.split(","):
        at = settings[workload]
        ends = answer_ends("genui", at)
        generate(loaded.model, loaded.tokenizer, conversations[:2], at, answer_end=ends)   # warm-up (the bf16 copy)
        runs: dict[str, list[tuple[float, float]]] = {mode: [] for mode in modes}
        answers: dict[str, set[str]] = {mode: set() for mode in modes}
        tokens = 0
        for round_ in range(rounds):
            for mode in modes:
                spent: list[float] = []
                with row_changes(mode, spent):
                    began = time.perf_counter()
                    result = generate(loaded.model, loaded.tokenizer, conversations, at, answer_end=ends)
                    seconds = time.perf_counter() - began
                runs[mode].append((seconds, sum(spent)))
                answers[mode].add(hashlib.sha256(json.dumps(result.outputs).encode()).hexdigest())
                tokens = result.new_tokens
                print(f"{workload} round {round_ + 1} {mode:>8}: {seconds:7.2f} s, row changes {sum(spent):6.2f} s "
                      f"({len(spent)} of them), {result.new_tokens} tokens")
        best = {mode: (min(s for s, _ in runs[mode]), min(r for _, r in runs[mode])) for mode in modes}
        same = len(answers["copies"] | answers["one copy"]) == 1
        print(f"{workload}: {len(conversations)} prompts, {tokens} tokens; best copies {best['copies'][0]:.2f} s "
              f"(row changes {best['copies'][1]:.2f}), one copy {best['one copy'][0]:.2f} s (row changes "
              f"{best['one copy'][1]:.2f}): {best['copies'][0] / best['one copy'][0]:.3f}x the decode, "
              f"{best['copies'][1] / max(best['one copy'][1], 1e-9):.2f}x the row changes; answers "
              f"{'identical' if same else 'DIFFERENT'}")
        if not same:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
