"""Reliability suite 7: ingest, train, eval and promote on a full disk and a read-only workspace, and a disk
that fills up while the loop's experience step samples.

Run:   python scripts/reliability_disk.py            # every command x every condition, twice (18 cases)
       python scripts/reliability_disk.py --quick    # each case once (9 cases)
       python scripts/reliability_disk.py --seed 7 --commands ingest,promote --conditions full

Each command first runs uninterrupted from its starting workspace (tiny-random base) to build the next
one's: ingest -> train -> eval -> promote. Each case then puts a command's starting workspace on

  * full:      a tmpfs of its own mounted at $MINT_HOME, filled to the last byte (`--free-kib` leaves
               some room); where mounting is not permitted, RLIMIT_FSIZE caps every file the command
               writes instead (said in the output);
  * readonly:  the same tmpfs remounted read-only; where mounting is not permitted, the files made
               read-only with chmod and the command run as an unprivileged user (setpriv), since root
               ignores file modes,

and runs the command. It must exit 1 or 2 with one clear `error:` line and no traceback, and leave the
workspace as it was: `mint registry verify` passes, the datasets, revisions, aliases and registered
reports listed are the same, and no file was added or changed (no partial file, no `.tmp-` leftover; only
empty lock files and a dataset's index cache may appear).

`experience` is the loop's second iteration resumed on a tmpfs (as in scripts/reliability_kill.py: the pool
answered from a fixed table by scripts/experience_answers.py), whose sampling ends by filling the disk: the step's
writes then meet a full disk. Beyond the checks above (the loop's own state file may change: the run began), once
the disk has room again `mint loop --resume` must end as an uninterrupted run does (the same datasets,
revisions and champions). Only the `full` condition applies, and only where a tmpfs can be mounted.
Cases run in a seeded order (`--seed`). The figure is printed last:
`FIGURE diskfull: cases=N failures=F goal=0 PASS|FAIL`; exit 1 when F > 0.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

COMMANDS = ("ingest", "train", "eval", "promote", "experience")
LIFECYCLE = COMMANDS[:4]
CONDITIONS = ("full", "readonly")
sys.path.insert(0, str(ROOT / "scripts"))
from reliability_kill import (CONTRACT, DATASET, EXPERIENCE_ANSWERS, EXPERIENCE_RECIPE, LOGS, RUN_LIMIT_S,  # noqa: E402
                              lifecycle_argv, snapshot)   # the same lifecycle commands as the kill suite
UNPRIVILEGED = 65534          # nobody:nogroup
EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
FILLER = ".filler-of-reliability-disk"   # not a name mint reads or writes
RLIMIT_FSIZE_BYTES = 4096     # the fallback for "full": no file the command writes may pass one page


@dataclass
class Case:
    command: str
    condition: str
    how: str = ""                   # how the condition was made (mount, or the fallback)
    exit_code: int | None = None
    message: str = ""
    problems: list[str] = field(default_factory=list)
    skipped: str = ""
    tracebacks: int = 0


def listing(home: Path) -> dict:
    """What mint's listing functions show of the workspace (`data ls`, `registry ls/history`, reports)."""
    from mint.data import datasets
    from mint.registry import store
    from mint.workspace import workspace

    ws = workspace(home)
    shown: dict = {"datasets": {}, "episodes": [], "revisions": [], "champions": {}, "events": 0, "reports": []}
    if ws.datasets.is_dir():
        shown["datasets"] = {d.name: (d.version, d.episodes) for d in datasets.list_datasets(ws)}
        if DATASET in shown["datasets"]:
            shown["episodes"] = sorted(e["id"] for e in datasets.iter_episodes(ws, DATASET))
    if not store.db_path(ws).exists():
        return shown
    conn = store.open_store(ws, create=False)
    try:
        listed = store.list_revisions(conn, limit=10_000).revisions
        shown["revisions"] = sorted((r.ref, r.status) for r in listed)
        for specialist in sorted({r.specialist for r in listed}):
            shown["champions"][specialist] = store.alias_target(conn, specialist, "champion")
            shown["events"] += len(store.history(conn, specialist))
        shown["reports"] = sorted(row["id"] for r in listed for row in store.reports_for(conn, r.id))
    finally:
        conn.close()
    return shown


def outcome(home: Path) -> dict:
    """What a loop made, by name rather than by id (a revision's id hashes when it was made): the dataset heads and
    episodes, the revisions (ref, status, parent, dataset, method, settings), the champions' refs, the alias events
    and the reports' verdicts; what a resumed loop must end with to end as an uninterrupted one."""
    made = snapshot(home)
    return {"datasets": made.heads, "episodes": made.episode_ids, "revisions": made.revisions,
            "champions": made.champions, "events": made.events,
            "reports": sorted({report[:3] for report in made.reports}), "verify": made.verify_problems}


