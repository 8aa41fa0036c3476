"""Reliability suite 1: kill -9 at random points of ingest, train, eval, promote, the loop, and the loop's
experience and controls.

Run:   python scripts/reliability_kill.py            # the long form: 60 trials over the six commands
       python scripts/reliability_kill.py --quick    # a small version: 12 trials
       python scripts/reliability_kill.py --seed 7 --commands ingest,promote --trials 20

Each command is first run uninterrupted on a copy of its starting workspace (tiny-random base), which
measures its duration and records the result it should give (generation 0, the bare base under the
contract, is measured once beforehand and is part of every starting workspace). Then each trial restores that starting
workspace, starts the command as a subprocess and kills it with SIGKILL: either after a seeded random
delay spread over the measured duration, or at one of the named MINT_FAULT points (mint/faults.py),
each point once. `experience` is a loop's second iteration, resumed (`mint loop --resume`) after a loop that
stopped once its first iteration was done: it gathers experience (its pool answered from a fixed table by
scripts/experience_answers.py, since the tiny base writes no valid tree; the verified, twin and steps-control
datasets ingested), trains the next generation, evaluates it, and its controls step trains the placebo twin and the steps control;
its named points are counted (`ingest.version_published@3`: the third dataset version the process publishes, the
twin's). After the kill it checks that

  * `mint registry verify` passes (every revision's files hash, the event chain holds);
  * only complete things are listed: dataset heads, revisions, aliases and registered reports are
    either the starting ones or the clean run's, never a `.tmp-` name or a missing file;
  * a rerun (`mint loop --resume` for the loop) exits as the clean run did, with the same result:
    the same dataset version and episode ids (none lost or duplicated), the same champion and
    revisions, the same verdict and metrics.

The figure is printed last: `FIGURE kill9: trials=N killed=K lost=L duplicated=D corrupt=C tracebacks=T failures=F
goal=0 PASS|FAIL` (lost and duplicated: episodes against the clean run; corrupt: a failed verify, a half-written
listing or report; tracebacks: in the rerun's output); exit 1 when F > 0.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

COMMANDS = ("ingest", "train", "eval", "promote", "loop", "experience")
LOOPS = ("loop", "experience")          # commands that run `mint loop` (resumed after a kill)
LOGS = [ROOT / "examples" / "logs" / name for name in ("server_log.jsonl.gz", "app_openai.jsonl", "chat_sharegpt.json")]
CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"
DATASET = "smoke"   # the name contracts/genui-smoke.yaml's live suite reads
# a run longer than this hangs (generous: on a 2-core host other work shares, one loop run took 20 min)
RUN_LIMIT_S = 3600

TRAIN_SETTINGS = ["max_steps=1", "per_device_train_batch_size=2", "max_length=96", "lora.r=2"]


def lifecycle_argv(command: str) -> list[str]:
    """The command line of one lifecycle step (ingest, train, eval, promote) on the tiny base; the disk
    suite runs the same ones."""
    mint = [sys.executable, "-m", "mint"]
    if command == "ingest":
        return mint + ["ingest", *map(str, LOGS), "--dataset", DATASET]
    if command == "train":
        sets = [a for s in TRAIN_SETTINGS for a in ("--set", s)]
        return mint + ["train", "--specialist", "genui", "--data", DATASET, "--method", "sft",
                       "--base", "tiny-random", *sets]
    if command == "eval":
        return mint + ["eval", "genui:v1", "--contract", str(CONTRACT)]
    return mint + ["promote", "genui:v1"]

# The named kill points each command passes through (mint/faults.py); the loop passes through all of them.
FAULT_POINTS = {
    "ingest": ["ingest.episodes_written", "ingest.version_published", "ingest.head_written"],
    "train": ["register.staged", "register.published", "register.committed"],
    "eval": ["eval.report_published"],
    "promote": ["promote.read", "promote.checked", "promote.before_commit", "promote.committed"],
    "loop": ["register.published", "loop.1.1", "eval.report_published", "loop.1.2", "promote.before_commit",
             "loop.1.0", "ingest.version_published", "loop.1.3"],
    # iteration 2 (steps: ingest 0 skipped, experience 1, train 2, eval 3, controls 4, promote 5). Its datasets in order: the
    # experience in the logs' dataset, the verified answers', the twin's, the steps control's; its revisions: the
    # generation, the twin, the steps control; its reports: the same three
    "experience": ["ingest.version_published@1", "ingest.head_written@2", "ingest.version_published@3",
                   "ingest.episodes_written@4", "loop.2.1", "register.published@1", "register.published@2",
                   "register.committed@3", "eval.report_published@2", "loop.2.3"],
}

RECIPE = """\
# Run: mint loop kill.yaml   (written by scripts/reliability_kill.py)
recipe: kill
base: tiny-random
dataset: {dataset}
loop: {{iterations: 1}}
steps:
  - ingest: {{sources: [{logs}]}}
  - train: {{specialist: genui, method: sft, set: {{max_steps: 1, per_device_train_batch_size: 2, max_length: 96,
              lora.r: 2}}}}
  - eval: {{specialist: genui, contract: {contract}}}
  - promote: {{specialist: genui}}
