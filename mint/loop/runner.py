"""`mint loop`: run a recipe's steps for N iterations, unattended, idempotent and resumable.

Every step's output is recorded in the loop's state under a key made of the step's own
settings and the content of its inputs (the dataset version it reads, the champion it
continues from, the candidate and contract it evaluates). A step whose key is already
recorded is skipped and its recorded output reused, so a rerun on unchanged inputs does
nothing and a killed loop continues where it stopped. One lock per workspace: a second
`mint loop` exits 1 naming the holder.
"""
from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, TextIO

from mint.errors import BadInput, Refused
from mint.faults import checkpoint as fault_point
from mint.loop.estimate import Done, Estimate
from mint.loop.history import generation_records, read_state, state_path
from mint.loop.recipe import Recipe, Step, StepSetting, load_recipe, step_settings
from mint.loop.steps import STEPS, LoopContext, content_key
from mint.registry.locks import RegistryLock
from mint.workspace import Workspace, atomic_write_json

LoopEvents = Callable[[dict], None]


@dataclass(frozen=True)
class StepOutcome:
    iteration: int
    index: int
    label: str
    # ran | skipped (inputs unchanged) | waiting (before from_iteration, or for traffic) | failed
    status: str
    seconds: float
    output: dict
    # the ETA (mint.loop.estimate): this step's estimated seconds before the run began, the seconds since the run
    # began when it ended, and the run's remaining seconds as estimated then (None: the step did not run)
    estimated_s: float | None = None
    elapsed_s: float | None = None
    left_s: float | None = None


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
    # this generation's experience (mint.loop.experience.experience_summary) and its placebo twin's comparison
    experience: dict | None = None
    twin: dict | None = None


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
    # per specialist, every generation with its experience, twin and verdict (mint.loop.progress.generation_progress),
    # read back from what the registry and the loop's state keep
    progress: dict[str, list] = field(default_factory=dict)
    # specialists whose generation waited for traffic: {iteration, specialist, message, traffic}
    waiting: list[dict] = field(default_factory=list)
    # the whole run's estimate before its first step, and what it was reckoned from (mint.loop.estimate)
    estimated_s: float | None = None
    estimate_basis: str = ""
    # the ETA against what happened, at the start and after each step (mint.loop.estimate.eta_record)
    eta: list[dict] = field(default_factory=list)
    # what each step decides (guards, their thresholds, early stop, backward transfer), as the recipe sets it
    settings: list[StepSetting] = field(default_factory=list)
    # what the loop says of each one the recipe turned off (StepSetting.turned_off)
    turned_off: list[str] = field(default_factory=list)


# --- the workspace lock --------------------------------------------------------------------------

HOLDER_WAIT_S = 2.0   # how long a refused loop waits for the holder to write its name into the lock file


class LoopLock:
    """An exclusive, non-blocking lock on the workspace; its file names the holder. With a shared registry
    (PostgreSQL) the lock is held in the registry instead, so one host at a time runs a loop on it, and a host
    that dies releases it with its connection (mint.registry.locks)."""

    def __init__(self, ws: Workspace) -> None:
        self.path = ws.home / "loop.lock"
        self.handle: TextIO | None = None
        self.shared = RegistryLock(ws, "loop") if ws.registry_url else None

    def __enter__(self) -> "LoopLock":
        if self.shared is not None:
            self.shared.__enter__()
            return self
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
        if self.shared is not None:
            self.shared.__exit__(*exc)
        if self.handle is not None:
            self.handle.seek(0)
            self.handle.truncate()
            fcntl.flock(self.handle.fileno(), fcntl.LOCK_UN)
            self.handle.close()


# --- state -------------------------------------------------------------------------------------------

