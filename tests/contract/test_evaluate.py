"""mint eval end to end on the tiny base: reports, predictions, gates, the champion baseline."""
import json
from pathlib import Path

import pytest

from mint.cli import main
from mint.contract.evaluate import evaluate
from mint.registry import store
from mint.contract.identity import contract_identity
from mint.registry.promotion import promote
from mint.registry.report import read_report
from tests.contract.conftest import card_contract
from tests.contract.test_schema import GOOD


@pytest.fixture
def ui_contract(tmp_path):
    return card_contract(tmp_path, GOOD)


def test_eval_writes_a_report_in_the_design_shape(ws, candidate, ui_contract, capsys):
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert {"revision", "revision_id", "contract", "baseline", "metrics", "gates", "verdict", "predictions",
            "created_at", "duration_s"} <= set(report)
    assert report["revision"] == "genui:v1" and report["revision_id"] == revision.id
    assert report["contract"]["name"] == "ui" and report["contract"]["version"] == 2
    # generation 0: no champion, so the baseline is the bare base under the same contract
    assert report["baseline"]["revision_id"] is None and report["baseline"]["label"] == "base"
    assert set(report["baseline"]["metrics"]) == set(report["metrics"]) and len(report["baseline"]["report"]) == 64
    assert set(report["metrics"]) == {"core.parse_rate", "core.schema_valid_rate", "core.required_props_rate",
                                      "core.root_type_match", "core.request_match", "core.off_request_rate",
                                      "latency.p50_ms", "latency.p95_ms"}
    assert report["verdict"] == "pass" and all(g["passed"] for g in report["gates"])
    predictions = [json.loads(l) for l in open(report["predictions_path"])]
    assert [p["index"] for p in predictions] == [0, 1, 2] and all(len(p["outputs"]) == 1 for p in predictions)
    registered = store.reports_for(store.open_store(ws), revision.id)
    assert [r["verdict"] for r in registered] == ["pass"]


def test_a_failing_gate_exits_1(ws, candidate, ui_contract, capsys):
    ui_contract.write_text(GOOD.replace("{metric: core.parse_rate, min: 0.0, no_regression: 0.0}",
                                        "{metric: core.schema_valid_rate, min: 0.9}"))
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract)]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_base_is_evaluated_without_a_revision(ws, ui_contract):
    result = evaluate(ws, "base", ui_contract, base="tiny-random")
    assert result.report.revision == "base" and result.report.revision_id is None


def test_candidate_is_gated_against_the_champions_report_then_promoted(ws, candidate, ui_contract):
    v1, v2 = candidate("genui"), candidate("genui")
    first = evaluate(ws, v1.ref, ui_contract)
    promote(ws, v1.ref, identify_contract=contract_identity)     # finds v1's registered passing report
    second = evaluate(ws, v2.ref, ui_contract)
    assert second.report.baseline.revision_id == v1.id
    assert second.report.baseline.metrics == first.report.metrics
    assert not second.baseline_evaluated
    gate = next(g for g in second.report.gates if g.metric == "core.parse_rate")
    assert gate.rule.startswith("min 0; no_regression 0; delta +0 [+0, +0] on 3 paired")
    # the report's baseline is the champion: CAS holds
    assert promote(ws, v2.ref, identify_contract=contract_identity).new == v2.id


def test_champion_without_a_report_under_this_version_is_measured_first_without_a_verdict(ws, candidate,
                                                                                           ui_contract):
    """A champion measured only as the candidate's baseline gets its scores and answers, no gates, and so needs
    no baseline of its own: the bare base is not decoded for it."""
    v1, v2 = candidate("genui"), candidate("genui")
    promote(ws, v1.ref, force=True, why="bootstrap")
    result = evaluate(ws, v2.ref, ui_contract)
    assert result.baseline_evaluated and result.report.baseline.revision_id == v1.id
    conn = store.open_store(ws)
    [champion_report] = store.reports_for(conn, v1.id)
    assert champion_report["verdict"] == "measured"
    assert all(not r["revision_id"].startswith("base:") for r in conn.execute("SELECT revision_id FROM reports"))
    measured = read_report(Path(champion_report["path"]))
    assert measured.gates == () and measured.baseline.revision_id is None and measured.metrics


