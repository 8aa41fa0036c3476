"""`make demo`, timed: where its minutes go, step by step, against the goal of 15 minutes on 2 CPU cores.

Run: python scripts/bench_demo.py [--keep DIR]     (the demo as `make demo` runs it, in a fresh project)
Smoke run: python scripts/bench_demo.py --quick   (the same recipe on the tiny-random base: every step, fast)

Each command of the Makefile's demo target runs as its own process and is timed (wall clock); the loop runs
with --json, so each of its steps' seconds is shown with its share of the whole, and the shares are summed by
kind of step (train, eval, experience, route, ...). Timings taken while other work shares the CPUs are
only good for shares, not for the goal.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 15 * 60
CHATS = (("Make a signup form with name, email and a submit button",),   # the turns the Makefile sends
         ("What's the weather in Paris tomorrow?", "--tools", "examples/tools/weather.json"),
         ("Tell me a fun fact about octopuses.",))


def timed(label: str, args: list[str], cwd: Path, timings: list) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mint", *args], cwd=cwd, env=env, capture_output=True, text=True)
    timings.append((label, time.perf_counter() - began))
    if done.returncode not in (0, 1):
        sys.exit(f"{label}: exit {done.returncode}\n{done.stderr[-3000:]}")
    print(f"  {label}: {timings[-1][1]:.0f}s", file=sys.stderr)
    return done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smoke run: the demo recipe on the tiny-random base")
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="mint-demo-bench-"))
    timings: list[tuple[str, float]] = []
    timed("mint init", ["init", "--dir", str(folder)], ROOT, timings)
    recipe = folder / "recipes" / "demo.yaml"
    if args.quick:
        recipe.write_text(recipe.read_text().replace("base: smollm2-135m", "base: tiny-random"))
        (folder / "mint.yaml").write_text((folder / "mint.yaml").read_text().replace("smollm2-135m", "tiny-random"))
    loop = json.loads(timed("mint loop", ["loop", "recipes/demo.yaml", "--json"], folder, timings))
    timed("mint report --html", ["report", "--html", "report.html"], folder, timings)
    for n, turn in enumerate(CHATS, 1):
        timed(f"mint chat #{n}", ["chat", *turn], folder, timings)

    total = sum(seconds for _, seconds in timings)
    print(f"make demo{' (--quick: tiny-random)' if args.quick else ''}: {total:.0f}s = {total / 60:.1f} min "
          f"(goal < {GOAL_S // 60} min on 2 quiet CPU cores: {'MET' if total < GOAL_S else 'MISSED'}); {folder}")
    by_kind: dict[str, float] = defaultdict(float)
    print(f"\n{'step':<34} {'seconds':>8} {'share':>6}")
    for step in loop["steps"]:
        if step["status"] == "ran":
            label = f"{step['iteration']}. {step['label']}"
            by_kind[step["label"].split()[0]] += step["seconds"]
            print(f"{label:<34} {step['seconds']:>8.1f} {step['seconds'] / total:>6.1%}")
    loop_seconds = dict(timings)["mint loop"]
    by_kind["loop start-up and bookkeeping"] = loop_seconds - sum(by_kind.values())
    for label, seconds in timings:
        if label != "mint loop":
            by_kind[label.split(" #")[0]] += seconds
    print(f"\n{'kind':<34} {'seconds':>8} {'share':>6}")
    for kind, seconds in sorted(by_kind.items(), key=lambda item: -item[1]):
        print(f"{kind:<34} {seconds:>8.1f} {seconds / total:>6.1%}")


if __name__ == "__main__":
    main()
