"""``mint eval``: revisions (or the bare base, or outputs made elsewhere) measured under a contract.

The base is loaded once and every revision to measure is put in a LoRA slot of its own; the suites are decoded
for all of them as one mixed-adapter stream by the engine that serves them (``mint.generation``), scored by the
specialist's harness, and gated against the champion's report under the same contract version and hash, made at
the same decoding precision (mint.contract.precision fixes it per contract, base and host). A baseline without
a report on these examples (the champion, or the bare base before there is one) joins the same stream, so
nothing is decoded twice. Each revision gets its own report, the one it gets evaluated alone; reports and the
per-example predictions are written atomically and registered (baselines first), so ``mint promote`` can find
them.
"""
from __future__ import annotations

import hashlib
import json
import math
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mint import tracking as trackers
from mint.contract.gates import apply_gates
from mint.contract.judge import JudgeSession, open_judge
from mint.contract.judge_pairs import Judged, judge_answers, judge_delta
from mint.contract.judge_schema import COMPARISON_METRICS, JUDGE_METRICS, PAIRWISE_METRICS, SCORE
from mint.contract.judge_scores import rate_answers
from mint.contract.live import read_suites
from mint.contract.paired import PairedDelta, compare
from mint.contract.precision import DecodingPrecision, decoding_precision, report_precision
from mint.contract.schema import Contract, load_contract
from mint.contract.answers import (  # noqa: F401  (evaluation_conversations, decoding_identity: importers use them here)
    BASE,
    DECODER_VERSION,
    Answers,
    decoding_identity,
    evaluation_conversations,
    gather_answers,
    record_id,
)
from mint.contract.served import open_engine, report_engine, resolve_engine
from mint.errors import BadInput, Refused
from mint.registry import queries
from mint.registry.artifacts import load_revision
from mint.registry.report import ContractIdentity, GateResult, Report, ReportBaseline, base_report_owner
from mint.registry.store import Revision, now
from mint.faults import checkpoint
from mint.workspace import Workspace, atomic_dir

# (suite name, examples done, examples in the suite)
# progress(label, done, total, share=None): ``done`` of ``total`` answers of one suite (of one revision), and where
# known the share of the decoding stream's token budget spent, which tells the time left better than ``done``
EvalProgress = Callable[..., None]
# started(): the request passed its checks and its work begins (nothing heavy was loaded before it)
Started = Callable[[], None]
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
        from mint.contract.schema import contract_sha256

        same_file = any(v == contract.version and sha == contract_sha256(
            contract.path, [s.data for s in contract.suites if not s.live], contract.settings.catalog,
            judge=contract.judge) for v, sha in rows)
        why = (f"its v{contract.version} reports were gated under gate rules 1 (no_regression failed only when the "
               f"whole interval lay beyond -TOL) and it now reads as gate rules {contract.gate_rules}; bump "
               "`version`, or set `gate_rules: 1` and bump it to keep the old reading") if same_file else \
            f"contract {contract.name} changed since its v{contract.version} reports were made; bump `version` so " \
            "old and new reports are not compared"
        raise BadInput(why, file=str(contract.path), line=line, field="version")


def evaluate(ws: Workspace, ref: str | None, contract_path: Path, *, out_dir: Path | None = None,
             limit: int | None = None, predictions: Path | None = None, base: str | None = None,
             progress: EvalProgress | None = None, baseline_predictions: Path | None = None,
             reuse: bool = True, stop_when_decided: bool = False, engine: str | None = None,
             started: Started | None = None) -> EvalResult:
    """Measure ``ref`` (a revision, ``base``, or outputs from ``predictions``) and gate it against its baseline:
    the champion, or the bare base when there is none (generation 0) or ``ref`` is the champion.

    An answer a registered report of the same subject holds for the same prompt, decoding settings, precision and
    base is taken from it (``reuse`` False: every answer decoded again). With ``predictions`` nothing is generated: the baseline is ``baseline_predictions`` scored the same way,
    else the champion's registered report on the same examples, else none (gates that compare with a
    baseline then fail, saying so). ``stop_when_decided``: see ``evaluate_many``. ``engine``: where answers are
    decoded, ``local`` or a server's URL (default: mint.yaml's ``engine``; mint.contract.served). ``started`` is
    told once every input has passed its checks, before a model is loaded."""
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
    trackers.check(_tracking())    # a tracker that cannot be reached is bad input before any decoding
    if predictions is not None:
        return _evaluate_predictions(ws, ref, contract, out_dir=out_dir, limit=limit, predictions=predictions,
                                     base=base, baseline_predictions=baseline_predictions, started=started)
    return _evaluate_generated(ws, [ref], contract, out_dir=out_dir, limit=limit, base=base, progress=progress,
                               reuse=reuse, stop_when_decided=stop_when_decided, engine=engine, started=started)[0]


