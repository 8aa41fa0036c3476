"""The Report type: one shape on disk, read back byte for byte; malformed reports name their field."""
import json

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.registry.promotion import promote
from mint.registry.report import FORMAT_VERSION, Report, read_report

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