class LoopState:
    """``$MINT_HOME/loops/<recipe>/state.json``: finished steps by key, the last run's start and end, and the
    generations the loop made (mint.loop.history)."""

    def __init__(self, ws: Workspace, recipe: Recipe) -> None:
        self.path = state_path(ws, recipe.name)
        data = read_state(self.path)
        self.steps: dict[str, dict] = data.get("steps", {})
        self.last_run: dict = data.get("last_run", {})
        self.runs: list[dict] = data.get("runs", [])
        self.generations: list[dict] = data.get("generations", [])

    def record_generations(self, rows: list[GenerationRow]) -> None:
        """Keep each row, replacing an earlier one of the same candidate (a resumed iteration makes it again)."""
        fresh = [dataclasses.asdict(row) for row in rows]
        made = {(row["specialist"], row["candidate"]) for row in fresh}
        self.generations = [g for g in self.generations if (g.get("specialist"), g.get("candidate")) not in made] \
            + fresh

    def save(self) -> None:
        atomic_write_json(self.path, {"steps": self.steps, "last_run": self.last_run, "runs": self.runs[-50:],
                                      "generations": self.generations[-500:]})


# --- the loop ----------------------------------------------------------------------------------------

def run_loop(ws: Workspace, recipe_path: Path, *, iterations: int | None = None, resume: bool = False,
             dry_run: bool = False, events: LoopEvents | None = None, requests: Path | None = None) -> LoopResult:
    """Run ``recipe_path``; see the module docstring. Exit code 1 only when a fatal step failed its contract.
    ``requests``: a JSONL of chat requests every serve step sends instead of the recipe's (checked, and routed,
    before the first step runs)."""
    from mint.harness import check_harnesses
    from mint.project import load_project

    recipe_path = Path(recipe_path)
    project_file = _project_file(recipe_path)
    project = load_project(project_file)
    check_harnesses(project)
    recipe = load_recipe(recipe_path, specialists=project.all_names)
    if iterations is not None and iterations < 1:
        raise BadInput("must be at least 1", field="--iterations")
    total = iterations or recipe.iterations
    emit = events or (lambda event: None)
    context = _Context(ws, recipe, project, emit, requests=Path(requests).absolute() if requests else None)
    check_traffic(context)
    generation_records(ws)   # the summary reads every recipe's state after training: a bad one is exit 2 now
    settings = step_settings(recipe)
    turned_off = [s.turned_off(recipe_path.name) for s in settings if s.off]

    if dry_run:
        state = LoopState(ws, recipe)
        start = context.state_key()
        unchanged = bool(state.last_run.get("finished")) and state.last_run.get("end") == start and not resume
        plan = [{"iteration": it, "step": s.index, "label": s.label,
                 "will": "wait" if not s.runs_in(it) else ("skip: nothing new" if unchanged else "run")}
                for it in range(1, total + 1) for s in recipe.steps]
        return LoopResult(recipe.name, "dry run", total, 0, plan=plan, state_file=str(state.path),
                          message="nothing new since the last completed run" if unchanged else "",
                          settings=settings, turned_off=turned_off)

    with LoopLock(ws):
        if recipe.description:
            emit({"event": "note", "message": recipe.description})
        for message in turned_off:
            emit({"event": "note", "message": message})
        if context.project.engine is not None:
            emit({"event": "note", "message": f"mint.yaml names the engine at {context.project.engine.url}: "
                                              "`mint eval` decodes there; the loop decodes every answer of a "
                                              "generation on mint's own engine, so its comparisons stay like with "
                                              "like"})
        state = LoopState(ws, recipe)
        start = context.state_key()
        if not resume and state.last_run.get("finished") and state.last_run.get("end") == start:
            return LoopResult(recipe.name, "nothing new", 0, 0, state_file=str(state.path),
                              message="the recipe, its sources and the champions are as the last completed run "
                                      "left them: nothing to do", alerts=routing_alerts(ws, project),
                              settings=settings, turned_off=turned_off)
        started_at: dict
        champions_at: dict
        first, started_at, champions_at = 1, {}, {}
        if resume:
            if state.last_run and not state.last_run.get("finished"):
                first = int(state.last_run.get("iteration", 1))
                started_at = state.last_run.get("dataset_at") or {}
                champions_at = state.last_run.get("champions_at") or {}
            else:
                emit({"event": "note", "message": "no unfinished run to resume; starting a new one"})
        state.last_run = {"start": start, "finished": False, "iteration": first, "iterations": total,
                          "started_at": _now(), "pid": os.getpid(), "dataset_at": started_at,
                          "champions_at": champions_at}
        state.save()
        estimate = context.estimate(range(first, total + 1))
        outcomes, generations, exit_code = [], [], 0
        for iteration in range(first, total + 1):
            state.last_run["iteration"] = iteration
            # the dataset's version when the iteration began, kept: a resumed iteration's steps read and are keyed
            # on the versions an uninterrupted one had, whatever a killed step had ingested since
            at = state.last_run["dataset_at"].setdefault(str(iteration), context.head_version())
            # and the champions, kept for the same reason: a step after this iteration's promote (or the same
            # iteration resumed) reads the champions the steps before it left, not the registry's
            champions = state.last_run.setdefault("champions_at", {}).setdefault(str(iteration),
                                                                                 context.registry_champions())
            state.save()
            context.begin_iteration(iteration, at, champions)
            for step in recipe.steps:
                outcome = context.run_step(step, iteration, state)
                outcomes.append(outcome)
                if outcome.status == "failed" and step.fatal:
                    exit_code = 1
            rows = context.generation_rows(iteration)
            state.record_generations(rows)
            state.save()
            generations += rows
        state.last_run.update(finished=True, end=context.state_key(), finished_at=_now())
        state.runs.append(dict(state.last_run))
        state.save()
        from mint.loop.estimate import eta_record
        from mint.loop.progress import generation_progress

        return LoopResult(recipe.name, "ran", total - first + 1, exit_code, outcomes, generations,
                          state_file=str(state.path), alerts=routing_alerts(ws, project),
                          progress=generation_progress(ws, specialists=recipe.specialists),
                          waiting=context.waiting, estimated_s=estimate, estimate_basis=context.estimate_basis,
                          eta=eta_record(estimate, outcomes), settings=settings, turned_off=turned_off)


