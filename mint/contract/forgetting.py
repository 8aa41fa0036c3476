"""Forgetting as backward transfer: a candidate measured again on every earlier champion's retention suites.

A contract's retention suites (suites named ``retention*``) may change from one version to the next, and
each generation's no_regression gate compares only with the champion just before it, so a specialist can
lose what generation 1 knew a tolerance at a time. For every retention suite that a champion of the
specialist was promoted under (read from the reports its promotions used), the candidate's score minus
the score of the generation that introduced the suite (the first champion promoted with it) is paired
example by example, with its interval; a regression the candidate's contract's no_regression rule fails at the
suite's tolerance (0 when it had none) is forgetting, and the loop rejects the candidate for it.

Cost is bounded: a suite is identified by the sha256 of its file, so one used by several generations is
measured once; one the candidate's own report already measured is reused, not generated again.
"""
from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Callable

from mint.contract.gates import lower_is_better, regressed
from mint.contract.paired import compare
from mint.contract.precision import report_precision
from mint.contract.schema import Contract, Suite, load_contract, read_suite
from mint.errors import BadInput
from mint.registry import queries
from mint.registry.report import Report, read_report
from mint.workspace import Workspace

RETENTION_PREFIX = "retention"
_TOLERANCE = re.compile(r"no_regression ([0-9.eE+-]+)")


def _suites_of(report: Report) -> list[dict]:
    """The suites a report measured (name, source, sha256, metrics); reports made before reports listed their
    suites get them from their contract file while it still hashes as it did."""
    if isinstance(report.suites, list):
        return [s for s in report.suites if isinstance(s, dict)]
    path = report.contract.path
    try:
        contract = load_contract(Path(path), check_data=False) if path else None
    except BadInput:
        return []
    if contract is None or contract.sha256 != report.contract.sha256:
        return []
    return [{"name": s.name, "source": s.source, "metrics": list(s.metrics),
             "sha256": None if s.live else hashlib.sha256(s.data.read_bytes()).hexdigest()} for s in contract.suites]


def _tolerances(report: Report, suite_name: str) -> dict[str, float]:
    """metric -> no_regression tolerance of the report's gates on ``suite_name`` (0 when gated otherwise)."""
    out = {}
    for gate in report.gates:
        if gate.metric.startswith(suite_name + ".") and not gate.metric.endswith(".examples"):
            found = _TOLERANCE.search(gate.rule)
            out[gate.metric.partition(".")[2]] = float(found.group(1)) if found else 0.0
    return out


def _rows(report_path: Path, suite_name: str) -> list[dict]:
    from mint.contract.evaluate import PREDICTIONS_FILE

    recorded = read_report(report_path).predictions_sha256
    predictions = report_path.parent / PREDICTIONS_FILE
    raw = predictions.read_bytes() if predictions.is_file() else b""
    if hashlib.sha256(raw).hexdigest() != recorded:
        return []       # edited since it was registered: not evidence
    return [row for row in (json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip())
            if row.get("suite") == suite_name]


def earlier_retention_suites(ws: Workspace, specialist: str, exclude_revision: str | None = None) -> list[dict]:
    """Every distinct retention suite (by file content) of the reports the specialist's champions were promoted
    with, oldest first, each with the generation that introduced it, that report and its tolerances."""
    found: dict[str, dict] = {}
    for promoted in queries.promoted_reports(ws, specialist, exclude_revision=exclude_revision):
        for suite in _suites_of(promoted.report):
            digest = suite.get("sha256")
            if not str(suite.get("name", "")).startswith(RETENTION_PREFIX) or not digest or digest in found:
                continue
            found[digest] = {"suite": suite["name"], "sha256": digest, "source": suite.get("source"),
                             "metrics": list(suite.get("metrics") or []), "introduced_by": promoted.revision.ref,
                             "report": promoted.report.path, "tolerances": _tolerances(promoted.report, suite["name"])}
    return list(found.values())


