"""Registry at scale: 1,000,000 revisions (metadata only), then reference resolution (ids, versions and
aliases), the first, middle and last pages of `registry ls`, promotion, and eight promoters racing, each
measured against its goal in one run; with --postgres, the same figures on PostgreSQL beside SQLite's.

Run: make bench   (or: python scripts/bench_registry.py [--revisions N] [--rounds N] [--postgres URL|start])

--postgres URL measures in a fresh schema of that database (dropped afterwards); --postgres start starts a
throwaway cluster (tests/registry/pgcluster.py, fsync on, as SQLite's synchronous=FULL) and stops it after.
The revisions are written in bulk (COPY on PostgreSQL, about 10 s for 10^5 here), then a sample is resolved
through the registry's API and compared with the rows written.
Goals on PostgreSQL (at 10^5 revisions: --revisions 100000): resolve p99 under 2 ms, promote p99
under 50 ms, 0 lost updates with eight racing promoters.

Goals: resolve p99 under 1 ms (aliases too), a 20-row page under 50 ms (the middle and last
ones included), promote under 10 ms, and with eight concurrent promoters 0 lost updates (exactly one winner a
round, every champion move chained to the one before); their p99 latency is printed. The database size per
revision is printed. Promotion commits with synchronous=FULL (it must survive a power loss), so its time
includes one fsync of the WAL: on a disk whose fsync takes ~10 ms the promote goal cannot be met, and that
is the disk's fsync, not the code.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from mint.registry import store
from mint.registry.promotion import promote, read_report, record_report
from mint.workspace import workspace

SPECIALISTS = ("chat", "agent", "coding", "genui")


def fill(ws, n: int) -> list[tuple[str, int, str]]:
    """n revisions spread over the four specialists, the rows `mint train` registers (metadata only), written in
    one transaction: executemany on SQLite, COPY on PostgreSQL. A sample is then resolved through the registry's
    own API, so a bulk row that differs from what the API writes fails the run."""
    conn = store.open_store(ws)
    rng = random.Random(0)
    made, versions, rows = [], {s: 0 for s in SPECIALISTS}, []
    for i in range(n):
        specialist = SPECIALISTS[i % 4]
        versions[specialist] += 1
        revision_id = "%032x" % rng.getrandbits(128)
        made.append((specialist, versions[specialist], revision_id))
        rows.append((revision_id, specialist, versions[specialist], None, "candidate", "smollm2-135m",
                     "sha256:" + "5" * 64, "prod@" + "%012x" % (i // 1000), "sft", None, "%064x" % i,
                     "%064x" % (i * 7), '{"train_loss": 0.1}', store.now()))
    columns = ", ".join(store.REVISION_COLUMNS)
    with store.write(conn):
        if conn.shared:
            with conn.raw.cursor().copy(f"COPY revisions ({columns}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            conn.executemany(f"INSERT INTO revisions ({columns}) VALUES "
                             f"({', '.join('?' * len(store.REVISION_COLUMNS))})", rows)
    if conn.shared:   # what autovacuum does to a registry at rest, done now rather than during the measurements
        conn.execute("VACUUM (ANALYZE) revisions")
    for index in random.Random(2).sample(range(n), min(n, 200)):
        specialist, version, revision_id = made[index]
        by_version, by_id = store.resolve(conn, f"{specialist}:v{version}"), store.resolve(conn, revision_id)
        expected = store.Revision(*rows[index][:12], metrics={"train_loss": 0.1}, created_at=rows[index][13])
        if by_version != expected or by_id != expected:
            raise SystemExit(f"the bulk fill wrote {specialist}:v{version} unlike the registry does: {by_version}")
    conn.close()
    return made


def percentile(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        out.append((time.perf_counter() - start) * 1000)
    return out


PROMOTERS = 8


def _promoter(home: str, registry_url: str | None, worker: int, ids: list[str], barrier, results) -> None:
    """Each round: read the champion, report against it, wait for the other promoters, promote at once."""
    ws = workspace(Path(home), registry_url=registry_url)
    for round_, revision_id in enumerate(ids):
        barrier.wait()
        conn = store.open_store(ws, create=False)
        champion = store.alias_target(conn, "agent", "champion")
        conn.close()
        report = Path(home) / f"race-{round_}-{worker}.json"
        report.write_text(json.dumps({"revision_id": revision_id, "verdict": "pass", "baseline": {
            "revision_id": champion}, "contract": {"name": "agent", "version": 1, "sha256": "0" * 64},
            "examples_sha256": "0" * 64}))
        conn = store.open_store(ws, create=False)
        try:
            record_report(conn, read_report(report))     # as `mint eval` does: promote trusts registered reports
        finally:
            conn.close()
        barrier.wait()
        start = time.perf_counter()
        try:
            promote(ws, revision_id, report_path=report, check_files=False)   # metadata-only revisions
            outcome = "won"
        except store.StaleBaseline:
            outcome = "stale"
        except Exception as exc:  # noqa: BLE001 - counted as an error in the summary
            outcome = f"error: {exc!r}"
        results.put((round_, outcome, (time.perf_counter() - start) * 1000))


def race(ws, made, rounds: int) -> tuple[list[float], int, int]:
    """PROMOTERS processes promoting agent revisions together, ``rounds`` times: (latencies, lost, errors)."""
    agent = [rid for specialist, _v, rid in made if specialist == "agent"][-PROMOTERS * rounds:]
    conn = store.open_store(ws)
    champion = store.alias_target(conn, "agent", "champion")
    if champion:    # promotion compares with the champion's own report on the same examples: give it one
        report = ws.home / "race-champion.json"
        report.write_text(json.dumps({"revision_id": champion, "verdict": "pass", "baseline": {"revision_id": None},
                                      "contract": {"name": "agent", "version": 1, "sha256": "0" * 64},
                                      "examples_sha256": "0" * 64}))
        record_report(conn, read_report(report))
    conn.close()
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(PROMOTERS, timeout=600), context.Queue()
    workers = [context.Process(target=_promoter, args=(str(ws.home), ws.registry_url, i, agent[i::PROMOTERS], barrier,
                                                       results))
               for i in range(PROMOTERS)]
    for worker in workers:
        worker.start()
    outcomes = [results.get(timeout=600) for _ in range(PROMOTERS * rounds)]
    for worker in workers:
        worker.join()
    winners = [sum(1 for r, o, _ in outcomes if r == round_ and o == "won") for round_ in range(rounds)]
    conn = store.open_store(ws)
    events = store.history(conn, "agent")
    conn.close()
    broken = sum(1 for before, after in zip(events, events[1:]) if after.old != before.new)
    lost = sum(abs(w - 1) for w in winners) + broken + abs(len(events) - rounds)
    errors = sum(1 for _, o, _ in outcomes if o.startswith("error"))
    if errors:
        print("first promoter error:", next(o for _, o, _ in outcomes if o.startswith("error")))
    return [ms for _, _, ms in outcomes], lost, errors


def database_size(conn, ws) -> int:
    if conn.shared:
        return int(conn.execute("SELECT COALESCE(SUM(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
                                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                                "WHERE n.nspname = current_schema() AND c.relkind = 'r'").fetchone()[0])
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return os.path.getsize(store.db_path(ws))


def measure(ws, tmp: str, revisions: int, rounds: int) -> dict:
    """Every figure on the registry of ``ws``: lists of milliseconds, and the fill's seconds and size."""
    figures: dict = {}
    ws.home.mkdir(parents=True, exist_ok=True)   # the race's reports are written there
    started = time.perf_counter()
    made = fill(ws, revisions)
    figures["fill_s"] = time.perf_counter() - started
    conn = store.open_store(ws)
    figures["size"] = database_size(conn, ws)

    rng = random.Random(1)
    samples = [rng.choice(made) for _ in range(10_000)]
    refs = [f"{s}:v{v}" if i % 2 else rid[:10] for i, (s, v, rid) in enumerate(samples)]
    figures["resolve"] = []
    for ref in refs:
        start = time.perf_counter()
        store.resolve(conn, ref)
        figures["resolve"].append((time.perf_counter() - start) * 1000)

    # aliases resolve through the aliases table; coding's champion is left to the promotions below
    aliased = ("chat", "agent", "genui")
    with store.write(conn):
        for specialist in aliased:
            conn.execute("INSERT INTO aliases (specialist, name, revision_id) VALUES (?, 'champion', ?)",
                         (specialist, next(rid for s, _v, rid in made if s == specialist)))
    figures["alias"] = []
    for i in range(10_000):
        ref = f"{aliased[i % 3]}:champion"
        start = time.perf_counter()
        store.resolve(conn, ref)
        figures["alias"].append((time.perf_counter() - start) * 1000)

    total = revisions
    figures["first_page"] = timed(lambda: store.list_revisions(conn, limit=20, offset=0), 20)
    figures["middle_page"] = timed(lambda: store.list_revisions(conn, limit=20, offset=total // 2), 20)
    figures["last_page"] = timed(lambda: store.list_revisions(conn, limit=20, offset=total - 20), 20)
    figures["filtered_last"] = timed(lambda: store.list_revisions(conn, specialist="coding", status="candidate",
                                                                  limit=20, offset=total // 4 - 20), 20)

    # promotion: each candidate's report was measured against the champion it replaces
    figures["promote"], champion = [], None
    for i in range(30):
        specialist, version, revision_id = made[-4 * (i + 1) + 2]   # coding revisions
        report = Path(tmp) / f"report-{i}.json"
        report.write_text(json.dumps({"revision_id": revision_id, "verdict": "pass", "baseline": {
            "revision_id": champion}, "contract": {"name": "coding", "version": 1, "sha256": "0" * 64},
            "examples_sha256": "0" * 64}))
        record_report(conn, read_report(report))     # as `mint eval` does: promote trusts registered reports
        start = time.perf_counter()
        promote(ws, f"{specialist}:v{version}", report_path=report, check_files=False)   # metadata only
        figures["promote"].append((time.perf_counter() - start) * 1000)
        champion = revision_id
    conn.close()
    figures["race"], figures["lost"], figures["errors"] = race(ws, made, rounds)
    return figures


# (figure, label, statistic, SQLite goal ms, PostgreSQL goal ms); None: printed, not gated
ROWS = [("resolve", "resolve p50", "p50", None, None),
        ("resolve", "resolve p99", "p99", 1, 2),
        ("alias", "resolve alias (champion) p99", "p99", 1, 2),
        ("first_page", "ls --limit 20, first page", "p50", None, None),
        ("middle_page", "ls --limit 20, middle page", "p50", 50, 50),
        ("last_page", "ls --limit 20, last page", "p50", 50, 50),
        ("filtered_last", "ls coding/candidate, last page", "p50", 50, 50),
        ("promote", "promote (median of 30)", "p50", 10, None),
        ("promote", "promote p99", "p99", None, 50),
        ("race", f"{PROMOTERS} racing promoters, p50", "p50", None, None),
        ("race", f"{PROMOTERS} racing promoters, p99", "p99", None, None)]


def report_table(results: dict[str, dict], revisions: int, rounds: int) -> None:
    backends = list(results)
    for backend, figures in results.items():
        print(f"{backend}: {revisions:,} revisions inserted in {figures['fill_s']:.1f} s; database "
              f"{figures['size'] / 1e6:.0f} MB, {figures['size'] / revisions:.0f} bytes per revision")
    print(f"\n{'measure':<34}" + "".join(f"{b:>14} {'goal':>8}      " for b in backends))
    for key, label, statistic, *goals in ROWS:
        line = f"{label:<34}"
        for backend, goal in zip(backends, goals if len(backends) > 1 else goals[:1]):
            values = results[backend][key]
            value = percentile(values, 0.99) if statistic == "p99" else statistics.median(values)
            verdict = "" if goal is None else ("MET" if value < goal else "MISSED")
            line += f"{value:>11.3f} ms {('< ' + str(goal)) if goal else '':>8} {verdict:<6}"
        print(line)
    line = f"{'lost updates':<34}"
    for backend in backends:
        figures = results[backend]
        line += f"{figures['lost']:>14d} {'= 0':>8} {'MET' if figures['lost'] == 0 else 'MISSED':<6}"
    print(line + f"   ({rounds} rounds)")
    for backend in backends:
        if results[backend]["errors"]:
            print(f"{backend}: {results[backend]['errors']} promoter errors")


def _with_schema(url: str, schema: str) -> str:
    return f"{url}{'&' if '?' in url else '?'}options=-csearch_path%3D{schema}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revisions", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=50, help="rounds of the eight-promoter race")
    parser.add_argument("--postgres", metavar="URL|start", help="also measure PostgreSQL: a database URL, or "
                                                                "'start' for a throwaway cluster")
    args = parser.parse_args()
    if args.revisions < 4 * (30 + PROMOTERS * args.rounds) + 40:
        parser.error(f"--revisions must be at least {4 * (30 + PROMOTERS * args.rounds) + 40} for --rounds "
                     f"{args.rounds}")
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="mint-bench-registry-") as tmp:
        results["sqlite"] = measure(workspace(Path(tmp) / "sqlite"), tmp, args.revisions, args.rounds)
        if args.postgres:
            cluster = None
            if args.postgres == "start":
                sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
                from tests.registry.pgcluster import start_cluster
                cluster = start_cluster(durable=True)
                base_url = cluster.url
            else:
                base_url = args.postgres
            import psycopg
            schema = f"bench_{uuid.uuid4().hex[:8]}"
            with psycopg.connect(base_url, autocommit=True) as admin:
                admin.execute(f"CREATE SCHEMA {schema}")
            try:
                results["postgresql"] = measure(workspace(Path(tmp) / "postgresql",
                                                          registry_url=_with_schema(base_url, schema)),
                                                tmp, args.revisions, args.rounds)
            finally:
                with psycopg.connect(base_url, autocommit=True) as admin:
                    admin.execute(f"DROP SCHEMA {schema} CASCADE")
                if cluster is not None:
                    cluster.stop()
    report_table(results, args.revisions, args.rounds)


if __name__ == "__main__":
    main()
