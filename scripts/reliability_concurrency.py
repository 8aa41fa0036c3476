"""Reliability suite 2: many `mint loop`, `mint promote`, `mint reject` and `mint rollback`
processes on one workspace, released together by a start barrier.

Run: python scripts/reliability_concurrency.py [--runs N] [--loops N] [--ops N] [--seed N] [--quick]
                                               [--postgres URL|start]

With --postgres the registry is shared on PostgreSQL (a fresh schema of that database per run, or of a
throwaway cluster with ``start``), as MINT_REGISTRY_URL sets it for every process; the loops' lock is then the
registry's advisory lock. Without it, the workspace's SQLite file (or whatever MINT_REGISTRY_URL names).

Each run builds a fresh workspace: chat:v1 and chat:v2 promoted (v2 champion), candidates chat:v3.. each with
a registered passing report measured against v2. Then LOOPS `mint loop` processes (one recipe on the tiny
random base) and OPS random promote / reject / rollback commands are started; every process imports mint
first and then waits on one start file, so they all reach the registry within milliseconds of each other.
Afterwards the suite checks:

- the loop lock: no two loops that both ran overlap in time, and every loop refused names the holder's pid;
- no lost update: every command that exited 0 has its event (same pid, same action), none that exited 1 has
  one, each champion move starts from the champion the move before it left (old == previous new), and the
  final alias equals the last event's new revision;
- `mint registry verify` exits 0 (every file hash and the event log's hash chain);
- no process exits with anything but 0 or 1, and none prints a traceback.

The figure (printed last) counts runs and lost updates (every violation above counts as one); goal 0.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SPECIALIST = "chat"
CONTRACT = {"name": "chat-race", "version": 1, "sha256": "ab" * 32}
EXAMPLES = "cd" * 32

# Imports mint (the slow part) first, then waits for the start file, then runs the CLI in this same process
# (same pid, so the event log's pid column names the command). It records when the loop lock was taken and
# released (wrapping LoopLock, not changing it), so two loops holding it at once are seen, not guessed.
LAUNCHER = textwrap.dedent("""\
    import json, os, sys, time
    from mint.cli import main
    from mint.loop import runner
    start, timing, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
    held = {}
    enter, leave = runner.LoopLock.__enter__, runner.LoopLock.__exit__
    def timed_enter(self):
        lock = enter(self)
        held["taken"] = time.time()
        return lock
    def timed_exit(self, *exc):
        if "taken" in held:
            held["released"] = time.time()
        return leave(self, *exc)
    runner.LoopLock.__enter__, runner.LoopLock.__exit__ = timed_enter, timed_exit
    while not os.path.exists(start):
        time.sleep(0.002)
    code = main(argv)
    with open(timing, "w") as f:
        json.dump({"pid": os.getpid(), "code": code, **held}, f)
    sys.exit(code)
""")

RECIPE = """\
# Run: mint loop race.yaml   (the concurrency suite's loop: one generation on the tiny random base)
recipe: race
base: tiny-random
dataset: smoke   # the name contracts/genui-smoke.yaml's live suite reads
loop: {{iterations: 1}}
steps:
  - ingest: {{sources: [{logs}]}}
{train}"""
TRAIN_STEPS = """\
  - train: {{specialist: genui, method: sft, set: {{max_steps: 1, per_device_train_batch_size: 2, max_length: 96,
              lora.r: 2}}}}
  - eval: {{specialist: genui, contract: {contract}}}
  - promote: {{specialist: genui}}