def evaluate_many(ws: Workspace, refs: list[str], contract_path: Path, *, limit: int | None = None,
                  base: str | None = None, progress: EvalProgress | None = None,
                  measure_on: dict[str, tuple[tuple[str, ...], str]] | None = None,
                  reuse: bool = True, stop_when_decided: bool = False, engine: str | None = None,
                  started: Started | None = None) -> list[EvalResult]:
    """Measure every revision of ``refs`` (or ``base``) under one contract, decoded as one mixed-adapter stream;
    each gets the report it gets evaluated alone (see ``evaluate``), in the order given. ``measure_on[ref]``:
    (the suites it is decoded on, why): a control that answers one question needs no other suite, and its
    report says so. ``stop_when_decided``: the suites a candidate must gain on (``deciding_suites``) are decoded
    first, with its baseline's; a candidate that fails a gate there has failed whatever the other suites say, so
    they are not decoded for it (its report names the gate, and those suites' gates read "not decoded"). The
    verdict is the one a complete evaluation gives: only decoding that cannot change it is skipped. ``started``:
    see ``evaluate``."""
    if not refs:
        raise BadInput("give the revisions (or `base`) to evaluate", field="REF")
    if limit is not None and limit < 1:
        raise BadInput("must be at least 1", field="--limit")
    contract = load_contract(contract_path)
    trackers.check(_tracking())
    check_not_stale(ws, contract)
    for ref, (names, _why) in (measure_on or {}).items():
        unknown = [n for n in names if n not in {suite.name for suite in contract.suites}]
        if ref not in refs or unknown or not names:
            raise BadInput(f"{ref}: measure_on names {', '.join(unknown) or 'no suite'} of contract {contract.name}",
                           field="measure_on")
    return _evaluate_generated(ws, list(refs), contract, out_dir=None, limit=limit, base=base, progress=progress,
                               measure_on=measure_on or {}, reuse=reuse, stop_when_decided=stop_when_decided,
                               engine=engine, started=started)




@dataclass(frozen=True)
class Subject:
    """A revision (or the bare base) whose outputs an evaluation decodes."""
    key: str                        # its revision id, or BASE
    label: str                      # coding:v3, or base
    revision: Revision | None = None  # its Revision (None for the base)
    adapter_dir: Path | None = None


def _subject(ws: Workspace, ref: str, contract: Contract) -> Subject:
    if ref == BASE:
        return Subject(BASE, BASE)
    revision, adapter_dir = load_revision(ws, ref)
    if revision.specialist != contract.specialist:
        raise BadInput(f"{revision.ref} is a {revision.specialist} revision; contract {contract.name} is for "
                       f"{contract.specialist}", field="REF")
    return Subject(revision.id, revision.ref, revision, adapter_dir)


def _evaluate_generated(ws: Workspace, refs: list[str], contract: Contract, *, out_dir, limit, base,
                        progress, measure_on: dict | None = None, reuse: bool = True,
                        stop_when_decided: bool = False, engine: str | None = None,
                        started: Started | None = None) -> list[EvalResult]:
    """Decode ``refs`` and every baseline they need that has no report yet in one stream, then write and register
    the reports, each baseline's before the reports compared with it. Answers a registered report of the same
    subject already holds for the same prompt, decoding settings, precision and base are taken from it, not
    decoded again."""
    began = time.perf_counter()
    candidates = [_subject(ws, ref, contract) for ref in refs]
    seen: dict[str, str] = {}
    for ref, subject in zip(refs, candidates):
        if subject.key in seen:
            raise BadInput(f"{seen[subject.key]} and {ref} are one revision ({subject.label}): give it once",
                           field="REF")
        seen[subject.key] = ref
    if out_dir is not None and len(candidates) > 1:
        raise BadInput("--out takes the report of one revision; evaluate several without it", field="--out")
    base_names = {base or (c.revision.base if c.revision else None) or _project_base() for c in candidates}
    if len(base_names) > 1:
        raise BadInput(f"these revisions are of different bases ({', '.join(sorted(base_names))}): one stream decodes "
                       "one base; evaluate each base's revisions on their own", field="REF")
    base_name = base_names.pop()
    suites, live_suites = read_suites(ws, contract, limit)
    loaded: dict = {}
    # a served engine is asked first: one that does not answer, or serves another base, is refused before anything
    served = open_engine(resolve_engine(engine), base_name)
    judge = None
    try:
        judge = open_judge(ws, contract, base_name)     # calibrated, or refused, before anything is decoded
        if started is not None:
            started()
        return _evaluate_on(ws, refs, contract, candidates, base_name, suites, live_suites, loaded, served, began,
                            out_dir=out_dir, progress=progress, measure_on=measure_on, reuse=reuse,
                            stop_when_decided=stop_when_decided, judge=judge)
    finally:
        if served is not None:
            served.close()
        if judge is not None:
            judge.close()


