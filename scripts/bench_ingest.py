"""Ingest throughput and peak memory on generated logs of two sizes, side by side.

Run: make bench   (or: python scripts/bench_ingest.py [--sizes 50000 500000])

Each size is ingested by a fresh `mint ingest` process into a fresh workspace,
so its peak RSS is that process's alone. Goals (issue #2): at least 10,000
episodes/s, and peak memory under 300 MB that does not grow with file size.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_EPS = 10_000
GOAL_MB = 300

WORDS = ("the quick brown fox jumps over a lazy dog while python code runs fast and users ask for help "
         "with their orders invoices dashboards forms weather flights and many other things").split()


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def make_log(path: Path, lines: int, seed: int = 0) -> None:
    """A realistic mix: OpenAI chats (some with tool calls), ShareGPT, feedback, PII, duplicates, bad lines."""
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            roll = rng.random()
            if roll < 0.01:
                f.write("{broken json line\n")
                continue
            if roll < 0.03 and i:
                f.write(last + "\n")   # an exact duplicate
                continue
            user = f"{sentence(rng, 12)} #{i}"
            if rng.random() < 0.05:
                user += f" contact me at user{i}@example.com or +1 415 555 {i % 10000:04d}"
            if roll < 0.5:
                record = {"messages": [{"role": "system", "content": "You are helpful."},
                                       {"role": "user", "content": user},
                                       {"role": "assistant", "content": sentence(rng, 40)}],
                          "feedback": {"thumbs": rng.choice(["up", "down"])}}
            elif roll < 0.7:
                record = {"messages": [{"role": "user", "content": user},
                                       {"role": "assistant", "content": None, "tool_calls": [
                                           {"id": "c1", "type": "function", "function": {
                                               "name": "lookup", "arguments": json.dumps({"q": user[:20], "n": i})}}]},
                                       {"role": "tool", "tool_call_id": "c1", "content": sentence(rng, 10)},
                                       {"role": "assistant", "content": sentence(rng, 20)}],
                          "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {
                              "type": "object", "properties": {"q": {"type": "string"}}}}}]}
            else:
                record = {"conversations": [{"from": "human", "value": user}, {"from": "gpt", "value": sentence(rng, 40)}],
                          "rating": rng.randint(1, 5)}
            last = json.dumps(record)
            f.write(last + "\n")


def run_one(lines: int, workdir: Path) -> dict:
    log = workdir / f"logs-{lines}.jsonl"
    make_log(log, lines)
    home = workdir / f"home-{lines}"
    started = time.perf_counter()
    child = subprocess.run([sys.executable, "-c", _CHILD, str(log), str(home)], capture_output=True, text=True,
                           env={**os.environ, "MINT_HOME": str(home)})
    wall = time.perf_counter() - started
    if child.returncode != 0:
        raise SystemExit(child.stderr)
    result = json.loads(child.stdout)
    return {"lines": lines, "mb": log.stat().st_size / 1e6, "read": result["read"], "kept": result["kept"],
            "ingest_s": result["seconds"], "wall_s": wall, "eps": result["read"] / result["seconds"],
            "main_mb": result["main_mb"], "worker_mb": result["worker_mb"], "workers": result["workers"],
            # an upper bound: every worker at the largest worker's peak, at the same moment as the main process
            "peak_mb": result["main_mb"] + result["workers"] * result["worker_mb"],
            "baseline_mb": result["baseline_mb"]}


# The child measures ingest alone: RSS after imports (baseline) and the process's peak RSS.
_CHILD = """
import json, os, resource, sys
from pathlib import Path
from mint.data.ingest import PARALLEL_MIN_BYTES, ingest
from mint.project import DEFAULT_PROJECT
from mint.workspace import workspace
baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
r = ingest(workspace(sys.argv[2]), [Path(sys.argv[1])], dataset="bench", project=DEFAULT_PROJECT)
s = r.sources[0]
print(json.dumps({"read": s.read, "kept": s.kept, "seconds": r.seconds, "baseline_mb": baseline,
                  "main_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "worker_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "workers": os.cpu_count() if s.bytes >= PARALLEL_MIN_BYTES and (os.cpu_count() or 1) > 1 else 0}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs=2, default=[50_000, 500_000])
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="mint-bench-") as tmp:
        rows = [run_one(n, Path(tmp)) for n in args.sizes]
    print(f"{'lines':>9} {'MB':>7} {'kept':>9} {'ingest s':>9} {'episodes/s':>11} {'workers':>8} "
          f"{'main MB':>8} {'worker MB':>10} {'total MB':>9}")
    for r in rows:
        print(f"{r['lines']:>9,} {r['mb']:>7.1f} {r['kept']:>9,} {r['ingest_s']:>9.2f} {r['eps']:>11,.0f} "
              f"{r['workers']:>8} {r['main_mb']:>8.0f} {r['worker_mb']:>10.0f} {r['peak_mb']:>9.0f}")
    print("(total MB = main peak + workers x largest worker peak: an upper bound on the whole ingest)")
    small, large = rows
    growth = large["peak_mb"] / small["peak_mb"]
    slowest = min(r["eps"] for r in rows)
    print(f"\nthroughput: {slowest:,.0f} episodes/s at worst (goal >= {GOAL_EPS:,}): "
          f"{'MET' if slowest >= GOAL_EPS else 'MISSED'} ({slowest / GOAL_EPS:.2f}x the goal)")
    print(f"peak memory: {large['peak_mb']:.0f} MB at {large['lines']:,} lines (goal < {GOAL_MB} MB): "
          f"{'MET' if large['peak_mb'] < GOAL_MB else 'MISSED'}")
    print(f"memory growth for {large['lines'] / small['lines']:.0f}x the lines: {growth:.2f}x total peak "
          f"(+{large['peak_mb'] - small['peak_mb']:.0f} MB)")


if __name__ == "__main__":
    main()
