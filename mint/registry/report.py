"""The evaluation report (docs/contracts.md, "The report") as one typed value.

``mint eval`` builds a ``Report`` once, writes ``to_json()`` and registers the sha256 of exactly those bytes;
promotion, ``mint report show/diff``, the loop and the HTML report read it back with ``from_json``. The type
lives in the registry, the floor every stage already stands on, because promotion reads it and the registry
imports nothing from the stage packages: this module imports only ``mint.errors``.

Format versions: 1 is the report every mint wrote before the field existed (a report without
``format_version`` is version 1); the shape is unchanged, so version 1 is also what is written now.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import BadInput

FORMAT_VERSION = 1
# "measured": a revision measured only as another's baseline (a champion under a newer contract): its scores
# and answers, no gates and no baseline of its own, so it is never promoted with it
VERDICTS = ("pass", "fail", "measured")
SOURCES = ("generated", "predictions")


@dataclass(frozen=True)
class ContractIdentity:
    """What the registry knows of a contract: its name, version and content hash (and the file it came from).
    The contract package computes it (mint.contract.identity); the registry only stores and compares it."""

    name: str
    version: int
    sha256: str
    path: str | None = None

    def same_contract(self, other: ContractIdentity) -> bool:
        return (self.name, self.version, self.sha256) == (other.name, other.version, other.sha256)

    def to_dict(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256,
                **({"path": self.path} if self.path is not None else {})}


@dataclass(frozen=True)
class ReportBaseline:
    """What the gates compared with: the champion when measured (None: the bare base or no baseline)."""

    revision_id: str | None
    metrics: dict
    label: str | None = None
    report: str | None = None       # the registered id of the baseline's report

    def to_dict(self) -> dict:
        out: dict = {"revision_id": self.revision_id}
        if self.label is not None:
            out["label"] = self.label
        if self.report is not None or self.label is not None:
            out["report"] = self.report
        out["metrics"] = self.metrics
        return out


def metric_suite(metric: str) -> str:
    """The suite a metric is measured on: what precedes its first dot (``core.parse_rate``: ``core``)."""
    return metric.partition(".")[0]


_DELTA_ORDER = ("n", "delta", "low", "high", "method", "wins", "losses", "p_value")


@dataclass(frozen=True)
class PairedDelta:
    """mean(candidate - baseline) over ``n`` paired examples, with its 95% interval [low, high]
    (mint.contract.paired computes it; a gate records it)."""

    n: int
    delta: float
    low: float
    high: float
    method: str                 # "mcnemar-exact" or "paired-bootstrap"
    wins: int | None = None     # pass/fail only: examples the candidate passes and the baseline fails
    losses: int | None = None   # ... and the reverse
    p_value: float | None = None  # pass/fail only: exact two-sided McNemar p-value for "no difference"
    extra: dict = field(default_factory=dict, compare=False, repr=False)
    # the keys a delta read from a file had, in their order, so it is written back in the shape it came in
    keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict:
        keys = self.keys if self.keys is not None else _DELTA_ORDER
        return {**{k: getattr(self, k) for k in keys}, **self.extra}

    @classmethod
    def from_dict(cls, data, *, file: str, field_name: str) -> PairedDelta:
        """A gate's delta as a report holds it; a malformed one is a BadInput naming its field."""
        if not isinstance(data, dict):
            raise BadInput("expected a paired delta object", file=file, field=field_name)

        def number(key: str, *, integer: bool = False, optional: bool = False):
            value = data.get(key)
            if value is None and optional:
                return None
            if not _is_number(value) or integer and not isinstance(value, int):
                raise BadInput(f"expected {'an integer' if integer else 'a number'}" + (" or null" if optional else ""),
                               file=file, field=f"{field_name}.{key}")
            return value

        method = data.get("method")
        if not isinstance(method, str):
            raise BadInput("expected a string", file=file, field=f"{field_name}.method")
        return cls(n=number("n", integer=True), delta=number("delta"), low=number("low"), high=number("high"),
                   method=method, wins=number("wins", integer=True, optional=True),
                   losses=number("losses", integer=True, optional=True), p_value=number("p_value", optional=True),
                   extra={k: v for k, v in data.items() if k not in _DELTA_ORDER},
                   keys=tuple(k for k in data if k in _DELTA_ORDER))