def _evaluate_on(ws: Workspace, refs: list[str], contract: Contract, candidates: list[Subject], base_name: str,
                 suites, live_suites, loaded: dict, served, started: float, *, out_dir, progress, measure_on,
                 reuse: bool, stop_when_decided: bool, judge: JudgeSession | None = None) -> list[EvalResult]:
    """``_evaluate_generated`` once the engine is chosen: ``served`` (a ServedEngineSession), or None for mint's;
    ``judge``: the contract's calibrated judge, which judges every answer before any report is written."""
    revision = next((c.revision for c in candidates if c.revision is not None and c.revision.base_fingerprint), None)
    precision = served.precision(contract) if served is not None else \
        _precision(ws, contract, base_name, revision, suites, loaded)
    fingerprint = _base_fingerprint(base_name, loaded)
    engine = served.identity if served is not None else None
    order, baseline_of, known = _plan(ws, contract, candidates, examples_digest(suites), fingerprint, precision,
                                      engine)
    if served is not None:      # every candidate loaded (or refused) before any answer is decoded
        served.prepare(order)
    restricted = {subject.key: measure_on[ref] for ref, subject in zip(refs, candidates) if ref in (measure_on or {})}
    own_suites = {subject.key: [(suite, records) for suite, records in suites
                                if subject.key not in restricted or suite.name in restricted[subject.key][0]]
                  for subject in order}
    reusable = _reusable(ws, contract, order, precision.used, fingerprint, engine) if reuse else None
    first = set(deciding_suites(contract)) if stop_when_decided else set()
    decided: dict[str, tuple[tuple[str, ...], str]] = {}
    decoded: dict[str, tuple[dict, dict, dict, dict]] = {}
    if first:       # the deciding suites first; a candidate that failed there is decoded on nothing more
        decoded = _decode_suites(contract, suites, order, base_name, progress, loaded, precision, reusable,
                                 {k: {suite.name for suite, _ in v if suite.name in first} for k, v in own_suites.items()},
                                 served)
        decided = _decided(contract, order, candidates, baseline_of, known, own_suites, decoded, first,
                           exempt=set(restricted))
        for key, (names, _why) in decided.items():
            own_suites[key] = [(suite, records) for suite, records in own_suites[key] if suite.name in names]
    rest = {k: {suite.name for suite, _ in v if suite.name not in first} for k, v in own_suites.items()}
    for key, more in _decode_suites(contract, suites, order, base_name, progress, loaded, precision, reusable,
                                    rest, served).items():
        decoded[key] = _merged(decoded[key], more) if key in decoded else more
    restricted.update(decided)
    judged = _judge_subjects(contract, judge, order, own_suites, decoded, baseline_of, known)
    results: dict[str, EvalResult] = {}
    for subject in order:            # each baseline before the reports compared with it
        mine = own_suites[subject.key]
        keys = {suite.name: example_keys(records) for suite, records in mine}
        examples_sha256 = examples_digest(mine)
        reference = baseline_of.get(subject.key)
        measured_only = subject.key not in requested_keys(candidates) and subject.key != BASE
        if reference is None:        # the base (generation 0 is its own baseline), or a baseline measured alone
            baseline = None
        else:
            baseline = known[reference] if reference in known else _load_baseline(ws, results[reference].report)
        outputs, latencies, generation, prompts = decoded[subject.key]
        own_dir = out_dir if subject in candidates else None
        results[subject.key] = _write_report(
            ws, contract, subject, mine, live_suites, keys, examples_sha256, precision, outputs, latencies,
            generation, baseline, base_name, fingerprint, started, out_dir=own_dir, source="generated",
            baseline_evaluated=reference in results, measured_only=measured_only,
            measured_on=restricted.get(subject.key), prompts=prompts, judged=judged.get(subject.key))
    return [results[c.key] for c in candidates]


def requested_keys(candidates: list[Subject]) -> set[str]:
    return {c.key for c in candidates}


def deciding_suites(contract: Contract) -> tuple[str, ...]:
    """The suites a candidate must show a gain on (those of an ``improve`` gate), in the contract's order: what an
    evaluation that stops once its verdict is decided decodes first. Empty when no gate asks for a gain, or when
    those suites are all of them (nothing would be left to skip)."""
    names = [suite.name for suite in contract.suites]
    gaining = {gate.suite for gate in contract.gates if gate.improve is not None}
    first = tuple(name for name in names if name in gaining)
    return first if len(first) < len(names) else ()


def _decode_suites(contract, suites, order: list[Subject], base_name, progress, loaded, precision, reusable,
                   wanted: dict[str, set[str]], served=None) -> dict:
    """``_decode`` of the subjects that want some suite, each on the suites ``wanted`` names (on ``served``, a
    ServedEngineSession, where it is given)."""
    subjects = [subject for subject in order if wanted.get(subject.key)]
    if not subjects:
        return {}
    if served is not None:
        return served.decode(contract, suites, subjects, progress, precision, _base_fingerprint(base_name, loaded),
                             reuse=reusable, own_suites={subject.key: wanted[subject.key] for subject in subjects})
    return _decode(contract, suites, subjects, base_name, progress, loaded, precision, reuse=reusable,
                   own_suites={subject.key: wanted[subject.key] for subject in subjects})


def _merged(first: tuple, more: tuple) -> tuple:
    """One subject's decoded (outputs, latencies, generation, prompts) of two stages, suite by suite."""
    return tuple({**a, **b} for a, b in zip(first, more))


