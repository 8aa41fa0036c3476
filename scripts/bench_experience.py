"""How a generation learns most from the same traffic: experience settings measured side by side, each
continuation gated as the demo's generation 2 is.

Run: python scripts/bench_experience.py --project .mint-demo [--variant NAME ...] [--keep DIR]

--project is a project the demo ran in (`make demo`, or `mint loop recipes/demo.yaml`): its GenUI champion
(generation 1, or the newest champion after rolling back to generation 1 where the demo promoted generation 2)
and the traffic `mint serve` logged. Each variant runs in a copy of that project (nothing in --project changes):
the experience step with the recipe's options and the variant's changes laid over them, the continuation it
plans (from the champion, on the verified answers and the replayed logged ones), then `mint eval` under the
recipe's generation-2 contract (contracts/genui.yaml: the held-out slice of the served traffic and the retention
suite), paired with the champion on the same requests (its answers decoded once, reused by every variant).

Printed per variant: the pool (pass@1, pass@k, accepted answers, seconds sampling), the candidate's core and
retention metrics with each delta's 95% interval against the champion, every significant loss, the verdict, and
the seconds each part took; `--json FILE` writes the same. Variants (each names what it changes):
  today            the recipe's experience step as it is (two rounds, 3 passes at 1e-4, at most 72 steps)
  one-round        one round of sampling (the champion's alone), the same plan
  one-round-12     one round, at most 12 steps (the demo before it learned from two rounds)
  constrained      samples decoded inside the catalog's trees (the contract harness's answer shape)
  samples16        16 samples a request instead of the recipe's
  lr3e-4           the continuation at 3e-4
  lr3e-4-steps24   the continuation at 3e-4, up to 24 steps
  auto-lr3e-4      samples at the precision the hardware probe finds fastest, the continuation at 3e-4
  samples32-lr3e-4 32 samples a request (decoded at the precision the hardware probe finds fastest), the
                   continuation at 3e-4
  replay1          1 logged answer replayed per verified one
  constrained-samples16   the two combined
  constrained-lr3e-4      constrained samples, the continuation at 3e-4
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

VARIANTS = {
    "today": {},
    "one-round": {"rounds": 1},
    "one-round-12": {"rounds": 1, "max_steps": 12},
    "constrained": {"constrained": True},
    "samples16": {"samples": 16},
    "lr3e-4": {"continuation_learning_rate": 3.0e-4},
    "lr3e-4-steps24": {"continuation_learning_rate": 3.0e-4, "max_steps": 24},
    "auto-lr3e-4": {"continuation_learning_rate": 3.0e-4, "precision": "auto"},
    "samples32-lr3e-4": {"samples": 32, "continuation_learning_rate": 3.0e-4, "precision": "auto"},
    "replay1": {"replay": 1},
    "constrained-samples16": {"constrained": True, "samples": 16},
    "constrained-lr3e-4": {"constrained": True, "continuation_learning_rate": 3.0e-4},
}


def recipe_step(project: Path, kind: str, specialist: str = "genui", last: bool = True) -> dict:
    from mint.loop.recipe import load_recipe

    recipe = load_recipe(project / "recipes" / "demo.yaml")
    steps = [s for s in recipe.steps if s.kind == kind and s.specialist == specialist]
    return dict((steps[-1] if last else steps[0]).options)


def run_variant(project: Path, name: str, changes: dict, keep: Path | None, pools: dict) -> dict:
    """One variant in a copy of ``project``. Variants whose sampling options agree share one pool: the
    first samples it and leaves a copy of its project as it stood after sampling (``pools``, keyed by those
    options); a later one starts from that copy and only plans, trains and evaluates."""

    from mint.contract.evaluate import evaluate
    from mint.loop.experience import GATHER_KEYS, experience_step, split_options, with_plan
    from mint.loop.placebo import train_planned
    from mint.project import load_project
    from mint.train.config import SettingsOverride
    from mint.workspace import Workspace

    folder = (keep / name) if keep else Path(tempfile.mkdtemp(prefix=f"mint-exp-{name}-"))
    if folder.exists():
        shutil.rmtree(folder)
    experience = {k: v for k, v in recipe_step(project, "experience").items()
                  if k not in ("specialist", "from_iteration", "until_iteration", "control")}
    experience.update(changes)
    pool_key = json.dumps({k: v for k, v in experience.items() if k in GATHER_KEYS or k == "rounds"}, sort_keys=True,
                          default=str)
    shared = pools.get(pool_key)
    shutil.copytree(shared[0] if shared else project, folder, symlinks=True)
    cwd = os.getcwd()
    os.chdir(folder)
    try:
        ws = Workspace(folder / ".mint")
        project_config = load_project()
        train_set = recipe_step(folder, "train")["set"]
        contracts = [folder / "recipes" / recipe_step(folder, "eval")["contract"]]
        timings = {}
        began = time.perf_counter()
        if shared:
            gathered = with_plan(shared[1], split_options(experience)[1])
        else:
            gathered = experience_step(ws, dataset="demo", specialist="genui", base="smollm2-135m",
                                       project=project_config, options=experience, contracts=contracts,
                                       recipe_dir=folder / "recipes")
            snapshot = Path(tempfile.mkdtemp(prefix="mint-exp-pool-")) / "project"
            shutil.copytree(folder, snapshot, symlinks=True)
            pools[pool_key] = (snapshot, gathered)
        timings["experience"] = round(time.perf_counter() - began, 1)
        pool = {"pool": gathered.pool, "accepted": gathered.accepted, "repaired": gathered.repaired,
                "precision": gathered.precision, "constrained": gathered.constrained,
                "shared_with_earlier_variant": bool(shared), "plan": gathered.plan,
                "families": [f.to_dict() for f in gathered.families]}
        if not gathered.plan or not gathered.plan.get("data") or not gathered.plan.get("max_steps"):
            return {"variant": name, "changes": changes, "pool": pool, "timings": timings,
                    "verdict": "nothing accepted"}
        began = time.perf_counter()
        result, _settings = train_planned(ws, specialist="genui", method="sft", plan=gathered.plan,
                                          parent="genui:champion", dataset="demo", base="smollm2-135m",
                                          settings=SettingsOverride.from_keys(train_set))
        timings["train"] = round(time.perf_counter() - began, 1)
        candidate = result.ref
        began = time.perf_counter()
        evaluation = evaluate(ws, candidate, contracts[0])
        timings["eval"] = round(time.perf_counter() - began, 1)
        report = evaluation.report
        deltas = {}
        for gate in report.gates:
            if gate.delta is not None:
                deltas[gate.metric] = gate.delta.to_dict() if hasattr(gate.delta, "to_dict") else gate.delta
        return {"variant": name, "changes": changes, "candidate": candidate, "pool": pool, "timings": timings,
                "metrics": report.metrics, "baseline": report.baseline.metrics, "verdict": report.verdict,
                "gates": [{"metric": g.metric, "passed": g.passed, "rule": g.rule} for g in report.gates],
                "deltas": deltas, "report": str(evaluation.report_path)}
    finally:
        os.chdir(cwd)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", type=Path, required=True, help="a project the demo ran in")
    parser.add_argument("--variant", action="append", choices=sorted(VARIANTS), help="default: every variant")
    parser.add_argument("--keep", type=Path, help="keep each variant's project under this folder")
    parser.add_argument("--json", type=Path, help="write the results here too")
    args = parser.parse_args()
    from mint.hardware import detect

    hardware = detect()
    print(f"host: {hardware.device_name}, {hardware.cores} cores, flags {' '.join(hardware.cpu_flags)}", flush=True)
    results, pools = [], {}
    for name in args.variant or list(VARIANTS):
        result = run_variant(args.project.resolve(), name, VARIANTS[name], args.keep, pools)
        results.append(result)
        print(json.dumps(result, default=str), flush=True)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
