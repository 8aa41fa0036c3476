"""mint report: the lineage with metrics and verdicts, and one self-contained HTML page."""
import json
import re

from mint.cli import main
from tests.reporting.test_reports import gated_report


def test_the_html_report_embeds_every_figure_and_the_lineage(ws, candidate, report_for, tmp_path, capsys):
    v1 = candidate()
    v2 = candidate(parent=v1.id)
    gated_report(ws, report_for, v1, 0.30, 0.10, True)
    gated_report(ws, report_for, v2, 0.20, 0.30, False, baseline_id=v1.id)
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


def test_the_html_report_shows_each_generation_with_its_experience_and_twin(ws, candidate, report_for, tmp_path):
    from tests.reporting.test_reports import two_generations_and_a_twin

    two_generations_and_a_twin(ws, candidate, report_for)
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out)]) == 0
    page = out.read_text()
    (table,) = re.findall(r"<table class='progress'>.*?</table>", page, re.S)
    second = next(row for row in table.split("<tr>") if "<td>coding:v2</td>" in row)
    for shown in ("nightly #2", "0.5", "coding:v1 0.3", "0.2 [0.1, 0.3]", "<td>0.25 / 0.5 (k=4)</td>",
                  "5 (4 served, 1 jsonl:requests.jsonl)", "coding:v3 0.35", "0.15 [-0.05, 0.35]",
                  "no experience effect", "pass, rejected", "forgetting: retention fell"):
        assert shown in second, shown
    assert "<td>coding:v3</td>" not in table                      # the twin sits beside its generation
    assert re.search(r"<img alt='coding: primary metric per generation' "
                     r"src='data:image/png;base64,[A-Za-z0-9+/=]{200,}'", page)


def test_the_html_report_shows_what_each_generations_experience_found_learnable_per_family(ws, candidate,
                                                                                             report_for, tmp_path):
    from tests.reporting.test_reports import two_generations_and_a_twin

    two_generations_and_a_twin(ws, candidate, report_for)
    out = tmp_path / "report.html"
    assert main(["report", "--html", str(out)]) == 0
    (table,) = re.findall(r"<table class='families'>.*?</table>", out.read_text(), re.S)
    card, beyond = (next(row for row in table.split("<tr>") if f"<td>{name}</td>" in row) for name in ("Card", "Table"))
    for shown in ("<td>2</td><td>coding:v2</td><td>Card</td>", "within reach</td>", "<td>6</td><td>48</td>",
                  "<td>0 → 0.125</td>", "<td>0 → 0.5 (k=8)</td>", "<td>0 / 3 / 3</td>", "<td>0.562</td><td>5</td>"):
        assert shown in card, shown
    assert "beyond reach</td>" in beyond and "<td>0 / 0 / 2</td>" in beyond


def test_the_twin_is_drawn_as_its_own_marker(ws, candidate, report_for):
    import dataclasses

    from mint.reporting.html import progress_figure
    from mint.loop.progress import generation_progress
    from tests.reporting.test_reports import two_generations_and_a_twin

    two_generations_and_a_twin(ws, candidate, report_for)
    rows = generation_progress(ws)["coding"]
    without = [dataclasses.replace(r, twin=None) for r in rows]
    assert progress_figure("coding", rows) != progress_figure("coding", without)
    # the steps control (the same steps on the logs alone): its own marker, and its column in the table
    from mint.reporting.html import progress_table

    control = [dataclasses.replace(r, twin=dataclasses.replace(
        r.twin, steps_control=dataclasses.replace(r.twin, revision="coding:v4", value=0.45, delta=0.05,
                                                  interval=[-0.1, 0.2], reading=None))) if r.twin else r
               for r in rows]
    assert progress_figure("coding", control) != progress_figure("coding", rows)
    assert "<td>coding:v4 0.45: +0.05 [-0.1, 0.2]</td>" in progress_table(control)
    assert "coding:v4" not in progress_table(rows)


def test_a_project_with_no_loop_runs_still_renders(ws, candidate, report_for, tmp_path):
    from tests.reporting.test_reports import gated_report

    out = tmp_path / "report.html"
    ws.home.mkdir(parents=True)
    assert main(["report", "--html", str(out)]) == 0                # nothing registered yet
    assert "<table class='progress'>" not in out.read_text()
    gated_report(ws, report_for, candidate(), 0.3, 0.1, True)
    assert main(["report", "--html", str(out)]) == 0                # registered, but no loop ran
    page = out.read_text()
    assert "<table class='progress'>" in page and "<td>coding:v1</td>" in page
    assert "<table class='families'>" not in page                  # no experience: nothing learnable to show
    assert "<img alt='coding: primary metric per generation'" in page


def test_the_retention_suite_shows_beside_the_core_with_its_interval_and_its_own_line(ws, candidate, report_for):
    from mint.reporting.html import progress_figure, progress_table
    from mint.loop.progress import generation_progress

    v1 = candidate()
    v2 = candidate(parent=v1.id)
    gated_report(ws, report_for, v1, 0.30, 0.10, True, retention=(0.9, 0.0))
    gated_report(ws, report_for, v2, 0.50, 0.30, True, baseline_id=v1.id, retention=(0.85, 0.9))
    rows = generation_progress(ws)["coding"]
    table = progress_table(rows)
    assert "<td>retention.pass_at_1 0.85 (-0.05 [-0.1, 0])</td>" in table
    assert "<td>retention.pass_at_1 0</td>" in table                  # the bare base: no delta of its own
    import dataclasses

    assert progress_figure("coding", rows) != progress_figure("coding", [dataclasses.replace(r, suites=())
                                                                          for r in rows])