def file_hashes(home: Path) -> dict[str, str]:
    """Every file under home and its sha256: the workspace's state byte for byte."""
    out = {}
    for dirpath, _dirs, files in os.walk(home):
        for name in files:
            path = Path(dirpath) / name
            if path.is_symlink():
                continue
            out[str(path.relative_to(home))] = hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def state_problems(home: Path, before_listing: dict, before_files: dict[str, str],
                   may_change: tuple[str, ...] = ()) -> list[str]:
    from mint.registry.maintenance import verify
    from mint.registry import store
    from mint.workspace import workspace

    problems = []
    if store.db_path(workspace(home)).exists():
        problems += [f"verify: {p}" for p in verify(workspace(home)).problems]
    after = listing(home)
    for key, value in before_listing.items():
        if after[key] != value:
            problems.append(f"{key} changed: {value} -> {after[key]}")
    after_files = file_hashes(home)
    # allowed: empty advisory lock files (kept by design) and a dataset's index.sqlite, a cache that ingest
    # rebuilds from the version chain whenever it disagrees with HEAD
    added = sorted(p for p in set(after_files) - set(before_files)
                   if not (Path(p).name.endswith(".lock") and after_files[p] == EMPTY_SHA256)
                   and not (p.startswith("datasets/") and Path(p).name.startswith("index.sqlite")))
    changed = sorted(p for p in before_files if p in after_files and after_files[p] != before_files[p]
                     and p not in may_change)
    removed = sorted(set(before_files) - set(after_files))
    if added:
        problems.append(f"files left behind: {added[:5]}{' ...' if len(added) > 5 else ''}")
    if changed:
        problems.append(f"files changed: {changed[:5]}")
    if removed:
        problems.append(f"files removed: {removed[:5]}")
    return problems


def message_problems(stderr: str, exit_code: int) -> tuple[str, list[str]]:
    """One clear `error:` line, no traceback, exit 1 or 2."""
    problems = []
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    if exit_code not in (1, 2):
        problems.append(f"exit {exit_code} (expected 1 or 2)")
    if "Traceback" in stderr:
        problems.append("printed a traceback")
    if len(errors) != 1:
        problems.append(f"{len(errors)} `error:` lines (expected one): {stderr.strip()[-400:]!r}")
    return (errors[0] if errors else stderr.strip().splitlines()[-1] if stderr.strip() else ""), problems


def can_mount(probe: Path) -> bool:
    probe.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(probe)], capture_output=True)
    if done.returncode != 0:
        return False
    subprocess.run(["umount", str(probe)], check=True)
    return True


def fill(filler: Path, free_bytes: int) -> None:
    """Write ``filler`` until its filesystem is full, then give back ``free_bytes``."""
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for block in (1 << 20, 4096):   # big blocks, then page by page for the last bit
            try:
                while os.write(fd, b"\0" * block) == block:
                    pass
            except OSError:
                pass
    finally:
        os.close(fd)
    if free_bytes:
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - free_bytes))


