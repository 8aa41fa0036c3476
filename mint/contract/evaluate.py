"""``mint eval``: a revision (or the bare base, or outputs made elsewhere) measured under a contract.

The base is loaded once and the revision's adapter attached; each suite is
generated in left-padded batches, scored by the specialist's harness, and
gated against the champion's report under the same contract version and hash
(the champion is evaluated first when it has none). The report and the
per-example predictions are written atomically and the report is registered,
so ``mint promote`` can find it.
"""
from __future__ import annotations

import json
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from mint.contract.gates import apply_gates
from mint.contract.schema import Contract, load_contract, read_suite
from mint.errors import BadInput
from mint.registry import store
from mint.registry.artifacts import load_revision
from mint.workspace import Workspace, atomic_dir

# (suite name, examples done, examples in the suite)
EvalProgress = Callable[[str, int, int], None]
REPORT_FILE = "report.json"
PREDICTIONS_FILE = "predictions.jsonl"


@dataclass
class EvalResult:
    report: dict
    report_path: str
    predictions_path: str
    baseline_evaluated: bool

    @property
    def passed(self) -> bool:
        return self.report["verdict"] == "pass"


def check_not_stale(ws: Workspace, contract: Contract) -> None:
    """A contract edited without a new version, or older than one already used, is refused at its line."""
    if not store.db_path(ws).exists():
        return
    conn = store.open_store(ws)
    try:
        rows = conn.execute("SELECT DISTINCT contract_version, contract_sha256 FROM reports WHERE contract_name = ?",
                            (contract.name,)).fetchall()
    finally:
        conn.close()
    line = contract.doc.line("version") if contract.doc else None
    newest = max((r[0] for r in rows), default=None)
    if newest is not None and newest > contract.version:
        raise BadInput(f"contract {contract.name} v{contract.version} is stale: reports under v{newest} exist",
                       file=str(contract.path), line=line, field="version")
    if any(v == contract.version and sha != contract.sha256 for v, sha in rows):
        raise BadInput(f"contract {contract.name} changed since its v{contract.version} reports were made; "
                       "bump `version` so old and new reports are not compared", file=str(contract.path),
                       line=line, field="version")


