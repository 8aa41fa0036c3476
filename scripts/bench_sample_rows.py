"""How many samples the experience step should decode side by side: the same pool drawn at several `sample_rows`,
alternated in rounds, timed, and compared answer for answer.

Run:   python scripts/bench_sample_rows.py                       (the demo project's GenUI champion: make demo first)
       python scripts/bench_sample_rows.py --home DIR --specialist genui --rows 32,96 --prompts 24 --samples 4
       python scripts/bench_sample_rows.py --rows 32,96 --torch-draws 32 --rounds 1   (mint's draws against torch's)

The defaults are the demo's pool (56 requests x 8 samples): a pool of exactly one wide batch favours it.

The prompts are the first `--prompts` requests of examples/requests/genui.jsonl (or `--requests FILE`), each sampled
`--samples` times at temperature 0.8, at most 192 new tokens, `--precision` (bf16 by default, as the demo's
`precision: auto` resolves on a CPU with native bf16), by the champion from its LoRA slot, as the experience step
samples (mint.loop.experience._sample). Each round draws the pool once at every row count, in turn. Printed: each
draw's seconds, each row count's best, the ratio of the first row count's best to each other's, and how many
prompts' samples equal the first draw's (the same rows must give the same pool; other rows may not at bf16, where
a matmul's rounding depends on the batch's shape; torch's draws must give mint's pool at the same rows). Other work on the machine skews the seconds: run it quietly.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--home", type=Path, default=ROOT / ".mint-demo" / ".mint", help="the workspace (MINT_HOME)")
    parser.add_argument("--specialist", default="genui")
    parser.add_argument("--requests", type=Path, default=ROOT / "examples" / "requests" / "genui.jsonl")
    parser.add_argument("--prompts", type=int, default=56)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--rows", default="32,96", help="row counts, comma-separated (the first is the reference)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--precision", default="bf16", choices=("fp32", "bf16"))
    parser.add_argument("--torch-draws", default="",
                        help="row counts (comma-separated) also drawn with torch's own multinomial and top-p, "
                             "as the engine does where mint.generation.sampling's replica is refused")
    args = parser.parse_args(argv)
    arms = [(int(r), "mint") for r in args.rows.split(",") if r.strip()]
    arms += [(int(r), "torch") for r in args.torch_draws.split(",") if r.strip()]
    os.environ["MINT_HOME"] = str(args.home)

    from mint.hardware import detect
    from mint.loop import experience
    from mint.registry import queries
    from mint.registry.artifacts import load_revision
    from mint.workspace import workspace

    ws = workspace(args.home)
    target = queries.champion(ws, args.specialist)
    if target is None:
        sys.exit(f"error: {args.home} has no {args.specialist} champion (run `make demo`, or give --home)")
    revision, adapter_dir = load_revision(ws, queries.revision_ref(ws, target))
    requests = [json.loads(line) for line in args.requests.read_text().splitlines() if line.strip()][:args.prompts]
    chosen = [experience.ExperiencePrompt("jsonl", [{"role": "user", "content": r.get("prompt") or
                                                     r["messages"][-1]["content"]}]) for r in requests]
    hardware = detect()
    print(f"{revision.ref}, {len(chosen)} prompts x {args.samples} samples, {args.precision}; "
          f"{hardware.device_name}, {hardware.cores} cores, flags {' '.join(hardware.cpu_flags)}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)
    seconds: dict[tuple, list[float]] = {arm: [] for arm in arms}
    pools: dict[tuple, list] = {arm: [] for arm in arms}
    for round_number in range(args.rounds):
        for arm in arms:
            n, draws = arm
            with torch_draws(draws == "torch"):
                began = time.perf_counter()
                pools[arm].append(experience._sample(ws, (revision, adapter_dir), revision.base, args.specialist,
                                                     chosen, samples=args.samples, temperature=0.8,
                                                     max_new_tokens=192, seed=0, precision=args.precision, rows=n))
                seconds[arm].append(time.perf_counter() - began)
            print(f"round {round_number + 1} rows {n}, {draws}'s draws: {seconds[arm][-1]:.1f} s", flush=True)
    reference = arms[0]
    for arm in arms:
        same = [sum(a == b for a, b in zip(pool, pools[reference][0])) for pool in pools[arm]]
        print(f"rows {arm[0]}, {arm[1]}'s draws: best {min(seconds[arm]):.1f} s, "
              f"{min(seconds[arm]) / min(seconds[reference]):.2f}x the time of rows {reference[0]} with "
              f"{reference[1]}'s; prompts whose samples equal its first draw: {same} of {len(chosen)}")
    print(f"load average after {os.getloadavg()[0]:.2f}")
    return 0


@contextlib.contextmanager
def torch_draws(wanted: bool):
    """The engine as it decodes where the fast draw's check fails: torch's multinomial, HF's top-p."""
    from mint.generation import sampling

    if not wanted:
        yield
        return
    exact = sampling.replica_exact
    sampling.replica_exact = lambda: False
    try:
        yield
    finally:
        sampling.replica_exact = exact


if __name__ == "__main__":
    sys.exit(main())