"""


def fake_adapter(directory: Path, salt: int) -> Path:
    """A PEFT-shaped directory with a valid one-tensor safetensors file (promotion never loads weights)."""
    directory.mkdir(parents=True)
    (directory / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 2, "salt": salt}))
    header = json.dumps({"w": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}}).encode()
    header += b" " * (-len(header) % 8)
    (directory / "adapter_model.safetensors").write_bytes(len(header).to_bytes(8, "little") + header
                                                          + salt.to_bytes(4, "little"))
    return directory


def write_report(home: Path, revision, baseline: str | None) -> Path:
    """A passing report of ``revision`` against ``baseline``, registered as `mint eval` registers its own."""
    from mint.registry import store
    from mint.registry.promotion import read_report, record_report

    path = home.parent / f"report-{revision.ref.replace(':', '-')}.json"
    path.write_text(json.dumps({"revision": revision.ref, "revision_id": revision.id, "contract": CONTRACT,
                                "baseline": {"revision_id": baseline}, "metrics": {}, "gates": [],
                                "verdict": "pass", "examples_sha256": EXAMPLES, "source": "generated",
                                "created_at": store.now()}))
    conn = store.open_store(workspace_of(home))
    try:
        record_report(conn, read_report(path))
    finally:
        conn.close()
    return path


def workspace_of(home: Path):
    from mint.workspace import workspace
    return workspace(home)


def build_workspace(root: Path, candidates: int) -> tuple[Path, dict[str, Path]]:
    """chat:v1 then chat:v2 promoted (v2 is the champion, v1 previous); candidates v3.. with reports vs v2."""
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote

    home = root / "home"
    ws = workspace_of(home)
    revisions = [register(ws, fake_adapter(root / f"adapter-{i}", i), specialist=SPECIALIST, method="sft")
                 for i in range(1, candidates + 3)]
    write_report(home, revisions[0], baseline=None)   # the champion's own report: the gates' baseline
    promote(ws, revisions[0].ref, force=True, why="suite setup")
    write_report(home, revisions[1], baseline=revisions[0].id)
    promote(ws, revisions[1].ref)
    reports = {r.ref: write_report(home, r, baseline=revisions[1].id) for r in revisions[2:]}
    return home, reports


def plan_commands(rng: random.Random, reports: dict[str, Path], ops: int) -> list[list[str]]:
    """OPS promote / reject / rollback command lines, drawn with ``rng``."""
    refs = sorted(reports)
    commands = []
    for _ in range(ops):
        kind = rng.choice(("promote", "promote", "reject", "rollback"))
        ref = rng.choice(refs)
        if kind == "promote":
            commands.append(["promote", ref, "--report", str(reports[ref])])
        elif kind == "reject":
            commands.append(["reject", ref, "--why", "race"])
        else:
            commands.append(["rollback", SPECIALIST, "--why", "race"])
    return commands


def run_once(root: Path, rng: random.Random, loops: int, ops: int, train: bool) -> tuple[list[str], dict]:
    """One race; returns every violation found (empty: none) and counts for the summary."""
    home, reports = build_workspace(root, candidates=max(4, ops // 2))
    recipe = root / "race.yaml"
    recipe.write_text(RECIPE.format(
        logs=ROOT / "examples" / "logs" / "server_log.jsonl.gz",
        train=TRAIN_STEPS.format(contract=ROOT / "contracts" / "genui-smoke.yaml") if train else ""))
    start = root / "start"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
           "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    jobs = [("loop", ["loop", str(recipe)]) for _ in range(loops)]
    jobs += [(command[0], command) for command in plan_commands(rng, reports, ops)]
    rng.shuffle(jobs)
    procs = []
    for i, (kind, argv) in enumerate(jobs):
        timing = root / f"timing-{i}.json"
        proc = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(start), str(timing), "--home", str(home),
                                 *argv], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
        procs.append((kind, argv, timing, proc))
    time.sleep(0.5)   # let the children get to their imports; the barrier holds them, not this sleep
    start.write_text("go")
    results = []
    for kind, argv, timing, proc in procs:
        out, err = proc.communicate(timeout=600)
        times = json.loads(timing.read_text()) if timing.exists() else None
        results.append({"kind": kind, "argv": argv, "pid": proc.pid, "code": proc.returncode, "out": out,
                        "err": err, "times": times})
    problems = check(home, results)
    counts = {k: sum(1 for r in results if r["kind"] == k and r["code"] == 0) for k in
              ("loop", "promote", "reject", "rollback")}
    return problems, counts


def check(home: Path, results: list[dict]) -> list[str]:
    from mint.registry import store
    from mint.registry.maintenance import verify

    problems = []
    for r in results:
        where = f"{' '.join(r['argv'][:2])} (pid {r['pid']})"
        if r["code"] not in (0, 1):
            problems.append(f"{where} exited {r['code']}: {r['err'][-400:]}")
        if "Traceback" in r["out"] + r["err"]:
            problems.append(f"{where} printed a traceback")
    loops = [r for r in results if r["kind"] == "loop"]
    holders = [r for r in loops if r["times"] and "taken" in r["times"]]
    for a in holders:
        for b in holders:
            if a is not b and a["times"]["taken"] <= b["times"]["taken"] < a["times"].get("released", 1e18):
                problems.append(f"loops {a['pid']} and {b['pid']} held the workspace lock at the same time")
    for r in loops:
        if r["code"] == 1 and not any(f"pid {h['pid']}," in r["err"] for h in holders):
            problems.append(f"loop {r['pid']} was refused without naming the holder: {r['err'][-300:]!r}")
    conn = store.open_store(workspace_of(home), create=False)
    try:
        events = conn.execute("SELECT * FROM events ORDER BY seq").fetchall()
        aliases = {(row[0], row[1]): row[2] for row in conn.execute("SELECT specialist, name, revision_id "
                                                                    "FROM aliases")}
    finally:
        conn.close()
    by_pid: dict[int, list] = {}
    for event in events:
        by_pid.setdefault(event["pid"], []).append(event)
    for r in results:
        if r["kind"] == "loop":
            continue
        mine = [e for e in by_pid.get(r["pid"], []) if e["action"] == r["kind"]]
        # promoting the revision that is already the champion succeeds and moves nothing (no event)
        unchanged = r["kind"] == "promote" and "is already the champion" in " ".join(r["out"].split())
        if r["code"] == 0 and len(mine) != (0 if unchanged else 1):
            problems.append(f"{' '.join(r['argv'][:2])} (pid {r['pid']}) succeeded with {len(mine)} events")
        if r["code"] != 0 and mine:
            problems.append(f"{' '.join(r['argv'][:2])} (pid {r['pid']}) failed but its event was written")
    for specialist in {e["specialist"] for e in events}:
        moves = [e for e in events if e["specialist"] == specialist and e["alias"] == "champion"]
        for before, after in zip(moves, moves[1:]):
            if after["old"] != before["new"]:
                problems.append(f"lost update: event #{after['seq']} moved {specialist} from {after['old']}, "
                                f"but event #{before['seq']} had left it at {before['new']}")
        if moves and aliases.get((specialist, "champion")) != moves[-1]["new"]:
            problems.append(f"{specialist}:champion is {aliases.get((specialist, 'champion'))}, but the last "
                            f"event moved it to {moves[-1]['new']}")
    result = verify(workspace_of(home))
    problems += [f"registry verify: {p}" for p in result.problems]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--loops", type=int, default=3)
    parser.add_argument("--ops", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-train", action="store_true", help="loops only ingest (a short loop)")
    parser.add_argument("--quick", action="store_true", help="one run, loops that only ingest")
    parser.add_argument("--postgres", metavar="URL|start", help="share the registry on PostgreSQL: a database URL, "
                                                                "or 'start' for a throwaway cluster")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.no_train = 1, True
    sys.path.insert(0, str(ROOT))
    cluster = None
    if args.postgres == "start":
        from tests.registry.pgcluster import start_cluster
        cluster = start_cluster()
    try:
        return _runs(args, cluster.url if cluster else args.postgres)
    finally:
        if cluster is not None:
            cluster.stop()


def fresh_registry(url: str) -> str:
    """A fresh schema of the database at ``url``, as the URL of an empty registry in it."""
    import uuid

    import psycopg

    schema = f"race_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {schema}")
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


def _runs(args, postgres: str | None) -> int:
    rng = random.Random(args.seed)
    lost, totals = 0, {}
    started = time.perf_counter()
    for run in range(args.runs):
        if postgres:   # every process of this run, and the checks, read the registry from the environment
            os.environ["MINT_REGISTRY_URL"] = fresh_registry(postgres)
        with tempfile.TemporaryDirectory(prefix="mint-race-") as tmp:
            problems, counts = run_once(Path(tmp), rng, args.loops, args.ops, train=not args.no_train)
        lost += len(problems)
        totals = {k: totals.get(k, 0) + v for k, v in counts.items()}
        print(f"run {run + 1}/{args.runs}: succeeded {counts}; violations {len(problems)}", flush=True)
        for problem in problems:
            print(f"  {problem}", flush=True)
    print(f"{args.runs} runs of {args.loops} loops + {args.ops} commands in {time.perf_counter() - started:.0f} s; "
          f"succeeded in all: {totals}")
    verdict = "PASS" if lost == 0 else "FAIL"
    print(f"FIGURE concurrency: runs={args.runs} processes={args.runs * (args.loops + args.ops)} "
          f"lost_updates={lost} goal=0 {verdict}")
    return 0 if lost == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
