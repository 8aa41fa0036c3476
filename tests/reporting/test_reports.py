"""mint report show/diff: reading reports by file or by revision, and comparing two."""
import json

import pytest

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


# --- per generation: the held-out metric, the experience, the placebo twin, the verdict ------------------

def gated_report(ws, report_for, revision, value, baseline_value, passed, baseline_id=None, retention=None):
    """A registered report of ``revision`` whose gate pairs it with its baseline: Δ ± 0.1 as its 95% interval;
    with ``retention`` (value, baseline value), a retention suite's gate too."""
    path = report_for(revision, baseline=baseline_id)
    data = json.loads(path.read_text())
    data["metrics"] = {"core.pass_at_1": value, "latency.p95_ms": 800}
    data["baseline"]["metrics"] = {"core.pass_at_1": baseline_value}
    data["gates"] = [{"metric": "core.pass_at_1", "value": value, "baseline": baseline_value,
                      "rule": "no_regression 0.0", "passed": passed,
                      "delta": {"n": 20, "delta": value - baseline_value, "low": value - baseline_value - 0.1,
                                "high": value - baseline_value + 0.1, "method": "bootstrap"}},
                     {"metric": "latency.p95_ms", "value": 800, "baseline": None, "rule": "max 2000", "passed": True}]
    if retention is not None:
        kept, before = retention
        data["metrics"]["retention.pass_at_1"] = kept
        data["baseline"]["metrics"]["retention.pass_at_1"] = before
        data["gates"].append({"metric": "retention.pass_at_1", "value": kept, "baseline": before,
                              "rule": "no_regression 0.05", "passed": True,
                              "delta": {"n": 30, "delta": kept - before, "low": kept - before - 0.05,
                                        "high": kept - before + 0.05, "method": "mcnemar-exact"}})
    data["verdict"] = "pass" if passed else "fail"
    path.write_text(json.dumps(data))
    _register(ws, path)
    return path


# what the experience step records of two families of requests (mint.loop.results.FamilyStats)
FAMILY_WITHIN_REACH = {"family": "Card", "requests": 6, "samples": 48, "k": 8, "raw_pass_at_1": 0.0,
                       "raw_pass_at_k": 0.0, "repaired_pass_at_1": 0.125, "repaired_pass_at_k": 0.5, "always": 0,
                       "sometimes": 3, "never": 3, "signal": 0.5625, "accepted": 5}
FAMILY_BEYOND_REACH = {"family": "Table", "requests": 2, "samples": 16, "k": 8, "raw_pass_at_1": 0.0,
                       "raw_pass_at_k": 0.0, "repaired_pass_at_1": 0.0, "repaired_pass_at_k": 0.0, "always": 0,
                       "sometimes": 0, "never": 2, "signal": 0.0, "accepted": 0}


def two_generations_and_a_twin(ws, candidate, report_for):
    """coding:v1 (from the base), coding:v2 learned from experience and rejected, coding:v3 its placebo twin;
    the loop's state records both generations as the runner writes them."""
    import dataclasses

    from mint.loop.runner import GenerationRow
    from mint.registry.promotion import reject

    v1 = candidate()
    v2, twin = candidate(parent=v1.id), candidate(parent=v1.id)
    gated_report(ws, report_for, v1, 0.30, 0.10, True)
    gated_report(ws, report_for, v2, 0.50, 0.30, True, baseline_id=v1.id)
    twin_report = gated_report(ws, report_for, twin, 0.35, 0.30, True, baseline_id=v1.id)
    reject(ws, twin.ref, why="placebo twin")
    reject(ws, v2.ref, why="forgetting: retention fell")
    experience = {"pool": {"pass@1": 0.25, "pass@4": 0.5, "k": 4, "prompts_between": 3}, "prompts": 8,
                  "accepted": 5, "dpo_pairs": 2, "kept_per_source": {"served": 6, "jsonl:requests.jsonl": 2},
                  "accepted_per_source": {"served": 4, "jsonl:requests.jsonl": 1}, "plan": None,
                  "families": [FAMILY_WITHIN_REACH, FAMILY_BEYOND_REACH]}
    comparison = {"revision": twin.ref, "revision_id": twin.id, "report": str(twin_report), "metric": "core.pass_at_1",
                  "vs_previous": {"delta": 0.2, "interval": [0.1, 0.3]},
                  "vs_twin": {"delta": 0.15, "interval": [-0.05, 0.35], "n": 20, "method": "mcnemar"},
                  "verdict": "no experience effect"}
    rows = [GenerationRow(1, "coding", v1.ref, "pass", v1.ref, "base", {}),
            GenerationRow(2, "coding", v2.ref, "pass", v1.ref, v1.id, {}, "forgetting: retention fell", experience,
                          comparison)]
    state = ws.home / "loops" / "nightly" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"steps": {}, "generations": [dataclasses.asdict(r) for r in rows]}))
    return v1, v2, twin