def test_a_contract_edited_without_a_new_version_is_refused_at_its_line(ws, candidate, ui_contract, capsys):
    revision = candidate("genui")
    evaluate(ws, revision.ref, ui_contract)
    ui_contract.write_text(GOOD.replace("max: 60000", "max: 50000"))
    assert main(["eval", revision.ref, "--contract", str(ui_contract)]) == 2
    assert f"{ui_contract}:2: version: contract ui changed since its v2 reports" in capsys.readouterr().err
    ui_contract.write_text(GOOD.replace("version: 2", "version: 1"))
    assert main(["eval", revision.ref, "--contract", str(ui_contract)]) == 2
    assert "is stale: reports under v2 exist" in capsys.readouterr().err


def test_wrong_specialist_and_missing_predictions_are_bad_input(ws, candidate, ui_contract, tmp_path, capsys):
    revision = candidate("coding")
    assert main(["eval", revision.ref, "--contract", str(ui_contract)]) == 2
    (tmp_path / "p.jsonl").write_text(json.dumps({"suite": "core", "index": 0, "output": "{}"}) + "\n")
    assert main(["eval", "--contract", str(ui_contract), "--predictions", str(tmp_path / "p.jsonl")]) == 2
    assert "no output for suite 'core' record 1" in capsys.readouterr().err


