"""The Report type: one shape on disk, read back byte for byte; malformed reports name their field."""
import json
import re
from pathlib import Path

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.registry.promotion import promote
from mint.registry.report import FORMAT_VERSION, GateResult, Report, read_report

# a report as `mint eval` wrote it before reports carried a format version (docs/contracts.md, "The report")
MAIN_REPORT = {
    "revision": "coding:v8", "revision_id": "f" * 32, "base": "tiny-random", "base_fingerprint": "sha256:" + "1" * 64,
    "contract": {"name": "coding", "version": 3, "sha256": "a" * 64, "path": "/x/contracts/coding.yaml"},
    "baseline": {"revision_id": "e" * 32, "label": "coding:v7", "report": "b" * 64,
                 "metrics": {"core.pass_at_1": 0.31}},
    "precision": {"used": "fp32", "reason": "the contract says fp32"},
    "metrics": {"core.pass_at_1": 0.34, "latency.p95_ms": 812},
    "gates": [{"metric": "core.pass_at_1", "value": 0.34, "rule": "min 0.20", "passed": True}],
    "verdict": "pass", "examples": {"core": 12}, "examples_sha256": "c" * 64,
    "suites": [{"name": "core", "source": "core.jsonl", "metrics": ["pass_at_1"], "sha256": "d" * 64}],
    "statistics": "paired", "source": "generated", "generation": {"core": {"precision": "fp32"}},
    "predictions": "predictions.jsonl", "created_at": "2026-12-01T10:00:00Z", "duration_s": 41.2,
    "predictions_sha256": "9" * 64,
}


def test_to_json_and_from_json_round_trip_byte_for_byte(tmp_path):
    report = Report.from_dict(MAIN_REPORT, file="r.json")
    text = report.to_json()
    again = Report.from_json(text, file=tmp_path / "r.json")
    assert again == report and again.to_json() == text
    assert json.loads(text) == {"format_version": FORMAT_VERSION, **MAIN_REPORT}


DELTA = {"n": 12, "delta": 0.25, "low": 0.0, "high": 0.5, "method": "mcnemar-exact", "wins": 3, "losses": 0,
         "p_value": 0.25}


def test_a_gates_delta_is_typed_and_written_back_in_the_shape_it_came_in(tmp_path):
    # an older writer's key order and a key this version does not know
    delta = {"method": "paired-bootstrap", "n": 5, "delta": -0.1, "low": -0.3, "high": 0.1, "resamples": 2000}
    gate = {"metric": "core.pass_at_1", "value": 0.3, "rule": "no_regression 0", "passed": True, "delta": delta}
    text = json.dumps({**MAIN_REPORT, "gates": [gate]}, indent=2)
    report = Report.from_json(text, file=tmp_path / "r.json")
    paired = report.gates[0].delta
    assert (paired.n, paired.delta, paired.method, paired.wins) == (5, -0.1, "paired-bootstrap", None)
    assert report.gates[0].interval == [-0.3, 0.1] and report.gates[0].paired_delta == -0.1
    assert json.loads(report.to_json())["gates"][0]["delta"] == delta
    assert list(json.loads(report.to_json())["gates"][0]["delta"]) == list(delta)


def test_a_report_written_by_main_loads_as_version_1_and_keeps_every_key(tmp_path):
    path = tmp_path / "report.json"
    path.write_text(json.dumps({**MAIN_REPORT, "confusion": {"coding": {"coding": 3}}}, indent=2))
    report = read_report(path)
    assert report.format_version == 1 and report.contract.version == 3 and report.baseline.label == "coding:v7"
    assert report.extra == {"confusion": {"coding": {"coding": 3}}}
    assert {k: v for k, v in report.to_dict().items() if k != "format_version"} == \
        {**MAIN_REPORT, "confusion": {"coding": {"coding": 3}}}