def backward_transfer(ws: Workspace, contract: Contract, revision_ref: str, report_path: Path, *,
                      base: str | None = None, progress: Callable[..., None] | None = None) -> list[dict]:
    """One row per (earlier retention suite, gated metric): the candidate ``revision_ref`` (whose report under
    ``contract`` is ``report_path``) against the generation that introduced the suite. ``progress(suite, done,
    total)`` hears the examples of each suite it decodes."""
    from mint.registry.artifacts import load_revision

    report = read_report(Path(report_path))
    revision, adapter_dir = load_revision(ws, revision_ref)
    own = {s.get("sha256"): s["name"] for s in _suites_of(report) if s.get("sha256")}
    to_generate, measured = [], {}
    earlier = earlier_retention_suites(ws, contract.specialist, exclude_revision=revision.id)
    for entry in earlier:
        if entry["sha256"] in own:         # measured in this very eval: reuse
            measured[entry["sha256"]] = _rows(Path(report_path), own[entry["sha256"]])
            continue
        path = Path(entry["source"] or "")
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != entry["sha256"]:
            entry["unavailable"] = f"{path} is gone or changed since {entry['introduced_by']} was measured on it"
            continue
        to_generate.append(entry)
    if to_generate:
        measured.update(_measure(contract, revision, adapter_dir, base, to_generate,
                                 report_precision(report) or "fp32", progress))

    results = []
    for entry in earlier:
        if "unavailable" in entry:
            results.append({k: entry[k] for k in ("suite", "sha256", "introduced_by", "unavailable")})
            continue
        then = {r["key"]: r["scores"] for r in _rows(Path(entry["report"]), entry["suite"])}
        now = {r["key"]: r["scores"] for r in measured.get(entry["sha256"], [])}
        for metric, tolerance in sorted(entry["tolerances"].items()):
            pairs = [(now[k].get(metric), then[k].get(metric)) for k in now if k in then]
            pairs = [(float(a), float(b)) for a, b in pairs if _number(a) and _number(b)]
            if not pairs:
                continue
            delta = compare([a for a, _ in pairs], [b for _, b in pairs], confidence=contract.confidence)
            lower = lower_is_better(contract, metric)
            results.append({
                "suite": entry["suite"], "sha256": entry["sha256"], "metric": f"{entry['suite']}.{metric}",
                "introduced_by": entry["introduced_by"], "reused": entry["sha256"] in own,
                "then": sum(b for _, b in pairs) / len(pairs), "now": sum(a for a, _ in pairs) / len(pairs),
                "delta": delta.to_dict(), "tolerance": tolerance,
                "regressed": regressed(contract, delta, tolerance, lower_is_better=lower)})
    return results


def at_tolerance(results: list[dict], contract: Contract, tolerance: float, *, source: str) -> list[dict]:
    """``results`` (``backward_transfer``'s rows, as ``source`` recorded them) judged again with ``tolerance`` on
    every earlier suite instead of each suite's own, under ``contract``'s gate rules (the candidate's)."""
    from mint.registry.report import PairedDelta

    judged = []
    for row in results:
        if "delta" not in row:          # a suite that was gone: nothing to judge
            judged.append(row)
            continue
        delta = PairedDelta.from_dict(row["delta"], file=source, field_name=f"backward_transfer.{row['metric']}")
        metric = str(row["metric"]).partition(".")[2]
        judged.append({**row, "tolerance": tolerance,
                       "regressed": regressed(contract, delta, tolerance,
                                              lower_is_better=lower_is_better(contract, metric))})
    return judged


def forgetting_reason(results: list[dict]) -> str | None:
    """Why to reject a candidate for forgetting, or None."""
    regressed = [r for r in results if r.get("regressed")]
    if not regressed:
        return None
    return "forgetting: " + "; ".join(
        f"{r['metric']} fell from {r['then']:.3g} ({r['introduced_by']}, which introduced the suite) to "
        f"{r['now']:.3g}, delta {r['delta']['delta']:+.3g} [{r['delta']['low']:+.3g}, {r['delta']['high']:+.3g}] "
        f"on {r['delta']['n']} paired, beyond no_regression {r['tolerance']:g}" for r in regressed)


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _measure(contract: Contract, revision, adapter_dir, base: str | None, entries: list[dict], precision: str,
             progress: Callable[..., None] | None = None) -> dict:
    """The candidate's scored rows on suites its contract no longer names, under today's harness and at the
    precision its own report was generated at."""
    from mint.contract.evaluate import example_keys, generate_outputs
    from mint.contract.precision import DecodingPrecision

    suites = []
    for i, entry in enumerate(entries):     # numbered: two generations' `retention` suites may differ
        suite = Suite(f"{entry['suite']}_{i}", Path(entry["source"]), tuple(entry["metrics"]), None)
        suites.append((suite, read_suite(contract, suite)))
    precision_used = DecodingPrecision(contract.settings.precision, precision,
                                       "the precision of the candidate's report")
    outputs, _latencies, _info = generate_outputs(contract, suites, revision, adapter_dir, base or revision.base,
                                                  progress, {}, precision_used)
    harness = contract.harness()
    measured = {}
    for entry, (suite, records) in zip(entries, suites):
        scores = harness.score_many(records, outputs[suite.name])
        measured[entry["sha256"]] = [{"key": key, "scores": score}
                                     for key, score in zip(example_keys(records), scores)]
    return measured