class Suite:
    def __init__(self, work: Path, env: dict, free_kib: int, mount: bool = True) -> None:
        self.work = work
        self.home = work / "ws"     # every run uses this path: the registry stores absolute report paths
        self.env = {**env, "MINT_HOME": str(self.home)}
        self.templates: dict[str, Path] = {}
        self.free_bytes = free_kib * 1024
        self.mounting = mount and can_mount(work / "probe")

    def argv(self, command: str) -> list[str]:
        if command == "experience":
            return [sys.executable, str(EXPERIENCE_ANSWERS), "loop", str(self.work / "experience.yaml"), "--resume"]
        return lifecycle_argv(command)

    def prepare(self, commands: list[str]) -> None:
        """Clean runs in the lifecycle's order; each one's end state is the next one's starting workspace."""
        if "experience" in commands:
            self.prepare_experience()
        lifecycle = [c for c in commands if c in LIFECYCLE]
        if not lifecycle:
            return
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        for command in LIFECYCLE[:max(LIFECYCLE.index(c) for c in lifecycle) + 1]:
            target = self.work / f"template-{command}"
            shutil.copytree(self.home, target, symlinks=True)
            self.templates[command] = target
            done = subprocess.run(self.argv(command), capture_output=True, text=True, env=self.env,
                                  cwd=self.work, timeout=RUN_LIMIT_S)
            if done.returncode != 0:
                raise SystemExit(f"the clean `mint {command}` failed: {done.stderr[-2000:]}")

    def prepare_experience(self) -> None:
        """The loop stopped (killed) once its first iteration was recorded, and the listing an uninterrupted
        resume of it ends with."""
        from experience_answers import REQUESTS

        (self.work / "experience.yaml").write_text(EXPERIENCE_RECIPE.format(dataset=DATASET, logs=LOGS[0],
                                                                             contract=CONTRACT))
        (self.work / "requests.jsonl").write_text(REQUESTS)
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        first = subprocess.run(self.argv("experience")[:-1], capture_output=True, text=True, cwd=self.work,
                               env={**self.env, "MINT_FAULT": "loop.1.5"}, timeout=RUN_LIMIT_S)
        if first.returncode != -9:
            raise SystemExit(f"the experience loop's first iteration did not stop at loop.1.5: {first.stderr[-2000:]}")
        target = self.work / "template-experience"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(self.home, target, symlinks=True)
        self.templates["experience"] = target
        clean = subprocess.run(self.argv("experience"), capture_output=True, text=True, cwd=self.work, env=self.env,
                               timeout=RUN_LIMIT_S)
        if clean.returncode != 0:
            raise SystemExit(f"the clean experience loop failed: {clean.stderr[-2000:]}")
        self.clean_experience = outcome(self.home)

    def experience_case(self) -> Case:
        """The disk fills while the experience step samples; with room again, the loop resumes to the clean end."""
        case = Case("experience", "full")
        if not self.mounting:
            case.skipped = "a disk that fills during sampling needs a tmpfs, and mounting is not permitted here"
            return case
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(self.home)], check=True)
        try:
            for entry in self.templates["experience"].iterdir():
                (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, self.home / entry.name)
            before_listing, before_files = listing(self.home), file_hashes(self.home)
            started = time.perf_counter()
            done = subprocess.run(self.argv("experience"), capture_output=True, text=True, cwd=self.work,
                                  timeout=RUN_LIMIT_S,
                                  env={**self.env, "MINT_FILL_DISK_AT_SAMPLING": str(self.home / FILLER)})
            case.how = f"tmpfs filled while the step sampled, {time.perf_counter() - started:.1f}s"
            case.exit_code = done.returncode
            case.tracebacks = done.stderr.count("Traceback")
            case.message, case.problems = message_problems(done.stderr, done.returncode)
            (self.home / FILLER).unlink(missing_ok=True)
            # the loop's own state and lock (it holds the running loop's pid) change: the run began
            began = [str(p.relative_to(self.home)) for p in (self.home / "loops").glob("*/state.json")]
            case.problems += state_problems(self.home, before_listing, before_files,
                                            may_change=(*began, "loop.lock"))
            resumed = subprocess.run(self.argv("experience"), capture_output=True, text=True, cwd=self.work,
                                     env=self.env, timeout=RUN_LIMIT_S)
            case.tracebacks += resumed.stderr.count("Traceback")
            if resumed.returncode != 0:
                case.problems.append(f"the resume with room again exited {resumed.returncode}: {resumed.stderr[-400:]}")
            after = outcome(self.home)
            for key, value in self.clean_experience.items():
                if after[key] != value:
                    case.problems.append(f"after the resume, {key} {after[key]} != the clean run's {value}")
        finally:
            subprocess.run(["umount", str(self.home)], check=False)
        return case

    def case(self, command: str, condition: str) -> Case:
        if command == "experience":
            return self.experience_case()
        case = Case(command, condition)
        shutil.rmtree(self.home, ignore_errors=True)
        self.home.mkdir(parents=True)
        preexec, env = None, dict(self.env)
        mounted = False
        try:
            if self.mounting:
                subprocess.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(self.home)], check=True)
                mounted = True
            for entry in self.templates[command].iterdir():
                (shutil.copytree if entry.is_dir() else shutil.copy2)(entry, self.home / entry.name)
            before_listing, before_files = listing(self.home), file_hashes(self.home)
            if condition == "full":
                if mounted:
                    fill(self.home / FILLER, self.free_bytes)
                    case.how = f"tmpfs filled to {self.free_bytes // 1024} KiB free"
                else:
                    preexec = lambda: resource.setrlimit(resource.RLIMIT_FSIZE,  # noqa: E731
                                                         (RLIMIT_FSIZE_BYTES, RLIMIT_FSIZE_BYTES))
                    case.how = f"no tmpfs: RLIMIT_FSIZE={RLIMIT_FSIZE_BYTES}"
            elif mounted:
                subprocess.run(["mount", "-o", "remount,ro", str(self.home)], check=True)
                case.how = "tmpfs remounted read-only"
            else:
                for dirpath, dirs, files in os.walk(self.home):
                    for name in dirs + files:
                        os.chmod(Path(dirpath) / name, 0o555 if name in dirs else 0o444)
                os.chmod(self.home, 0o555)
                if os.geteuid() == 0:
                    if not shutil.which("setpriv"):
                        case.skipped = "no read-only mount and no setpriv to drop root (root ignores chmod)"
                        return case
                    argv_prefix = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups"]
                    case.how = "no tmpfs: chmod a-w, run as uid 65534 via setpriv"
                else:
                    argv_prefix = []
                    case.how = "no tmpfs: chmod a-w"
            argv = self.argv(command)
            if condition == "readonly" and not mounted:
                argv = argv_prefix + argv
            started = time.perf_counter()
            done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=self.work, timeout=RUN_LIMIT_S,
                                  preexec_fn=preexec)
            case.exit_code = done.returncode
            case.message, case.problems = message_problems(done.stderr, done.returncode)
            # the checks read through SQLite, which needs room and a writable folder for a WAL database's reads too
            if condition == "readonly" and mounted:
                subprocess.run(["mount", "-o", "remount,rw", str(self.home)], check=True)
            elif condition == "full" and mounted:
                (self.home / FILLER).unlink()
            case.tracebacks = done.stderr.count("Traceback")
            case.problems += state_problems(self.home, before_listing, before_files)
            case.how += f", {time.perf_counter() - started:.1f}s"
        finally:
            if mounted:
                subprocess.run(["umount", str(self.home)], check=False)
        return case


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="each case once (default: twice)")
    parser.add_argument("--repeat", type=int, help="runs of each case (default 2, --quick 1)")
    parser.add_argument("--seed", type=int, default=7, help="seeds the order of the cases (default 7)")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"a subset of {','.join(COMMANDS)}")
    parser.add_argument("--conditions", default=",".join(CONDITIONS), help=f"a subset of {','.join(CONDITIONS)}")
    parser.add_argument("--free-kib", type=int, default=0, help="room left on the full disk (default 0)")
    parser.add_argument("--no-mount", action="store_true",
                        help="use the fallbacks (RLIMIT_FSIZE; chmod + setpriv) even where mounting is permitted")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    args = parser.parse_args(argv)
    commands = [c.strip() for c in args.commands.split(",") if c.strip()]
    conditions = [c.strip() for c in args.conditions.split(",") if c.strip()]
    if not commands or set(commands) - set(COMMANDS):
        parser.error(f"--commands: expected some of {','.join(COMMANDS)}")
    if not conditions or set(conditions) - set(CONDITIONS):
        parser.error(f"--conditions: expected some of {','.join(CONDITIONS)}")
    repeat = args.repeat if args.repeat is not None else (1 if args.quick else 2)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    env.pop("MINT_FAULT", None)
    work = args.keep or Path(tempfile.mkdtemp(prefix="mint-disk-"))
    work.mkdir(parents=True, exist_ok=True)
    os.chmod(work, 0o755)   # the unprivileged fallback user must reach the workspace and the recipe
    # the suite works in-process too (tests call main()): MINT_HOME is given back when it ends
    home = mock.patch.dict(os.environ, {"MINT_HOME": str(work / "ws")})
    home.start()
    cases: list[Case] = []
    try:
        suite = Suite(work, env, args.free_kib, mount=not args.no_mount)
        print("mounting a tmpfs: " + ("permitted" if suite.mounting else
                                      "not used, RLIMIT_FSIZE and chmod + setpriv instead"), flush=True)
        started = time.perf_counter()
        suite.prepare(commands)
        order = [(c, k) for c in commands for k in conditions if c != "experience" or k == "full"] * repeat
        random.Random(args.seed).shuffle(order)
        for number, (command, condition) in enumerate(order, 1):
            case = suite.case(command, condition)
            cases.append(case)
            verdict = f"SKIP {case.skipped}" if case.skipped else \
                ("FAIL " + "; ".join(case.problems) if case.problems else "ok")
            print(f"case {number:2d} {command:8s} {condition:9s} exit {case.exit_code}  {case.message[:90]!r}  "
                  f"[{case.how}] {verdict}", flush=True)
        print(f"seed {args.seed}; {time.perf_counter() - started:.0f}s", flush=True)
    finally:
        home.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    ran = [c for c in cases if not c.skipped]
    failures = sum(bool(c.problems) for c in ran)
    skipped = len(cases) - len(ran)
    corrupt = sum(any(p.startswith(("verify", "files", "datasets", "episodes", "revisions", "champions", "events",
                                    "reports", "after the resume")) for p in c.problems) for c in ran)
    print(f"FIGURE diskfull: cases={len(ran)} corrupt={corrupt} tracebacks={sum(c.tracebacks for c in ran)} "
          f"failures={failures} skipped={skipped} goal=0 "
          f"{'PASS' if failures == 0 and ran else 'FAIL'}")
    return 0 if failures == 0 and ran else 1


if __name__ == "__main__":
    sys.exit(main())