def _decided(contract: Contract, order: list[Subject], candidates: list[Subject], baseline_of: dict, known: dict,
             own_suites: dict, decoded: dict, first: set[str], *, exempt: set[str]) -> dict[str, tuple]:
    """The subjects whose verdict the deciding suites ``first`` already settle, by key: (the suites they are
    measured on, why). A candidate that fails a gate on those suites has failed; a baseline decoded only for such
    candidates needs no other suite either. ``exempt``: subjects measured on suites of their own choosing."""
    from mint.contract.gates import check_gate

    def scored(key: str):
        mine = [(suite, records) for suite, records in own_suites[key] if suite.name in first]
        outputs, latencies, _generation, prompts = decoded[key]
        return _score(contract, mine, {suite.name: example_keys(records) for suite, records in mine},
                      outputs, latencies, prompts)

    names = tuple(suite.name for suite in contract.suites if suite.name in first)
    decided: dict[str, tuple] = {}
    for candidate in candidates:
        reference = baseline_of.get(candidate.key)
        if candidate.key in exempt or reference is None or candidate.key not in decoded:
            continue
        metrics, rows = scored(candidate.key)
        if reference in known:
            baseline_metrics, baseline_rows = known[reference].metrics, known[reference].rows
        elif reference in decoded:
            baseline_metrics, baseline_rows = scored(reference)
        else:
            continue
        paired = paired_deltas(contract, rows, baseline_rows)
        # the judge has not judged yet: its gates are checked once every suite is decoded
        failed = [gate for gate in (check_gate(contract, g, metrics, baseline_metrics, paired.get(g.metric))
                                    for g in contract.gates if g.suite in first and not _judge_metric(g.metric))
                  if not gate.passed]
        if failed:
            decided[candidate.key] = (names, f"{failed[0].metric} failed ({failed[0].rule}), so the verdict is fail "
                                             "whatever the other suites show")
    requested = requested_keys(candidates)
    for subject in order:      # a baseline measured only for candidates already decided
        dependents = [key for key, reference in baseline_of.items() if reference == subject.key]
        if subject.key not in requested and subject.key not in exempt and dependents and \
                all(key in decided for key in dependents):
            decided[subject.key] = (names, "measured as the baseline of "
                                           f"{', '.join(c.label for c in candidates if c.key in dependents)}, "
                                           f"whose verdicts {', '.join(names)} decided")
    return decided


def _plan(ws: Workspace, contract: Contract, candidates: list[Subject], examples_sha256: str, fingerprint: str,
          precision, engine: dict | None = None) -> tuple[list[Subject], dict[str, str], dict[str, "Baseline"]]:
    """What to decode: the candidates, and each baseline they need with no registered report on these examples
    at this precision on this engine (a candidate's is the champion, or the bare base when there is none or it is the champion;
    a champion decoded as a baseline is measured alone, without a baseline of its own). (Subjects in dependency order, each one's
    baseline key (none for the base), the baselines found registered.)"""
    champion_id = _champion(ws, contract)
    requested = {c.key: c for c in candidates}
    order: list[Subject] = []
    baseline_of: dict[str, str] = {}
    known: dict[str, Baseline] = {}

    def ensure(key: str) -> None:
        if key in known or any(s.key == key for s in order):
            return
        if key not in requested:
            owner = base_report_owner(fingerprint) if key == BASE else key
            found = queries.find_report(ws, owner, _identity(contract), examples_sha256,
                                        where=_decoded_alike(precision, engine))
            if found is not None:
                known[key] = _load_baseline(ws, found)
                return
        subject = requested.get(key) or (Subject(BASE, BASE) if key == BASE else
                                         _subject(ws, queries.revision_ref(ws, key), contract))
        # a champion decoded only to be a candidate's baseline gets no verdict of its own, so it needs no baseline
        # (before, it was gated against the bare base, decoded for that alone)
        if key != BASE and key in requested:
            baseline_of[key] = champion_id if champion_id is not None and champion_id != key else BASE
            ensure(baseline_of[key])
        order.append(subject)

    for candidate in candidates:
        ensure(candidate.key)
    return order, baseline_of, known


def _evaluate_predictions(ws: Workspace, ref: str | None, contract: Contract, *, out_dir, limit, predictions: Path,
                          base, baseline_predictions: Path | None, started: Started | None) -> EvalResult:
    """Outputs made elsewhere, scored and gated without generating anything, not even a baseline."""
    began = time.perf_counter()
    subject = _subject(ws, ref, contract) if ref is not None else Subject("predictions", "predictions")
    suites, live_suites = read_suites(ws, contract, limit)
    keys = {suite.name: example_keys(records) for suite, records in suites}
    examples_sha256 = examples_digest(suites)
    base_name = base or (subject.revision.base if subject.revision else None) or _project_base()
    outputs, latencies = _read_predictions(predictions, suites)
    baseline = _predictions_baseline(ws, contract, suites, keys, examples_sha256, _champion(ws, contract),
                                     baseline_predictions)
    if started is not None:     # both files read: what is left may load the base, to measure its precision
        started()
    loaded: dict = {}
    precision = _precision(ws, contract, base_name, subject.revision, suites, loaded)
    # known without loading anything more: the revision records it, and the base was loaded if it was measured
    fingerprint = subject.revision.base_fingerprint if subject.revision else \
        (loaded[base_name].fingerprint if base_name in loaded else None)
    judged, baseline = _judge_predictions(ws, contract, base_name, suites, keys, outputs, baseline)
    return _write_report(ws, contract, subject, suites, live_suites, keys, examples_sha256, precision, outputs,
                         latencies, None, baseline, base_name, fingerprint, began, out_dir=out_dir,
                         source="predictions", baseline_evaluated=False, judged=judged)


def _judge_predictions(ws: Workspace, contract: Contract, base_name: str, suites, keys: dict, outputs: dict,
                       baseline: "Baseline") -> tuple[Judged | None, "Baseline"]:
    """Outputs made elsewhere judged against their baseline's answers (none: no baseline to judge against) and
    rated; the baseline, with ratings of the answers its rows hold none for (predictions given as the baseline)."""
    judge = open_judge(ws, contract, base_name)
    if judge is None:
        return None, baseline
    try:
        judged = judge_answers(judge, contract, suites, keys, outputs, _answers_by_key(baseline.rows)) \
            if baseline.rows and _compares(contract) else None
        if _rates(contract):
            rated = rate_answers(judge, contract, suites, outputs)
            judged = rated if judged is None else judged.beside(rated)
            baseline = _rated_baseline(judge, contract, suites, baseline)
        return judged, baseline
    finally:
        judge.close()