def check_traffic(context: "_Context") -> None:
    """Before any step runs: the traffic's held-out share the recipe (or mint.yaml) asks for is the one its log
    has, and a ``--requests`` file is well formed and holds a request for each specialist the served traffic
    feeds (routed as the mixture routes it). Every problem is BadInput naming the file and line."""
    from mint.data.split import share_conflict

    conflict = share_conflict(context.ws, context.traffic_heldout)
    if conflict:
        file, line, where = context.traffic_at
        raise BadInput(conflict, file=file, line=line, field=where)
    if context.requests is None:
        return
    from mint.routing.router import route_conversations
    from mint.serve.replay import read_requests

    if not any(step.kind == "serve" for step in context.recipe.steps):
        raise BadInput(f"{context.recipe.path.name} has no serve step to send the requests through", field="--requests")
    if not context.requests.is_file():
        raise BadInput("no such file", file=str(context.requests), field="--requests")
    rows = read_requests(context.requests)
    fed = traffic_fed(context)
    if not fed:
        return
    routes = route_conversations(context.ws, [r["messages"] for r in rows], [bool(r.get("tools")) for r in rows],
                                 project=context.project, base=context.base)
    went: dict[str, list[int]] = {}
    for number, route in enumerate(routes, start=1):
        went.setdefault(route.specialist, []).append(number)
    for specialist in fed:
        if specialist not in went:
            where = "; ".join(f"{name}: line{'s' if len(lines) > 1 else ''} {_lines(lines)}"
                              for name, lines in sorted(went.items()))
            raise BadInput(f"no request here is one {specialist} answers, routed as the mixture routes it ({where}); "
                           f"the served traffic feeds {specialist}'s experience and contract, so it would learn and "
                           "be measured on nothing", file=str(context.requests))


def traffic_fed(context: "_Context") -> list[str]:
    """The specialists the served traffic feeds: an experience step that reads served turns, or an eval contract
    with a suite drawn from the traffic."""
    from mint.contract.schema import load_contract
    from mint.loop.experience import DEFAULT_SOURCES

    fed = []
    for step in context.recipe.steps:
        if step.kind == "experience" and "served" in (step.options.get("sources") or DEFAULT_SOURCES):
            fed.append(step.specialist)
        elif step.kind == "eval":
            contract = load_contract(context.recipe.path.parent / step.options["contract"], check_data=False)
            if any(s.traffic for s in contract.suites):
                fed.append(step.specialist)
    return list(dict.fromkeys(fed))


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(map(str, numbers[:5]))
    return shown + (f" and {len(numbers) - 5} more" if len(numbers) > 5 else "")


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