def test_each_generation_shows_its_metric_experience_twin_and_verdict(ws, candidate, report_for):
    from mint.loop.progress import generation_progress

    two_generations_and_a_twin(ws, candidate, report_for)
    base, first, second = generation_progress(ws)["coding"]          # the twin is no generation of its own
    assert (base.generation, base.revision, base.value) == (0, "base", 0.10)
    assert (first.generation, first.baseline, first.value, first.experience, first.twin) == (1, "base", 0.30,
                                                                                             None, None)
    assert (second.generation, second.baseline, second.baseline_value, second.value) == (2, "coding:v1", 0.30, 0.50)
    assert second.delta == pytest.approx(0.2) and second.interval == pytest.approx([0.1, 0.3])
    assert (second.verdict, second.decision, second.reason) == ("pass", "rejected", "forgetting: retention fell")
    assert (second.recipe, second.iteration) == ("nightly", 2)
    e = second.experience
    assert (e.pass_at_1, e.pass_at_k, e.k, e.prompts_between, e.accepted) == (0.25, 0.5, 4, 3, 5)
    assert e.accepted_per_source == {"served": 4, "jsonl:requests.jsonl": 1}
    t = second.twin
    assert (t.revision, t.value, t.delta, t.interval, t.reading) == ("coding:v3", 0.35, 0.15, [-0.05, 0.35],
                                                                     "no experience effect")


def test_each_generation_shows_what_its_experience_found_learnable_per_family(ws, candidate, report_for, capsys):
    from mint.loop.results import FamilyStats
    from mint.loop.progress import generation_progress

    two_generations_and_a_twin(ws, candidate, report_for)
    _base, first, second = generation_progress(ws)["coding"]
    assert second.experience.families == (FamilyStats.from_dict(FAMILY_WITHIN_REACH),
                                           FamilyStats.from_dict(FAMILY_BEYOND_REACH))
    assert [f.reading for f in second.experience.families] == ["within reach", "beyond reach"]
    assert main(["report"]) == 0
    shown = capsys.readouterr().out
    assert "coding: what each generation's experience found learnable, per family of requests" in " ".join(shown.split())
    (card,) = [line for line in shown.splitlines() if "Card" in line]
    for cell in ("coding:v2", "within reach", "0 → 0.125", "0 → 0.5 (k=8)", "0 / 3 / 3", "0.562"):
        assert cell in card, cell
    assert main(["report", "--json"]) == 0
    (recorded,) = [g for g in json.loads(capsys.readouterr().out)["specialists"]["coding"]["progress"]
                   if g["revision"] == "coding:v2"]
    assert recorded["experience"]["families"] == [FAMILY_WITHIN_REACH, FAMILY_BEYOND_REACH]


def test_each_generation_shows_its_retention_suite_beside_what_users_ask_now(ws, candidate, report_for):
    from mint.loop.progress import generation_progress

    v1 = candidate()
    v2 = candidate(parent=v1.id)
    gated_report(ws, report_for, v1, 0.30, 0.10, True, retention=(0.9, 0.0))
    gated_report(ws, report_for, v2, 0.50, 0.30, True, baseline_id=v1.id, retention=(0.85, 0.9))
    base, first, second = generation_progress(ws)["coding"]
    assert [(f.metric, f.value) for f in base.suites] == [("retention.pass_at_1", 0.0)]
    (kept,) = second.suites
    assert (kept.metric, kept.value, kept.baseline_value) == ("retention.pass_at_1", 0.85, 0.9)
    assert kept.delta == pytest.approx(-0.05) and kept.interval == pytest.approx([-0.1, 0.0])


def test_report_json_carries_the_generations(ws, candidate, report_for, capsys):
    two_generations_and_a_twin(ws, candidate, report_for)
    assert main(["report", "--json"]) == 0
    progress = json.loads(capsys.readouterr().out)["specialists"]["coding"]["progress"]
    assert [g["revision"] for g in progress] == ["base", "coding:v1", "coding:v2"]
    assert progress[2]["twin"]["value"] == 0.35 and progress[2]["experience"]["accepted"] == 5


def test_generations_without_a_loop_come_from_the_registry_alone(ws, candidate, report_for):
    from mint.loop.progress import generation_progress

    v1 = candidate()
    gated_report(ws, report_for, v1, 0.30, 0.10, False)
    (base, first) = generation_progress(ws)["coding"]
    assert base.value == 0.10 and (first.value, first.verdict, first.decision) == (0.30, "fail", "not decided")
    assert first.experience is None and first.twin is None and first.recipe is None