def _rated_baseline(judge: JudgeSession, contract: Contract, suites, baseline: "Baseline") -> "Baseline":
    """``baseline`` with the judge's rating of each answer where its rows hold none (a report registered under
    this contract holds them already)."""
    rows = [row for row in baseline.rows if isinstance(row.get("outputs"), list)]
    if not rows or all(SCORE in row["scores"] for row in rows if _rated_suite(contract, row["suite"])):
        return baseline
    by_suite = {suite.name: (suite, records) for suite, records in suites}
    outputs: dict[str, list[list]] = {name: [[] for _ in records] for name, (_suite, records) in by_suite.items()}
    for row in rows:
        if row["suite"] in outputs and row["index"] < len(outputs[row["suite"]]):
            outputs[row["suite"]][row["index"]] = row["outputs"]
    rated = rate_answers(judge, contract, suites, outputs)
    metrics, rows = rated.applied(dict(baseline.metrics), [dict(row) for row in baseline.rows])
    return Baseline(baseline.revision_id, baseline.label, baseline.report_id, metrics, rows, baseline.examples_sha256)


def _rated_suite(contract: Contract, name: str) -> bool:
    return any(suite.name == name and SCORE in suite.metrics for suite in contract.suites)


def _compares(contract: Contract) -> bool:
    """Whether some suite measures the judge's comparison of two answers."""
    return any(m in COMPARISON_METRICS for suite in contract.suites for m in suite.metrics)


def _rates(contract: Contract) -> bool:
    """Whether some suite measures the judge's rating of each answer."""
    return any(SCORE in suite.metrics for suite in contract.suites)


def _judge_subjects(contract: Contract, judge: JudgeSession | None, order: list[Subject], own_suites: dict,
                    decoded: dict, baseline_of: dict, known: dict) -> dict[str, Judged]:
    """Each subject's answers judged against its baseline's, by key, and rated, all before any report is written:
    a judge that fails leaves nothing registered. The bare base is its own baseline (every pair the same answer,
    so nothing is asked); a champion measured only as a baseline is not compared, but rated, as every subject
    is: its ratings are what its candidate's are compared with."""
    if judge is None:
        return {}
    judged: dict[str, Judged] = {}
    for subject in order:
        mine = own_suites[subject.key]
        keys = {suite.name: example_keys(records) for suite, records in mine}
        reference = baseline_of.get(subject.key, subject.key if subject.key == BASE else None)
        if reference is not None and _compares(contract):
            theirs = known[reference].rows if reference in known else \
                _decoded_rows(own_suites[reference], decoded[reference][0])
            judged[subject.key] = judge_answers(judge, contract, mine, keys, decoded[subject.key][0],
                                                _answers_by_key(theirs))
        if _rates(contract):
            rated = rate_answers(judge, contract, mine, decoded[subject.key][0])
            judged[subject.key] = judged[subject.key].beside(rated) if subject.key in judged else rated
    return judged


def _decoded_rows(suites, outputs: dict) -> list[dict]:
    """The (suite, key, outputs) rows of answers decoded now, as a report's predictions hold them."""
    return [{"suite": suite.name, "key": key, "outputs": outs} for suite, records in suites
            for key, outs in zip(example_keys(records), outputs[suite.name])]


def _answers_by_key(rows: list[dict]) -> dict[tuple[str, str], list]:
    return {(row["suite"], row["key"]): row["outputs"] for row in rows if isinstance(row.get("outputs"), list)}


def _judge_metric(metric: str) -> bool:
    return metric.partition(".")[2] in JUDGE_METRICS


