"""Tracking: mint.yaml's `tracking:` block and `--track`; a tracked loop's training run and a run per report,
read back with MLflow's own client."""
from __future__ import annotations

import json

import pytest

from mint.cli import main
from mint.errors import BadInput


def test_tracking_is_off_unless_mint_yaml_or_track_turns_it_on(tmp_path, monkeypatch):
    from mint.project import load_project
    from mint.tracking import Tracking, current

    monkeypatch.delenv("MINT_TRACK", raising=False)
    plain = tmp_path / "plain.yaml"
    plain.write_text("base: tiny-random\nspecialists:\n  chat: {description: talk}\n")
    assert current(load_project(plain)) == Tracking()
    monkeypatch.setenv("MINT_TRACK", "1")
    assert current(load_project(plain)) == Tracking(mlflow=True, tensorboard=True)
    tracked = tmp_path / "tracked.yaml"
    tracked.write_text(plain.read_text() + "tracking:\n  mlflow: sqlite:///runs.db\n  experiment: nightly\n")
    assert current(load_project(tracked)) == Tracking(mlflow=True, uri="sqlite:///runs.db", experiment="nightly")


@pytest.mark.parametrize("block, field", [("tracking: {mlflow: 3}", "tracking.mlflow"),
                                          ("tracking: {tensorboard: yes please}", "tracking.tensorboard"),
                                          ("tracking: {mlflo: true}", "tracking.mlflo")])
def test_a_bad_tracking_block_names_its_line_and_field(tmp_path, block, field):
    from mint.project import load_project

    path = tmp_path / "mint.yaml"
    path.write_text(f"base: tiny-random\nspecialists:\n  chat: {{description: talk}}\n{block}\n")
    with pytest.raises(BadInput) as refused:
        load_project(path)
    assert refused.value.field == field and refused.value.line == 4


def test_a_tracked_loop_leaves_its_training_run_and_a_run_per_report_in_mlflow(ws, tmp_path, capsys, monkeypatch):
    from mlflow import MlflowClient

    from tests.loop.test_loop import recipe

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert main(["loop", str(recipe(tmp_path, iterations=1)), "--track", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["exit_code"] == 0
    client = MlflowClient(tracking_uri=f"sqlite:///{ws.home / 'mlflow' / 'mlflow.db'}")
    runs = client.search_runs([client.get_experiment_by_name("mint").experiment_id])
    by_kind = {kind: [r for r in runs if r.data.tags.get("mint.kind") == kind] for kind in ("train", "eval")}

    [trained] = by_kind["train"]
    assert trained.info.status == "FINISHED"
    assert trained.data.tags["mint.revision"] == "genui:v1" and trained.data.tags["mint.specialist"] == "genui"
    assert trained.data.params["max_steps"] == "1"                           # TRL's callback: the arguments
    assert [m.step for m in client.get_metric_history(trained.info.run_id, "loss")] == [1]   # ... and each step
    [run_dir] = (ws.home / "runs").iterdir()
    assert trained.data.tags["mint.run"] == run_dir.name
    assert any(p.name.startswith("events.out.tfevents") for p in (run_dir / "tensorboard").rglob("*"))

    reports = {r.data.tags["mint.revision"]: r for r in by_kind["eval"]}
    assert set(reports) == {"base", "genui:v1"}                  # generation 0, then the candidate
    candidate = reports["genui:v1"]
    local = client.download_artifacts(candidate.info.run_id, "report.json", str(tmp_path))
    report = json.loads(open(local).read())
    assert report["revision"] == "genui:v1" and candidate.data.tags["mint.verdict"] == report["verdict"]
    assert candidate.data.metrics["verdict.pass"] == (1.0 if report["verdict"] == "pass" else 0.0)
    for gate in report["gates"]:
        assert candidate.data.metrics[f"gate.{gate['metric']}.passed"] == float(gate["passed"])
        assert json.loads(candidate.data.tags[f"gate.{gate['metric']}"])["rule"] == gate["rule"]
    assert candidate.data.metrics["core.parse_rate"] == report["metrics"]["core.parse_rate"]