"""

# the loop with experience from its second iteration, both controls beside the generation
EXPERIENCE_RECIPE = """\
# Run: python scripts/experience_answers.py loop experience.yaml   (written by scripts/reliability_kill.py)
recipe: experience
base: tiny-random
dataset: {dataset}
loop: {{iterations: 2}}
steps:
  - ingest: {{sources: [{logs}]}}
  - experience: {{specialist: genui, samples: 2, prompts: 2, max_new_tokens: 8, from_iteration: 2,
                 control: [placebo, steps], sources: [{{jsonl: requests.jsonl}}], batch_size: 2, min_steps: 1,
                 max_steps: 1}}
  - train: {{specialist: genui, method: sft, plan: experience, set: {{max_steps: 1, per_device_train_batch_size: 2,
              max_length: 96, lora.r: 2}}}}
  - eval: {{specialist: genui, contract: {contract}}}
  - controls: {{specialist: genui}}
  - promote: {{specialist: genui}}
"""
EXPERIENCE_ANSWERS = ROOT / "scripts" / "experience_answers.py"


@dataclass
class Snapshot:
    """What the listing commands show of a workspace, plus the dataset's episode ids."""

    heads: dict[str, str]
    episode_ids: list[str]
    revisions: list[tuple]          # (ref, status, parent ref, dataset, method, config hash)
    champions: dict[str, str]
    events: int
    reports: list[tuple]            # (revision ref, contract, verdict)
    verify_problems: list


@dataclass
class Clean:
    """An uninterrupted run of one command from its starting workspace."""

    command: str
    argv: list[str]
    seconds: float
    exit_code: int
    before: Snapshot
    after: Snapshot
    output: dict


@dataclass
class Trial:
    number: int
    command: str
    kill: str                        # "fault:<point>" or "delay:<seconds>"
    killed: bool = False             # False: the command finished before the kill
    problems: list[str] = field(default_factory=list)