def test_predictions_made_elsewhere_are_scored_with_the_same_gates(ws, ui_contract, tmp_path, capsys):
    rows = [{"suite": "core", "index": i, "output": json.dumps({"type": "Card", "props": {"title": str(i)}}),
             "latency_ms": 120.0} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({**r, "output": "no"}) + "\n" for r in rows))
    assert main(["eval", "--contract", str(ui_contract), "--predictions", str(tmp_path / "p.jsonl"),
                 "--baseline-predictions", str(tmp_path / "b.jsonl"), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["metrics"]["core.schema_valid_rate"] == 1.0 and report["metrics"]["latency.p95_ms"] == 120.0
    assert report["baseline"]["label"] == "predictions b.jsonl" and report["baseline"]["metrics"]["core.parse_rate"] == 0


def test_predictions_generate_nothing_and_fail_only_the_gates_that_need_a_baseline(ws, ui_contract, tmp_path,
                                                                                   monkeypatch):
    import mint.contract.evaluate as evaluation

    def no_generation(*args, **kwargs):
        raise AssertionError("scoring predictions generated outputs")

    monkeypatch.setattr(evaluation, "generate_outputs", no_generation)
    rows = [{"suite": "core", "index": i, "output": json.dumps({"type": "Card", "props": {"title": str(i)}}),
             "latency_ms": 120.0} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = evaluate(ws, None, ui_contract, predictions=tmp_path / "p.jsonl").report.to_dict()
    gates = {g["metric"]: g for g in report["gates"]}
    assert report["baseline"]["label"] == "none" and report["verdict"] == "fail"
    assert not gates["core.parse_rate"]["passed"] and "no baseline to compare with" in gates["core.parse_rate"]["rule"]
    assert gates["latency.p95_ms"]["passed"]                       # a threshold needs no baseline


def test_predictions_without_latency_skip_the_latency_gate_and_say_so(ws, ui_contract, tmp_path, capsys):
    rows = [{"suite": "core", "index": i, "output": json.dumps({"type": "Card", "props": {"title": str(i)}})}
            for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({**r, "output": "no"}) + "\n" for r in rows))
    args = ["eval", "--contract", str(ui_contract), "--predictions", str(tmp_path / "p.jsonl"),
            "--baseline-predictions", str(tmp_path / "b.jsonl")]
    assert main(args + ["--json"]) == 0                       # latency_ms is optional: its gate does not fail
    report = json.loads(capsys.readouterr().out)
    latency = next(g for g in report["gates"] if g["metric"] == "latency.p95_ms")
    assert latency["skipped"] and latency["passed"] and latency["value"] is None
    assert latency["rule"] == "skipped: the predictions carry no latency_ms"
    assert main(args) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if "latency.p95_ms" in line]
    cells = [cell.strip() for cell in row.strip("│ ").split("│")]
    assert cells[-2:] == ["skipped: the predictions carry no latency_ms", "skipped"]
    # one measured latency is a measurement: the gate is checked, not skipped
    rows[0]["latency_ms"] = 90_000.0
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(args + ["--json"]) == 1
    latency = next(g for g in json.loads(capsys.readouterr().out)["gates"] if g["metric"] == "latency.p95_ms")
    assert not latency["passed"] and "skipped" not in latency


def test_generation_0_is_gated_against_the_base_measured_once_per_contract(ws, candidate, ui_contract):
    v1, v2 = candidate("genui"), candidate("genui")
    first = evaluate(ws, v1.ref, ui_contract)
    assert first.baseline_evaluated and first.report.baseline.label == "base"
    second = evaluate(ws, v2.ref, ui_contract)
    assert not second.baseline_evaluated                                  # the base's report is cached
    assert second.report.baseline.report == first.report.baseline.report
    ui_contract.write_text(GOOD.replace("version: 2", "version: 3"))
    assert evaluate(ws, v2.ref, ui_contract).baseline_evaluated           # a new contract: measured again


def _ui_rows(n):
    return [{"id": f"card-{i}", "messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(n)]


def test_improve_passes_only_on_a_significant_gain_over_the_base(ws, ui_contract, tmp_path):
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _ui_rows(8)))
    ui_contract.write_text(GOOD.replace("{metric: core.parse_rate, min: 0.0, no_regression: 0.0}",
                                        "{metric: core.schema_valid_rate, improve: 0.0}"))

    def scored(valid: int) -> dict:
        rows = [{"suite": "core", "id": f"card-{i}", "latency_ms": 5.0,
                 "output": json.dumps({"type": "Card", "props": {"title": str(i)}}) if i < valid else "no"}
                for i in reversed(range(8))]                               # any order: matched by id
        path = tmp_path / f"p{valid}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        return evaluate(ws, None, ui_contract, predictions=path, baseline_predictions=baseline).report.to_dict()

    baseline = tmp_path / "baseline.jsonl"   # a baseline that never writes a valid tree
    baseline.write_text("".join(json.dumps({"suite": "core", "id": f"card-{i}", "output": "no"}) + "\n"
                                for i in range(8)))

    better, barely = scored(8), scored(5)
    gate = next(g for g in better["gates"] if g["metric"] == "core.schema_valid_rate")
    assert better["baseline"]["metrics"]["core.schema_valid_rate"] == 0.0
    assert gate["passed"] and gate["delta"]["wins"] == 8 and gate["delta"]["low"] > 0
    assert barely["verdict"] == "fail"                                       # 5 of 8 could be luck (p = 0.0625)


def test_candidate_and_baseline_rows_are_paired_by_example_key_not_position(ui_contract):
    from mint.contract.evaluate import paired_deltas
    from mint.contract.schema import load_contract

    contract = load_contract(ui_contract)
    ours = [{"suite": "core", "key": f"id:{i}", "scores": {"parse_rate": float(i % 2)}} for i in range(6)]
    theirs = [{"suite": "core", "key": f"id:{i}", "scores": {"parse_rate": float(i % 2)}} for i in reversed(range(6))]
    theirs.append({"suite": "core", "key": "id:gone", "scores": {"parse_rate": 1.0}})    # not in ours: unpaired
    delta = paired_deltas(contract, ours, theirs)["core.parse_rate"]
    assert (delta.n, delta.wins, delta.losses) == (6, 0, 0)     # by position it would be 3 wins and 3 losses


def test_example_keys_are_ids_or_content_hashes_and_never_collide():
    from mint.contract.evaluate import example_keys

    keys = example_keys([{"id": 7}, {"id": "a"}, {"prompt": "x"}, {"prompt": "x"}, {"id": True}])
    assert keys[:2] == ["id:7", "id:a"] and keys[2].startswith("sha256:") and keys[3] == keys[2] + "#2"
    assert len(set(keys)) == 5


def test_the_table_fills_the_baseline_of_every_metric(ws, candidate, ui_contract, capsys):
    import re
    revision = candidate("genui")
    main(["eval", revision.ref, "--contract", str(ui_contract)])
    out = capsys.readouterr().out
    ungated = next(line for line in out.splitlines() if "core.root_type_match" in line)
    assert re.search(r"core\.root_type_match\s*│\s*[\d.]+\s*│\s*[\d.]+\s*│", ungated), ungated
    assert "baseline: base (generation 0" in out


def test_predictions_are_paired_with_the_champions_registered_report_without_generating(ws, candidate, ui_contract,
                                                                                        tmp_path, monkeypatch):
    import mint.contract.evaluate as evaluation

    v1 = candidate("genui")
    evaluate(ws, v1.ref, ui_contract)
    promote(ws, v1.ref, identify_contract=contract_identity)
    monkeypatch.setattr(evaluation, "generate_outputs", lambda *a, **k: pytest.fail("scoring predictions generated"))
    rows = [{"suite": "core", "index": i, "output": "{}"} for i in range(3)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = evaluate(ws, None, ui_contract, predictions=tmp_path / "p.jsonl").report.to_dict()
    assert report["baseline"]["revision_id"] == v1.id and report["baseline"]["report"]
    gate = next(g for g in report["gates"] if g["metric"] == "core.parse_rate")
    assert "on 3 paired" in gate["rule"]


def test_the_table_shows_every_gate_of_a_metric_and_names_a_missing_baseline(ws, ui_contract, tmp_path, capsys):
    ui_contract.write_text(GOOD.replace("{metric: core.parse_rate, min: 0.0, no_regression: 0.0}",
                                        "{metric: core.parse_rate, min: 0.0}\n  - {metric: core.parse_rate, "
                                        "no_regression: 0.0}"))
    (tmp_path / "p.jsonl").write_text("".join(json.dumps({"suite": "core", "index": i, "output": "{}"}) + "\n"
                                              for i in range(3)))
    assert main(["eval", "--contract", str(ui_contract), "--predictions", str(tmp_path / "p.jsonl")]) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("core.parse_rate") == 2 and "no baseline to" in out
    assert "baseline: none (no baseline" in out


def test_eval_prints_plain_progress_lines_when_not_on_a_terminal(ws, ui_contract, capsys):
    """A cron job or a CI log is not a terminal: it gets lines, not minutes of silence (and none under -q)."""
    code = main(["eval", "base", "--contract", str(ui_contract), "--base", "tiny-random"])
    assert code in (0, 1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("decoding on cpu") and lines[1] == f"evaluating base under {ui_contract} ..."
    assert any(line.startswith("core: 3/3 in ") for line in lines), lines
    assert main(["eval", "base", "--contract", str(ui_contract), "--base", "tiny-random", "-q"]) == code
    quiet = capsys.readouterr()
    assert quiet.err == "" and "verdict" in quiet.out


def test_progress_lines_come_at_most_every_few_seconds_with_an_eta(monkeypatch, capsys):
    from mint.cli import common

    clock = iter([0.0, 1.0, 5.0, 12.0, 13.0, 30.0])
    monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
    lines = common.ProgressLines(every_s=10)
    for done in (0, 1, 2, 3, 4, 8):
        lines.update("core", done, 8)
    assert capsys.readouterr().err.splitlines() == ["core: 0/8", "core: 3/8  ETA 0:00:20", "core: 8/8 in 30s"]


def test_progress_lines_follow_the_share_of_work_where_one_is_given(monkeypatch, capsys):
    """A batched decode finishes its rows together near the end: with no row done yet, the ETA follows the share of
    the token budget spent (a tenth in 10 s: 90 s left), not the rows finished."""
    from mint.cli import common

    clock = iter([0.0, 10.0, 30.0])
    monkeypatch.setattr(common.time, "monotonic", lambda: next(clock))
    lines = common.ProgressLines(every_s=5)
    lines.update("core", 0, 24, share=0.0)
    lines.update("core", 0, 24, share=0.1)
    lines.update("core", 24, 24, share=0.6)
    assert capsys.readouterr().err.splitlines() == ["core: 0/24", "core: 0/24  ETA 0:01:30", "core: 24/24 in 30s"]
