"""Three generations of self-improvement, measured: the self-improvement goal benchmark, each figure against its goal.

Run: python scripts/bench_selfimprove.py [--json PATH] [--keep DIR]      (quiet machine: the lead's run)
Smoke run: python scripts/bench_selfimprove.py --base tiny-random --steps 1 --limit 2 --prompts 2 --max-new-tokens 8

In a fresh project (`mint init`), `mint loop recipes/selfimprove.yaml --json` runs three generations of GenUI and
the agent on the embedded SmolLM2-135M: generation 1 is the demo's SFT from the logs, generations 2 and 3 learn
from experience on prompts the champion was not trained on (GenUI: new requests served through `mint serve`,
its own batch in each generation; the agent: its logged requests without an accepted answer), each beside a
placebo twin. The figures come from the loop's own result (its generation rows and step outputs) and from the
registered reports (mint.registry.queries); deltas are paired on the same held-out examples with 95%
intervals (mint.contract.paired through mint.loop.placebo.paired_on_examples).

The benchmark refuses (exit 2) to run when an evaluation would measure fewer than 48 held-out examples (a suite
drawn from the served traffic: fewer than the power planner's size for its gates, which the loop waits for), or
when a served request appears in the project's logs or held-out files or in two generations' batches. A run
on another base or with a smaller budget (--steps, --limit, --prompts, --max-new-tokens) is a smoke run:
same figures and goal lines, no floor, not the benchmark. Timings taken while other work shares the CPUs
are only good for shares, not for the goal.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

import yaml  # noqa: E402

from make_demo_requests import clashes, known_requests  # noqa: E402
from mint.errors import BadInput, MintError  # noqa: E402

RECIPE = "recipes/selfimprove.yaml"
DEFAULT_BASE = "smollm2-135m"
MIN_HELDOUT = 48
GOAL_WALL_S = 45 * 60
GOAL_BACKWARD_TRANSFER = -0.02


# --- the machine ----------------------------------------------------------------------------------------

def machine() -> dict:
    import torch

    from mint.hardware import REPORTED_CPU_FLAGS, cpu_flags, read_cpuinfo, usable_cores

    text = read_cpuinfo() or ""
    model = next((line.partition(":")[2].strip() for line in text.splitlines()
                  if line.lower().startswith("model name")), platform.processor() or platform.machine())
    flags = cpu_flags(text) or set()
    return {"cpu": model, "flags": [f for f in REPORTED_CPU_FLAGS if f in flags], "cores": usable_cores(),
            "torch": torch.__version__}


# --- the project: the recipe, its budget, and what the benchmark refuses -----------------------------------

def apply_budget(folder: Path, args) -> list[str]:
    """Write the smoke run's base and budget into the project's copy of the recipe; what was changed."""
    path = folder / RECIPE
    recipe = yaml.safe_load(path.read_text(encoding="utf-8"))
    changed = []
    if args.base != DEFAULT_BASE:
        recipe["base"] = args.base
        project = folder / "mint.yaml"
        project.write_text(re.sub(r"(?m)^base: .*$", f"base: {args.base}", project.read_text(encoding="utf-8")))
        changed.append(f"base {args.base}")
    for entry in recipe["steps"]:
        (kind, options), = entry.items()
        if args.steps is not None and kind == "train":
            options.setdefault("set", {})["max_steps"] = args.steps
        if args.steps is not None and kind == "experience":
            options["max_steps"] = args.steps
            options["min_steps"] = min(options.get("min_steps", 1), args.steps)
        if args.limit is not None and kind in ("eval", "controls"):
            options["limit"] = args.limit
        if args.prompts is not None and kind == "experience":
            options["prompts"] = args.prompts
        if args.max_new_tokens is not None and kind == "experience":
            options["max_new_tokens"] = args.max_new_tokens
        if args.max_new_tokens is not None and kind == "serve":
            options["max_tokens"] = args.max_new_tokens
    for name in ("steps", "limit", "prompts", "max_new_tokens"):
        if getattr(args, name) is not None:
            changed.append(f"{name.replace('_', '-')} {getattr(args, name)}")
    if changed:
        path.write_text(f"# Run: mint loop {RECIPE}\n# the smoke run's budget: {', '.join(changed)}\n"
                        + yaml.safe_dump(recipe, sort_keys=False), encoding="utf-8")
    return changed


def heldout_sizes(folder: Path) -> dict[str, dict]:
    """Per evaluated specialist: the contract file of its evaluation nearest its floor, how many core examples that
    evaluation measures (the smaller of the suite file, the suite's own limit and the recipe's; a suite drawn from
    the served traffic: the held-out requests of the batches served in its iterations, as mint.data.split sides
    them) and its floor (MIN_HELDOUT; for a traffic suite whose gates say `detect`, the power planner's size, which
    the loop waits for), or why that cannot be counted (a recipe may gate each generation on its own contract)."""
    from mint.contract.planner import planned_size
    from mint.contract.schema import load_contract, read_suite, suite_cap
    from mint.data.split import HELDOUT_FRACTION, is_heldout
    from mint.loop.recipe import load_recipe

    recipe = load_recipe(folder / RECIPE)
    share = recipe.traffic_heldout or HELDOUT_FRACTION
    sizes = {}
    for step in recipe.steps:
        if step.kind != "eval":
            continue
        floors = (sizes.get(step.specialist) or {}).get("floors", {})   # each of its contracts' floor, by name
        contract_path = (recipe.path.parent / step.options["contract"]).resolve()
        contract = load_contract(contract_path)
        core = next((s for s in contract.suites if s.name == "core"), None)
        floor = MIN_HELDOUT
        if core is None:
            size = {"contract": str(contract_path), "examples": 0, "floor": floor, "why": "no suite named core"}
        elif core.traffic is not None:
            served = {r for batch in served_batches(folder) if _overlap(batch["iterations"], step)
                      for r in batch["requests"]}
            held = sum(is_heldout({"messages": [{"role": "user", "content": r}]}, share) for r in served)
            cap = suite_cap(contract, core, step.options.get("limit"))
            floor = planned_size(contract, core.name) or MIN_HELDOUT
            size = {"contract": str(contract_path), "examples": min(held, cap) if cap else held, "floor": floor,
                    "why": f"{core.source}: {held} of the {len(served)} requests served in its iterations held out "
                           f"at {share:g}, the planner's size {floor}, recipe limit {step.options.get('limit')}"}
        elif core.live:
            size = {"contract": str(contract_path), "examples": 0, "floor": floor,
                    "why": "a live suite: its size is known only once the loop ingested"}
        else:
            count = len(read_suite(contract, core, step.options.get("limit")))
            size = {"contract": str(contract_path), "examples": count, "floor": floor,
                    "why": f"{core.source}, suite limit {core.limit}, recipe limit {step.options.get('limit')}"}
        floors[f"{contract.name} v{contract.version}"] = size["floor"]
        earlier = sizes.get(step.specialist)
        if earlier is None or size["examples"] - size["floor"] < earlier["examples"] - earlier["floor"]:
            sizes[step.specialist] = {**size, "floors": floors}     # the evaluation nearest its floor
    return sizes


def _overlap(iterations: list, step) -> bool:
    """Whether a batch served in ``iterations`` ([from, until or None]) is served in a run of ``step``."""
    first, last = iterations
    return any(step.runs_in(i) for i in range(first, (last or max(first, step.until_iteration or first)) + 1))


def refuse_small_suites(sizes: dict[str, dict]) -> None:
    for specialist, size in sizes.items():
        if size["examples"] < size["floor"]:
            raise BadInput(f"the {specialist} evaluation would measure {size['examples']} held-out examples "
                           f"({size['why']}); the benchmark needs at least {size['floor']} (a smoke run with "
                           "--base tiny-random has no floor)", file=size["contract"], field="suites.core")


def served_batches(folder: Path) -> list[dict]:
    """Each serve step's request file, the iterations it serves in, and its requests' normalized texts."""
    from mint.loop.experience import jsonl_prompts
    from mint.loop.recipe import load_recipe

    recipe = load_recipe(folder / RECIPE)
    batches = []
    for step in recipe.steps:
        if step.kind == "serve":
            path = (recipe.path.parent / step.options["requests"]).resolve()
            prompts = jsonl_prompts(path)
            batches.append({"file": str(path), "iterations": [step.from_iteration, step.until_iteration],
                            "requests": [p.prompt[-1]["content"] for p in prompts], "keys": [p.key for p in prompts]})
    return batches


def refuse_overlapping_requests(folder: Path, batches: list[dict]) -> dict:
    """The served requests must be new: in no log or held-out file of the project, and in one batch only."""
    known = known_requests(folder)
    for batch in batches:
        clash = clashes(batch["requests"], known)
        if clash:
            raise BadInput(f"{len(clash)} request(s) appear in the project's examples/logs or examples/heldout, "
                           f"e.g. {clash[0]!r}: regenerate with scripts/make_demo_requests.py", file=batch["file"])
    for i, first in enumerate(batches):
        for second in batches[i + 1:]:
            shared = set(first["keys"]) & set(second["keys"])
            if shared:
                raise BadInput(f"{len(shared)} request(s) are also in {second['file']}, e.g. {sorted(shared)[0]!r}: "
                               "each generation serves its own", file=first["file"])
    return {"batches": [{"file": b["file"], "iterations": b["iterations"], "requests": len(b["requests"])}
                        for b in batches],
            "checked_against": "examples/logs, examples/heldout and each other (no request in two)"}


# --- running ------------------------------------------------------------------------------------------

def run_mint(label: str, args: list[str], cwd: Path, timings: dict) -> str:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "mint", *args], cwd=cwd, env=env, capture_output=True, text=True)
    timings[label] = round(time.perf_counter() - began, 2)
    if done.returncode == 2:        # mint refused its input (a --keep that is a file, a bad recipe): say why
        raise BadInput(f"{label}: {done.stderr.strip()[-2000:]}")
    if done.returncode not in (0, 1):
        raise MintError(f"{label}: exit {done.returncode}\n{done.stderr[-3000:]}")
    print(f"  {label}: {timings[label]:.0f}s", file=sys.stderr, flush=True)
    return done.stdout


# --- the figures --------------------------------------------------------------------------------------

def _step_output(loop: dict, iteration: int, label: str) -> dict | None:
    for step in loop["steps"]:
        if step["iteration"] == iteration and step["label"] == label and step["status"] != "waiting":
            return step["output"]
    return None


def _interval(paired: dict | None) -> list | None:
    return paired.get("interval") if paired else None


def generation_figures(ws, loop: dict) -> dict[str, dict]:
    """Per specialist and generation: the primary metric from the registered report, its paired delta against the
    previous generation and against the baseline its gates used, the verdict, the experience pool, the twin,
    and the retention figures of a promoted generation."""
    from mint.loop.placebo import paired_on_examples
    from mint.loop.results import EvalOutput

    out: dict[str, dict] = {}
    for row in loop["generations"]:
        specialist, iteration = row["specialist"], row["iteration"]
        evaluation = _step_output(loop, iteration, f"eval {specialist}")
        decision = _step_output(loop, iteration, f"promote {specialist}") or {}
        entry = out.setdefault(specialist, {"metric": None, "contract": None, "generations": []})
        previous = entry["generations"][-1] if entry["generations"] else None
        figures = {"generation": iteration, "revision": row["candidate"], "value": None, "examples": None,
                   "vs_previous_generation": None, "vs_baseline": None, "baseline": row["baseline"],
                   "verdict": decision.get("action") or "not decided", "reason": decision.get("reason"),
                   "experience": row["experience"], "twin": None, "retention": [], "backward_transfer": []}
        entry["generations"].append(figures)
        if not evaluation:
            continue
        evaluation = EvalOutput.from_dict(evaluation)
        report = own_report(ws, evaluation)
        metric = evaluation.primary_metric
        if report is None or metric is None:
            figures["reason"] = "no registered report" if report is None else "its contract gates no quality metric"
            continue
        entry.update(metric=metric, contract=f"{report.contract.name} v{report.contract.version}")
        figures.update(value=report.metrics.get(metric), examples=report.examples, report=report.path,
                       contract=f"{report.contract.name} v{report.contract.version}")
        gates = {g.metric: g for g in report.gates}
        gate = gates.get(metric)
        figures["vs_baseline"] = {"delta": gate.paired_delta if gate else None, "interval": gate.interval if gate
                                  else None}
        if previous is None:            # generation 1's baseline is generation 0, the bare base
            figures["vs_previous_generation"] = {**figures["vs_baseline"], "against": "base (generation 0)"}
        elif previous.get("contract") != figures["contract"]:
            # the traffic drifted and the contract followed: the previous generation was measured under this
            # contract as the baseline (the champion), so the gate's own paired delta compares the two
            figures["vs_previous_generation"] = {**figures["vs_baseline"],
                                                 "against": f"{row['baseline']} under {figures['contract']}"}
        elif previous.get("report"):
            paired = paired_on_examples(report.path, previous["report"], metric)
            paired.pop("significant_gain")
            figures["vs_previous_generation"] = {**paired, "against": previous["revision"]}
        twin = row.get("twin")
        if twin:
            figures["twin"] = {"revision": twin.get("revision"), "verdict": twin.get("verdict"),
                               **(twin.get("vs_twin") or {"why": twin.get("why")})}
            control = twin.get("steps_control")
            if isinstance(control, dict):     # the same steps on the logs alone
                figures["steps_control"] = {"revision": control.get("revision"), **(control.get("vs_control") or {})}
        elif iteration > 1:
            plan = (row.get("experience") or {}).get("plan") or {}
            figures["twin"] = {"verdict": "not measured", "why": "the experience found no new verified answer, so "
                               "nothing was trained on it" if not plan.get("max_steps") else
                               "the generation failed its contract, so its controls were not trained"
                               if figures["verdict"] != "promoted" else "no twin in the loop"}
        if figures["verdict"] == "promoted":
            for name, gate in gates.items():
                if name.startswith("retention.") and not name.endswith(".examples"):
                    figures["retention"].append({"metric": name, "delta": gate.paired_delta, "interval": gate.interval,
                                                 "against": row["baseline"]})
            for transfer in evaluation.backward_transfer:
                if "delta" in transfer:
                    figures["backward_transfer"].append(
                        {"metric": transfer["metric"], "against": transfer["introduced_by"],
                         "delta": transfer["delta"]["delta"],
                         "interval": [transfer["delta"]["low"], transfer["delta"]["high"]]})
    return out


def own_report(ws, evaluation):
    """The report a generation's own evaluation registered. Not its revision's newest: the next generation measures
    it again as its baseline, under that generation's contract, and that report holds no verdict of its own."""
    from mint.registry import queries
    from mint.registry.report import read_report

    try:
        return read_report(Path(evaluation.report))
    except BadInput:        # its file is gone: the newest that still reads
        return queries.newest_report(ws, evaluation.revision_id)