def snapshot(home: Path) -> Snapshot:
    """Read the workspace through mint's own listing functions (the ones `data ls`, `registry ls` use)."""
    from mint.data import datasets
    from mint.registry import store
    from mint.registry.maintenance import verify
    from mint.workspace import workspace

    ws = workspace(home)
    heads, ids = {}, []
    if ws.datasets.is_dir():
        for summary in datasets.list_datasets(ws):
            heads[summary.name] = summary.version
        if DATASET in heads:
            ids = sorted(e["id"] for e in datasets.iter_episodes(ws, DATASET))
    if not store.db_path(ws).exists():
        return Snapshot(heads, ids, [], {}, 0, [], [])
    conn = store.open_store(ws, create=False)
    try:
        listed = store.list_revisions(conn, limit=10_000).revisions
        by_id = {r.id: r.ref for r in listed}
        revisions = sorted((r.ref, r.status, by_id.get(r.parent), r.dataset, r.method, r.config_hash) for r in listed)
        champions = {}
        events = 0
        for specialist in sorted({r.specialist for r in listed}):
            target = store.alias_target(conn, specialist, "champion")
            if target:
                champions[specialist] = by_id.get(target, target)
            events += len(store.history(conn, specialist))
        reports = []
        for revision in listed:
            for row in store.reports_for(conn, revision.id):
                reports.append((revision.ref, f"{row['contract_name']}-v{row['contract_version']}", row["verdict"],
                                row["path"], row["id"]))
    finally:
        conn.close()
    return Snapshot(heads, ids, revisions, champions, events, sorted(reports), verify(ws).problems)


def report_problems(snap: Snapshot) -> list[str]:
    """Every registered report must be a complete file whose bytes are the ones registered."""
    problems = []
    for ref, contract, _verdict, path, report_id in snap.reports:
        file = Path(path)
        if ".tmp-" in str(file):
            problems.append(f"report of {ref} registered under a temp path {path}")
        elif not file.is_file():
            problems.append(f"report of {ref} ({contract}) is registered but {path} is missing")
        elif hashlib.sha256(file.read_bytes()).hexdigest() != report_id:
            problems.append(f"report of {ref} ({contract}) does not hash to its registered id")
    return problems


def visible_problems(snap: Snapshot, clean: Clean) -> list[str]:
    """After a kill: only the starting state or the clean run's outcome may be listed, and only whole."""
    problems = [f"verify: {p}" for p in snap.verify_problems] + report_problems(snap)
    for name, head in snap.heads.items():
        if ".tmp-" in name or head not in (clean.before.heads.get(name), clean.after.heads.get(name)):
            problems.append(f"dataset {name} lists version {head}, neither the starting nor the clean one")
    if snap.episode_ids not in (clean.before.episode_ids, clean.after.episode_ids) and clean.command == "ingest":
        problems.append(f"dataset lists {len(snap.episode_ids)} episodes, neither the starting "
                        f"{len(clean.before.episode_ids)} nor the clean {len(clean.after.episode_ids)}")
    known = {r[0] for r in clean.before.revisions} | {r[0] for r in clean.after.revisions}
    extra = [r[0] for r in snap.revisions if r[0] not in known]
    if clean.command not in LOOPS and extra:
        problems.append(f"revisions listed that neither run made: {extra}")
    for specialist, champion in snap.champions.items():
        if clean.command not in LOOPS and champion not in (clean.before.champions.get(specialist),
                                                        clean.after.champions.get(specialist)):
            problems.append(f"{specialist}:champion is {champion}, neither the starting nor the clean one")
    return problems


