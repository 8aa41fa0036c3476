"""``mint eval``: a revision (or the bare base, or outputs made elsewhere) measured under a contract.

The base is loaded once and the revision's adapter attached; each suite is
generated in left-padded batches, scored by the specialist's harness, and
gated against the champion's report under the same contract version and hash,
made at the same decoding precision (mint.contract.precision fixes it per
contract, base and host; the champion is evaluated first when it has none).
The report and the per-example predictions are written atomically and the
report is registered, so ``mint promote`` can find it.
"""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from mint.contract.gates import apply_gates
from mint.contract.live import read_suites
from mint.contract.paired import PairedDelta, compare
from mint.contract.precision import DecodingPrecision, decoding_precision, report_precision
from mint.contract.schema import Contract, load_contract
from mint.errors import BadInput, Refused
from mint.registry import queries
from mint.registry.artifacts import load_revision
from mint.registry.report import ContractIdentity, Report, ReportBaseline, base_report_owner
from mint.registry.store import now
from mint.faults import checkpoint
from mint.workspace import Workspace, atomic_dir

# (suite name, examples done, examples in the suite)
EvalProgress = Callable[[str, int, int], None]
REPORT_FILE = "report.json"
PREDICTIONS_FILE = "predictions.jsonl"


@dataclass
class EvalResult:
    report: Report          # as written to report_path (its id is the sha256 of that file)
    report_path: str
    predictions_path: str
    baseline_evaluated: bool

    @property
    def passed(self) -> bool:
        return self.report.verdict == "pass"


def check_not_stale(ws: Workspace, contract: Contract) -> None:
    """A contract edited without a new version, or older than one already used, is refused at its line."""
    rows = queries.contract_versions(ws, contract.name)
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
             progress: EvalProgress | None = None, baseline_predictions: Path | None = None) -> EvalResult:
    """Measure ``ref`` (a revision, ``base``, or outputs from ``predictions``) and gate it against its baseline:
    the champion, or the bare base when there is none (generation 0) or ``ref`` is the champion.

    With ``predictions`` nothing is generated: the baseline is ``baseline_predictions`` scored the same way,
    else the champion's registered report on the same examples, else none (gates that compare with a
    baseline then fail, saying so)."""
    if baseline_predictions is not None and predictions is None:
        raise BadInput("a baseline's predictions are scored only beside --predictions", field="--baseline-predictions")
    if limit is not None and limit < 1:
        raise BadInput("must be at least 1", field="--limit")
    if ref is None and predictions is None:
        raise BadInput("give a revision (or `base`) to evaluate, or --predictions FILE", field="REF")
    if ref == "base" and predictions is not None:
        raise BadInput("the base is the baseline of generation 0, so mint measures it itself; drop --predictions",
                       field="--predictions")
    contract = load_contract(contract_path)
    check_not_stale(ws, contract)
    return _evaluate(ws, ref, contract, out_dir=out_dir, limit=limit, predictions=predictions, base=base,
                     progress=progress, loaded={}, baseline_predictions=baseline_predictions)