def _write_report(ws: Workspace, contract: Contract, subject: Subject, suites, live_suites, keys: dict,
                  examples_sha256: str, precision, outputs: dict, latencies: dict, generation: dict | None,
                  baseline: "Baseline | None", base_name: str, fingerprint: str | None, started: float, *,
                  out_dir: Path | None, source: str, baseline_evaluated: bool, measured_only: bool = False,
                  measured_on: tuple | None = None, prompts: dict | None = None,
                  judged: Judged | None = None) -> EvalResult:
    """Score ``subject``'s outputs, gate them against ``baseline`` (None: the base, its own), write the report
    and its predictions atomically and register it. ``measured_only``: a champion measured as another's baseline,
    whose report has no gates and no verdict of its own ("measured"); ``measured_on``: (suites, why) when the
    subject was decoded on some suites only; ``prompts``: each record's prompt digest, by suite, so a later
    evaluation takes the answer instead of decoding it again; ``judged``: the judge's verdicts on its answers."""
    revision = subject.revision
    is_base = subject.key == BASE and source == "generated"
    metrics, rows = _score(contract, suites, keys, outputs, latencies, prompts)
    if judged is not None:
        metrics, rows = judged.applied(metrics, rows)
    if is_base:     # generation 0 is its own baseline: every delta is 0
        baseline = Baseline(None, "base", None, metrics, rows, examples_sha256)
    if measured_only:
        baseline = Baseline(None, MEASURED_AS_BASELINE, None, {}, [], examples_sha256)
        gates = []
    else:
        paired = paired_deltas(contract, rows, baseline.rows)
        no_latency = None if any(k.startswith("latency.") for k in metrics) else \
            "the predictions carry no latency_ms" if source == "predictions" else "no example's latency was measured"
        gates = apply_gates(contract, metrics, baseline.metrics if baseline.label != NO_BASELINE else None,
                            {s.name: len(r) for s, r in suites}, paired, no_latency)
        if measured_on:     # a gate on a suite not decoded is not checked, and never passes
            gates = [not_decoded(gate, measured_on) if gate.suite not in measured_on[0]
                     and not gate.metric.startswith("latency.") else gate for gate in gates]
    label = subject.label
    predictions_text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    report = Report(
        revision=label, revision_id=revision.id if revision else None,
        base=base_name, base_fingerprint=fingerprint, contract=_identity(contract),
        baseline=ReportBaseline(baseline.revision_id, baseline.metrics, label=baseline.label,
                                report=baseline.report_id),
        # what every generation compared under this contract on this host decodes at, and why
        precision=precision.record(),
        metrics=metrics, gates=tuple(gates),
        verdict="measured" if measured_only else "pass" if all(g.passed for g in gates) else "fail",
        examples={suite.name: len(records) for suite, records in suites},
        examples_sha256=examples_sha256,
        # what each suite was, so a later generation can be measured on this one's retention suites again
        suites=[{"name": suite.name, "source": suite.source, "metrics": list(suite.metrics),
                 "sha256": None if suite.live else hashlib.sha256(suite.data.read_bytes()).hexdigest()}
                for suite, _records in suites],
        # suites drawn from a dataset: its resolved version and the episodes used, to make the report again
        live_suites=live_suites or None,
        statistics=statistics_text(contract),
        source=source, generation=generation,
        predictions=PREDICTIONS_FILE, created_at=now(),
        duration_s=round(time.perf_counter() - started, 3),
        predictions_sha256=hashlib.sha256(predictions_text.encode("utf-8")).hexdigest(),
        # what the harness says beside its metrics (the router's: its confusion matrix, the held-out distribution)
        extra={**contract.harness().report_fields([r for _suite, records in suites for r in records],
                                                  [o for suite, _records in suites for o in outputs[suite.name]]),
               **({"measured_on": {"suites": list(measured_on[0]), "why": measured_on[1]}} if measured_on else {}),
               **({"judge": judged.facts} if judged is not None else {})})
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
    trackers.log_report(ws, _tracking(), report, target / REPORT_FILE)   # a run per report where it is on
    return EvalResult(report, str(target / REPORT_FILE), str(target / PREDICTIONS_FILE), baseline_evaluated)


def not_decoded(gate: GateResult, measured_on: tuple) -> GateResult:
    """A gate on a suite the subject was not decoded on: not checked (the reason is its rule), not passed."""
    return GateResult(gate.metric, None, gate.baseline, f"not decoded: {measured_on[1]}", False, None, skipped=True)


def _tracking() -> trackers.Tracking:
    """Where reports are tracked (mint.yaml's ``tracking``, or ``--track``)."""
    from mint.project import load_project

    return trackers.current(load_project())


def _identity(contract: Contract) -> ContractIdentity:
    """The loaded contract's identity as the registry files it (load_contract computed the hash)."""
    return ContractIdentity(contract.name, contract.version, contract.sha256, str(contract.path))


def _score(contract: Contract, suites, keys: dict, outputs: dict, latencies: dict,
           prompts: dict | None = None) -> tuple[dict, list[dict]]:
    """The suites' metrics (and latency percentiles) and one row per example, for the outputs given (with each
    one's prompt digest where ``prompts`` has it)."""
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
            digest = (prompts or {}).get(suite.name)
            rows.append({"suite": suite.name, "index": index, "id": record_id(record), "key": key, "outputs": outs,
                         "scores": score, "latency_ms": suite_latency[index] if index < len(suite_latency) else None,
                         **({"prompt_sha256": digest[index]} if digest else {})})
    if all_latencies:
        metrics["latency.p50_ms"] = statistics.median(all_latencies)
        metrics["latency.p95_ms"] = _percentile(all_latencies, 0.95)
    return metrics, rows


NO_BASELINE = "none"   # the label of a missing baseline (predictions with no baseline to pair them with)
MEASURED_AS_BASELINE = "none: measured as a baseline"   # a champion measured for a candidate, not gated itself


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


def statistics_text(contract: Contract) -> str:
    """How the report's deltas were computed and how its gates read them."""
    from mint.contract.gates import rules_text

    return (f"Candidate and baseline are scored on the same examples, matched by suite and example id. Each gated "
            f"metric's delta (candidate - baseline) has a {contract.confidence:.0%} interval: exact McNemar "
            f"(Clopper-Pearson on the discordant pairs) for pass/fail metrics, a seeded paired bootstrap (2000 "
            f"resamples) otherwise. " + rules_text(contract) + (JUDGE_STATISTICS if _compares(contract) else "")
            + (RATING_STATISTICS if _rates(contract) else ""))


JUDGE_STATISTICS = (" judge_win_rate: each example won (1), tied (0.5) or lost (0) against the baseline's answer to it, "
                    "judged in both orders (a verdict that changes with the order is a tie, counted in "
                    "judge_flip_rate); its delta is (wins - losses) / n, with the exact sign test's interval on the "
                    "examples won or lost.")