def result_problems(snap: Snapshot, clean: Clean, killed_after: Snapshot) -> list[str]:
    """After the rerun: the same outcome as the uninterrupted run."""
    problems = [f"verify after rerun: {p}" for p in snap.verify_problems] + report_problems(snap)
    if snap.heads != clean.after.heads:
        problems.append(f"dataset heads {snap.heads} != clean {clean.after.heads}")
    if snap.episode_ids != clean.after.episode_ids:
        lost = len(set(clean.after.episode_ids) - set(snap.episode_ids))
        dup = len(snap.episode_ids) - len(set(snap.episode_ids))
        problems.append(f"episodes {len(snap.episode_ids)} != clean {len(clean.after.episode_ids)} "
                        f"(lost {lost}, duplicated {dup})")
    if snap.champions != clean.after.champions:
        problems.append(f"champions {snap.champions} != clean {clean.after.champions}")
    if clean.command in LOOPS:
        # content-addressed steps: a resumed loop makes exactly the revisions an uninterrupted one makes
        if snap.revisions != clean.after.revisions:
            problems.append(f"revisions {snap.revisions} != clean {clean.after.revisions}")
        if snap.events != clean.after.events:
            problems.append(f"{snap.events} alias events != clean {clean.after.events}")
    elif clean.command == "train":
        # a rerun of `mint train` trains again: one more candidate, with the clean one's lineage and settings
        made = [r[1:] for r in snap.revisions if r not in killed_after.revisions]
        expected = [r[1:] for r in clean.after.revisions if r not in clean.before.revisions]
        if made != expected:
            problems.append(f"the rerun registered {made}, the clean run {expected}")
    else:
        if snap.revisions != clean.after.revisions:
            problems.append(f"revisions {snap.revisions} != clean {clean.after.revisions}")
        if snap.events != clean.after.events:
            problems.append(f"{snap.events} alias events != clean {clean.after.events}")
    if clean.command == "eval":
        verdicts = sorted({(r[0], r[1], r[2]) for r in snap.reports})
        if verdicts != sorted({(r[0], r[1], r[2]) for r in clean.after.reports}):
            problems.append(f"reports {verdicts} != clean {sorted({r[:3] for r in clean.after.reports})}")
    return problems