def _evaluate(ws: Workspace, ref: str | None, contract: Contract, *, out_dir, limit, predictions, base, progress,
              loaded: dict, resolved: tuple[list, dict] | None = None,
              baseline_predictions: Path | None = None) -> EvalResult:
    """``resolved``: the suites' records as the candidate's evaluation read them, so that its baseline is
    measured on the same episodes of a live suite (`@latest` resolved once)."""
    started = time.perf_counter()
    revision, adapter_dir = None, None
    if ref not in (None, "base"):
        revision, adapter_dir = load_revision(ws, ref)
        if revision.specialist != contract.specialist:
            raise BadInput(f"{revision.ref} is a {revision.specialist} revision; contract {contract.name} is for "
                           f"{contract.specialist}", field="REF")
    resolved = resolved or read_suites(ws, contract, limit)
    suites, live_suites = resolved
    keys = {suite.name: example_keys(records) for suite, records in suites}
    examples_sha256 = examples_digest(suites)
    base_name = base or (revision.base if revision else None) or _project_base()
    is_base = ref == "base"
    precision = _precision(ws, contract, base_name, revision, suites, loaded)

    # the baseline first, while the base model is still free of adapters
    champion_id = _champion(ws, contract)
    baseline, baseline_evaluated = None, False
    if predictions is not None:   # outputs made elsewhere: generate nothing, not even a baseline
        baseline = _predictions_baseline(ws, contract, suites, keys, examples_sha256, champion_id,
                                         baseline_predictions)
    elif not is_base:
        if champion_id is not None and (revision is None or champion_id != revision.id):
            baseline, baseline_evaluated = _champion_baseline(ws, contract, champion_id, examples_sha256, limit,
                                                              base, progress, loaded, resolved, precision)
        else:
            baseline, baseline_evaluated = _base_baseline(ws, contract, base_name, examples_sha256, limit, progress,
                                                          loaded, resolved, precision)

    generation = None
    if predictions is not None:
        outputs, latencies = _read_predictions(predictions, suites)
    else:
        outputs, latencies, generation = generate_outputs(contract, suites, revision, adapter_dir, base_name, progress,
                                                   loaded, precision)

    metrics, rows = _score(contract, suites, keys, outputs, latencies)

    # known without loading anything more: the revision records it, and the base was loaded when it was measured
    fingerprint = revision.base_fingerprint if revision else (loaded[base_name].fingerprint if base_name in loaded
                                                              else None)
    if is_base:     # generation 0 is its own baseline: every delta is 0
        baseline = Baseline(None, "base", None, metrics, rows, examples_sha256)
    paired = paired_deltas(contract, rows, baseline.rows)
    no_latency = None if any(k.startswith("latency.") for k in metrics) else \
        "the predictions carry no latency_ms" if predictions is not None else "no example's latency was measured"
    gates = apply_gates(contract, metrics, baseline.metrics if baseline.label != NO_BASELINE else None,
                        {s.name: len(r) for s, r in suites}, paired, no_latency)
    label = revision.ref if revision else ("base" if is_base else (ref or "predictions"))
    predictions_text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    report = Report(
        revision=label, revision_id=revision.id if revision else None,
        base=base_name, base_fingerprint=fingerprint, contract=_identity(contract),
        baseline=ReportBaseline(baseline.revision_id, baseline.metrics, label=baseline.label,
                                report=baseline.report_id),
        # what every generation compared under this contract on this host decodes at, and why
        precision=precision.record(),
        metrics=metrics, gates=[{k: v for k, v in asdict(g).items() if k != "skipped" or v} for g in gates],
        verdict="pass" if all(g.passed for g in gates) else "fail",
        examples={suite.name: len(records) for suite, records in suites},
        examples_sha256=examples_sha256,
        # what each suite was, so a later generation can be measured on this one's retention suites again
        suites=[{"name": suite.name, "source": suite.source, "metrics": list(suite.metrics),
                 "sha256": None if suite.live else hashlib.sha256(suite.data.read_bytes()).hexdigest()}
                for suite, _records in suites],
        # suites drawn from a dataset: its resolved version and the episodes used, to make the report again
        live_suites=live_suites or None,
        statistics=STATISTICS,
        source="predictions" if predictions is not None else "generated", generation=generation,
        predictions=PREDICTIONS_FILE, created_at=now(),
        duration_s=round(time.perf_counter() - started, 3),
        predictions_sha256=hashlib.sha256(predictions_text.encode("utf-8")).hexdigest(),
        # what the harness says beside its metrics (the router's: its confusion matrix, the held-out distribution)
        extra=contract.harness().report_fields([r for _suite, records in suites for r in records],
                                               [o for suite, _records in suites for o in outputs[suite.name]]))
    if out_dir is not None:
        target = out_dir
    elif is_base and not _base_dir(ws, contract, fingerprint, examples_sha256, precision.used).exists():
        target = _base_dir(ws, contract, fingerprint, examples_sha256, precision.used)
    else:
        target = ws.reports / f"{contract.name}-v{contract.version}" / \
            f"{(revision.id[:12] if revision else label)}-{time.strftime('%Y%m%dT%H%M%S')}-{time.perf_counter_ns() % 10**6}"
    if target.exists():
        raise BadInput("already exists; choose another --out", file=str(target))
    encoded = report.encode()
    with atomic_dir(target) as tmp:
        (tmp / PREDICTIONS_FILE).write_text(predictions_text, encoding="utf-8")
        (tmp / REPORT_FILE).write_bytes(encoded)
    report = report.stored(target / REPORT_FILE, encoded)   # registered as the bytes written, not re-read
    checkpoint("eval.report_published")   # on disk but not registered: promote must not trust it
    if revision is not None or is_base:
        queries.register_report(ws, report)
    return EvalResult(report, str(target / REPORT_FILE), str(target / PREDICTIONS_FILE), baseline_evaluated)