class _Context(LoopContext):
    """One iteration's steps, run in order: each kind's key, run and result come from ``STEPS``."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.waiting: list[dict] = []
        self._waits: dict[tuple[int, str], dict | None] = {}
        # the ETA: each step still to run, estimated (a step that turns out to wait or be skipped is dropped), and
        # (estimated, measured) seconds of each step that ran
        self.estimates: dict[tuple[int, int], Estimate] = {}
        self.estimate_basis = ""
        self.measured: list[Done] = []
        # each part of the running step that reports its share done: (seconds into the step, share) when first heard
        self.paces: dict[str, tuple[float, float]] = {}
        self.began = time.perf_counter()
        self.running: tuple[Step, int, float] | None = None     # the step now, its iteration and when it began

    def estimate(self, iterations: range) -> float:
        """Estimate every step of ``iterations`` from its settings and this machine's probe, and say the total."""
        from mint.loop.estimate import base_parameters, estimate_run, machine_rates

        rates = machine_rates()
        planned = estimate_run(self.recipe, iterations, rates, base_parameters(self.base))
        self.estimates = {(e.iteration, e.index): e for e in planned}
        self.estimate_basis = f"{len(planned)} step(s) sized from the recipe, {rates.source}"
        self.began = time.perf_counter()
        seconds = round(sum(e.seconds for e in planned), 1)
        self.emit({"event": "estimate", "seconds": seconds, "basis": self.estimate_basis,
                   "steps": [dataclasses.asdict(e) for e in planned]})
        return seconds

    def eta(self, iteration: int, index: int):
        """The run's remaining time once step ``index`` of ``iteration`` is done (mint.loop.estimate.refine)."""
        from mint.loop.estimate import refine

        return refine(self.measured, [e for key, e in self.estimates.items() if key > (iteration, index)])

    def progress(self, what: str, done: int, total: int | None, detail: str = "", share: float | None = None) -> None:
        """The running step's heartbeat, with its seconds so far and the run's remaining time as now estimated."""
        if self.running is None:
            return
        from mint.loop.estimate import pace_left, step_left

        step, iteration, began = self.running
        now = time.perf_counter() - began
        eta = self.eta(iteration, step.index)
        current = self.estimates.get((iteration, step.index))
        part_share = share if share is not None else done / total if total else None
        part_left = None
        if part_share is not None:
            part_left = pace_left(self.paces.setdefault(what, (now, part_share)), (now, part_share))
        in_step = step_left(eta, current, now, part_left)
        self.emit({"event": "progress", "iteration": iteration, "step": step.label, "what": what, "done": done,
                   "total": total, "detail": detail, "share": share, "seconds": round(now, 1),
                   "left_s": round(eta.left_s + in_step, 1)})

    def traffic_wait(self, specialist: str, iteration: int) -> dict | None:
        """Why ``specialist``'s generation waits this iteration: an eval contract of this iteration has a suite
        drawn from the served traffic whose held-out slice is smaller than the power planner's size for its
        gates (None: it does not wait). Asked once per iteration, at its first step."""
        if (iteration, specialist) in self._waits:
            return self._waits[(iteration, specialist)]
        from mint.contract.live import traffic_shortfalls
        from mint.contract.schema import load_contract

        wait = None
        for step in self.recipe.steps:
            if step.kind != "eval" or step.specialist != specialist or not step.runs_in(iteration):
                continue
            contract = load_contract(self.recipe.path.parent / step.options["contract"], check_data=False)
            short = traffic_shortfalls(self.ws, contract)
            if short:
                message = f"{specialist}: {short[0].message}; its generation waits for more traffic (nothing " \
                          "trained or registered for it in this iteration)"
                wait = {"iteration": iteration, "specialist": specialist, "message": message,
                        "traffic": [dataclasses.asdict(s) for s in short]}
                self.waiting.append(wait)
                self.emit({"event": "note", "message": message})
                break
        self._waits[(iteration, specialist)] = wait
        return wait

    def state_key(self) -> str:
        outside = [STEPS[s.kind].outside_inputs(self, s) for s in self.recipe.steps]
        return content_key(self.recipe.sha256, [f for f in outside if f is not None], self.registry_champions())

    # one step
    def run_step(self, step: Step, iteration: int, state: LoopState) -> StepOutcome:
        # a step that does not run leaves the estimate: the remaining time is what is still to run
        estimated = self.estimates.pop((iteration, step.index), None)
        if not step.runs_in(iteration):
            return StepOutcome(iteration, step.index, step.label, "waiting", 0.0,
                               {"note": f"runs in iterations {step.from_iteration}–{step.until_iteration or ''}"})
        kind = STEPS[step.kind]
        wait = self.traffic_wait(step.specialist, iteration) if step.specialist else None
        if wait is not None:
            return StepOutcome(iteration, step.index, step.label, "waiting", 0.0,
                               {"note": wait["message"], "traffic": wait["traffic"]})
        key = kind.key(self, step)
        if key is None:
            return StepOutcome(iteration, step.index, step.label, "waiting", 0.0,
                               {"note": "nothing to do: no candidate from an earlier step"})
        began = time.perf_counter()
        if key in state.steps:
            output = state.steps[key]
            kind.absorb(self, step, kind.recorded(output))
            self.emit({"event": "skip", "iteration": iteration, "step": step.label})
            return StepOutcome(iteration, step.index, step.label, "skipped", 0.0, output)
        self.emit({"event": "start", "iteration": iteration, "step": step.label,
                   "estimated_s": estimated.seconds if estimated else None})
        if estimated is not None:       # back while it runs: its heartbeat reads it
            self.estimates[(iteration, step.index)] = estimated
        self.running = (step, iteration, began)
        self.paces = {}
        try:
            result = kind.run(self, step)
        finally:
            self.running = None
            self.estimates.pop((iteration, step.index), None)
        kind.absorb(self, step, result)
        output = kind.record(result)
        state.steps[key] = output
        state.save()
        fault_point(f"loop.{iteration}.{step.index}")
        seconds = round(time.perf_counter() - began, 2)
        failed = kind.judged and output.get("verdict") == "fail"
        if estimated is not None:
            self.measured.append(Done(estimated.seconds, estimated.training_s, seconds))
        eta = self.eta(iteration, step.index)
        elapsed = round(time.perf_counter() - self.began, 1)
        self.emit({"event": "end", "iteration": iteration, "step": step.label, "seconds": seconds, "output": output,
                   "estimated_s": estimated.seconds if estimated else None, "left_s": eta.left_s,
                   "ratio": eta.ratio})
        return StepOutcome(iteration, step.index, step.label, "failed" if failed else "ran", seconds, output,
                           estimated.seconds if estimated else None, elapsed, eta.left_s)

    def generation_rows(self, iteration: int) -> list[GenerationRow]:
        from mint.loop.experience import experience_summary

        rows = []
        for specialist, evaluation in self.evaluations.items():
            decision = self.decisions.get(specialist)
            metrics = {}
            for gate in evaluation.gates:
                name = gate.metric
                if name.startswith("latency.") or name not in evaluation.metrics:
                    continue
                value, before = evaluation.metrics.get(name), evaluation.baseline_value(name)
                delta, interval = gate.paired_delta, gate.interval
                if delta is None and value is not None and before is not None:
                    delta = value - before
                metrics[name] = {"value": value, "baseline": before, "delta": delta, "interval": interval}
            gathered = self.experiences.get(specialist)
            rows.append(GenerationRow(iteration, specialist, evaluation.revision, evaluation.verdict,
                                      (decision.champion if decision else None) or self.champion_ref(specialist),
                                      evaluation.baseline.revision_id or "base", metrics,
                                      decision.reason if decision else None,
                                      experience_summary(gathered) if gathered else None, evaluation.twin))
        return rows
