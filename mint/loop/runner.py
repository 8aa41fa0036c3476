"""`mint loop`: run a recipe's steps for N iterations, unattended, idempotent and resumable.

Every step's output is recorded in the loop's state under a key made of the step's own
settings and the content of its inputs (the dataset version it reads, the champion it
continues from, the candidate and contract it evaluates). A step whose key is already
recorded is skipped and its recorded output reused, so a rerun on unchanged inputs does
nothing and a killed loop continues where it stopped. One lock per workspace: a second
`mint loop` exits 1 naming the holder.
"""
from __future__ import annotations

import fcntl
import hashlib
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from mint.errors import BadInput, Refused
from mint.faults import checkpoint as fault_point
from mint.loop.recipe import Recipe, Step, load_recipe
from mint.workspace import Workspace, atomic_write_json

LoopEvents = Callable[[dict], None]
STATE_FILE = "state.json"


@dataclass(frozen=True)
class StepOutcome:
    iteration: int
    index: int
    label: str
    status: str                 # ran | skipped (inputs unchanged) | waiting (before from_iteration) | failed
    seconds: float
    output: dict


@dataclass(frozen=True)
class GenerationRow:
    """One specialist in one iteration: the candidate, its gated metrics against the baseline, the verdict."""

    iteration: int
    specialist: str
    candidate: str | None
    verdict: str | None
    champion_after: str | None
    baseline: str | None
    metrics: dict[str, dict]    # metric -> {value, baseline, delta, interval}
    reason: str | None = None


@dataclass(frozen=True)
class LoopResult:
    recipe: str
    status: str                 # ran | nothing new | dry run
    iterations: int
    exit_code: int
    steps: list[StepOutcome] = field(default_factory=list)
    generations: list[GenerationRow] = field(default_factory=list)
    plan: list[dict] = field(default_factory=list)
    state_file: str = ""
    message: str = ""
    # `mint monitor`'s alerts on the workspace's served logs (routing share shift, max share): a warning to
    # read with the verdicts, never a failure of the loop
    alerts: list[str] = field(default_factory=list)