def _identity(contract: Contract) -> ContractIdentity:
    """The loaded contract's identity as the registry files it (load_contract computed the hash)."""
    return ContractIdentity(contract.name, contract.version, contract.sha256, str(contract.path))


def _score(contract: Contract, suites, keys: dict, outputs: dict, latencies: dict) -> tuple[dict, list[dict]]:
    """The suites' metrics (and latency percentiles) and one row per example, for the outputs given."""
    metrics: dict[str, float] = {}
    rows: list[dict] = []
    all_latencies: list[float] = []
    harness = contract.harness()
    for suite, records in suites:
        scores = harness.score_many(records, outputs[suite.name])
        aggregate = harness.aggregate(scores)
        for metric in suite.metrics:
            if metric in aggregate:
                metrics[f"{suite.name}.{metric}"] = aggregate[metric]
        suite_latency = latencies.get(suite.name) or []
        all_latencies += [x for x in suite_latency if x is not None]
        for index, (record, key, outs, score) in enumerate(zip(records, keys[suite.name], outputs[suite.name],
                                                                scores)):
            rows.append({"suite": suite.name, "index": index, "id": _record_id(record), "key": key, "outputs": outs,
                         "scores": score, "latency_ms": suite_latency[index] if index < len(suite_latency) else None})
    if all_latencies:
        metrics["latency.p50_ms"] = statistics.median(all_latencies)
        metrics["latency.p95_ms"] = _percentile(all_latencies, 0.95)
    return metrics, rows


NO_BASELINE = "none"   # the label of a missing baseline (predictions with no baseline to pair them with)


def _predictions_baseline(ws, contract, suites, keys, examples_sha256, champion_id, baseline_predictions):
    """The baseline of outputs made elsewhere, without generating: ``baseline_predictions`` scored like them,
    else the champion's registered report on the same examples, else none."""
    if baseline_predictions is not None:
        outputs, latencies = _read_predictions(baseline_predictions, suites)
        metrics, rows = _score(contract, suites, keys, outputs, latencies)
        return Baseline(None, f"predictions {baseline_predictions.name}", None, metrics, rows, examples_sha256)
    if champion_id is not None:
        found = queries.find_report(ws, champion_id, _identity(contract), examples_sha256)
        if found is not None:
            return _load_baseline(ws, found)
    return Baseline(None, NO_BASELINE, None, {}, [], examples_sha256)


STATISTICS = ("Candidate and baseline are scored on the same examples, matched by suite and example id. Each gated "
              "metric's delta (candidate - baseline) has a 95% interval: exact McNemar (Clopper-Pearson on the "
              "discordant pairs) for pass/fail metrics, a seeded paired bootstrap (2000 resamples) otherwise. "
              "no_regression TOL fails only when the whole interval lies beyond TOL on the worse side; improve "
              "DELTA passes only when it lies beyond DELTA on the better side.")


@dataclass(frozen=True)
class Baseline:
    """What a report is compared with: the champion's (or the bare base's) registered report and its rows."""

    revision_id: str | None     # the champion when measured; None for the base (generation 0)
    label: str
    report_id: str | None       # sha256 of the baseline's report file, as registered
    metrics: dict
    rows: list[dict]
    examples_sha256: str


def example_keys(records: list[dict]) -> list[str]:
    """A stable key per record: its id, or a hash of its content; repeats are numbered so none collide."""
    keys, seen = [], {}
    for record in records:
        rid = _record_id(record)
        key = f"id:{rid}" if isinstance(rid, (str, int)) and not isinstance(rid, bool) else \
            "sha256:" + hashlib.sha256(_canonical(record)).hexdigest()[:24]
        seen[key] = seen.get(key, 0) + 1
        keys.append(key if seen[key] == 1 else f"{key}#{seen[key]}")
    return keys


def examples_digest(suites) -> str:
    """sha256 over every evaluated record, in order: two reports are paired only on the same examples."""
    digest = hashlib.sha256()
    for suite, records in suites:
        for record in records:
            digest.update(f"{suite.name}\0".encode() + hashlib.sha256(_canonical(record)).digest())
    return digest.hexdigest()