# a gate's keys, in the order `mint eval` writes them; `skipped` only when true
_GATE_ORDER = ("metric", "value", "baseline", "rule", "passed", "delta", "skipped")


@dataclass(frozen=True)
class GateResult:
    """One gate's verdict in a report: the candidate's value, the baseline's, the rule as checked and whether it
    held. ``delta`` is the paired candidate-minus-baseline delta as the contract package computed it, or None
    where the gate compared with no baseline."""

    metric: str
    value: float | None
    baseline: float | None
    rule: str
    passed: bool
    delta: PairedDelta | None = None
    skipped: bool = False       # not checked, and why is its rule (latency where no example carried any)
    extra: dict = field(default_factory=dict)
    # the keys a gate read from a file had, in their order, so it is written back in the shape it came in
    keys: tuple[str, ...] | None = field(default=None, compare=False, repr=False)

    @property
    def suite(self) -> str:
        return metric_suite(self.metric)

    @property
    def interval(self) -> list[float] | None:
        """The paired delta's 95% interval [low, high] (as JSON writes it), where the gate recorded one."""
        return [self.delta.low, self.delta.high] if self.delta is not None else None

    @property
    def paired_delta(self) -> float | None:
        """The paired delta (candidate - baseline) the gate recorded, if any."""
        return self.delta.delta if self.delta is not None else None

    def to_dict(self) -> dict:
        keys = self.keys if self.keys is not None else \
            [k for k in _GATE_ORDER if k != "skipped" or self.skipped]
        out = {k: getattr(self, k) for k in keys}
        if isinstance(out.get("delta"), PairedDelta):
            out["delta"] = out["delta"].to_dict()
        return {**out, **self.extra}

    @classmethod
    def from_dict(cls, data, *, file: str, field_name: str) -> GateResult:
        """A gate as a report holds it; a malformed one is a BadInput naming ``field_name`` (``gates[2].rule``)."""
        if not isinstance(data, dict):
            raise BadInput("expected a gate object", file=file, field=field_name)

        def typed(key: str, kinds: tuple, what: str, *, optional: bool = True):
            value = data.get(key)
            if value is None and optional:
                return None
            if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
                raise BadInput(f"expected {what}" + (" or null" if optional else ""), file=file,
                               field=f"{field_name}.{key}")
            return value

        return cls(metric=typed("metric", (str,), "a string", optional=False),
                   value=typed("value", (int, float), "a number"),
                   baseline=typed("baseline", (int, float), "a number"),
                   rule=typed("rule", (str,), "a string") or "",
                   passed=typed("passed", (bool,), "true or false", optional=False),
                   delta=None if data.get("delta") is None else
                   PairedDelta.from_dict(data["delta"], file=file, field_name=f"{field_name}.delta"),
                   skipped=bool(typed("skipped", (bool,), "true or false")),
                   extra={k: v for k, v in data.items() if k not in _GATE_ORDER},
                   keys=tuple(k for k in data if k in _GATE_ORDER))


def primary_metric(gates, metrics: dict) -> str | None:
    """What "better" means for the specialist, the one rule every view reads: the contract's first gated metric
    that was measured and is not latency (latency says nothing about what was learned); with no such gate, the
    first measured metric that is not latency."""
    for gate in gates:
        if not gate.metric.startswith("latency.") and gate.metric in metrics:
            return gate.metric
    return next((m for m in metrics if not m.startswith("latency.")), None)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def number_or_none(value) -> float | None:
    """``value`` as a float where it is a number (not a bool), else None: a figure read from a report."""
    return float(value) if _is_number(value) else None