def _sha(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


# --- the workspace lock --------------------------------------------------------------------------

HOLDER_WAIT_S = 2.0   # how long a refused loop waits for the holder to write its name into the lock file


class LoopLock:
    """An exclusive, non-blocking lock on the workspace; its file names the holder."""

    def __init__(self, ws: Workspace) -> None:
        self.path = ws.home / "loop.lock"
        self.handle = None

    def __enter__(self) -> "LoopLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            who = self._holder(handle)
            handle.close()
            raise Refused(f"another `mint loop` holds the workspace lock {self.path} ({who})") from None
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                 "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}))
        handle.flush()
        self.handle = handle
        return self

    @staticmethod
    def _holder(handle) -> str:
        """Who holds the lock, from its file. The holder writes its name just after taking the lock, so a
        loop refused in between reads an empty file: wait briefly for the name rather than report nobody."""
        deadline = time.monotonic() + HOLDER_WAIT_S
        while True:
            handle.seek(0)
            try:
                info = json.loads(handle.read())
                return f"host {info['host']}, pid {info['pid']}, since {info['since']}"
            except (ValueError, KeyError, TypeError):
                if time.monotonic() >= deadline:
                    return "another process"
            time.sleep(0.02)

    def __exit__(self, *exc) -> None:
        if self.handle is not None:
            self.handle.seek(0)
            self.handle.truncate()
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()


# --- state -------------------------------------------------------------------------------------------

class LoopState:
    """``$MINT_HOME/loops/<recipe>/state.json``: finished steps by key, and the last run's start and end."""

    def __init__(self, ws: Workspace, recipe: Recipe) -> None:
        self.path = ws.home / "loops" / recipe.name / STATE_FILE
        try:
            data = json.loads(self.path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            data = {}
        except (OSError, ValueError) as exc:
            raise BadInput(f"unreadable loop state ({exc}); move it away to start over", file=str(self.path)) \
                from None
        self.steps: dict[str, dict] = data.get("steps", {})
        self.last_run: dict = data.get("last_run", {})
        self.runs: list[dict] = data.get("runs", [])

    def save(self) -> None:
        atomic_write_json(self.path, {"steps": self.steps, "last_run": self.last_run, "runs": self.runs[-50:]})


# --- the loop ----------------------------------------------------------------------------------------

def run_loop(ws: Workspace, recipe_path: Path, *, iterations: int | None = None, resume: bool = False,
             dry_run: bool = False, events: LoopEvents | None = None) -> LoopResult:
    """Run ``recipe_path``; see the module docstring. Exit code 1 only when a fatal step failed its contract."""
    from mint.project import load_project

    recipe_path = Path(recipe_path)
    project_file = _project_file(recipe_path)
    project = load_project(project_file)
    recipe = load_recipe(recipe_path, specialists=project.names + ("router",))
    if iterations is not None and iterations < 1:
        raise BadInput("must be at least 1", field="--iterations")
    total = iterations or recipe.iterations
    emit = events or (lambda event: None)
    context = _Context(ws, recipe, project, emit)

    if dry_run:
        state = LoopState(ws, recipe)
        start = context.state_key()
        unchanged = bool(state.last_run.get("finished")) and state.last_run.get("end") == start and not resume
        plan = [{"iteration": it, "step": s.index, "label": s.label,
                 "will": "wait" if not s.runs_in(it) else ("skip: nothing new" if unchanged else "run")}
                for it in range(1, total + 1) for s in recipe.steps]
        return LoopResult(recipe.name, "dry run", total, 0, plan=plan, state_file=str(state.path),
                          message="nothing new since the last completed run" if unchanged else "")

    with LoopLock(ws):
        if recipe.description:
            emit({"event": "note", "message": recipe.description})
        state = LoopState(ws, recipe)
        start = context.state_key()
        if not resume and state.last_run.get("finished") and state.last_run.get("end") == start:
            return LoopResult(recipe.name, "nothing new", 0, 0, state_file=str(state.path),
                              message="the recipe, its sources and the champions are as the last completed run "
                                      "left them: nothing to do", alerts=routing_alerts(ws, project))
        first = 1
        if resume:
            if state.last_run and not state.last_run.get("finished"):
                first = int(state.last_run.get("iteration", 1))
            else:
                emit({"event": "note", "message": "no unfinished run to resume; starting a new one"})
        state.last_run = {"start": start, "finished": False, "iteration": first, "iterations": total,
                          "started_at": _now(), "pid": os.getpid()}
        state.save()
        outcomes, generations, exit_code = [], [], 0
        for iteration in range(first, total + 1):
            state.last_run["iteration"] = iteration
            state.save()
            context.begin_iteration(iteration)
            for step in recipe.steps:
                outcome = context.run_step(step, iteration, state)
                outcomes.append(outcome)
                if outcome.status == "failed" and step.fatal:
                    exit_code = 1
            generations += context.generation_rows(iteration)
        state.last_run.update(finished=True, end=context.state_key(), finished_at=_now())
        state.runs.append(dict(state.last_run))
        state.save()
        return LoopResult(recipe.name, "ran", total - first + 1, exit_code, outcomes, generations,
                          state_file=str(state.path), alerts=routing_alerts(ws, project))


def routing_alerts(ws: Workspace, project) -> list[str]:
    """`mint monitor`'s alerts for the last day of served turns, with the thresholds of ``mint.yaml``."""
    from mint.mol.monitor import monitor

    return list(monitor(ws, project, window="1d").alerts)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _project_file(recipe_path: Path) -> Path | None:
    for folder in (recipe_path.parent, recipe_path.parent.parent):
        if (folder / "mint.yaml").is_file():
            return folder / "mint.yaml"
    return None


class _Context:
    """What the steps of one iteration hand each other: candidates, reports, the dataset version."""

    def __init__(self, ws: Workspace, recipe: Recipe, project, emit: LoopEvents) -> None:
        self.ws, self.recipe, self.project, self.emit = ws, recipe, project, emit
        self.base = recipe.base or project.base
        self.candidates: dict[str, dict] = {}
        self.evaluations: dict[str, dict] = {}
        self.decisions: dict[str, dict] = {}

    # inputs, fingerprinted
    def sources(self, step: Step) -> list[Path]:
        paths = []
        for source in step.options["sources"]:
            expanded = os.path.expandvars(source.replace("$MINT_HOME", str(self.ws.home)))
            path = Path(expanded)
            paths.append(path if path.is_absolute() else self.recipe.path.parent / path)
        return paths

    def sources_fingerprint(self, step: Step) -> list:
        seen = []
        for root in self.sources(step):
            files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file()) \
                if root.is_dir() else []
            for path in files:
                stat = path.stat()
                seen.append([str(path), stat.st_size, stat.st_mtime_ns])
        return seen

    def dataset_version(self) -> str | None:
        from mint.data.datasets import dataset_dir, read_head

        try:
            return read_head(dataset_dir(self.ws, self.recipe.dataset))
        except BadInput:
            return None

    def champions(self) -> dict[str, str | None]:
        from mint.registry import store

        if not store.db_path(self.ws).exists():
            return {s: None for s in self.recipe.specialists}
        conn = store.open_store(self.ws)
        try:
            return {s: store.alias_target(conn, s, "champion") for s in self.recipe.specialists}
        finally:
            conn.close()

    def state_key(self) -> str:
        sources = [self.sources_fingerprint(s) for s in self.recipe.steps if s.kind == "ingest"]
        return _sha(self.recipe.sha256, sources, self.champions())

    def begin_iteration(self, iteration: int) -> None:
        self.candidates, self.evaluations, self.decisions = {}, {}, {}
        self.iteration = iteration

    # one step
    def run_step(self, step: Step, iteration: int, state: LoopState) -> StepOutcome:
        if not step.runs_in(iteration):
            return StepOutcome(iteration, step.index, step.label, "waiting", 0.0,
                               {"note": f"runs in iterations {step.from_iteration}–{step.until_iteration or ''}"})
        key = self.step_key(step)
        if key is None:
            return StepOutcome(iteration, step.index, step.label, "waiting", 0.0,
                               {"note": "nothing to do: no candidate from an earlier step"})
        began = time.perf_counter()
        if key in state.steps:
            output = state.steps[key]
            self.absorb(step, output)
            self.emit({"event": "skip", "iteration": iteration, "step": step.label})
            return StepOutcome(iteration, step.index, step.label, "skipped", 0.0, output)
        self.emit({"event": "start", "iteration": iteration, "step": step.label})
        output = getattr(self, f"_run_{step.kind}")(step)
        self.absorb(step, output)
        state.steps[key] = output
        state.save()
        fault_point(f"loop.{iteration}.{step.index}")
        seconds = round(time.perf_counter() - began, 2)
        failed = step.kind in ("eval", "promote") and output.get("verdict") == "fail"
        self.emit({"event": "end", "iteration": iteration, "step": step.label, "seconds": seconds, "output": output})
        return StepOutcome(iteration, step.index, step.label, "failed" if failed else "ran", seconds, output)

    def step_key(self, step: Step) -> str | None:
        o, s = step.options, step.specialist
        if step.kind == "ingest":
            return _sha("ingest", self.recipe.dataset, o.get("format", "auto"), self.sources_fingerprint(step))
        if step.kind == "experience":
            return _sha("experience", s, o, self.dataset_version(), self.champions().get(s), self.base)
        if step.kind == "train":
            parent = self.champions().get(s) if o.get("from", "champion") == "champion" else None
            return _sha("train", s, o, self.dataset_version(), parent, self.base)
        if step.kind == "eval":
            candidate = self.candidates.get(s)
            if candidate is None:
                return None
            contract = self.recipe.path.parent / o["contract"]
            return _sha("eval", candidate["revision_id"], hashlib.sha256(contract.read_bytes()).hexdigest(),
                        o.get("limit"))
        if step.kind == "promote":
            evaluation = self.evaluations.get(s)
            if evaluation is None:
                return None
            return _sha("promote", evaluation["revision_id"], evaluation["report"])
        if step.kind == "route":
            return _sha("route", o, self.routing_labels(), self.base)
        raise AssertionError(step.kind)

    def absorb(self, step: Step, output: dict) -> None:
        if step.kind == "train" and output.get("revision_id"):
            self.candidates[step.specialist] = output
        elif step.kind == "eval":
            self.evaluations[step.specialist] = output
        elif step.kind == "promote":
            self.decisions[step.specialist] = output

    # the steps themselves: each calls one library function
    def _run_ingest(self, step: Step) -> dict:
        from mint.data.ingest import ingest

        missing = [str(p) for p in self.sources(step) if not p.exists()]
        paths = [p for p in self.sources(step) if p.exists()]
        if not paths:
            return {"version": self.dataset_version(), "created": False, "episodes_added": 0, "missing": missing}
        result = ingest(self.ws, paths, dataset=self.recipe.dataset, fmt=step.options.get("format", "auto"),
                        project=self.project)
        return {"version": result.version, "created": result.created, "episodes_added": result.episodes_added,
                "quarantined": result.quarantined_new, "missing": missing}

    def _run_experience(self, step: Step) -> dict:
        from mint.loop.experience import gather_experience

        return gather_experience(self.ws, dataset=self.recipe.dataset, specialist=step.specialist, base=self.base,
                                 project=self.project, **{k: v for k, v in step.options.items() if k != "specialist"})

    def _run_train(self, step: Step) -> dict:
        from mint.train.run import train

        o = step.options
        parent = self.champions().get(step.specialist) if o.get("from", "champion") == "champion" else None
        # continuing from a champion keeps its adapter's LoRA shape: lora.* settings apply to a new adapter only
        sets = [f"{k}={v}" for k, v in (o.get("set") or {}).items() if not (parent and str(k).startswith("lora."))]
        result = train(self.ws, specialist=step.specialist, data=self.recipe.dataset, method=o["method"],
                       from_ref=parent, base=None if parent else self.base, sets=sets)
        return {"revision": result.ref, "revision_id": result.revision_id, "run": result.run,
                "parent": parent, "steps": result.steps, "examples": result.examples,
                "train_loss": result.metrics.get("train_loss")}

    def _run_eval(self, step: Step) -> dict:
        """The candidate under its contract, then on every earlier generation's retention suites."""
        from mint.contract.evaluate import evaluate
        from mint.contract.forgetting import backward_transfer
        from mint.contract.schema import load_contract

        candidate = self.candidates[step.specialist]
        contract_path = self.recipe.path.parent / step.options["contract"]
        result = evaluate(self.ws, candidate["revision"], contract_path, limit=step.options.get("limit"))
        report = result.report
        transfer = backward_transfer(self.ws, load_contract(contract_path), candidate["revision"],
                                     Path(result.report_path), base=self.base)
        return {"revision": candidate["revision"], "revision_id": candidate["revision_id"],
                "report": result.report_path, "verdict": report.verdict, "metrics": report.metrics,
                "baseline": report.baseline.to_dict(), "gates": report.gates,
                "backward_transfer": transfer, **({"live_suites": report.live_suites} if report.live_suites else {})}

    def _run_promote(self, step: Step) -> dict:
        from mint.contract.identity import contract_identity
        from mint.registry.promotion import promote, reject

        evaluation = self.evaluations[step.specialist]
        ref = evaluation["revision"]
        hacked = self.guard(step.specialist, evaluation) if evaluation["verdict"] == "pass" else None
        if hacked is None and evaluation["verdict"] == "pass":
            from mint.contract.forgetting import forgetting_reason

            hacked = forgetting_reason(evaluation.get("backward_transfer") or [])
        if hacked:
            reject(self.ws, ref, why=hacked)
            return {"action": "rejected", "revision": ref, "verdict": "fail", "reason": hacked,
                    "champion": self.champion_ref(step.specialist)}
        if evaluation["verdict"] != "pass":
            failing = [g for g in evaluation["gates"] if not g.get("passed")]
            why = "failed gates: " + "; ".join(f"{g.get('metric')} ({g.get('rule')})" for g in failing) \
                if failing else "failed its contract"
            reject(self.ws, ref, why=why)
            return {"action": "rejected", "revision": ref, "verdict": "fail", "reason": why,
                    "champion": self.champion_ref(step.specialist)}
        try:
            promote(self.ws, ref, report_path=Path(evaluation["report"]), identify_contract=contract_identity)
        except Refused as exc:
            return {"action": "refused", "revision": ref, "verdict": "fail", "reason": str(exc),
                    "champion": self.champion_ref(step.specialist)}
        return {"action": "promoted", "revision": ref, "verdict": "pass", "reason": None,
                "champion": self.champion_ref(step.specialist)}

    def guard(self, specialist: str, evaluation: dict) -> str | None:
        """The reward-hacking guard on the candidate's training run and its answers against the baseline's."""
        from mint.loop.guards import reward_hacking
        from mint.registry import store

        metric = next((g.get("metric") for g in evaluation["gates"] if isinstance(g.get("metric"), str)
                       and not g["metric"].startswith("latency.") and g["metric"] in evaluation["metrics"]), None)
        if metric is None:
            return None
        gate = next(g for g in evaluation["gates"] if g.get("metric") == metric)
        baseline_value = gate.get("baseline", (evaluation.get("baseline") or {}).get("metrics", {}).get(metric))
        candidate = self.candidates.get(specialist) or {}
        run_dir = self.ws.home / "runs" / candidate["run"] if candidate.get("run") else None
        predictions = Path(evaluation["report"]).parent / "predictions.jsonl"
        baseline_predictions = None
        baseline_id = (evaluation.get("baseline") or {}).get("revision_id")
        if baseline_id and store.db_path(self.ws).exists():
            conn = store.open_store(self.ws)
            try:
                rows = store.reports_for(conn, baseline_id)
            finally:
                conn.close()
            for row in reversed(rows):
                candidate_file = Path(row["path"]).parent / "predictions.jsonl"
                if candidate_file.is_file():
                    baseline_predictions = candidate_file
                    break
        return reward_hacking(metric=metric, value=evaluation["metrics"].get(metric), baseline=baseline_value,
                              run_dir=run_dir, predictions=predictions, baseline_predictions=baseline_predictions)

    def _run_route(self, step: Step) -> dict:
        from mint.contract.identity import contract_identity
        from mint.mol.router_training import train_router
        from mint.registry.promotion import promote, reject

        contract = step.options.get("contract")
        if contract is None:        # the project's router contract, beside its mint.yaml
            folder = self.project.path.parent if self.project.path else Path.cwd()
            contract = folder / "contracts" / "router.yaml"
        contract = self.recipe.path.parent / contract
        sets = [f"contract={contract}"] if contract.is_file() else []
        result = train_router(self.ws, data=self.recipe.dataset, base=self.base, sets=sets, project=self.project)
        verdict = result.metrics.get("verdict")
        output = {"revision": result.ref, "revision_id": result.revision_id, "verdict": verdict,
                  "examples": result.examples,
                  "metrics": {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}}
        if verdict == "pass":
            try:
                promote(self.ws, result.ref, identify_contract=contract_identity)
                output["action"] = "promoted"
            except Refused as exc:
                output.update(action="refused", reason=str(exc))
        elif verdict == "fail":
            reject(self.ws, result.ref, why="failed contracts/router.yaml")
            output.update(action="rejected", reason="failed contracts/router.yaml")
        output["champion"] = self.champion_ref("router")
        return output

    def routing_labels(self) -> str:
        """A digest of (turn, specialist) pairs: the router is retrained only when what it learns from changed."""
        from mint.data.datasets import iter_episodes

        pairs = set()
        try:
            for episode in iter_episodes(self.ws, self.recipe.dataset, None):
                user = [m.get("content") for m in episode.get("messages", []) if m.get("role") == "user"]
                if user and isinstance(user[-1], str):
                    pairs.add((hashlib.sha256(user[-1].encode("utf-8", "replace")).hexdigest(), episode["specialist"]))
        except BadInput:
            return ""
        return _sha(sorted(pairs))

    def champion_ref(self, specialist: str) -> str | None:
        from mint.registry import store

        conn = store.open_store(self.ws)
        try:
            target = store.alias_target(conn, specialist, "champion")
            return store.get_revision(conn, target).ref if target else None
        finally:
            conn.close()

    def generation_rows(self, iteration: int) -> list[GenerationRow]:
        from mint.reports import gate_delta

        rows = []
        for specialist, evaluation in self.evaluations.items():
            decision = self.decisions.get(specialist, {})
            baseline = evaluation.get("baseline") or {}
            base_metrics = baseline.get("metrics") or {}
            metrics = {}
            for gate in evaluation["gates"]:
                name = gate.get("metric")
                if not name or name.startswith("latency.") or name not in evaluation["metrics"]:
                    continue
                value, before = evaluation["metrics"].get(name), gate.get("baseline", base_metrics.get(name))
                delta, interval = gate_delta(gate)
                if delta is None and value is not None and before is not None:
                    delta = value - before
                metrics[name] = {"value": value, "baseline": before, "delta": delta, "interval": interval}
            rows.append(GenerationRow(iteration, specialist, evaluation["revision"], evaluation["verdict"],
                                      decision.get("champion") or self.champion_ref(specialist),
                                      baseline.get("revision_id") or "base", metrics, decision.get("reason")))
        return rows
