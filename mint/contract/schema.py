"""Contract files: load, validate every field with its line, and check the suites' data.

``mint contract check FILE`` runs all of this without loading a model.
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import BadInput
from mint.harness import HarnessSettings, harness_for, specialists
from mint.generation.precision import PRECISIONS
from mint.harness.base import Harness, RecordProblem
from mint.contract.judge_schema import (
    FLIP_RATE,
    JUDGE_METRICS,
    SCORE,
    JudgeSpec,
    judge_hash_lines,
    judge_summary,
    judge_warnings,
    load_judge,
)
from mint.registry.refs import check_name
from mint.registry.report import metric_suite
from mint.text import closest
from mint.yamlfile import YamlDoc, check_keys, check_number, check_string, is_file, load_yaml

TOP_KEYS = ("contract", "version", "specialist", "harness", "suites", "gates", "promotion", "gate_rules", "confidence",
            "power", "judge")
HARNESS_KEYS = ("name", "system", "template", "tools", "decoding", "timeout_s", "catalog")
DECODING_KEYS = ("max_new_tokens", "temperature", "top_p", "samples", "batch_size", "precision",
                 "stop_at_answer_end", "prompt_lookup")
MAX_PROMPT_LOOKUP = 64   # drafted tokens a row may check in one step
SUITE_KEYS = ("name", "data", "metrics", "limit")
GATE_KEYS = ("metric", "min", "max", "no_regression", "non_inferior", "improve", "detect")
PROMOTION_KEYS = ("min_examples", "auto")
POWER_KEYS = ("target", "churn")
# How a gate reads (docs/contracts.md, "Gates"). 1: `no_regression: TOL` fails only when the whole interval lies
# beyond -TOL. 2 (the default): it fails a loss that is significant and whose point estimate is worse than -TOL,
# as a reader of "not worse by more than TOL" expects; `non_inferior: TOL` passes only when the interval's
# worse-side bound is within TOL. A contract's hash covers its rules, so reports made under one rule are never
# compared with reports made under the other as if one contract had made both.
GATE_RULES = (1, 2)
DEFAULT_GATE_RULES = 2
DEFAULT_POWER = {"target": 0.8, "churn": 0.02}
LATENCY_METRICS = ("latency.p50_ms", "latency.p95_ms")
_SUITE_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
LIVE_PREFIX = "dataset:"
_LIVE_REF = re.compile(r"^dataset:([A-Za-z0-9][A-Za-z0-9._-]{0,99})@([A-Za-z0-9._-]{1,64})\Z")
# a live suite's records are made from logged episodes; HumanEval-style tests cannot be
# a traffic suite: the held-out requests of what `mint serve` logged (mint.data.split), in a window: served since
# the champion was promoted, or all of it
TRAFFIC_PREFIX = "traffic:"
TRAFFIC_WINDOWS = ("since-promotion", "all")


@dataclass(frozen=True)
class Suite:
    name: str
    data: Path | None               # a suite file; None for a live suite
    metrics: tuple[str, ...]
    limit: int | None
    dataset: str | None = None      # a live suite: drawn from this dataset's held-out split ...
    version: str | None = None      # ... at this version (`latest` resolves when the suite is read)
    where: str = ""                 # the suite's field in the contract, for errors about its data
    traffic: str | None = None      # a traffic suite: the served traffic's held-out requests in this window

    @property
    def live(self) -> bool:
        """Whether the records are read from the workspace when evaluated (a dataset's or the traffic's), not a file."""
        return self.dataset is not None or self.traffic is not None

    @property
    def source(self) -> str:
        if self.traffic is not None:
            return f"{TRAFFIC_PREFIX}{self.traffic}"
        return f"{LIVE_PREFIX}{self.dataset}@{self.version}" if self.dataset is not None else str(self.data)


@dataclass(frozen=True)
class Gate:
    metric: str
    min: float | None = None
    max: float | None = None
    no_regression: float | None = None
    improve: float | None = None
    non_inferior: float | None = None
    detect: float | None = None     # the effect the gate must find ``power.target`` of the time: sizes its suite

    @property
    def paired(self) -> bool:
        """Whether the gate compares the candidate with its baseline example by example."""
        return self.no_regression is not None or self.improve is not None or self.non_inferior is not None

    @property
    def suite(self) -> str:
        return metric_suite(self.metric)


@dataclass(frozen=True)
class Power:
    """What the power planner assumes (``power:`` in a contract): a gate's ``detect`` effect is found ``target``
    of the time, with ``churn`` of the examples moving the other way (a gain's losses, a loss's wins)."""
    target: float = DEFAULT_POWER["target"]
    churn: float = DEFAULT_POWER["churn"]


@dataclass(frozen=True)
class Contract:
    name: str
    version: int
    specialist: str
    harness_name: str
    settings: HarnessSettings
    suites: tuple[Suite, ...]
    gates: tuple[Gate, ...]
    min_examples: int
    auto_promote: bool
    path: Path
    sha256: str
    doc: YamlDoc = field(repr=False, compare=False, default=None)
    gate_rules: int = DEFAULT_GATE_RULES
    confidence: float = 0.95
    power: Power = field(default_factory=Power)
    judge: JudgeSpec | None = None      # a model judge (the `judge:` block), where the contract names one

    def harness(self) -> Harness:
        return harness_for(self.harness_name, self.settings)

    def produced_metrics(self) -> set[str]:
        return {f"{s.name}.{m}" for s in self.suites for m in s.metrics} | set(LATENCY_METRICS)

    @property
    def ref(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "path": str(self.path)}


def load_contract(path: Path, *, check_data: bool = True) -> Contract:
    """Parse and validate ``path``; every problem is BadInput at ``file:line: field``."""
    doc = load_yaml(path)
    data = check_keys(doc, doc.data if doc.data is not None else {}, "", TOP_KEYS)
    for key in ("contract", "version", "specialist", "suites"):
        if key not in data:
            raise doc.error("", f"missing required field `{key}`")
    name = check_string(doc, data["contract"], "contract")
    version = check_number(doc, data["version"], "version", minimum=1, integer=True)
    try:
        specialist = check_name(data["specialist"]) if isinstance(data["specialist"], str) else None
    except BadInput:
        specialist = None
    if specialist is None:
        raise doc.error("specialist", "expected a specialist name (lowercase letters, digits, - or _)")

    harness = check_keys(doc, data.get("harness") or {}, "harness", HARNESS_KEYS)
    harness_name = harness.get("name", specialist)
    known = specialists()
    if harness_name not in known:
        raise doc.error("harness.name" if "name" in harness else "specialist",
                        f"no harness named {harness_name!r} (harnesses: {', '.join(known)})")
    decoding = check_keys(doc, harness.get("decoding") or {}, "harness.decoding", DECODING_KEYS)
    template = harness.get("template", "{prompt}")
    if not isinstance(template, str) or "{prompt}" not in template:
        raise doc.error("harness.template", "expected a string containing {prompt}")
    tools = harness.get("tools")
    if tools is not None and (not isinstance(tools, list) or not all(isinstance(t, str) for t in tools)):
        raise doc.error("harness.tools", "expected a list of tool names")
    catalog = None
    if "catalog" in harness:
        catalog = (path.parent / check_string(doc, harness["catalog"], "harness.catalog")).resolve()
        if not is_file(catalog):
            raise doc.error("harness.catalog", f"no such file: {catalog}")
    system = harness.get("system")
    if system is not None and not isinstance(system, str):
        raise doc.error("harness.system", "expected a string")
    precision = decoding.get("precision", "fp32")
    if precision not in PRECISIONS:
        raise doc.error("harness.decoding.precision", f"expected one of {', '.join(PRECISIONS)}, got {precision!r}")
    stop_at_answer_end = decoding.get("stop_at_answer_end", False)
    if not isinstance(stop_at_answer_end, bool):
        raise doc.error("harness.decoding.stop_at_answer_end", "expected true or false")
    settings = HarnessSettings(
        precision=precision, stop_at_answer_end=stop_at_answer_end, system=system, template=template, tools=tuple(tools) if tools is not None else None,
        max_new_tokens=check_number(doc, decoding.get("max_new_tokens", 256), "harness.decoding.max_new_tokens",
                               minimum=1, integer=True),
        temperature=check_number(doc, decoding.get("temperature", 0.0), "harness.decoding.temperature", minimum=0),
        top_p=check_number(doc, decoding.get("top_p", 1.0), "harness.decoding.top_p", minimum=0, exclusive=True),
        samples=check_number(doc, decoding.get("samples", 1), "harness.decoding.samples", minimum=1, integer=True),
        batch_size=check_number(doc, decoding.get("batch_size", 8), "harness.decoding.batch_size", minimum=1,
                           integer=True),
        timeout_s=check_number(doc, harness.get("timeout_s", 10.0), "harness.timeout_s", minimum=0, exclusive=True),
        catalog=catalog,
        prompt_lookup=check_number(doc, decoding.get("prompt_lookup", 0), "harness.decoding.prompt_lookup",
                                   minimum=0, integer=True))
    if settings.prompt_lookup > MAX_PROMPT_LOOKUP:
        raise doc.error("harness.decoding.prompt_lookup", f"must be at most {MAX_PROMPT_LOOKUP}")
    if settings.samples > 1 and settings.temperature == 0:
        raise doc.error("harness.decoding.samples", "several samples need temperature > 0 (greedy repeats itself)")
    scorer = harness_for(harness_name, settings)
    judge = load_judge(doc, data["judge"], path) if "judge" in data else None
    # a judge reads the request and two answers (or one, to rate it): it measures every suite, served traffic
    # included
    judged = judge.metrics() if judge is not None else ()
    available = scorer.metrics + judged
    request_metrics = scorer.request_metrics + judged

    raw_suites = data["suites"]
    if not isinstance(raw_suites, list) or not raw_suites:
        raise doc.error("suites", "expected a non-empty list of suites")
    suites, names = [], set()
    for i, raw in enumerate(raw_suites):
        where = f"suites[{i}]"
        raw = check_keys(doc, raw, where, SUITE_KEYS)
        for key in ("name", "data"):
            if key not in raw:
                raise doc.error(where, f"missing required field `{key}`")
        suite_name = raw["name"]
        if not isinstance(suite_name, str) or not _SUITE_NAME.match(suite_name) or suite_name == "latency":
            raise doc.error(f"{where}.name", "a suite name is lowercase letters, digits and _ (not `latency`)")
        if suite_name in names:
            raise doc.error(f"{where}.name", f"suite {suite_name!r} appears twice")
        names.add(suite_name)
        data_text = check_string(doc, raw["data"], f"{where}.data")
        dataset = dataset_version = data_path = traffic = None
        if data_text.startswith(TRAFFIC_PREFIX):
            traffic = data_text[len(TRAFFIC_PREFIX):]
            if traffic not in TRAFFIC_WINDOWS:
                raise doc.error(f"{where}.data", f"expected {TRAFFIC_PREFIX}WINDOW with a window of "
                                                 f"{', '.join(TRAFFIC_WINDOWS)}, got {data_text!r}"
                                + closest(traffic, TRAFFIC_WINDOWS))
            if not request_metrics:
                able = [n for n in known if harness_for(n, settings).request_metrics]
                raise doc.error(f"{where}.data", f"the {harness_name} harness cannot score a request without a "
                                                 f"reference answer, and served traffic has none (traffic suites: "
                                                 f"{', '.join(able)}, or any contract with a `judge:`); use a suite "
                                                 "file")
        elif data_text.startswith(LIVE_PREFIX):
            match = _LIVE_REF.match(data_text)
            if match is None:
                raise doc.error(f"{where}.data", f"expected {LIVE_PREFIX}NAME@VERSION (a version hash prefix, vN "
                                                 f"or latest), got {data_text!r}")
            if known[harness_name].suite_record is None:
                live = [n for n, spec in known.items() if spec.suite_record is not None]
                raise doc.error(f"{where}.data", f"the {harness_name} harness cannot score logged episodes "
                                                 f"(live suites: {', '.join(live)}); use a suite file")
            dataset, dataset_version = match.groups()
        else:
            data_path = (path.parent / data_text).resolve()
            if not is_file(data_path):
                raise doc.error(f"{where}.data", f"no such file: {data_path}")
        metrics = raw.get("metrics", list(request_metrics if traffic is not None else available))
        if not isinstance(metrics, list) or not metrics:
            raise doc.error(f"{where}.metrics", "expected a non-empty list of metric names")
        for j, metric in enumerate(metrics):
            if metric in JUDGE_METRICS and judge is None:
                raise doc.error(f"{where}.metrics[{j}]", f"{metric} is a model judge's verdict: name the judge in a "
                                                         "`judge:` block (docs/contracts.md, \"A model judge\")")
            if metric == SCORE and judge is not None and judge.scale is None:
                raise doc.error(f"{where}.metrics[{j}]", "judge_score is the judge's rating of each answer: declare "
                                                         "its scale in the judge block, e.g. `score: {scale: [1, 10]}`")
            if not isinstance(metric, str) or not (scorer.knows_metric(metric) or metric in judged):
                raise doc.error(f"{where}.metrics[{j}]", f"the {harness_name} harness has no metric {metric!r}"
                                + closest(str(metric), available, listing="expected one of"))
            if traffic is not None and metric not in request_metrics:
                raise doc.error(f"{where}.metrics[{j}]", f"{metric} compares with a reference answer, and served "
                                                         "traffic has none; a traffic suite measures "
                                                         f"{', '.join(request_metrics)}")
        limit = raw.get("limit")
        if limit is not None:
            check_number(doc, limit, f"{where}.limit", minimum=1, integer=True)
        suites.append(Suite(suite_name, data_path, tuple(metrics), limit, dataset, dataset_version, f"{where}.data",
                            traffic))

    gate_rules = data.get("gate_rules", DEFAULT_GATE_RULES)
    if gate_rules not in GATE_RULES or isinstance(gate_rules, bool):
        raise doc.error("gate_rules", "expected 1 (no_regression fails only when the whole interval lies beyond "
                                      "-TOL) or 2 (it fails a significant loss worse than -TOL)")
    confidence = check_number(doc, data.get("confidence", 0.95), "confidence", minimum=0.5, exclusive=True)
    if confidence >= 1:
        raise doc.error("confidence", "expected a level below 1, such as 0.95")
    raw_power = check_keys(doc, data.get("power") or {}, "power", POWER_KEYS)
    target = check_number(doc, raw_power.get("target", DEFAULT_POWER["target"]), "power.target", minimum=0,
                          exclusive=True)
    if target >= 1:
        raise doc.error("power.target", "expected a chance below 1, such as 0.8")
    churn = check_number(doc, raw_power.get("churn", DEFAULT_POWER["churn"]), "power.churn", minimum=0)
    if churn >= 0.5:
        raise doc.error("power.churn", "expected the share of examples moving the other way, below 0.5")
    power = Power(target, churn)

    gates = []
    raw_gates = data.get("gates") or []
    if not isinstance(raw_gates, list):
        raise doc.error("gates", "expected a list of gates")
    produced = {f"{s.name}.{m}" for s in suites for m in s.metrics} | set(LATENCY_METRICS)
    for i, raw in enumerate(raw_gates):
        where = f"gates[{i}]"
        raw = check_keys(doc, raw, where, GATE_KEYS)
        metric = raw.get("metric")
        if not isinstance(metric, str):
            raise doc.error(where, "missing required field `metric`")
        if metric not in produced:
            raise doc.error(f"{where}.metric", f"no suite produces {metric!r}"
                            + closest(metric, sorted(produced), listing="expected one of"))
        bounds = {k: check_number(doc, raw[k], f"{where}.{k}") for k in ("min", "max") if k in raw}
        relative = {k: check_number(doc, raw[k], f"{where}.{k}", minimum=0)
                    for k in ("no_regression", "non_inferior", "improve") if raw.get(k) is not None}
        if not bounds and not relative:
            raise doc.error(where, "a gate needs min, max, no_regression, non_inferior or improve")
        if relative and metric in LATENCY_METRICS:
            key = next(iter(relative))
            raise doc.error(f"{where}.{key}", "latency is not compared example by example; gate it with max")
        if relative and metric.partition(".")[2] == FLIP_RATE:
            key = next(iter(relative))
            raise doc.error(f"{where}.{key}", "the judge's flip rate has no baseline to compare with; gate it with max")
        if "non_inferior" in relative and gate_rules < 2:
            raise doc.error(f"{where}.non_inferior", "non_inferior needs gate_rules: 2")
        if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
            raise doc.error(f"{where}.max", "is below min")
        detect = None
        if raw.get("detect") is not None:
            detect = check_number(doc, raw["detect"], f"{where}.detect", minimum=0, exclusive=True)
            if not relative:
                raise doc.error(f"{where}.detect", "detect sizes a paired comparison: give improve, no_regression "
                                                   "or non_inferior beside it")
            if detect + 2 * power.churn > 1:
                raise doc.error(f"{where}.detect", f"an effect of {detect:g} with churn {power.churn:g} each way is "
                                                   "more than every example can move")
        gates.append(Gate(metric, bounds.get("min"), bounds.get("max"), relative.get("no_regression"),
                          relative.get("improve"), relative.get("non_inferior"), detect))

    promotion = check_keys(doc, data.get("promotion") or {}, "promotion", PROMOTION_KEYS)
    min_examples = check_number(doc, promotion.get("min_examples", 1), "promotion.min_examples", minimum=0,
                                integer=True)
    auto = promotion.get("auto", True)
    if not isinstance(auto, bool):
        raise doc.error("promotion.auto", "expected true or false")

    contract = Contract(name, version, specialist, harness_name, settings, tuple(suites), tuple(gates), min_examples,
                        auto, path.absolute(), contract_sha256(path, [s.data for s in suites if not s.live], catalog,
                                                               gate_rules=gate_rules, judge=judge),
                        doc, gate_rules, confidence, power, judge)
    if check_data:
        for suite in contract.suites:
            if not suite.live:      # a live suite's data exists only in a workspace: read when evaluated
                read_suite(contract, suite)
    return contract


def contract_sha256(path: Path, suite_files: list[Path], catalog: Path | None, *, gate_rules: int = 1,
                    judge: JudgeSpec | None = None) -> str:
    """One hash over the YAML, every suite file and the catalog: editing any of them makes a new contract. Gate
    rules past 1 are hashed too, so a file written before the rules changed, read under today's default, is a
    new contract: its earlier reports, gated under rules 1, are never mixed with reports gated under 2. A judge's
    identity (its model, rubric, decoding, how mint prompts it) and its calibration file's bytes are hashed too:
    a report made under another judge is another contract's."""
    digest = hashlib.sha256()
    named = [("contract", path)] + [(f"suite {i}", f) for i, f in enumerate(suite_files)] + \
        ([("catalog", catalog)] if catalog is not None else [])
    for role, file in named:
        digest.update(f"{role}\0{hashlib.sha256(file.read_bytes()).hexdigest()}\n".encode())
    if gate_rules != 1:
        digest.update(f"gate_rules\0{gate_rules}\n".encode())
    for line in judge_hash_lines(judge) if judge is not None else []:
        digest.update(line)
    return digest.hexdigest()