def step_times(loop: dict, timings: dict) -> dict:
    steps = [{"iteration": s["iteration"], "step": s["label"], "status": s["status"], "seconds": s["seconds"]}
             for s in loop["steps"] if s["status"] != "waiting"]
    ran = sum(s["seconds"] for s in steps)
    total = sum(timings.values())
    return {"steps": steps, "mint init": timings.get("mint init"), "mint loop": timings.get("mint loop"),
            "loop start-up and bookkeeping": round(timings.get("mint loop", 0) - ran, 2), "total": round(total, 2)}


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def goals(specialists: dict, sizes: dict, wall: dict) -> list[dict]:
    """Each of the benchmark's goals: what it asks, the figure, PASS or MISS."""
    rows = []

    def goal(text: str, figure: str, met: bool) -> None:
        rows.append({"goal": text, "figure": figure, "status": "PASS" if met else "MISS"})

    # the core examples each evaluation's registered report counts (before the loop ran: the suite's size), each
    # against its own contract's floor; per specialist, the evaluation nearest its floor
    measured = {}
    for specialist, size in sizes.items():
        floors, floor = size.get("floors") or {}, size.get("floor", MIN_HELDOUT)
        counted = [(g["examples"]["core"], floors.get(g.get("contract"), floor))
                   for g in (specialists.get(specialist) or {}).get("generations", [])
                   if isinstance(g.get("examples"), dict) and _number(g["examples"].get("core"))]
        measured[specialist] = min(counted, key=lambda c: c[0] - c[1]) if counted else (size["examples"], floor)
    goal(f"every evaluation on at least {MIN_HELDOUT} held-out examples (a suite drawn from the traffic: the power "
         "planner's size for its gates)", ", ".join(f"{s} {n} (floor {f})" for s, (n, f) in measured.items()),
         all(n >= f for n, f in measured.values()))

    ordered = []
    for specialist, entry in specialists.items():
        by = {g["generation"]: g for g in entry["generations"]}
        two, three = by.get(2, {}).get("vs_previous_generation"), by.get(3, {}).get("vs_previous_generation")
        above = bool(two) and _number((two.get("interval") or [None])[0]) and two["interval"][0] > 0
        kept = bool(three) and _number(three.get("delta")) and three["delta"] >= 0
        ordered.append((specialist, above and kept,
                        f"{specialist}: 2 vs 1 {_fmt_paired(two)}, 3 vs 2 {_fmt_paired(three)}"))
    goal("generation 3 >= generation 2 > generation 1 on at least one specialist (2 above 1: paired interval "
         "above 0; 3 at least 2: delta >= 0)", "; ".join(f for _, _, f in ordered) or "-",
         any(met for _, met, _ in ordered))

    deltas = [(s, g) for s, e in specialists.items() for g in e["generations"]]
    goal("every generation's delta against the previous one, with its 95% interval",
         f"{sum(1 for _, g in deltas if _interval(g['vs_previous_generation']))} of {len(deltas)}",
         bool(deltas) and all(_interval(g["vs_previous_generation"]) for _, g in deltas))

    later = [(s, g) for s, g in deltas if g["generation"] > 1]
    twins = [(s, g) for s, g in later if g["twin"] and _interval(g["twin"])]
    goal("every generation after the first against its placebo twin",
         "; ".join(f"{s} {g['generation']}: {_fmt_paired(g['twin'])} {g['twin']['verdict']}" for s, g in later
                   if g["twin"]) or "-", bool(later) and len(twins) == len(later))

    retained = [(s, g["generation"], r) for s, g in deltas for r in g["retention"] + g["backward_transfer"]]
    worst = min((r["delta"] for _, _, r in retained if _number(r["delta"])), default=None)
    goal(f"backward transfer on the retention suites >= {GOAL_BACKWARD_TRANSFER} (each promoted generation "
         "against the previous champion and against the generation that introduced the suite)",
         f"worst {worst:+.3f} over {len(retained)} figure(s)" if worst is not None else "no promoted generation",
         worst is not None and worst >= GOAL_BACKWARD_TRANSFER)

    goal(f"wall time at most {GOAL_WALL_S // 60} min on 2 cores", f"{wall['total'] / 60:.1f} min",
         wall["total"] <= GOAL_WALL_S)
    return rows


