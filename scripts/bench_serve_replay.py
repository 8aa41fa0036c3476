"""How many concurrent clients the loop's `serve` step should send with: the same requests served through a real
`mint serve` (mint.serve.replay, as the step runs it) at several client counts, alternated in rounds, timed, and
compared answer for answer.

Run:   python scripts/bench_serve_replay.py                  (the demo project's champions: make demo first)
       python scripts/bench_serve_replay.py --home DIR --clients 16,32 --rounds 2 --requests FILE

The server's batch takes every request in flight (max_batch = clients), so more clients mean wider decoding steps:
on a CPU a step reads every weight whatever the batch. Each run serves into a copy of the workspace (the project's
own turn log is not touched), and its answers are read back from the copy's turn log. Printed: each run's seconds,
each client count's best, the ratio of the first count's best to each other's, and how many answers equal the first
run's (greedy answers must not depend on the batch). Other work on the machine skews the seconds: run it quietly.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def served_answers(home: Path) -> dict[str, str]:
    """The assistant's reply to each user request in the copy's turn log (the last one per request)."""
    import json

    answers = {}
    for path in sorted((home / "logs").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            turn = json.loads(line)
            users = [m["content"] for m in turn["messages"] if m["role"] == "user"]
            replies = [m["content"] for m in turn["messages"] if m["role"] == "assistant"]
            if users and replies:
                answers[users[-1]] = replies[-1]
    return answers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--project", type=Path, default=ROOT / ".mint-demo", help="the project (its .mint is copied)")
    parser.add_argument("--requests", type=Path, default=ROOT / "examples" / "requests" / "genui.jsonl")
    parser.add_argument("--clients", default="16,32", help="client counts, comma-separated (the first is the reference)")
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args(argv)
    counts = [int(c) for c in args.clients.split(",") if c.strip()]
    if not (args.project / ".mint" / "registry.sqlite").is_file():
        sys.exit(f"error: {args.project} has no workspace (run `make demo`, or give --project)")

    from mint.hardware import detect
    from mint.project import load_project
    from mint.serve.replay import serve_requests
    from mint.workspace import workspace

    hardware = detect()
    print(f"{args.requests.name}, max_tokens {args.max_tokens}; {hardware.device_name} ({hardware.cores} cores, "
          f"flags {' '.join(hardware.cpu_flags)})", flush=True)
    seconds: dict[int, list[float]] = {c: [] for c in counts}
    answers: dict[int, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="mint-serve-bench-") as scratch:
        for round_index in range(args.rounds):
            for clients in counts:
                home = Path(scratch) / f"r{round_index}-c{clients}"
                shutil.copytree(args.project / ".mint", home, ignore=shutil.ignore_patterns("logs", "loop.lock"))
                os.environ["MINT_HOME"] = str(home)
                ws = workspace(home)
                project = load_project(args.project / "mint.yaml")
                result = serve_requests(ws, project, args.requests, clients=clients, max_tokens=args.max_tokens,
                                        heldout=0.5)
                seconds[clients].append(result.seconds)
                answers.setdefault(clients, served_answers(home))
                print(f"round {round_index + 1}, {clients} clients: {result.seconds:.1f} s, {result.served} served "
                      f"({result.failed} failed), {result.tokens} tokens", flush=True)
                shutil.rmtree(home)
    reference = counts[0]
    best = {c: min(s) for c, s in seconds.items()}
    for clients in counts:
        same = sum(answers[clients].get(request) == reply for request, reply in answers[reference].items())
        print(f"{clients} clients: best {best[clients]:.1f} s, {best[reference] / best[clients]:.2f}x "
              f"{reference} clients; answers equal to {reference} clients': {same}/{len(answers[reference])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