RATING_STATISTICS = (" judge_score: the judge's rating of each answer alone on the contract's scale (the mean of an "
                     "example's samples), the candidate's and the baseline's; its delta is the paired bootstrap's.")


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
    seen: dict
    keys, seen = [], {}
    for record in records:
        rid = record_id(record)
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
        if metric in PAIRWISE_METRICS:     # the judge compared the two answers itself: a sign test on its verdicts
            deltas[gate.metric] = judge_delta(rows, suite_name, contract.confidence)
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
        deltas[gate.metric] = compare(candidate, reference, confidence=contract.confidence)
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


def _decoded_alike(precision: DecodingPrecision, engine: dict | None):
    """Whether a registered report was generated at ``precision`` on ``engine`` (None: mint's own): a baseline
    decoded otherwise is not reused, it is decoded again like its candidate."""
    return lambda report: report_precision(report) == precision.used and report_engine(report) == engine


def _base_dir(ws: Workspace, contract: Contract, fingerprint: str, examples_sha256: str, precision: str) -> Path:
    return ws.reports / f"{contract.name}-v{contract.version}" / \
        f"base-{fingerprint.split(':')[-1][:16]}-{contract.sha256[:12]}-{examples_sha256[:12]}-{precision}"


def _base_fingerprint(base_name: str, loaded: dict) -> str:
    if base_name not in loaded:
        from mint.base import load_base
        loaded[base_name] = load_base(base_name)
    return loaded[base_name].fingerprint


def _project_base() -> str:
    from mint.project import load_project
    return load_project().base


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def generate_outputs(contract: Contract, suites, revision, adapter_dir, base_name: str, progress, bases: dict,
                     precision: DecodingPrecision):
    """Each suite's outputs, latencies and generation facts (precision, tokens/s) from the revision (the bare
    base when ``adapter_dir`` is None), all suites decoded as one stream."""
    subject = Subject(revision.id, revision.ref, revision, adapter_dir) if revision is not None else Subject(BASE, BASE)
    return _decode(contract, suites, [subject], base_name, progress, bases, precision)[subject.key][:3]


def prompt_digest(ids: list[int], seed: int | None) -> str:
    """A prompt's key among decoded answers: its token ids (the whole rendering: system turn, template, tools),
    and where answers are sampled the seed its first sample draws with."""
    return hashlib.sha256(json.dumps([ids, seed]).encode()).hexdigest()


def _reusable(ws: Workspace, contract: Contract, subjects: list[Subject], precision_used: str,
              fingerprint: str, engine: dict | None = None) -> dict[str, dict[str, dict]]:
    """Per subject, the answers its registered reports hold for prompts decoded with this identity, by prompt
    digest (newest report first); a report whose predictions changed since it was registered is passed over."""
    identity = decoding_identity(contract, precision_used, fingerprint, engine)
    found: dict[str, dict[str, dict]] = {}
    for subject in subjects:
        rows: dict[str, dict] = {}
        owner = base_report_owner(fingerprint) if subject.key == BASE else subject.key
        for report in queries.generated_reports(ws, owner):
            if not any(isinstance(g, dict) and g.get("decoding") == identity
                       for g in (report.generation or {}).values()):
                continue
            try:
                baseline = _load_baseline(ws, report)
            except Refused:
                continue
            for row in baseline.rows:
                digest = row.get("prompt_sha256")
                if isinstance(digest, str) and isinstance(row.get("outputs"), list):
                    rows.setdefault(digest, {**row, "report": report.id})
        found[subject.key] = rows
    return found