# --- printing -----------------------------------------------------------------------------------------

def _fmt(value, signed: bool = False) -> str:
    if not _number(value):
        return "-"
    return f"{value:+.3f}" if signed else f"{value:.3f}"


def _fmt_paired(paired: dict | None) -> str:
    if not paired or not _number(paired.get("delta")):
        return "-"
    interval = paired.get("interval") or [None, None]
    return f"{_fmt(paired['delta'], True)} [{_fmt(interval[0], True)}, {_fmt(interval[1], True)}]"


def render(result: dict) -> None:
    m = result["machine"]
    print(f"machine: {m['cpu']}, {m['cores']} cores, flags {', '.join(m['flags']) or '-'}; torch {m['torch']}")
    print(f"mode: {result['mode']}; project {result['folder']}")
    for batch in result["requests"]["batches"]:
        print(f"served in iterations {batch['iterations'][0]}-{batch['iterations'][1] or ''}: "
              f"{batch['requests']} requests from {batch['file']}")
    print(f"experience sources: {result['experience_sources']}")
    for specialist, entry in result["specialists"].items():
        print(f"\n{specialist} ({entry['contract']}, {entry['metric']}, "
              f"{result['heldout'][specialist]['examples']} held-out)")
        print(f"  {'gen':<4}{'revision':<11}{'value':>7}  {'vs previous generation':<28}{'verdict':<10}"
              f"{'pass@1':>7}{'pass@k':>7}{'accepted':>9}{'between':>8}  vs twin")
        for g in entry["generations"]:
            pool = (g["experience"] or {}).get("pool") or {}
            k = pool.get("k")
            twin = g["twin"] or {}
            twin_text = f"{_fmt_paired(twin)} {twin.get('verdict', '')}" if twin.get("delta") is not None \
                else twin.get("verdict", "-") + (f" ({twin['why']})" if twin.get("why") else "")
            print(f"  {g['generation']:<4}{g['revision'] or '-':<11}{_fmt(g['value']):>7}  "
                  f"{_fmt_paired(g['vs_previous_generation']):<28}{g['verdict']:<10}"
                  f"{_fmt(pool.get('pass@1')):>7}{_fmt(pool.get(f'pass@{k}')):>7}"
                  f"{str((g['experience'] or {}).get('accepted', '-')):>9}{str(pool.get('prompts_between', '-')):>8}"
                  f"  {twin_text}")
            if g.get("steps_control"):
                print(f"       vs the steps control {g['steps_control'].get('revision')} (the same steps on the logs "
                      f"alone): {_fmt_paired(g['steps_control'])}")
            for r in g["retention"] + g["backward_transfer"]:
                print(f"       retention {r['metric']} vs {r['against']}: {_fmt_paired(r)}")
    wall = result["wall_s"]
    print(f"\n{'iter':<5}{'step':<22}{'status':<9}{'seconds':>8}")
    for s in wall["steps"]:
        print(f"{s['iteration']:<5}{s['step']:<22}{s['status']:<9}{s['seconds']:>8.1f}")
    print(f"mint init {wall['mint init']:.0f}s, mint loop {wall['mint loop']:.0f}s (start-up and bookkeeping "
          f"{wall['loop start-up and bookkeeping']:.0f}s), total {wall['total']:.0f}s = {wall['total'] / 60:.1f} min")
    print("\ngoals" + ("" if result["mode"] == "benchmark" else " (a smoke run: not the benchmark)"))
    for g in result["goals"]:
        print(f"  {g['status']:<5} {g['goal']}: {g['figure']}")