class Suite:
    def __init__(self, work: Path, seed: int, env: dict) -> None:
        self.work = work
        self.home = work / "ws"              # every run uses this one path: the registry stores absolute paths
        self.env = {**env, "MINT_HOME": str(self.home)}
        self.rng = random.Random(seed)
        self.templates: dict[str, Path] = {}
        self.cleans: dict[str, Clean] = {}
        self.recipe = work / "kill.yaml"
        self.recipe.write_text(RECIPE.format(dataset=DATASET, logs=", ".join(str(p) for p in LOGS[:1]),
                                             contract=CONTRACT))
        self.experience_recipe = work / "experience.yaml"
        self.experience_recipe.write_text(EXPERIENCE_RECIPE.format(dataset=DATASET, logs=LOGS[0], contract=CONTRACT))
        from experience_answers import REQUESTS

        (work / "requests.jsonl").write_text(REQUESTS)

    def argv(self, command: str, rerun: bool = False) -> list[str]:
        if command == "loop":
            return [sys.executable, "-m", "mint", "loop", str(self.recipe)] + (["--resume"] if rerun else [])
        if command == "experience":     # always a resume: the loop stopped after its first iteration
            return [sys.executable, str(EXPERIENCE_ANSWERS), "loop", str(self.experience_recipe), "--resume"]
        return lifecycle_argv(command)

    def restore(self, command: str) -> None:
        shutil.rmtree(self.home, ignore_errors=True)
        if command in self.templates:
            shutil.copytree(self.templates[command], self.home, symlinks=True)
        else:
            self.home.mkdir(parents=True)

    def save_template(self, command: str) -> None:
        target = self.work / f"template-{command}"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.home, target, symlinks=True)
        self.templates[command] = target

    def run(self, argv: list[str], extra_env: dict | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(argv, capture_output=True, text=True, env={**self.env, **(extra_env or {})},
                              cwd=self.work, timeout=RUN_LIMIT_S)

    def prepare(self, commands: list[str]) -> None:
        """Clean runs in the lifecycle's order; each one's end state is the next one's starting workspace."""
        self.restore("ingest")
        lifecycle = [c for c in commands if c != "loop"]
        needed = COMMANDS[:max(COMMANDS.index(c) for c in lifecycle) + 1] if lifecycle else ()
        for command in needed:
            if command == "train" and "eval" in needed:
                # generation 0 once, after the ingest (the contract's live suite reads the dataset): each
                # later starting workspace has it, so each eval then measures only its candidate
                base = self.run([sys.executable, "-m", "mint", "eval", "base", "--contract", str(CONTRACT),
                                 "--base", "tiny-random"])
                if base.returncode != 0:
                    raise SystemExit(f"the clean `mint eval base` failed: {base.stderr[-2000:]}")
            self.save_template(command)
            self.cleans[command] = self.clean_run(command)
            if self.cleans[command].exit_code != 0:
                raise SystemExit(f"the clean `{' '.join(self.cleans[command].argv[2:])}` failed: "
                                 f"{self.cleans[command].output.get('stderr', '')[-2000:]}")
        if "loop" in commands:
            self.templates.pop("loop", None)   # the loop starts from an empty workspace and does it all
            self.restore("loop")
            self.cleans["loop"] = self.clean_run("loop")
        if "experience" in commands:
            # its starting workspace: the loop stopped (killed) once its first iteration was recorded
            self.templates.pop("experience", None)
            self.restore("experience")
            first = self.run([sys.executable, str(EXPERIENCE_ANSWERS), "loop", str(self.experience_recipe)],
                             {"MINT_FAULT": "loop.1.5"})
            if first.returncode != -signal.SIGKILL:
                raise SystemExit(f"the experience loop's first iteration did not stop at loop.1.5 (exit "
                                 f"{first.returncode}): {first.stderr[-2000:]}")
            self.save_template("experience")
            self.cleans["experience"] = self.clean_run("experience")
            if self.cleans["experience"].exit_code != 0:
                raise SystemExit("the clean experience loop failed: "
                                 f"{self.cleans['experience'].output.get('stderr', '')[-2000:]}")

    def clean_run(self, command: str) -> Clean:
        before = snapshot(self.home)
        argv = self.argv(command)
        started = time.perf_counter()
        done = self.run(argv)
        seconds = time.perf_counter() - started
        return Clean(command, argv, seconds, done.returncode, before, snapshot(self.home),
                     {"stderr": done.stderr})

    def trial(self, number: int, command: str, kill: str) -> Trial:
        clean, trial = self.cleans[command], Trial(number, command, kill)
        self.restore(command)
        extra = {"MINT_FAULT": kill.split(":", 1)[1]} if kill.startswith("fault:") else {}
        process = subprocess.Popen(clean.argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                   env={**self.env, **extra}, cwd=self.work, start_new_session=True)
        if kill.startswith("delay:"):
            try:
                process.wait(timeout=float(kill.split(":", 1)[1]))
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)   # the command and any worker it started
        _, stderr = process.communicate(timeout=RUN_LIMIT_S)
        trial.killed = process.returncode == -signal.SIGKILL
        if not trial.killed and process.returncode != clean.exit_code:
            trial.problems.append(f"exited {process.returncode} (clean: {clean.exit_code}): {stderr[-500:]}")
        killed_state = snapshot(self.home)
        trial.problems += visible_problems(killed_state, clean)
        rerun = self.run(self.argv(command, rerun=True))
        if rerun.returncode != clean.exit_code:
            trial.problems.append(f"rerun exited {rerun.returncode} (clean: {clean.exit_code}): "
                                  f"{rerun.stderr.strip()[-800:]}")
        if "Traceback" in rerun.stderr:
            trial.problems.append("rerun printed a traceback")
        trial.problems += result_problems(snapshot(self.home), clean, killed_state)
        return trial


# Shares of the trials: the quick commands get more, so that the long form fits in about 5 quiet minutes.
SHARES = {"ingest": 0.28, "promote": 0.25, "train": 0.10, "eval": 0.10, "loop": 0.10, "experience": 0.17}


def tally(trials: list[Trial]) -> dict[str, int]:
    """The figure's counts: trials killed, episodes lost and duplicated, trials that left something corrupt (a failed
    verify, a half-written or unregistered report, a listing neither the starting nor the clean one), tracebacks."""
    import re

    counts = {"killed": 0, "lost": 0, "duplicated": 0, "corrupt": 0, "tracebacks": 0}
    for trial in trials:
        counts["killed"] += trial.killed
        for problem in trial.problems:
            found = re.search(r"\(lost (\d+), duplicated (\d+)\)", problem)
            if found:
                counts["lost"] += int(found[1])
                counts["duplicated"] += int(found[2])
        counts["corrupt"] += any(p.startswith(("verify", "report of")) or "neither the starting" in p
                                 or "temp path" in p for p in trial.problems)
        counts["tracebacks"] += any("traceback" in p for p in trial.problems)
    return counts


