"""Alias moves: promote (compare-and-set against the report's baseline), reject and rollback.

Each move is one write transaction (``BEGIN IMMEDIATE`` on SQLite, an advisory
write lock on PostgreSQL) that re-reads the champion, checks it, moves the
aliases, updates statuses and appends the event, so two promotions racing on one
specialist can never both win.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mint.errors import BadInput, MintError, Refused
from mint.faults import checkpoint
from mint.registry import store
from mint.registry.artifacts import revision_dir, verify_revision
from mint.registry.refs import check_name
from mint.registry.report import ContractIdentity, Report, read_report
from mint.registry.servers import adapter_rank, running_servers
from mint.registry.store import StaleBaseline
from mint.workspace import Workspace

# what a contract file is now (mint.contract.identity.contract_identity): the caller's, so the registry never
# loads a contract
IdentifyContract = Callable[[Path], ContractIdentity]


def _check_subject(report: Report) -> None:
    """A report the registry files is of a revision, or of the bare base (generation 0's baseline)."""
    if report.revision_id is None and not (report.revision == "base" and report.base_fingerprint):
        raise BadInput("expected str", file=report.path, field="revision_id")


def record_report(conn, report: Report) -> None:
    """Register a report under its content hash (idempotent); ``mint eval`` calls this for every report it
    writes, and nothing else does, so promotion can tell its reports from any other JSON. ``report`` is the
    value as written: its ``id`` is the sha256 of the bytes on disk."""
    _check_subject(report)
    if report.id is None or report.path is None:
        raise MintError("record_report needs a report as stored (Report.stored or read_report)")
    conn.execute("INSERT INTO reports (id, revision_id, contract_name, contract_version, contract_sha256, "
                 "verdict, baseline_revision_id, path, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                 "ON CONFLICT DO NOTHING",
                 (report.id, report.owner, report.contract.name, report.contract.version,
                  report.contract.sha256, report.verdict, report.baseline.revision_id, report.path,
                  report.created_at or store.now()))


def is_registered(conn, report: Report) -> bool:
    """Whether ``mint eval`` registered exactly the bytes ``report`` was read from."""
    return conn.execute("SELECT 1 FROM reports WHERE id = ?", (report.id,)).fetchone() is not None


def registered(conn, report: Report) -> None:
    """Refuse ``report`` unless ``mint eval`` registered exactly these bytes."""
    if is_registered(conn, report):
        return
    if conn.execute("SELECT 1 FROM reports WHERE path = ?", (report.path,)).fetchone():
        raise Refused(f"{report.path} was edited after `mint eval` registered it; re-run `mint eval {report.label}`")
    raise Refused(f"{report.path} is not a report registered by `mint eval`; run `mint eval {report.label} "
                  "--contract FILE` and promote with the report it writes")


def intact_report(conn, report_id: str) -> Report | None:
    """The registered report with this id, if its file still has exactly the registered bytes."""
    row = conn.execute("SELECT path FROM reports WHERE id = ?", (report_id,)).fetchone()
    if row is None:
        return None
    try:
        report = read_report(Path(row[0]))
        _check_subject(report)
    except BadInput:
        return None
    return report if report.id == report_id else None


def find_registered_report(conn, owner: str, contract: ContractIdentity, examples_sha256: str,
                           where: Callable[[Report], bool] | None = None) -> Report | None:
    """The newest intact report that mint generated for ``owner`` under ``contract`` on these examples (and
    for which ``where`` holds, when given)."""
    rows = conn.execute("SELECT id FROM reports WHERE revision_id = ? AND contract_name = ? AND contract_version = ? "
                        "AND contract_sha256 = ? ORDER BY created_at DESC",
                        (owner, contract.name, contract.version, contract.sha256)).fetchall()
    for (report_id,) in rows:
        report = intact_report(conn, report_id)
        if report and report.source == "generated" and report.examples_sha256 == examples_sha256 and \
                (where is None or where(report)):
            return report
    return None


def _newest_registered_report(conn, revision_id: str, verdict: str | None = "pass") -> Report | None:
    """The newest intact registered report of the revision with that ``verdict`` (any verdict for None)."""
    if verdict is None:
        rows = conn.execute("SELECT id FROM reports WHERE revision_id = ? ORDER BY created_at DESC",
                            (revision_id,)).fetchall()
    else:
        rows = conn.execute("SELECT id FROM reports WHERE revision_id = ? AND verdict = ? ORDER BY created_at DESC",
                            (revision_id, verdict)).fetchall()
    for (report_id,) in rows:
        report = intact_report(conn, report_id)
        if report is not None:
            return report
    return None


def failing_gates(report: Report) -> str:
    """The gates a report failed, each with its value and rule: ``core.request_match 0.2 (min 0.4)``."""
    shown = []
    for gate in report.gates:
        if not gate.passed:
            value = "not measured" if gate.value is None else f"{gate.value:.4g}"
            shown.append(f"{gate.metric} {value} ({gate.rule})")
    return "; ".join(shown) or "no gate failed, but its verdict is not pass"


def _failed_report_message(revision: store.Revision, report: Report) -> str:
    if report.verdict == "measured":
        return (f"{revision.ref} was only measured as a baseline under {report.contract.name} "
                f"v{report.contract.version} (report {report.path}): that report has no gates of its own; run `mint "
                f"eval {revision.ref} --contract FILE` to gate it")
    return (f"{revision.ref} failed its gates under {report.contract.name} v{report.contract.version}: "
            f"{failing_gates(report)} (report {report.path}). Train a better candidate and `mint eval` it, or "
            f"promote this one anyway with `mint promote {revision.ref} --force --why TEXT` (the event log keeps "
            "the reason)")


def _check_contract_is_current(conn, report: Report, ref: str, identify_contract: IdentifyContract | None) -> None:
    contract = report.contract
    newer = conn.execute("SELECT MAX(contract_version) FROM reports WHERE contract_name = ?",
                         (contract.name,)).fetchone()[0]
    if newer is not None and newer > contract.version:
        raise Refused(f"the report is under contract {contract.name} v{contract.version}, but "
                      f"v{newer} is current; re-run `mint eval {ref}`")
    if contract.path:
        path = Path(contract.path)
        if not path.is_file():
            raise Refused(f"the report's contract {path} no longer exists; re-run `mint eval {ref}`")
        if identify_contract is None:   # a caller that cannot say what the contract is now can't vouch for it
            raise Refused(f"the report's contract {path} could not be checked against the report: promote "
                          "through `mint promote` or pass identify_contract")
        try:
            current = identify_contract(path)
        except BadInput as exc:
            raise Refused(f"contract {path} changed since this report and no longer loads ({exc}); "
                          f"re-run `mint eval {ref}`") from None
        if not current.same_contract(contract):
            raise Refused(f"contract {path} (its YAML, suites or catalog) changed since this report; "
                          f"re-run `mint eval {ref}`")


def _check_same_examples(conn, report: Report, current: str | None) -> None:
    """The gates compared the candidate with ``report.baseline.report``: it must be an intact registered report
    of the current champion (or of the base, for generation 0) under the same contract, on the same examples."""
    if report.baseline.report is None:
        if current is None:
            return
        found = report.examples_sha256 and find_registered_report(conn, current, report.contract,
                                                                   report.examples_sha256)
        if not found:
            raise Refused(f"the champion has no report under contract {report.contract.name} "
                          f"v{report.contract.version} on the examples of {report.path}; re-run `mint eval "
                          f"{report.label}`")
        return
    baseline = intact_report(conn, report.baseline.report)
    if baseline is None:
        raise Refused(f"the baseline report {report.baseline.report[:12]} named by {report.path} is not registered "
                      f"or was edited; re-run `mint eval {report.label}`")
    expected_owner = current or baseline.owner
    if (baseline.owner != expected_owner or (current is None and baseline.revision_id is not None)
            or not baseline.contract.same_contract(report.contract) or baseline.source != "generated"):
        raise Refused(f"{report.path} was compared with {baseline.label}'s report under "
                      f"{baseline.contract.name} v{baseline.contract.version}, not with the current champion's "
                      f"under the same contract; re-run `mint eval {report.label}`")
    if baseline.examples_sha256 != report.examples_sha256:
        raise Refused(f"{report.path} and its baseline report ({baseline.label}) were measured on different "
                      f"examples (e.g. one with --limit); re-run `mint eval {report.label}` without --limit")


@dataclass(frozen=True)
class AliasMove:
    action: str
    specialist: str
    old: str | None
    new: str
    new_ref: str
    report: str | None
    reason: str | None


def _describe(conn, revision_id: str | None) -> str:
    if revision_id is None:
        return "none"
    revision = store.get_revision(conn, revision_id)
    return f"{revision.ref} ({revision_id[:12]})" if revision else revision_id[:12]


def _move_champion(conn, specialist: str, current: str | None, target: store.Revision) -> None:
    store.set_alias(conn, specialist, "champion", target.id)
    if current:
        store.set_alias(conn, specialist, "previous", current)
        conn.execute("UPDATE revisions SET status = 'retired' WHERE id = ?", (current,))
    conn.execute("UPDATE revisions SET status = 'champion' WHERE id = ?", (target.id,))


def promote(ws: Workspace, ref: str, *, report_path: Path | None = None, force: bool = False,
            why: str | None = None, check_files: bool = True,
            identify_contract: IdentifyContract | None = None) -> AliasMove:
    """Make ``ref`` its specialist's champion if its files are intact and its registered, passing report was
    measured against the current one on the same examples. Every report check runs inside the one write
    transaction that moves the alias.

    ``identify_contract`` (mint.contract.identity.contract_identity) says what the report's contract file is
    now: a report whose contract changed since is refused, and without it a report that names its contract
    file is refused. ``check_files=False`` only for registries of metadata-only revisions (benchmarks at
    scale); ``--force`` skips the report checks, never the files' hashes.
    """
    if force and not (why and why.strip()):
        raise BadInput("--force needs --why TEXT, which the event log keeps", field="--why")
    conn = store.open_store(ws, create=False)
    try:
        revision = store.resolve(conn, ref)
        given = read_report(Path(report_path)) if report_path else None
        if given is not None:
            _check_subject(given)
        if given is not None and given.revision_id is None:
            raise BadInput(f"this is a report of the bare base ({given.base_fingerprint}), the baseline of "
                           "generation 0; base reports can't be promoted: promote a revision with its own report",
                           file=given.path, field="revision")
        if check_files:   # before the transaction: hashing the weights must not hold the write lock
            problems = verify_revision(ws, revision)
            if problems:
                raise Refused(f"{revision.ref} ({revision.id[:12]}) failed verification, so it is not promoted: "
                              + "; ".join(problems))
        if not force:
            _check_servers_hold(ws, revision)
        checkpoint("promote.read")
        with store.write(conn):
            # re-read inside the transaction: a reject or promotion committed since the lines above counts
            revision = store.get_revision(conn, revision.id)
            report = given or _newest_registered_report(conn, revision.id)
            current = store.alias_target(conn, revision.specialist, "champion")
            if current == revision.id:
                # a retry of a promote that committed before its process died (or a second cron run): the
                # outcome the caller asked for already holds, so nothing moves and it is not a refusal
                return AliasMove("unchanged", revision.specialist, current, revision.id, revision.ref, None, None)
            if not force:
                _check_promotable(conn, revision, report, current, identify_contract)
            checkpoint("promote.checked")
            with conn.batch():   # the moves and the event log's head in one round trip on PostgreSQL
                _move_champion(conn, revision.specialist, current, revision)
                store.record_event(conn, action="force-promote" if force else "promote",
                                   specialist=revision.specialist, alias="champion", old=current, new=revision.id,
                                   report=report.path if report else None,
                                   contract=report.contract.to_dict() if report else None, reason=why)
            checkpoint("promote.before_commit")
        checkpoint("promote.committed")
        return AliasMove("force-promote" if force else "promote", revision.specialist, current, revision.id,
                         revision.ref, report.path if report else None, why)
    finally:
        conn.close()


def _check_servers_hold(ws: Workspace, revision: store.Revision) -> None:
    """Refuse a revision whose LoRA rank is above the slot rank of a running `mint serve` (as it announced it):
    that server could not load it and would go on serving the old champion."""
    servers = running_servers(ws)
    if not servers:
        return
    rank = adapter_rank(revision_dir(ws, revision))
    for server in servers:
        if rank > server["max_rank"]:
            raise Refused(f"{revision.ref} has LoRA rank {rank}, above the rank {server['max_rank']} that the server "
                          f"at {server.get('url')} (pid {server['pid']}) holds: it would keep serving the old "
                          f"champion; restart it with --max-rank {rank} first, or promote with --force --why TEXT")


def _check_promotable(conn, revision: store.Revision, report: Report | None, current: str | None,
                      identify_contract: IdentifyContract | None) -> None:
    if report is None:
        failed = _newest_registered_report(conn, revision.id, verdict=None)
        if failed is not None:
            raise Refused(_failed_report_message(revision, failed))
        raise Refused(f"no passing report for {revision.ref}: it has no report yet; run `mint eval {revision.ref} "
                      "--contract FILE` first (or pass --report FILE)")
    if report.revision_id != revision.id:
        raise BadInput(f"the report is for revision {report.revision_id[:12]}, not {revision.ref} "
                       f"({revision.id[:12]})", file=report.path, field="revision_id")
    if report.verdict != "pass":
        raise Refused(_failed_report_message(revision, report))
    if revision.status == "rejected":
        raise Refused(f"{revision.ref} was rejected; promote it with --force --why TEXT if you mean it")
    _check_contract_is_current(conn, report, revision.ref, identify_contract)
    registered(conn, report)
    if report.source != "generated":
        raise Refused(f"{report.path} scores outputs made elsewhere (--predictions), not {revision.ref} itself; "
                      "promote it with --force --why TEXT if you trust them")
    if report.baseline.revision_id != current:
        raise StaleBaseline(f"champion moved from {_describe(conn, report.baseline.revision_id)} to "
                            f"{_describe(conn, current)} since this report; re-run `mint eval {revision.ref}`")
    _check_same_examples(conn, report, current)


def reject(ws: Workspace, ref: str, *, why: str) -> AliasMove:
    if not (why and why.strip()):
        raise BadInput("say why with --why TEXT; the event log keeps it", field="--why")
    conn = store.open_store(ws, create=False)
    try:
        with store.write(conn):
            revision = store.resolve(conn, ref)
            if store.alias_target(conn, revision.specialist, "champion") == revision.id:
                raise Refused(f"{revision.ref} is the champion of {revision.specialist}; "
                              f"`mint rollback {revision.specialist}` first")
            if revision.status == "rejected":
                raise Refused(f"{revision.ref} is already rejected")
            conn.execute("UPDATE revisions SET status = 'rejected' WHERE id = ?", (revision.id,))
            store.record_event(conn, action="reject", specialist=revision.specialist, new=revision.id, reason=why)
            _point_previous_at_rollback_target(conn, revision.specialist)   # never at a rejected revision
        return AliasMove("reject", revision.specialist, None, revision.id, revision.ref, None, why)
    finally:
        conn.close()


def champion_stack(conn, specialist: str) -> list[str]:
    """The champions a rollback can return to, oldest first, the current one last.

    Read from the event log: a promotion pushes its revision; a rollback pops every
    champion above its target, so a revision rolled away from is never returned to.
    """
    stack: list[str] = []
    for event in store.history(conn, specialist):
        if event.alias != "champion" or event.new is None:
            continue
        if event.action == "rollback":
            if event.new in stack:
                del stack[len(stack) - stack[::-1].index(event.new):]
                continue
            if stack and stack[-1] == event.old:   # a v0 log's `--to` anywhere: the old one was rolled away from
                stack.pop()
        stack.append(event.new)
    return stack


def _rollback_targets(conn, specialist: str, current: str | None) -> list[str]:
    """Earlier champions below the current one, nearest first, without rejected ones."""
    stack = champion_stack(conn, specialist)
    if stack and stack[-1] == current:
        stack = stack[:-1]
    targets = []
    for revision_id in reversed(stack):
        revision = store.get_revision(conn, revision_id)
        if revision is not None and revision.status != "rejected" and revision_id != current \
                and revision_id not in targets:
            targets.append(revision_id)
    return targets


def _point_previous_at_rollback_target(conn, specialist: str) -> None:
    """``SPECIALIST:previous`` names what ``mint rollback SPECIALIST`` would return to, or nothing."""
    targets = _rollback_targets(conn, specialist, store.alias_target(conn, specialist, "champion"))
    if targets:
        store.set_alias(conn, specialist, "previous", targets[0])
    else:
        conn.execute("DELETE FROM aliases WHERE specialist = ? AND name = 'previous'", (specialist,))


def rollback(ws: Workspace, specialist: str, *, why: str | None, expect: str | None = None,
             to: str | None = None) -> AliasMove:
    """Re-point the champion to the one before it in the event history (or to ``to``, an earlier champion).

    Compare-and-set: ``expect`` names the champion the operator saw; if the champion is another revision by the
    time the transaction runs, the rollback is refused. Without ``expect`` the champion read in the transaction is
    the one rolled away from.
    """
    check_name(specialist)
    if not (why and why.strip()):
        raise BadInput("say why with --why TEXT; the event log keeps it", field="--why")
    conn = store.open_store(ws, create=False)
    try:
        with store.write(conn):
            current = store.alias_target(conn, specialist, "champion")
            if expect is not None:
                expected = store.resolve(conn, expect)
                if expected.specialist != specialist:
                    raise BadInput(f"{expected.ref} is a revision of {expected.specialist}, not {specialist}",
                                   field="--expect")
                if expected.id != current:
                    raise StaleBaseline(f"the champion of {specialist} is {_describe(conn, current)}, not "
                                        f"{expected.ref}: it moved since you looked; check `mint registry history "
                                        f"{specialist}` and run the rollback again")
            if current is None:
                raise Refused(f"{specialist} has no champion to roll back from")
            targets = _rollback_targets(conn, specialist, current)
            if to is not None:
                target = store.resolve(conn, to)
                if target.specialist != specialist:
                    raise BadInput(f"{target.ref} is a revision of {target.specialist}, not {specialist}", field="--to")
                if target.id == current:
                    raise Refused(f"{target.ref} is already the champion of {specialist}")
                if target.id not in targets:
                    earlier = ", ".join(_describe(conn, t) for t in targets) or "none"
                    raise Refused(f"{target.ref} is not an earlier champion of {specialist} that a rollback can "
                                  f"return to (those are: {earlier}); promote it with a passing report "
                                  f"(`mint promote {target.ref}`) or with --force --why TEXT")
            elif targets:
                target = store.get_revision(conn, targets[0])
            elif champion_stack(conn, specialist) in ([], [current]):
                raise Refused(f"no previous champion to roll back to: {_describe(conn, current)} is the first "
                              f"champion of {specialist}. To replace it, promote another revision (`mint promote "
                              f"{specialist}:vN`)")
            else:
                raise Refused(f"{specialist} has no previous champion to roll back to (every earlier one was "
                              "rolled away from or rejected); promote a revision instead")
            with conn.batch():
                store.set_alias(conn, specialist, "champion", target.id)
                conn.execute("UPDATE revisions SET status = 'retired' WHERE id = ?", (current,))
                conn.execute("UPDATE revisions SET status = 'champion' WHERE id = ?", (target.id,))
                store.record_event(conn, action="rollback", specialist=specialist, alias="champion", old=current,
                                   new=target.id, reason=why)
            _point_previous_at_rollback_target(conn, specialist)
        return AliasMove("rollback", specialist, current, target.id, target.ref, None, why)
    finally:
        conn.close()