# --- main ---------------------------------------------------------------------------------------------

def experience_sources(loop: dict) -> dict[str, list[str]]:
    """Which prompt sources each specialist's experience read, as its steps recorded them."""
    found: dict[str, set] = {}
    for step in loop["steps"]:
        if step["label"].startswith("experience ") and step["status"] != "waiting":
            found.setdefault(step["label"].split()[1], set()).update((step["output"].get("sources") or {}).keys())
    return {s: sorted(names) for s, names in found.items()}


def bench(args) -> dict:
    from mint.workspace import workspace

    folder = args.keep or Path(tempfile.mkdtemp(prefix="mint-selfimprove-bench-"))
    timings: dict[str, float] = {}
    run_mint("mint init", ["init", "--dir", str(folder)], ROOT, timings)
    if args.json_path and not args.json_path.absolute().parent.is_dir():   # found out now, not after the run
        raise BadInput("no such folder for the figures", file=str(args.json_path), field="--json")
    changed = apply_budget(folder, args)
    sizes = heldout_sizes(folder)
    if not changed:
        refuse_small_suites(sizes)
    requests = refuse_overlapping_requests(folder, served_batches(folder))
    loop = json.loads(run_mint("mint loop", ["loop", RECIPE, "--json"], folder, timings))
    specialists = generation_figures(workspace(folder / ".mint"), loop)
    wall = step_times(loop, timings)
    return {"mode": "benchmark" if not changed else f"smoke ({', '.join(changed)})", "folder": str(folder),
            "machine": machine(), "recipe": RECIPE, "heldout": sizes, "requests": requests,
            "experience_sources": experience_sources(loop), "loop_exit_code": loop["exit_code"],
            "specialists": specialists, "wall_s": wall, "goals": goals(specialists, sizes, wall)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default=DEFAULT_BASE, help=f"the base (default {DEFAULT_BASE}; tiny-random: a "
                                                             "smoke run)")
    parser.add_argument("--keep", type=Path, help="run in this (new) folder and keep it")
    parser.add_argument("--json", type=Path, dest="json_path", help="also write the figures to this file")
    for name, what in (("--steps", "every training's max_steps"), ("--limit", "every evaluation's limit"),
                       ("--prompts", "every experience step's prompts"),
                       ("--max-new-tokens", "experience and serving tokens per answer")):
        parser.add_argument(name, type=int, help=f"a smoke run's {what}")
    args = parser.parse_args(argv)
    try:
        result = bench(args)
        if args.json_path:
            args.json_path.write_text(json.dumps(result, indent=2, default=str) + "\n", encoding="utf-8")
    except MintError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    render(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
