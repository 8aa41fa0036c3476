"""Ingest throughput and peak memory on generated logs of two sizes, side by side.

Run: make bench   (or: python scripts/bench_ingest.py [--sizes 50000 500000])

Each size is ingested by a fresh `mint ingest` process into a fresh workspace,
so its peak RSS is that process's alone. Goals: at least 10,000
records/s (kept/s is reported beside it), and peak memory under 300 MB that does not grow with
file size, the quarantine included.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_EPS = 10_000
GOAL_MB = 300

WORDS = ("the quick brown fox jumps over a lazy dog while python code runs fast and users ask for help "
         "with their orders invoices dashboards forms weather flights and many other things").split()
CODE = ['def add(a, b):\n    return a + b\n', 'for i in range(10):\n    print(i ** 2)\n',
        'import pandas as pd\ndf = pd.read_csv("sales-2026-11.csv")\nprint(df.groupby("region").sum())\n',
        'SELECT id, total FROM orders WHERE created_at > \'2026-11-01\' ORDER BY total DESC LIMIT 20;\n',
        'const r = await fetch("https://api.example.com/v2/items?page=3");\n']


def sentence(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def user_text(rng: random.Random, i: int) -> str:
    """A user turn with what real logs carry: numbers, times, URLs, versions, code, now and then PII."""
    parts = [sentence(rng, rng.randint(6, 20))]
    roll = rng.random()
    if roll < 0.15:
        parts.append(f"order #{rng.randint(10_000, 999_999)} placed 2026-11-{rng.randint(1, 28):02d} "
                     f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}")
    elif roll < 0.25:
        parts.append(f"see https://docs.example.com/v{rng.randint(1, 3)}.{rng.randint(0, 20)}/guide#{i}")
    elif roll < 0.40:
        parts.append("```python\n" + rng.choice(CODE) + "```")
    elif roll < 0.45:
        parts.append(f"ts {1795946400 + i} build {rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 99)} "
                     f"sha {rng.getrandbits(160):040x}")
    if rng.random() < 0.05:
        parts.append(f"contact me at user{i}@example.com or +1 415 555 {i % 10000:04d}")
    return " ".join(parts)


BAD_LINES = ['{broken json line', '{"messages": [{"role": "wizard", "content": "x"}]}',
             '{"messages": [{"role": "user", "content": "cut emoji \\ud83d"}]}', "[" * 5000 + "]" * 5000,
             '{"request": {"messages": [{"role": "user", "content": "hi"}]}, "error": "upstream timeout"}',
             '{"messages": []}']


def make_log(path: Path, lines: int, seed: int = 0, big_every: int = 25_000, big_bytes: int = 2_000_000) -> None:
    """OpenAI chats (some with tool calls), server logs, ShareGPT, sessions re-logged each turn, late
    feedback, duplicates, 1% bad lines of several kinds, and a multi-MB record every ``big_every`` lines."""
    rng = random.Random(seed)
    last = ""
    with open(path, "w", encoding="utf-8") as f:
        for i in range(lines):
            roll = rng.random()
            if roll < 0.01:
                f.write(rng.choice(BAD_LINES) + "\n")
                continue
            if roll < 0.03 and last:
                f.write(last + "\n")   # an exact duplicate
                continue
            if i and i % big_every == 0:   # a pasted log file: over the default 1 MB cap
                record = {"messages": [{"role": "user", "content": "why does this fail?\n" + "x" * big_bytes},
                                       {"role": "assistant", "content": "the stack trace says..."}]}
                f.write(json.dumps(record) + "\n")
                continue
            user = user_text(rng, i)
            if roll < 0.40:
                record = {"messages": [{"role": "system", "content": "You are helpful."},
                                       {"role": "user", "content": user},
                                       {"role": "assistant", "content": sentence(rng, 40)}],
                          "session": f"s-{i}", "ts": 1795946400 + i,
                          "feedback": {"thumbs": rng.choice(["up", "down"])}}
            elif roll < 0.55:
                record = {"messages": [{"role": "user", "content": user},
                                       {"role": "assistant", "content": None, "tool_calls": [
                                           {"id": "c1", "type": "function", "function": {
                                               "name": "lookup", "arguments": json.dumps({"q": user[:20], "n": i})}}]},
                                       {"role": "tool", "tool_call_id": "c1", "content": sentence(rng, 10)},
                                       {"role": "assistant", "content": sentence(rng, 20)}],
                          "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {
                              "type": "object", "properties": {"q": {"type": "string"}}}}}]}
            elif roll < 0.70:
                record = {"id": f"chatcmpl-{i}", "session": f"web-{i}", "ts": (1795946400 + i) * 1000,
                          "request": {"messages": [{"role": "user", "content": user}]},
                          "response": {"choices": [{"finish_reason": "stop",
                                                    "message": {"role": "assistant", "content": sentence(rng, 30)}}]},
                          "served_by": "chat:v3"}
                if rng.random() < 0.3:   # the same conversation again, with the feedback that came later
                    f.write(json.dumps(record) + "\n")
                    record = {**record, "feedback": {"rating": rng.choice([1, -1])}}
            elif roll < 0.80:
                turns = [{"role": "user", "content": user}, {"role": "assistant", "content": sentence(rng, 15)},
                         {"role": "user", "content": sentence(rng, 8)}, {"role": "assistant", "content": sentence(rng, 15)}]
                f.write(json.dumps({"session": f"chat-{i}", "messages": turns[:2]}) + "\n")   # re-logged each turn
                record = {"session": f"chat-{i}", "messages": turns}
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
            "quarantined": result["quarantined"], "quarantine_mb": result["quarantine_mb"],
            "ingest_s": result["seconds"], "wall_s": wall, "eps": result["read"] / result["seconds"],
            "kept_eps": result["kept"] / result["seconds"],
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
                  "quarantined": s.quarantined, "quarantine_mb": os.path.getsize(r.quarantine_file) / 1e6,
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
    print(f"{'lines':>9} {'MB':>7} {'kept':>9} {'quarant.':>9} {'ingest s':>9} {'total/s':>9} {'kept/s':>9} "
          f"{'workers':>8} {'main MB':>8} {'worker MB':>10} {'total MB':>9} {'quar. MB':>9}")
    for r in rows:
        print(f"{r['lines']:>9,} {r['mb']:>7.1f} {r['kept']:>9,} {r['quarantined']:>9,} {r['ingest_s']:>9.2f} "
              f"{r['eps']:>9,.0f} {r['kept_eps']:>9,.0f} {r['workers']:>8} {r['main_mb']:>8.0f} "
              f"{r['worker_mb']:>10.0f} {r['peak_mb']:>9.0f} {r['quarantine_mb']:>9.2f}")
    print("(total/s counts every record read, kept/s only new episodes; total MB = main peak + workers x largest "
          "worker peak, an upper bound; quar. MB = quarantine file size on disk, never held in memory)")
    small, large = rows
    growth = large["peak_mb"] / small["peak_mb"]
    slowest = min(r["eps"] for r in rows)
    print(f"\nthroughput: {slowest:,.0f} records/s at worst (goal >= {GOAL_EPS:,}): "
          f"{'MET' if slowest >= GOAL_EPS else 'MISSED'} ({slowest / GOAL_EPS:.2f}x the goal); "
          f"kept {min(r['kept_eps'] for r in rows):,.0f} episodes/s")
    print(f"peak memory: {large['peak_mb']:.0f} MB at {large['lines']:,} lines (goal < {GOAL_MB} MB): "
          f"{'MET' if large['peak_mb'] < GOAL_MB else 'MISSED'}")
    print(f"memory growth for {large['lines'] / small['lines']:.0f}x the lines: {growth:.2f}x total peak "
          f"(+{large['peak_mb'] - small['peak_mb']:.0f} MB), quarantine {small['quarantine_mb']:.2f} -> "
          f"{large['quarantine_mb']:.2f} MB on disk")


if __name__ == "__main__":
    main()