@pytest.mark.parametrize("text, where", [("[1, 2]", "expected a JSON object"), ("{not json", "unreadable"),
                                         ('{"generations": {"a": 1}}', "generations: expected a list"),
                                         ('{"generations": [{"specialist": 3}]}', "generations[0].specialist"),
                                         ('{"generations": [{"specialist": "coding", "twin": {"revision_id": [1]}}]}',
                                          "generations[0].twin.revision_id: expected str or null, not list"),
                                         ('{"generations": [{"specialist": "coding", "twin": {"steps_control": '
                                          '{"revision_id": 7}}}]}',
                                          "generations[0].twin.steps_control.revision_id: expected str or null"),
                                         ('{"generations": [{"specialist": "coding", "twin": {"steps_control": 5}}]}',
                                          "generations[0].twin.steps_control: expected dict or null"),
                                         ('{"generations": [{"specialist": "coding", "experience": {"families": '
                                          '[{"family": "Card", "requests": "6"}]}}]}',
                                          "generations[0].experience.families[0].requests: expected int, not str"),
                                         ('{"generations": [{"specialist": "coding", "experience": {"families": '
                                          '[{"requests": 6}]}}]}',
                                          "generations[0].experience.families[0]: expected an object naming its "
                                          "family")])
def test_a_malformed_loop_state_is_exit_2_naming_the_file(ws, candidate, report_for, tmp_path, capsys, text, where):
    v1 = candidate()
    gated_report(ws, report_for, v1, 0.30, 0.10, True)
    state = ws.home / "loops" / "nightly" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(text)
    page = tmp_path / "report.html"
    assert main(["report", "--html", str(page)]) == 2
    message = capsys.readouterr().err
    assert str(state) in message and where in message and "Traceback" not in message
    assert not page.exists()                                            # nothing half-written


def test_show_says_its_baseline_as_eval_does_and_latency_in_plain_milliseconds(ws, candidate, report_for, capsys):
    revision = candidate()
    path = report_for(revision)
    data = json.loads(path.read_text())
    data["baseline"] = {"revision_id": None, "label": "base", "report": "r" * 64,
                        "metrics": {"core.pass_at_1": 0.0, "latency.p95_ms": 41234.5}}
    data["metrics"] = {"core.pass_at_1": 0.25, "latency.p95_ms": 38460.2}
    data["gates"] = [{"metric": "latency.p95_ms", "value": 38460.2, "baseline": 41234.5, "rule": "max 120000",
                      "passed": True}]
    path.write_text(json.dumps(data))
    _register(ws, path)
    assert main(["report", "show", "coding:v1"]) == 0
    shown = capsys.readouterr().out
    assert "baseline: base (generation 0: the bare base under this contract)" in " ".join(shown.split())
    (row,) = [line for line in shown.splitlines() if "latency.p95_ms" in line]
    assert "38,460" in row and "41,234" in row and "e+" not in shown


def test_a_force_promoted_failing_revision_is_marked_forced(ws, candidate, report_for, tmp_path, capsys):
    from mint.registry.promotion import promote
    from mint.reporting.html import render_html
    from mint.loop.progress import generation_progress
    from mint.reporting.reports import lineage_report

    revision = candidate()
    _register(ws, _report(report_for(revision), revision, {"core.pass_at_1": 0.1}, False))
    promote(ws, revision.ref, force=True, why="hotfix for the launch")
    assert main(["report"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "champion (forced)" in shown
    assert "coding:v1 was promoted with --force past its report's verdict (fail): hotfix for the launch" in shown
    (generation,) = [g for g in generation_progress(ws)["coding"] if g.revision == "coding:v1"]
    assert generation.forced == "hotfix for the launch" and generation.verdict == "fail"
    page = render_html(lineage_report(ws))
    progress = page.split("<table class='progress'>")[1].split("</table>")[0]
    lineage = page.replace(progress, "")
    assert "fail, promoted by force: hotfix for the launch" in progress         # the generations table
    assert "fail, promoted by force: hotfix for the launch" in lineage          # and the lineage table


def test_a_promoted_generation_shows_the_report_it_was_promoted_with(ws, candidate, report_for, capsys):
    """A champion measured again as its successor's baseline, under a contract that followed drifted traffic, scores
    0 there and fails; it was still promoted on a passing report, and that is the generation it shows."""
    from mint.registry.promotion import promote
    from mint.loop.progress import generation_progress
    from mint.reporting.reports import lineage_report

    v1 = candidate()
    promoted_with = gated_report(ws, report_for, v1, 0.30, 0.10, True)
    promote(ws, v1.ref, report_path=promoted_with)
    gated_report(ws, report_for, v1, 0.0, 0.0, False)                  # newer: v1 as a baseline, measured again
    base, first = generation_progress(ws)["coding"]
    assert (first.value, first.baseline, first.verdict, first.decision) == (0.30, "base", "pass", "promoted")
    (shown,) = lineage_report(ws)["specialists"]["coding"]["generations"]
    assert shown["verdict"] == "pass" and shown["report"] == str(promoted_with)
