"""Experiment tracking: mint's training runs and evaluation reports in MLflow, training curves in TensorBoard.

Off unless ``mint.yaml`` turns it on, or the command line does (``mint --track ...`` for one invocation: it sets
``MINT_TRACK=1``, which turns both on where mint.yaml says nothing)::

    tracking:
      mlflow: true         # or a tracking URI; true: $MLFLOW_TRACKING_URI, else SQLite in $MINT_HOME/mlflow/
      tensorboard: true    # training curves as event files in the run's folder (runs/RUN/tensorboard)
      experiment: mint     # the MLflow experiment (default: mint)

A training run is one MLflow run that mint opens (named after the run's folder, tagged with the specialist,
method, dataset and base, and with the revision once it is registered); TRL's own MLflow callback (TRL's
``report_to``) logs the training arguments and every logged step's loss, learning rate and rewards into it.
An evaluation is one run per report: its metrics, each gate (``gate.METRIC.passed`` 1 or 0, its rule and
value as tags), the verdict, and the report file as an artifact. MLflow's filesystem store is retired in
MLflow 3, so the local default is its SQLite store, with the artifacts beside it.
"""
from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from mint.errors import BadInput
from mint.workspace import Workspace

TRACK_ENV = "MINT_TRACK"
TRACKING_KEYS = ("mlflow", "tensorboard", "experiment")
DEFAULT_EXPERIMENT = "mint"
INSTALL = "pip install 'mint[tracking]' (mlflow-skinny, SQLAlchemy and alembic for its SQLite store, tensorboardX)"


@dataclass(frozen=True)
class Tracking:
    """Where runs are logged: MLflow (``mlflow``; ``uri`` None: $MLFLOW_TRACKING_URI, else the workspace's
    SQLite store), TensorBoard (``tensorboard``)."""
    mlflow: bool = False
    uri: str | None = None
    tensorboard: bool = False
    experiment: str = DEFAULT_EXPERIMENT

    @property
    def on(self) -> bool:
        return self.mlflow or self.tensorboard


def current(project) -> Tracking:
    """What this invocation tracks: ``project``'s ``tracking`` block (mint.yaml's), or, where it says nothing,
    both MLflow and TensorBoard when ``MINT_TRACK=1`` (``--track``)."""
    tracking = project.tracking
    if not tracking.on and os.environ.get(TRACK_ENV) == "1":
        return Tracking(mlflow=True, tensorboard=True, experiment=tracking.experiment)
    return tracking


def tracking_uri(ws: Workspace, tracking: Tracking) -> str:
    if tracking.uri:
        return tracking.uri
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    return f"sqlite:///{(ws.home / 'mlflow' / 'mlflow.db').absolute()}"


def _mlflow():
    try:
        import mlflow
    except ImportError:
        raise BadInput(f"tracking with MLflow needs it installed: {INSTALL}", field="tracking.mlflow") from None
    return mlflow


def check(tracking: Tracking) -> None:
    """BadInput now, before any work, when tracking asks for MLflow and it is not installed."""
    if tracking.mlflow:
        _mlflow()


def client(ws: Workspace, tracking: Tracking):
    """(MlflowClient, experiment id): the experiment made on first use, its artifacts beside a local store."""
    mlflow = _mlflow()
    uri = tracking_uri(ws, tracking)
    if uri.startswith("sqlite:///"):
        Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
    tracker = mlflow.MlflowClient(tracking_uri=uri)
    experiment = tracker.get_experiment_by_name(tracking.experiment)
    if experiment is not None:
        return tracker, experiment.experiment_id
    local = uri.startswith(("sqlite:", "file:")) or "://" not in uri
    artifacts = (ws.home / "mlflow" / "artifacts").absolute().as_uri() if local else None
    return tracker, tracker.create_experiment(tracking.experiment, artifact_location=artifacts)


# --- training ---------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class TrainingRun:
    """A training run as the trackers see it: the MLflow run (None without MLflow), TRL's ``report_to`` and the
    environment TRL's callbacks read."""
    run_id: str | None
    report_to: tuple[str, ...]
    env: dict