def _canonical(record) -> bytes:
    return json.dumps(record, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def paired_deltas(contract: Contract, rows: list[dict], baseline_rows: list[dict]) -> dict[str, PairedDelta]:
    """Each gated suite metric: candidate minus baseline over the examples both have a score for."""
    by_key = {(r["suite"], r["key"]): r["scores"] for r in baseline_rows}
    deltas = {}
    for gate in contract.gates:
        suite_name, _, metric = gate.metric.partition(".")
        if suite_name == "latency" or gate.metric in deltas:
            continue
        candidate, reference = [], []
        for row in rows:
            if row["suite"] != suite_name:
                continue
            theirs = by_key.get((suite_name, row["key"]), {}).get(metric)
            ours = row["scores"].get(metric)
            if _is_number(ours) and _is_number(theirs):
                candidate.append(float(ours))
                reference.append(float(theirs))
        deltas[gate.metric] = compare(candidate, reference)
    return deltas


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _champion(ws: Workspace, contract: Contract) -> str | None:
    return queries.champion(ws, contract.specialist)


def _load_baseline(ws: Workspace, report: Report) -> Baseline:
    """The rows of a registered report, checked against the predictions hash its report records."""
    predictions = Path(report.path).parent / PREDICTIONS_FILE
    raw = predictions.read_bytes() if predictions.is_file() else b""
    if hashlib.sha256(raw).hexdigest() != report.predictions_sha256:
        raise Refused(f"{predictions} changed since its report was registered; re-run `mint eval` for "
                      f"{report.label} or delete {Path(report.path).parent}")
    rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    return Baseline(report.revision_id, report.label, report.id, report.metrics, rows, report.examples_sha256)


def evaluation_conversations(harness, suites) -> list[list[dict]]:
    """What the model is asked for each record of ``suites``, in order: the harness's system turn (with its
    tools listed) and request, as ``mint.render`` shows a conversation."""
    return [harness.messages(r) for _suite, records in suites for r in records]


def _precision(ws, contract, base_name, revision, suites, loaded) -> DecodingPrecision:
    """The contract's decoding precision on this host; ``auto`` is measured on the bare base the first time."""
    def fingerprint() -> str:
        return (revision.base_fingerprint if revision and revision.base_fingerprint
                else _base_fingerprint(base_name, loaded))

    def bare_base():
        _base_fingerprint(base_name, loaded)
        return loaded[base_name]

    harness = contract.harness()
    return decoding_precision(ws, contract, fingerprint, bare_base,
                              lambda: evaluation_conversations(harness, suites))


def _at(precision: DecodingPrecision):
    """Whether a registered report was generated at ``precision`` (a baseline at another one is not reused)."""
    return lambda report: report_precision(report.to_dict()) == precision.used


def _champion_baseline(ws, contract, champion_id, examples_sha256, limit, base, progress, loaded, resolved,
                       precision):
    """The champion's newest registered, generated report on these examples at this precision; evaluated now
    when it has none."""
    found = queries.find_report(ws, champion_id, _identity(contract), examples_sha256, where=_at(precision))
    if found is not None:
        return _load_baseline(ws, found), False
    result = _evaluate(ws, queries.revision_ref(ws, champion_id), contract, out_dir=None, limit=limit, predictions=None, base=base,
                       progress=_labelled(progress, "baseline"), loaded=loaded, resolved=resolved)
    return _load_baseline(ws, result.report), True


def _base_dir(ws: Workspace, contract: Contract, fingerprint: str, examples_sha256: str, precision: str) -> Path:
    return ws.reports / f"{contract.name}-v{contract.version}" / \
        f"base-{fingerprint.split(':')[-1][:16]}-{contract.sha256[:12]}-{examples_sha256[:12]}-{precision}"


def _base_baseline(ws, contract, base_name, examples_sha256, limit, progress, loaded, resolved, precision):
    """Generation 0: the bare base under this contract, cached per contract hash, base fingerprint, examples
    and precision."""
    fingerprint = _base_fingerprint(base_name, loaded)
    found = queries.find_report(ws, base_report_owner(fingerprint), _identity(contract), examples_sha256,
                                where=_at(precision))
    if found is not None:
        return _load_baseline(ws, found), False
    result = _evaluate(ws, "base", contract, out_dir=None, limit=limit, predictions=None, base=base_name,
                       progress=_labelled(progress, "baseline"), loaded=loaded, resolved=resolved)
    return _load_baseline(ws, result.report), True


def _labelled(progress: EvalProgress | None, label: str) -> EvalProgress | None:
    """The baseline's suites are reported as ``baseline core``, apart from the candidate's ``core``."""
    if progress is None:
        return None
    return lambda suite, done, total: progress(f"{label} {suite}", done, total)


def _base_fingerprint(base_name: str, loaded: dict) -> str:
    if base_name not in loaded:
        from mint.base import load_base
        loaded[base_name] = load_base(base_name)
    return loaded[base_name].fingerprint


def _project_base() -> str:
    from mint.project import load_project
    return load_project().base


def _record_id(record: dict):
    return record.get("id", record.get("task_id"))


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def generate_outputs(contract: Contract, suites, revision, adapter_dir, base_name: str, progress, bases: dict,
              precision: DecodingPrecision):
    """Each suite's outputs, latencies and generation facts (precision, parity, tokens/s) from the revision
    (the bare base when ``adapter_dir`` is None), all suites decoded as one stream."""
    import dataclasses

    from mint.base import load_base
    from mint.hardware import apply_decoding_threads
    from mint.mol.generate import answer_ends, generate

    # a base loaded earlier in this eval is reused once; attaching an adapter changes it, so it is not kept
    loaded = bases.pop(base_name, None) if adapter_dir is not None else bases.get(base_name)
    loaded = loaded or load_base(base_name)
    if adapter_dir is None:
        bases[base_name] = loaded
    if revision is not None and revision.base_fingerprint and revision.base_fingerprint != loaded.fingerprint:
        raise BadInput(f"{revision.ref} was trained on a base with fingerprint {revision.base_fingerprint[:19]}, "
                       f"but {base_name} is {loaded.fingerprint[:19]}", field="--base")
    harness = contract.harness()
    records = [r for _suite, records in suites for r in records]
    started = time.perf_counter()
    responses = harness.respond(loaded, adapter_dir, records, revision.ref if revision else None)
    if responses is not None:      # scored without generating text (the router's choices)
        outputs = {suite.name: [] for suite, _ in suites}
        owners = [suite for suite, suite_records in suites for _ in suite_records]
        for suite, response in zip(owners, responses):
            outputs[suite.name].append([response])
        latencies = {suite.name: [] for suite, _ in suites}
        seconds = round(time.perf_counter() - started, 3)
        return outputs, latencies, {suite.name: {"responded_s": seconds} for suite, _ in suites}
    model = loaded.model
    if adapter_dir is not None:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, str(adapter_dir))
        model.eval()
    # every suite in one stream: a batch stays full across suites (two suites of 12 decode as one batch of
    # 24, not two of 12), and each row's output does not depend on the rows beside it
    owners = [(suite, index) for suite, records in suites for index in range(len(records))]
    done = {suite.name: 0 for suite, _ in suites}
    totals = {suite.name: len(records) for suite, records in suites}

    def tick(conversation: int) -> None:
        suite = owners[conversation][0]
        done[suite.name] += 1
        if progress:
            progress(suite.name, done[suite.name], totals[suite.name])

    conversations = evaluation_conversations(harness, suites)
    settings = dataclasses.replace(contract.settings, precision=precision.used)
    threads = apply_decoding_threads()     # the hardware plan's (mint.hardware), recorded with its figures
    result = generate(model, loaded.tokenizer, conversations, settings, on_done=tick,
                      answer_end=answer_ends(contract.harness_name, contract.settings))
    outputs = {suite.name: [] for suite, _ in suites}
    latencies = {suite.name: [] for suite, _ in suites}
    tokens = {suite.name: 0 for suite, _ in suites}
    for (suite, _index), output, latency, count in zip(owners, result.outputs, result.latencies_ms,
                                                       result.row_tokens):
        outputs[suite.name].append(output)
        latencies[suite.name].append(latency)
        tokens[suite.name] += count
    # precision used and why (the contract's, resolved once per host: see the report's `precision`), the merged
    # adapter's parity check (one for the stream), tokens/s of the whole stream
    generation = {suite.name: {"precision": result.precision, "reason": result.precision_reason,
                               "parity": result.parity, "new_tokens": tokens[suite.name],
                               "tokens_per_s": round(result.tokens_per_s, 2),
                               "threads": {"value": threads.value, "reason": threads.reason}} for suite, _ in suites}
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