def read_suite(contract: Contract, suite: Suite, limit: int | None = None, *, whole: bool = False) -> list[dict]:
    """The suite file's records (up to ``suite_cap``; ``whole``: every one); a bad line is BadInput at its
    line. Live suites are read by mint.contract.live."""
    harness = contract.harness()
    cap = None if whole else suite_cap(contract, suite, limit)
    records = []
    with open(suite.data, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                harness.check_record(record)
            except ValueError as exc:
                raise BadInput(f"invalid JSON: {exc}", file=str(suite.data), line=number) from None
            except RecordProblem as exc:
                raise BadInput(str(exc), file=str(suite.data), line=number) from None
            records.append(record)
            if cap is not None and len(records) >= cap:
                break
    if not records:
        raise BadInput("the suite has no records", file=str(suite.data))
    return records


def suite_cap(contract: Contract, suite: Suite, limit: int | None = None) -> int | None:
    """How many records of ``suite`` are read: the smallest of its ``limit``, the caller's and, where its gates
    say ``detect``, the size the power planner gives (mint.contract.planner); None: all of them."""
    from mint.contract.planner import planned_size

    caps = [x for x in (suite.limit, limit, planned_size(contract, suite.name)) if x is not None]
    return min(caps) if caps else None


@dataclass(frozen=True)
class SuiteCheck:
    name: str
    data: str
    records: int | None             # None: a live suite, counted when it is evaluated
    limit: int | None
    metrics: list[str]
    detectable: float | None        # the smallest pass/fail delta this many examples can show at 95%
    detectable_examples: int | None
    planned: int | None = None      # the records its gates' ``detect`` effects need (the power planner)
    available: int | None = None    # the records its file holds (None: a live suite)


@dataclass(frozen=True)
class ContractCheck:
    """What ``mint contract check`` reports."""

    contract: str
    version: int
    specialist: str
    harness: str
    sha256: str
    suites: list[SuiteCheck]
    gates: list[Gate]
    min_examples: int
    isolation: dict | None = None   # how untrusted programs run (a harness that runs the answers' code)
    ok: bool = True
    gate_rules: int = 2
    confidence: float = 0.95
    plans: list = field(default_factory=list)   # mint.contract.planner.GatePlan per paired gate
    warnings: list[str] = field(default_factory=list)
    judge: dict | None = None       # the model judge, where the contract names one


def check_contract(path: Path) -> ContractCheck:
    """Validate ``path`` and say, per suite, the smallest difference its size can resolve."""

    from mint.contract.paired import minimum_detectable_effect
    from mint.contract.planner import plan_gate, planned_size

    contract = load_contract(path, check_data=False)
    suites, sizes, warnings = [], {}, []
    for suite in contract.suites:
        records = None if suite.live else len(read_suite(contract, suite))
        available = None if suite.live else len(read_suite(contract, suite, whole=True))
        sizes[suite.name] = records
        mde = minimum_detectable_effect(records, contract.confidence) if records else None
        planned = planned_size(contract, suite.name)
        suites.append(SuiteCheck(suite.name, suite.source, records, suite.limit, list(suite.metrics),
                                 mde[0] if mde else None, mde[1] if mde else None, planned, available))
    plans = [plan for gate in contract.gates
             if (plan := plan_gate(gate, sizes.get(gate.suite), rules=contract.gate_rules,
                                   confidence=contract.confidence, target=contract.power.target,
                                   churn=contract.power.churn)) is not None]
    for plan in plans:
        if plan.enough is False:
            warnings.append(f"{plan.metric}: {plan.rule} needs {plan.needed} examples to find {plan.detect:g} "
                            f"{plan.target:.0%} of the time; its suite has {plan.examples}")
    if contract.gate_rules < 2 and any(g.no_regression for g in contract.gates):
        warnings.append("gate_rules 1: no_regression fails only when the whole interval lies beyond -TOL, so a "
                        "significant loss far beyond TOL can pass; gate_rules: 2 fails it")
    if contract.judge is not None:
        warnings += judge_warnings(contract.judge, sorted(contract.produced_metrics()))
    isolation = None
    if contract.harness().runs_untrusted_code:
        from mint.harness.sandbox import describe_isolation

        isolation = describe_isolation()
    return ContractCheck(contract.name, contract.version, contract.specialist, contract.harness_name,
                         contract.sha256, suites, list(contract.gates), contract.min_examples,
                         isolation, gate_rules=contract.gate_rules, confidence=contract.confidence, plans=plans,
                         warnings=warnings, judge=judge_summary(contract.judge) if contract.judge else None)