@pytest.mark.parametrize("change, field", [
    ({"contract": {"name": "coding", "version": "three", "sha256": "a"}}, "contract.version"),
    ({"verdict": "maybe"}, "verdict"),
    ({"metrics": [1]}, "metrics"),
    ({"baseline": {"revision_id": 7, "metrics": {}}}, "baseline.revision_id"),
    ({"format_version": FORMAT_VERSION + 1}, "format_version"),
])
def test_a_malformed_report_is_bad_input_naming_the_file_and_field(tmp_path, change, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**MAIN_REPORT, **change}))
    with pytest.raises(BadInput, match=f"bad.json: {field}: ") as caught:
        read_report(path)
    assert caught.value.exit_code == 2 and caught.value.field == field


def test_report_show_of_a_malformed_report_exits_2_naming_the_field(ws, tmp_path, capsys):
    path = tmp_path / "bad.json"
    data = {k: v for k, v in MAIN_REPORT.items() if k != "contract"}
    path.write_text(json.dumps(data))
    assert main(["report", "show", str(path)]) == 2
    err = capsys.readouterr().err
    assert "bad.json: contract: expected dict" in err and "Traceback" not in err


def test_promotion_reads_the_report_through_the_report_type(ws, candidate, report_for):
    revision = candidate()
    path = report_for(revision)
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "format_version": FORMAT_VERSION + 1}))
    with pytest.raises(BadInput, match="format_version: format 2 is newer than this mint reads"):
        promote(ws, revision.ref, report_path=path)


# `mint eval --predictions` as main wrote it while a report's gates were plain dicts: a paired gate, a skipped
# latency gate and a per-suite examples gate
REPORT_V1 = Path(__file__).parent / "data" / "report_v1.json"


def test_a_report_written_before_gates_were_typed_loads_its_gates_as_gate_results_and_writes_the_same_bytes():
    report = read_report(REPORT_V1)
    paired, latency, examples = report.gates
    assert all(isinstance(g, GateResult) for g in report.gates)
    assert (paired.metric, paired.value, paired.baseline, paired.passed) == ("core.parse_rate", 1.0, 0.0, True)
    assert paired.paired_delta == 1.0 and paired.interval == [pytest.approx(-0.4152, abs=1e-4), 1.0]
    assert latency.skipped and latency.value is None and latency.interval is None
    assert examples.rule == "min 2 per suite (promotion.min_examples)" and not examples.skipped
    assert report.to_json().encode("utf-8") == REPORT_V1.read_bytes()       # the shape on disk, unchanged


def test_report_show_reads_the_typed_gates(ws, capsys):
    assert main(["report", "show", str(REPORT_V1)]) == 0
    rows = {line.split("│")[1].strip(): [c.strip() for c in line.strip("│ ").split("│")]
            for line in capsys.readouterr().out.splitlines() if line.count("│") > 4}
    assert rows["latency.p95_ms"][-1] == "skipped" and rows["core.parse_rate"][-1] == "pass"
    assert rows["core.parse_rate"][3].startswith("min 0; no_regression 0; delta +1")


@pytest.mark.parametrize("gate, field", [
    ("not a gate", "gates[1]"),
    ({"value": 0.3, "passed": True}, "gates[1].metric"),
    ({"metric": "core.pass_at_1", "passed": "yes"}, "gates[1].passed"),
    ({"metric": "core.pass_at_1", "passed": True, "value": "high"}, "gates[1].value"),
    ({"metric": "core.pass_at_1", "passed": True, "delta": [0.1]}, "gates[1].delta"),
    ({"metric": "core.pass_at_1", "passed": True, "delta": {**DELTA, "low": "wide"}}, "gates[1].delta.low"),
    ({"metric": "core.pass_at_1", "passed": True, "delta": {**DELTA, "n": 2.5}}, "gates[1].delta.n"),
    ({"metric": "core.pass_at_1", "passed": True, "delta": {k: v for k, v in DELTA.items() if k != "method"}},
     "gates[1].delta.method"),
])
def test_a_malformed_gate_is_bad_input_naming_it(tmp_path, gate, field):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**MAIN_REPORT, "gates": MAIN_REPORT["gates"] + [gate]}))
    with pytest.raises(BadInput, match=re.escape(f"bad.json: {field}: ")) as caught:
        read_report(path)
    assert caught.value.field == field
