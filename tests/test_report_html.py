"""mint report: the lineage with metrics and verdicts, and one self-contained HTML page."""
import json
import re

from mint.cli import main
from mint.registry import store
from mint.registry.promotion import read_report, record_report


def _with_report(ws, report_for, revision, value, baseline_value, passed, baseline_id=None):
    path = report_for(revision, baseline=baseline_id)
    data = json.loads(path.read_text())
    data["metrics"] = {"core.pass_at_1": value, "latency.p95_ms": 800}
    data["baseline"]["metrics"] = {"core.pass_at_1": baseline_value}
    data["gates"] = [{"metric": "core.pass_at_1", "value": value, "baseline": baseline_value,
                      "rule": "no_regression 0.0", "passed": passed,
                      "delta": {"n": 20, "delta": value - baseline_value, "low": value - baseline_value - 0.1,
                                "high": value - baseline_value + 0.1, "method": "bootstrap"}},
                     {"metric": "latency.p95_ms", "value": 800, "baseline": None, "rule": "max 2000", "passed": True}]
    data["verdict"] = "pass" if passed else "fail"
    path.write_text(json.dumps(data))
    conn = store.open_store(ws)
    with store.write(conn):
        record_report(conn, read_report(path))
    conn.close()


def test_the_html_report_embeds_every_figure_and_the_lineage(ws, candidate, report_for, tmp_path, capsys):
    v1 = candidate()
    v2 = candidate(parent=v1.id)
    _with_report(ws, report_for, v1, 0.30, 0.10, True)
    _with_report(ws, report_for, v2, 0.20, 0.30, False, baseline_id=v1.id)
    run = ws.home / "runs" / "coding-sft-1"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    (run / "result.json").write_text(json.dumps({"registered": True, "revision_id": v1.id}))
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": 2.0 / s, "time": s}) + "\n"
                                               for s in (1, 2, 3)))
    logs = ws.home / "logs"
    logs.mkdir()
    (logs / "served.jsonl").write_text("".join(json.dumps({"ts": 1764400000 + 3600 * i, "served_by":
                                                           "coding:v1" if i % 3 else "genui:v1"}) + "\n"
                                               for i in range(30)) + "not json\n")
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (g1, g2) = data["specialists"]["coding"]["generations"]
    assert (g1["ref"], g1["verdict"], g1["primary"]) == ("coding:v1", "pass", "core.pass_at_1")
    assert g2["parent"] == "coding:v1" and g2["verdict"] == "fail" and g1["loss"] == [[1, 2.0], [2, 1.0],
                                                                                      [3, 2.0 / 3]]
    assert data["routing"]["turns"] == 30 and set(data["routing"]["shares"]) == {"coding", "genui"}
    page = out.read_text()
    figures = re.findall(r"src='data:image/png;base64,[A-Za-z0-9+/=]{200,}'", page)
    assert len(figures) == 4          # metric per generation, loss, gates, routing share
    assert "coding:v2" in page and "-0.1 [-0.2, 0]" in page                    # Δ with its interval
    assert not re.search(r"(src|href)=['\"]https?:", page)                    # opens with no network


def test_no_registry_yet_is_an_empty_report(ws, capsys):
    ws.home.mkdir(parents=True)
    assert main(["report"]) == 0
    assert "nothing to report yet" in capsys.readouterr().out