def start_training(ws: Workspace, tracking: Tracking, run_dir: Path, run: dict) -> TrainingRun | None:
    """Open the MLflow run of the training run at ``run_dir`` (``run``: its run.json) where tracking is on."""
    if not tracking.on:
        return None
    env: dict[str, str]
    env, report_to, run_id = {}, [], None
    if tracking.mlflow:
        tracker, experiment = client(ws, tracking)
        tags = {"mint.kind": "train", "mint.run": run_dir.name, "mint.specialist": run.get("specialist"),
                "mint.method": run.get("method"), "mint.dataset": run.get("dataset"), "mint.base": run.get("base"),
                "mint.parent": run.get("parent")}
        run_id = tracker.create_run(experiment, run_name=f"train {run_dir.name}",
                                    tags={k: str(v) for k, v in tags.items() if v is not None}).info.run_id
        # TRL's MLflow callback resumes this run (MLFLOW_RUN_ID) and logs the arguments and each step into it
        env.update(MLFLOW_TRACKING_URI=tracking_uri(ws, tracking), MLFLOW_EXPERIMENT_NAME=tracking.experiment,
                   MLFLOW_RUN_ID=run_id)
        report_to.append("mlflow")
    if tracking.tensorboard:
        env["TENSORBOARD_LOGGING_DIR"] = str((run_dir / "tensorboard").absolute())
        report_to.append("tensorboard")
    env[REPORT_TO_ENV] = ",".join(report_to)
    return TrainingRun(run_id, tuple(report_to), env)


REPORT_TO_ENV = "MINT_REPORT_TO"     # the trainer's report_to (mint.train.trainer), in each process it runs in


@contextlib.contextmanager
def training_env(training: TrainingRun | None) -> Iterator[None]:
    """The environment TRL's callbacks read, for the training (and the processes it starts), then as before."""
    if training is None:
        yield
        return
    before = {key: os.environ.get(key) for key in training.env}
    os.environ.update(training.env)
    try:
        yield
    finally:
        for key, value in before.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def finish_training(ws: Workspace, tracking: Tracking, training: TrainingRun | None, *, revision: str | None,
                    metrics: dict, failed: bool = False) -> None:
    """Tag the training's MLflow run with the revision it registered and its summary metrics, and close it."""
    if training is None or training.run_id is None:
        return
    tracker, _experiment = client(ws, tracking)
    if revision:
        tracker.set_tag(training.run_id, "mint.revision", revision)
    for key, value in metrics.items():
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            tracker.log_metric(training.run_id, f"mint.{key}", float(value))
    tracker.set_terminated(training.run_id, "FAILED" if failed else "FINISHED")


# --- evaluation -------------------------------------------------------------------------------------------

def log_report(ws: Workspace, tracking: Tracking, report, report_path: Path) -> str | None:
    """One MLflow run for a registered report: metrics, gates, verdict, the report file; its id (None: off)."""
    if not tracking.mlflow:
        return None
    tracker, experiment = client(ws, tracking)
    contract, baseline = report.contract, report.baseline
    tags = {"mint.kind": "eval", "mint.revision": report.revision, "mint.revision_id": report.revision_id,
            "mint.contract": contract.name, "mint.contract_version": contract.version,
            "mint.contract_sha256": contract.sha256, "mint.verdict": report.verdict,
            "mint.baseline": baseline.revision_id or baseline.label, "mint.report_id": report.id,
            "mint.source": report.source}
    run = tracker.create_run(experiment, run_name=f"eval {report.label} {contract.name} v{contract.version}",
                             tags={k: str(v) for k, v in tags.items() if v is not None})
    run_id = run.info.run_id
    metrics = {name: float(value) for name, value in report.metrics.items() if _number(value)}
    for gate in report.gates:
        name = gate.metric
        metrics[f"gate.{name}.passed"] = 1.0 if gate.passed else 0.0
        tracker.set_tag(run_id, _metric_name(f"gate.{name}"), json.dumps(
            {"value": gate.value, "baseline": gate.baseline, "rule": gate.rule, "passed": gate.passed}, default=str))
    metrics["verdict.pass"] = 1.0 if report.verdict == "pass" else 0.0
    _log_metrics(tracker, run_id, metrics)
    tracker.log_artifact(run_id, str(report_path))
    tracker.set_terminated(run_id)
    return run_id


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value


def _log_metrics(tracker, run_id: str, metrics: dict[str, float]) -> None:
    import time

    from mlflow.entities import Metric

    now = int(time.time() * 1000)
    entries = [Metric(_metric_name(k), v, now, 0) for k, v in metrics.items()]
    for start in range(0, len(entries), 500):      # MLflow takes at most 1000 metrics a batch
        tracker.log_batch(run_id, metrics=entries[start:start + 500])


def _metric_name(name: str) -> str:
    """MLflow's metric names take letters, digits and ``_-./ `` only."""
    return "".join(c if c.isalnum() or c in "_-./ " else "_" for c in name)