def _decode(contract: Contract, suites, subjects: list[Subject], base_name: str, progress, bases: dict,
            precision: DecodingPrecision, *, reuse: dict[str, dict[str, dict]] | None = None,
            own_suites: dict[str, set[str]] | None = None) -> dict[str, tuple[dict, dict, dict, dict]]:
    """Each subject's (outputs, latencies, generation facts, prompt digests) per suite: every suite of every
    subject decoded as one stream, each revision's adapter in a LoRA slot of its own (the bare base in slot 0).
    ``own_suites[key]``: the suites a subject is measured on (all by default); ``reuse[key]``: answers a
    registered report of it already holds, by prompt digest, taken instead of decoded."""
    import dataclasses

    from mint.base import load_base
    from mint.generation.engine import generate_each, prompt_ids
    from mint.generation.slots import attach_adapters
    from mint.harness import answer_ends
    from mint.hardware import apply_decoding_threads

    reuse = reuse or {}
    own = {s.key: (own_suites or {}).get(s.key) or {suite.name for suite, _ in suites} for s in subjects}
    harness = contract.harness()
    owners = [(suite, index) for suite, records in suites for index in range(len(records))]
    conversations = evaluation_conversations(harness, suites)
    # a base loaded earlier in this eval is reused once; slots installed in it change it, so it is not kept
    loaded = bases.pop(base_name, None) or load_base(base_name)
    responded = _responses(harness, loaded, subjects, suites)
    if responded is not None:
        if not any(s.adapter_dir is not None for s in subjects):
            bases[base_name] = loaded
        return responded
    settings = dataclasses.replace(contract.settings, precision=precision.used)
    ids = prompt_ids(loaded.tokenizer, conversations)
    sampled = settings.temperature > 0
    digests = [prompt_digest(p, c * settings.samples if sampled else None) for c, p in enumerate(ids)]
    wanted = {s.key: [c for c, (suite, _i) in enumerate(owners) if suite.name in own[s.key]
                      and digests[c] not in reuse.get(s.key, {})] for s in subjects}
    decoding = [s for s in subjects if wanted[s.key]]
    adapters = [s for s in decoding if s.adapter_dir is not None]
    if not adapters:
        bases[base_name] = loaded
    for subject in adapters:
        fingerprint = subject.revision.base_fingerprint if subject.revision is not None else None
        if fingerprint and fingerprint != loaded.fingerprint:
            raise BadInput(f"{subject.label} was trained on a base with fingerprint {fingerprint[:19]}, "
                           f"but {base_name} is {loaded.fingerprint[:19]}", field="--base")
    slots = dict(zip((s.key for s in adapters), attach_adapters(
        loaded.model, [s.adapter_dir for s in adapters], base_name=base_name, names=[s.label for s in adapters])))
    done = {(subject.key, suite.name): 0 for subject in subjects for suite, _ in suites}
    totals = {suite.name: len(records) for suite, records in suites}

    shown = [(subject, name) for subject in decoding for name in totals if name in own[subject.key]]
    spent = [0.0]

    def label(subject: Subject, suite_name: str) -> str:   # a stream of several revisions says whose suite it counts
        return suite_name if len(subjects) == 1 else f"{subject.label} {suite_name}"

    def tick(k: int, conversation: int) -> None:
        subject, suite = decoding[k], owners[conversation][0]
        done[(subject.key, suite.name)] += 1
        if progress:
            progress(label(subject, suite.name), done[(subject.key, suite.name)], totals[suite.name], share=spent[0])

    def step(share: float) -> None:
        if progress and share - spent[0] >= 0.005:    # every half percent of the budget: a line, not a flood
            spent[0] = share
            for subject, name in shown:
                progress(label(subject, name), done[(subject.key, name)], totals[name], share=share)

    if progress:      # every suite's clock starts with the stream, not at its first answer
        for subject, name in shown:
            progress(label(subject, name), 0, totals[name], share=0.0)

    threads = apply_decoding_threads()     # the hardware plan's (mint.hardware), recorded with its figures
    # every suite in one stream: a batch stays full across suites (two suites of 12 decode as one batch of
    # 24, not two of 12) and across revisions, and each row's output does not depend on the rows beside it
    results = dict(zip((s.key for s in decoding), generate_each(
        loaded.model, loaded.tokenizer, conversations, settings, [slots.get(s.key, 0) for s in decoding],
        on_done=tick, answer_end=answer_ends(contract.harness_name, contract.settings),
        subsets=[wanted[s.key] for s in decoding], prompts=ids, on_step=step))) if decoding else {}
    identity = decoding_identity(contract, precision.used, loaded.fingerprint)
    decoded: dict[str, tuple[dict, dict, dict, dict]] = {}
    for subject in subjects:
        result = results.get(subject.key)
        fresh = dict(zip(wanted[subject.key], zip(result.outputs, result.latencies_ms, result.row_tokens))) \
            if result is not None else {}
        answers = gather_answers(suites, owners, own[subject.key], fresh, reuse.get(subject.key, {}), digests)
        # precision used and why (the contract's, resolved once per host: see the report's `precision`), tokens/s
        # of the whole stream and who else it decoded; answers taken from earlier reports instead of decoded
        generation = {name: {"precision": precision.used if result is None else result.precision,
                             "reason": precision.reason if result is None else result.precision_reason,
                             "new_tokens": answers.tokens[name],
                             "tokens_per_s": round(result.tokens_per_s, 2) if result is not None else None,
                             "threads": {"value": threads.value, "reason": threads.reason},
                             "engine": {"kind": "local"}, "decoding": identity,
                             **answers.reuse_facts(name),
                             **({"stream": [s.label for s in decoding]} if len(decoding) > 1 else {})}
                      for name in answers.outputs}
        decoded[subject.key] = (answers.outputs, answers.latencies, generation, answers.prompts)
    return decoded


def _responses(harness, loaded, subjects: list[Subject], suites) -> dict | None:
    """Each subject's outputs where its harness scores something other than generated text (the router's
    choices, ``respond``); None where the model generates them."""
    records = [r for _suite, records in suites for r in records]
    decoded: dict = {}
    for subject in subjects:
        started = time.perf_counter()
        responses = harness.respond(loaded, subject.adapter_dir, records,
                                    subject.revision.ref if subject.revision is not None else None)
        if responses is None:
            return None
        outputs: dict[str, list] = {suite.name: [] for suite, _ in suites}
        for suite, response in zip((suite for suite, records in suites for _ in records), responses):
            outputs[suite.name].append([response])
        seconds = round(time.perf_counter() - started, 3)
        decoded[subject.key] = (outputs, {suite.name: [] for suite, _ in suites},
                                {suite.name: {"responded_s": seconds} for suite, _ in suites}, {})
    return decoded


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
    outputs: dict
    latencies: dict
    outputs, latencies = {}, {}
    for suite, records in suites:
        outputs[suite.name], latencies[suite.name] = [], []
        for index, record in enumerate(records):
            found = by_key.get((suite.name, "id", record_id(record))) or by_key.get((suite.name, "index", index))
            if found is None:
                raise BadInput(f"no output for suite {suite.name!r} record {index} (id {record_id(record)!r})",
                               file=str(path))
            outputs[suite.name].append(found[0])
            latencies[suite.name].append(found[1])
    return outputs, latencies
