"""mint report show/diff: reading reports by file or by revision, and comparing two."""
import json

from mint.cli import main
from mint.registry import store
from mint.registry.promotion import read_report, record_report


def _register(ws, path):
    conn = store.open_store(ws)
    try:
        with store.write(conn):
            record_report(conn, read_report(path))
    finally:
        conn.close()


def _report(path, revision, metrics, passed):
    data = json.loads(path.read_text())
    data["metrics"] = metrics
    data["gates"] = [{"metric": "core.pass_at_1", "value": metrics["core.pass_at_1"], "baseline": None,
                      "rule": "min 0.3", "passed": passed}]
    data["verdict"] = "pass" if passed else "fail"
    path.write_text(json.dumps(data))
    return path


def test_show_by_revision_finds_its_registered_report(ws, candidate, report_for, capsys):
    revision = candidate()
    path = _report(report_for(revision), revision, {"core.pass_at_1": 0.42}, True)
    _register(ws, path)
    assert main(["report", "show", "coding:v1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["metrics"]["core.pass_at_1"] == 0.42 and shown["path"] == str(path.absolute())
    assert main(["report", "show", str(path)]) == 0
    text = capsys.readouterr().out
    assert "core.pass_at_1" in text and "0.42" in text and "min 0.3" in text


def test_diff_gives_the_delta_and_both_gate_outcomes(ws, candidate, report_for, capsys):
    a, b = candidate(), candidate()
    pa = _report(report_for(a), a, {"core.pass_at_1": 0.25, "latency.p95_ms": 900}, False)
    pb = _report(report_for(b), b, {"core.pass_at_1": 0.5}, True)
    assert main(["report", "diff", str(pa), str(pb), "--json"]) == 0
    diff = json.loads(capsys.readouterr().out)
    (gated,) = [m for m in diff["metrics"] if m["metric"] == "core.pass_at_1"]
    assert gated["delta"] == 0.25 and gated["gate_a"] is False and gated["gate_b"] is True
    (latency,) = [m for m in diff["metrics"] if m["metric"] == "latency.p95_ms"]
    assert latency["b"] is None and latency["delta"] is None
    assert diff["same_contract"] is True


def test_a_revision_without_a_report_or_a_bad_file_is_exit_2(ws, candidate, tmp_path, capsys):
    candidate()
    assert main(["report", "show", "coding:v1"]) == 2
    assert "has no report" in capsys.readouterr().err
    (tmp_path / "x.json").write_text("[1, 2]")
    assert main(["report", "show", str(tmp_path / "x.json")]) == 2
    assert "not a mint report" in capsys.readouterr().err