def evaluate(ws: Workspace, ref: str | None, contract_path: Path, *, out_dir: Path | None = None,
             limit: int | None = None, predictions: Path | None = None, base: str | None = None,
             progress: EvalProgress | None = None, _baseline: bool = True) -> EvalResult:
    started = time.perf_counter()
    if limit is not None and limit < 1:
        raise BadInput("must be at least 1", field="--limit")
    contract = load_contract(contract_path)
    check_not_stale(ws, contract)
    revision, adapter_dir = None, None
    if ref not in (None, "base"):
        revision, adapter_dir = load_revision(ws, ref)
        if revision.specialist != contract.specialist:
            raise BadInput(f"{revision.ref} is a {revision.specialist} revision; contract {contract.name} is for "
                           f"{contract.specialist}", field="REF")
    if ref is None and predictions is None:
        raise BadInput("give a revision (or `base`) to evaluate, or --predictions FILE", field="REF")

    harness = contract.harness()
    suites = [(suite, read_suite(contract, suite, limit)) for suite in contract.suites]
    if predictions is not None:
        outputs, latencies = _read_predictions(predictions, suites)
        base_name, generation = None, None
    else:
        base_name = base or (revision.base if revision else None) or _project_base()
        outputs, latencies, generation = _generate(contract, suites, revision, adapter_dir, base_name, progress)

    metrics: dict[str, float] = {}
    rows: list[dict] = []
    all_latencies: list[float] = []
    for suite, records in suites:
        scores = harness.score_many(records, outputs[suite.name])
        aggregate = harness.aggregate(scores)
        for metric in suite.metrics:
            if metric in aggregate:
                metrics[f"{suite.name}.{metric}"] = aggregate[metric]
        suite_latency = latencies.get(suite.name) or []
        all_latencies += [x for x in suite_latency if x is not None]
        for index, (record, outs, score) in enumerate(zip(records, outputs[suite.name], scores)):
            rows.append({"suite": suite.name, "index": index, "id": _record_id(record), "outputs": outs,
                         "scores": score, "latency_ms": suite_latency[index] if index < len(suite_latency) else None})
    if all_latencies:
        metrics["latency.p50_ms"] = statistics.median(all_latencies)
        metrics["latency.p95_ms"] = _percentile(all_latencies, 0.95)

    # the baseline is the champion now, whether or not a gate compares with it: promotion checks it did not move
    baseline_id, baseline_metrics, baseline_evaluated = None, None, False
    if _baseline:
        baseline_id, baseline_metrics, baseline_evaluated = _baseline_metrics(
            ws, contract, revision, contract_path, limit, base, progress,
            need_metrics=any(g.no_regression is not None for g in contract.gates))
    examples = sum(len(records) for _suite, records in suites)
    gates = apply_gates(contract, metrics, baseline_metrics, examples)
    label = revision.ref if revision else ("base" if ref == "base" else (ref or "predictions"))
    report = {
        "revision": label, "revision_id": revision.id if revision else None,
        "base": base_name, "contract": contract.ref,
        "baseline": {"revision_id": baseline_id, "metrics": baseline_metrics or {}},
        "metrics": metrics, "gates": [asdict(g) for g in gates],
        "verdict": "pass" if all(g.passed for g in gates) else "fail",
        "examples": {suite.name: len(records) for suite, records in suites},
        "source": "predictions" if predictions is not None else "generated", "generation": generation,
        "predictions": PREDICTIONS_FILE, "created_at": store.now(),
        "duration_s": round(time.perf_counter() - started, 3),
    }
    target = out_dir or ws.reports / f"{contract.name}-v{contract.version}" / \
        f"{(revision.id[:12] if revision else label)}-{time.strftime('%Y%m%dT%H%M%S')}-{time.perf_counter_ns() % 10**6}"
    if target.exists():
        raise BadInput("already exists; choose another --out", file=str(target))
    with atomic_dir(target) as tmp:
        with open(tmp / PREDICTIONS_FILE, "w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        (tmp / REPORT_FILE).write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    if revision is not None:
        from mint.registry.promotion import read_report, record_report

        conn = store.open_store(ws)
        try:
            record_report(conn, read_report(target / REPORT_FILE))
        finally:
            conn.close()
    return EvalResult(report, str(target / REPORT_FILE), str(target / PREDICTIONS_FILE), baseline_evaluated)


def _project_base() -> str:
    from mint.project import load_project
    return load_project().base


def _record_id(record: dict):
    return record.get("id", record.get("task_id"))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _generate(contract: Contract, suites, revision, adapter_dir, base_name: str, progress):
    from mint.base import load_base
    from mint.mol.generate import answer_ends, generate

    loaded = load_base(base_name)
    if revision is not None and revision.base_fingerprint and revision.base_fingerprint != loaded.fingerprint:
        raise BadInput(f"{revision.ref} was trained on a base with fingerprint {revision.base_fingerprint[:19]}, "
                       f"but {base_name} is {loaded.fingerprint[:19]}", field="--base")
    model = loaded.model
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
        model.eval()
    harness = contract.harness()
    outputs, latencies, generation = {}, {}, {}
    for suite, records in suites:
        done = [0]

        def tick(n, suite=suite, records=records, done=done):
            done[0] += n
            if progress:
                progress(suite.name, done[0], len(records))

        result = generate(model, loaded.tokenizer, [harness.messages(r) for r in records], contract.settings, tick,
                          answer_end=answer_ends(contract.harness_name, contract.settings))
        outputs[suite.name], latencies[suite.name] = result.outputs, result.latencies_ms
        # precision used and why, the bf16/fp32 parity check, tokens/s
        generation[suite.name] = {"precision": result.precision, "reason": result.precision_reason,
                                  "parity": result.parity, "new_tokens": result.new_tokens,
                                  "tokens_per_s": round(result.tokens_per_s, 2)}
    return outputs, latencies, generation


def _read_predictions(path: Path, suites) -> tuple[dict, dict]:
    """Outputs made elsewhere: JSONL lines with suite, index (or id) and output (or outputs)."""
    by_key: dict = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise BadInput("no such predictions file", file=str(path)) from None
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            raise BadInput(f"invalid JSON: {exc}", file=str(path), line=number) from None
        if not isinstance(row, dict) or not isinstance(row.get("suite"), str):
            raise BadInput("expected an object with `suite`", file=str(path), line=number, field="suite")
        outs = row.get("outputs", [row["output"]] if "output" in row else None)
        if not isinstance(outs, list) or not outs or not all(isinstance(o, str) for o in outs):
            raise BadInput("expected `output` (a string) or `outputs` (a list of strings)", file=str(path),
                           line=number, field="output")
        latency = row.get("latency_ms")
        value = (outs, latency if isinstance(latency, (int, float)) else None)
        if "id" in row and row["id"] is not None:
            by_key[(row["suite"], "id", row["id"])] = value
        if isinstance(row.get("index"), int):
            by_key[(row["suite"], "index", row["index"])] = value
    outputs, latencies = {}, {}
    for suite, records in suites:
        outputs[suite.name], latencies[suite.name] = [], []
        for index, record in enumerate(records):
            found = by_key.get((suite.name, "id", _record_id(record))) or by_key.get((suite.name, "index", index))
            if found is None:
                raise BadInput(f"no output for suite {suite.name!r} record {index} (id {_record_id(record)!r})",
                               file=str(path))
            outputs[suite.name].append(found[0])
            latencies[suite.name].append(found[1])
    return outputs, latencies


def _baseline_metrics(ws, contract, revision, contract_path, limit, base, progress, need_metrics: bool):
    """(champion id, its metrics under this contract version and hash, whether it was evaluated just now)."""
    if not store.db_path(ws).exists():
        return None, None, False
    conn = store.open_store(ws)
    try:
        champion_id = store.alias_target(conn, contract.specialist, "champion")
        if champion_id is None:
            return None, None, False
        champion = store.get_revision(conn, champion_id)
        row = conn.execute("SELECT path FROM reports WHERE revision_id = ? AND contract_name = ? AND "
                           "contract_version = ? AND contract_sha256 = ? ORDER BY created_at DESC LIMIT 1",
                           (champion_id, contract.name, contract.version, contract.sha256)).fetchone()
    finally:
        conn.close()
    if not need_metrics or (revision is not None and champion_id == revision.id):
        return champion_id, None, False
    if row and Path(row[0]).is_file():
        return champion_id, json.loads(Path(row[0]).read_text())["metrics"], False
    result = evaluate(ws, champion.ref, contract_path, limit=limit, base=base, progress=progress, _baseline=False)
    return champion_id, result.report["metrics"], True
