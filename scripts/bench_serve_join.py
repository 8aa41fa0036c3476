"""Time to answer of a short turn asked while a long one decodes, in `mint serve`'s local backend: the batcher
letting it join the running stream (continuous batching across clients) against the same batcher letting it wait
for that stream's end, alternated in one run, printed side by side with the CPU flags.

Run:   python scripts/bench_serve_join.py                          (the embedded SmolLM2-135M, about a minute)
       python scripts/bench_serve_join.py --base tiny-random       (checks the script, not the figures)

Each trial: a long turn (``--long`` tokens) starts alone; once it has decoded ``--after`` tokens a short turn
(``--short`` tokens) is asked. Reported: the short turn's time from asking to its answer, and the long turn's
whole time, median of ``--repeats`` per mode; the goal is the short answer well before the long one ends.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from mint.base import SMOLLM2, load_base  # noqa: E402
from mint.mol.mixture import Mixture, Turn  # noqa: E402
from mint.mol.runtime import Decoding, MixtureRuntime  # noqa: E402
from mint.project import DEFAULT_PROJECT, Project  # noqa: E402
from mint.serve.local import Batcher  # noqa: E402

LONG = [{"role": "user", "content": "Write a long story about a lighthouse keeper and a storm, in many chapters."}]
SHORT = [{"role": "user", "content": "What is the capital of France?"}]


def trial(batcher: Batcher, long_tokens: int, short_tokens: int, after: int) -> dict:
    decoding = threading.Event()
    steps = [0]

    def heard(_delta: str) -> bool:
        steps[0] += 1
        if steps[0] == after:
            decoding.set()
        return True

    started = time.perf_counter()
    long = batcher.submit(Turn(LONG, specialist="chat", decoding=Decoding(long_tokens)), heard)
    if not decoding.wait(timeout=600):
        raise RuntimeError(f"the long turn ended before {after} tokens: ask for fewer (--after)")
    asked = time.perf_counter()
    short = batcher.submit(Turn(SHORT, specialist="chat", decoding=Decoding(short_tokens)))
    short_answer = short.result(timeout=600)
    short_s = time.perf_counter() - asked
    long_answer = long.result(timeout=600)
    return {"short_s": short_s, "long_s": time.perf_counter() - started,
            "long_tokens": long_answer.completion_tokens, "short_tokens": short_answer.completion_tokens,
            "short_text": short_answer.text}


def main() -> int:
    from mint.hardware import apply_decoding_threads, detect
    from mint.workspace import workspace

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default=SMOLLM2)
    parser.add_argument("--long", type=int, default=192, help="the long turn's max_tokens")
    parser.add_argument("--short", type=int, default=8, help="the short turn's max_tokens")
    parser.add_argument("--after", type=int, default=8, help="the long turn's tokens before the short one is asked")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    hardware = detect()
    print(f"hardware: {hardware.device} {hardware.device_name}, {hardware.cores} cores, flags "
          f"{', '.join(hardware.cpu_flags) or '-'}", file=sys.stderr)
    apply_decoding_threads(hardware)
    project = Project(base=args.base, specialists=DEFAULT_PROJECT.specialists)
    runtime = MixtureRuntime(load_base(args.base), project.names)
    mixture = Mixture(workspace(Path(tempfile.mkdtemp(prefix="mint-bench-join-"))), project, runtime)
    batchers = {"join": Batcher(mixture, window_ms=0, max_batch=16, join=True),
                "wait": Batcher(mixture, window_ms=0, max_batch=16, join=False)}
    for batcher in batchers.values():
        batcher.start()
    trial(batchers["join"], 4, 2, 1)                 # warm-up: first-call costs are not timed
    runs: dict[str, list[dict]] = {mode: [] for mode in batchers}
    try:
        for _ in range(args.repeats):                # alternated, so both modes see the same machine
            for mode, batcher in batchers.items():
                runs[mode].append(trial(batcher, args.long, args.short, args.after))
    finally:
        for batcher in batchers.values():
            batcher.stop()
    figures = {mode: {"short_answer_s": round(statistics.median(r["short_s"] for r in trials), 3),
                      "long_answer_s": round(statistics.median(r["long_s"] for r in trials), 3),
                      "long_tokens": trials[0]["long_tokens"], "short_tokens": trials[0]["short_tokens"]}
               for mode, trials in runs.items()}
    same = len({r["short_text"] for trials in runs.values() for r in trials}) == 1
    join, wait = figures["join"], figures["wait"]
    print(json.dumps({"base": args.base, "cpu_flags": list(hardware.cpu_flags), "long": args.long,
                      "short": args.short, "after": args.after, "repeats": args.repeats, **figures,
                      "short_answer_wait_over_join": round(wait["short_answer_s"] / join["short_answer_s"], 2),
                      "long_answer_join_over_wait": round(join["long_answer_s"] / wait["long_answer_s"], 3),
                      "short_answers_identical": same}, indent=2))
    met = join["short_answer_s"] < join["long_answer_s"] / 2 and same
    print(f"{'PASS' if met else 'FAIL'}  a short turn asked during a long decode is answered before half the long "
          "one's time, with the answer it gets alone")
    return 0 if met else 1


if __name__ == "__main__":
    sys.exit(main())