# the keys of a report, in the order `mint eval` writes them; `extra` keeps any other key (the router's
# confusion matrix, for one) in the order it came
_ORDER = ("format_version", "revision", "revision_id", "base", "base_fingerprint", "contract", "baseline",
          "precision", "metrics", "gates", "verdict", "examples", "examples_sha256", "suites", "live_suites",
          "statistics", "source", "generation", "predictions", "created_at", "duration_s", "predictions_sha256")
_OPTIONAL = {"base", "base_fingerprint", "precision", "examples", "examples_sha256", "suites", "live_suites",
             "statistics", "generation", "predictions", "duration_s", "predictions_sha256"}


@dataclass(frozen=True)
class Report:
    revision: str | None            # the label: a revision ref, "base", or where predictions came from
    revision_id: str | None         # None for a report of the bare base or of outputs made elsewhere
    contract: ContractIdentity
    baseline: ReportBaseline
    metrics: dict
    gates: tuple[GateResult, ...]
    verdict: str
    created_at: str
    source: str = "generated"       # "generated" by mint eval, or "predictions" made elsewhere
    base: str | None = None
    base_fingerprint: str | None = None
    precision: dict | None = None
    examples: dict | None = None
    examples_sha256: str | None = None   # which examples were measured (mint.contract.evaluate.examples_digest)
    suites: list | None = None
    live_suites: list | dict | None = None
    statistics: str | None = None
    generation: dict | None = None
    predictions: str | None = None
    duration_s: float | None = None
    predictions_sha256: str | None = None
    extra: dict = field(default_factory=dict)
    format_version: int = FORMAT_VERSION
    # where the report was read from or written to, and the sha256 of those bytes: its registered id
    path: str | None = field(default=None, compare=False)
    id: str | None = field(default=None, compare=False)

    @property
    def label(self) -> str:
        if isinstance(self.revision, str):
            return self.revision
        return self.revision_id[:12] if self.revision_id else "report"

    @property
    def owner(self) -> str:
        """What the registry files the report under: the revision id, or the base's fingerprint."""
        return self.revision_id or base_report_owner(self.base_fingerprint or "unknown")

    @property
    def primary_metric(self) -> str | None:
        return primary_metric(self.gates, self.metrics)

    def gates_by_metric(self) -> dict[str, GateResult]:
        return {g.metric: g for g in self.gates}

    def to_dict(self) -> dict:
        out: dict = {}
        for key in _ORDER:
            value = getattr(self, key)
            if key in ("contract", "baseline"):
                value = value.to_dict()
            elif key == "gates":
                value = [gate.to_dict() for gate in value]
            if key in _OPTIONAL and value is None:     # absent and null read the same
                continue
            out[key] = value
        return {**out, **self.extra}

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    def encode(self) -> bytes:
        return self.to_json().encode("utf-8")

    def stored(self, path: Path, data: bytes) -> Report:
        """This report as written to ``path`` as ``data`` (its ``encode()``): the id is those bytes' sha256."""
        return dataclasses.replace(self, path=str(Path(path).absolute()), id=hashlib.sha256(data).hexdigest())

    @classmethod
    def from_json(cls, text: str | bytes, *, file: str | Path) -> Report:
        """Parse and check a report; every problem is a BadInput naming ``file`` and the field (exit 2)."""
        raw = text.encode("utf-8") if isinstance(text, str) else text
        try:
            data = json.loads(raw.decode("utf-8"))
        except (ValueError, RecursionError) as exc:
            raise BadInput(f"not a JSON report: {exc}", file=str(file)) from None
        return cls.from_dict(data, file=file).stored(Path(file), raw)

    @classmethod
    def from_dict(cls, data, *, file: str | Path) -> Report:
        where = str(file)

        def fail(message: str, name: str):
            raise BadInput(message, file=where, field=name)

        def typed(value, kinds: tuple, name: str, *, optional: bool = True, what: str = ""):
            if value is None and optional:
                return None
            if isinstance(value, bool) and bool not in kinds or not isinstance(value, kinds):
                fail(f"expected {what or ' or '.join(k.__name__ for k in kinds)}"
                     + (" or null" if optional else ""), name)
            return value

        if not isinstance(data, dict):
            raise BadInput("not a mint report: expected a JSON object", file=where)
        version = data.get("format_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            fail("expected a positive integer", "format_version")
        if version > FORMAT_VERSION:
            fail(f"format {version} is newer than this mint reads ({FORMAT_VERSION}); upgrade mint",
                 "format_version")
        contract = typed(data.get("contract"), (dict,), "contract", optional=False)
        identity = ContractIdentity(
            name=typed(contract.get("name"), (str,), "contract.name", optional=False),
            version=typed(contract.get("version"), (int,), "contract.version", optional=False),
            sha256=typed(contract.get("sha256"), (str,), "contract.sha256", optional=False),
            path=typed(contract.get("path"), (str,), "contract.path"))
        baseline_data = typed(data.get("baseline"), (dict,), "baseline", what="an object") or {}
        baseline = ReportBaseline(
            revision_id=typed(baseline_data.get("revision_id"), (str,), "baseline.revision_id"),
            metrics=typed(baseline_data.get("metrics"), (dict,), "baseline.metrics", what="an object") or {},
            label=typed(baseline_data.get("label"), (str,), "baseline.label"),
            report=typed(baseline_data.get("report"), (str,), "baseline.report"))
        verdict = typed(data.get("verdict"), (str,), "verdict", optional=False)
        if verdict not in VERDICTS:
            fail(f"{verdict!r} is not pass, fail or measured", "verdict")
        source = data.get("source", "generated")
        if source not in SOURCES:
            fail(f"{source!r} is not generated or predictions", "source")
        number = (int, float)
        known = set(_ORDER)
        return cls(
            format_version=version,
            revision=typed(data.get("revision"), (str,), "revision"),
            revision_id=typed(data.get("revision_id"), (str,), "revision_id"),
            contract=identity, baseline=baseline,
            metrics=typed(data.get("metrics"), (dict,), "metrics", what="an object") or {},
            gates=tuple(GateResult.from_dict(gate, file=where, field_name=f"gates[{i}]")
                        for i, gate in enumerate(typed(data.get("gates", []), (list,), "gates", what="a list")
                                                 or [])),
            verdict=verdict,
            created_at=typed(data.get("created_at"), (str,), "created_at") or "",
            source=source,
            base=typed(data.get("base"), (str,), "base"),
            base_fingerprint=typed(data.get("base_fingerprint"), (str,), "base_fingerprint"),
            precision=typed(data.get("precision"), (dict,), "precision", what="an object"),
            examples=typed(data.get("examples"), (dict, int), "examples"),
            examples_sha256=typed(data.get("examples_sha256"), (str,), "examples_sha256"),
            suites=typed(data.get("suites"), (list,), "suites", what="a list"),
            live_suites=typed(data.get("live_suites"), (list, dict), "live_suites"),
            statistics=typed(data.get("statistics"), (str,), "statistics"),
            generation=typed(data.get("generation"), (dict,), "generation", what="an object"),
            predictions=typed(data.get("predictions"), (str,), "predictions"),
            duration_s=typed(data.get("duration_s"), number, "duration_s", what="a number"),
            predictions_sha256=typed(data.get("predictions_sha256"), (str,), "predictions_sha256"),
            extra={k: v for k, v in data.items() if k not in known})


def base_report_owner(fingerprint: str) -> str:
    return f"base:{fingerprint}"


def read_report(path: Path) -> Report:
    """The report in ``path``; a missing, unreadable or malformed file is a BadInput naming it and the field."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except (FileNotFoundError, NotADirectoryError):
        raise BadInput("no such report", file=str(path)) from None
    except IsADirectoryError:
        raise BadInput("is a folder; give its report.json", file=str(path)) from None
    except OSError as exc:
        raise BadInput(f"not a readable report: {exc}", file=str(path)) from None
    return Report.from_json(raw, file=path)