def plan(commands: list[str], trials: int, cleans: dict[str, Clean], rng: random.Random) -> list[tuple[str, str]]:
    """Each command's share of the trials (at least one each): its named fault points first, then seeded
    random delays spread uniformly over its measured duration; the commands interleaved in a seeded order."""
    total = sum(SHARES[c] for c in commands)
    counts = {c: max(1, int(trials * SHARES[c] / total)) for c in commands}
    for command in sorted(commands, key=lambda c: -SHARES[c]):   # hand out what rounding left
        if sum(counts.values()) >= trials:
            break
        counts[command] += 1
    per_command = {}
    for command in commands:
        points = [f"fault:{p}" for p in FAULT_POINTS[command]][:counts[command]]
        delays = [f"delay:{rng.uniform(0, cleans[command].seconds):.3f}" for _ in range(counts[command] - len(points))]
        per_command[command] = points + delays
    order = [c for c in commands for _ in range(counts[c])]
    rng.shuffle(order)
    return [(command, per_command[command].pop(0)) for command in order]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small version: 12 trials, each command at least once")
    parser.add_argument("--trials", type=int, help="trials in all (default 60, --quick 12)")
    parser.add_argument("--seed", type=int, default=12, help="seeds the kill delays (default 12)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"a subset of {','.join(COMMANDS)}")
    parser.add_argument("--points", help="only these named kill points, one trial each (e.g. loop.2.1,"
                                          "register.committed@3): a trial reproduced")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    args = parser.parse_args(argv)
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    unknown = [c for c in commands if c not in COMMANDS]
    if unknown or not commands:
        parser.error(f"--commands: unknown {unknown} (expected some of {','.join(COMMANDS)})")
    trials = args.trials if args.trials is not None else (12 if args.quick else 60)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("MINT_FAULT", None)
    work = args.keep or Path(tempfile.mkdtemp(prefix="mint-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    # the suite works in-process too (tests call main()): MINT_HOME is given back when it ends
    home = mock.patch.dict(os.environ, {"MINT_HOME": str(work / "ws")})
    home.start()
    try:
        suite = Suite(work, args.seed, env)
        started = time.perf_counter()
        suite.prepare(commands)
        for command in commands:
            clean = suite.cleans[command]
            print(f"clean {command}: {clean.seconds:.1f}s, exit {clean.exit_code}", flush=True)
        failures = 0
        results = []
        planned = plan(commands, trials, suite.cleans, suite.rng) if not args.points else \
            [(c, f"fault:{p}") for c in commands for p in args.points.split(",") if p in FAULT_POINTS[c]]
        for number, (command, kill) in enumerate(planned, 1):
            trial = suite.trial(number, command, kill)
            results.append(trial)
            failures += bool(trial.problems)
            state = "killed" if trial.killed else "finished first"
            print(f"trial {number:3d} {command:8s} {kill:32s} {state:15s} "
                  f"{'FAIL ' + '; '.join(trial.problems) if trial.problems else 'ok'}", flush=True)
        by_command = {c: sum(1 for t in results if t.command == c) for c in commands}
        print(f"per command: {by_command}; killed {sum(t.killed for t in results)}/{len(results)}; "
              f"seed {args.seed}; {time.perf_counter() - started:.0f}s", flush=True)
    finally:
        home.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    counts = tally(results)
    print(f"FIGURE kill9: trials={len(results)} killed={counts['killed']} lost={counts['lost']} "
          f"duplicated={counts['duplicated']} corrupt={counts['corrupt']} tracebacks={counts['tracebacks']} "
          f"failures={failures} goal=0 {'PASS' if failures == 0 else 'FAIL'}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
