"""Training the next generation on verified experience, and the placebo twin that tells whether it helped.

The next generation starts from the champion (a continuation) or from the base (ReST-EM's choice: each
iteration retrains from the base on the logs plus all verified experience). Its steps follow the number of
examples it learns from (``epochs`` passes over them at ``batch_size``, clamped to ``min_steps``..``max_steps``):
a continuation learns from the verified answers alone (the champion has learned the logs; mixed into them, 18
new answers among 113 logged examples were a small share of each batch and barely moved it: measured in
docs/benchmarks.md), at a learning rate of its own; a generation from the base from the logs plus the verified
answers.

The placebo twin trains the same steps from the same parent on the same prompts, with every sampled answer kept
unverified (a continuation's twin: those answers alone; from the base: beside the logs), and is evaluated under
the same contract, in one stream with the generation (and the steps control), each with its own report. Generation k+1 is compared with
generation k (its contract's paired gate) and with its twin (paired on the same examples), each with a
95% interval; a gain over the twin that is not significant is "no experience effect", even when the
generation is promoted. The twin is rejected as soon as it is measured: it is never promoted.

A placebo twin controls for unverified answers, not for the steps themselves: where generation k is
under-trained, any further steps on its own logs raise it (in the demo, 12 more steps on the logs alone gained
+0.125, more than the verified experience's continuations did on average). The steps control (``control:
[placebo, steps]``) trains those same steps on the logs alone; the gain then counts as an experience effect
only when it is significant over both.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from typing import TYPE_CHECKING, Any

from mint.jsonl import read_jsonl
from mint.workspace import Workspace

if TYPE_CHECKING:
    from mint.loop.heartbeat import StepProgress
    from mint.loop.results import ControlData, EvalOutput, TrainOutput
    from mint.train.config import SettingsOverride
    from mint.train.rundir import TrainProgress
    from mint.train.run import TrainResult

INITS = ("champion", "base")
PLAN_DEFAULTS: dict[str, Any] = {"init": "champion", "epochs": 2, "batch_size": 4, "min_steps": 2, "max_steps": 24,
                                 "learning_rate": 1.0e-3, "continuation_learning_rate": 1.0e-4}
EXPERIENCE_EFFECT, NO_EXPERIENCE_EFFECT = "experience effect", "no experience effect"


def training_plan(*, new_examples: int, logged_examples: int, init: str = PLAN_DEFAULTS["init"],
                  epochs: float = PLAN_DEFAULTS["epochs"], batch_size: int = PLAN_DEFAULTS["batch_size"],
                  min_steps: int = PLAN_DEFAULTS["min_steps"], max_steps: int = PLAN_DEFAULTS["max_steps"],
                  learning_rate: float = PLAN_DEFAULTS["learning_rate"],
                  continuation_learning_rate: float = PLAN_DEFAULTS["continuation_learning_rate"],
                  data: str | None = None, replayed: int = 0) -> dict:
    """The next generation's start, steps, learning rate and data; ``max_steps`` 0 when there is nothing new.
    A continuation from the champion trains on ``data`` (DATASET@VERSION: the verified answers alone), so its
    ``epochs`` are passes over them; a generation from the base, on the logs and the verified answers."""
    if init not in INITS:
        raise ValueError(init)
    # a continuation's epochs are passes over its verified answers, the logged ones replayed beside them counted
    examples = new_examples + replayed if init == "champion" else new_examples + logged_examples
    steps = min(max_steps, max(min_steps, math.ceil(epochs * examples / batch_size))) if new_examples else 0
    rate = continuation_learning_rate if init == "champion" else learning_rate
    return {"init": init, "examples": examples, "new_examples": new_examples, "max_steps": steps,
            "learning_rate": rate, "per_device_train_batch_size": batch_size,
            **({"data": data} if data and init == "champion" else {})}


# what an experience plan sets of a continuation's training (a train step with `plan: experience` sets none of them)
PLANNED_SETTINGS = ("max_steps", "learning_rate", "per_device_train_batch_size")


def planned_settings(plan: dict, settings: SettingsOverride) -> SettingsOverride:
    """``settings`` with the plan's steps, learning rate and batch size."""
    from mint.train.config import SettingsOverride

    return SettingsOverride(trl={key: plan[key] for key in PLANNED_SETTINGS}).over(settings)


def _scores_by_example(predictions: Path, metric: str) -> dict[tuple, float]:
    """``suite.metric``'s score per (suite, example key) in an eval's predictions."""
    suite, _, name = metric.partition(".")
    scores = {}
    for _number, row in read_jsonl(predictions, torn="skip"):
        if not isinstance(row, dict) or row.get("suite") != suite:
            continue
        value = (row.get("scores") or {}).get(name)
        if isinstance(value, (int, float)):
            scores[(row["suite"], row.get("key"))] = float(value)
    return scores


def compare_with_twin(evaluation: EvalOutput, twin_report: str) -> dict:
    """Generation k+1 against generation k (its gate's paired delta) and against its twin (paired here on the
    examples both answered), each with its 95% interval, and the verdict."""
    metric = evaluation.primary_metric
    if metric is None:
        return {"metric": None, "verdict": NO_EXPERIENCE_EFFECT, "why": "the contract gates no quality metric"}
    gate = evaluation.gate(metric)
    delta, interval = gate.paired_delta, gate.interval
    vs_twin = paired_on_examples(evaluation.report, twin_report, metric)
    effect = vs_twin.pop("significant_gain")
    return {"metric": metric,
            "vs_previous": {"delta": delta, "interval": interval},
            "vs_twin": vs_twin,
            "verdict": EXPERIENCE_EFFECT if effect else NO_EXPERIENCE_EFFECT}


def paired_on_examples(report: str | Path, other_report: str | Path, metric: str) -> dict:
    """``metric`` of one eval report minus another's (higher is better), paired on the examples both answered:
    the delta with its 95% interval, how many pairs, the test, and whether the gain is significant."""
    from mint.contract.paired import compare, significant_gain

    ours = _scores_by_example(Path(report).parent / "predictions.jsonl", metric)
    theirs = _scores_by_example(Path(other_report).parent / "predictions.jsonl", metric)
    common = sorted(set(ours) & set(theirs), key=str)
    paired = compare([ours[k] for k in common], [theirs[k] for k in common])
    return {"delta": round(paired.delta, 4), "interval": [round(paired.low, 4), round(paired.high, 4)],
            "n": paired.n, "method": paired.method,
            "significant_gain": bool(common) and significant_gain(paired, 0.0, lower_is_better=False)}


def train_planned(ws: Workspace, *, specialist: str, method: str, plan: dict | None, parent: str | None,
                  dataset: str, base: str, settings: SettingsOverride, progress: TrainProgress | None = None):
    """A training as an experience ``plan`` says (``None``: as ``settings`` say): from ``parent`` (the champion;
    ``None``, where the plan starts from the base: from ``base``), on the plan's data (a continuation's verified
    answers alone) or else ``dataset``, with the plan's steps, rate and batch. A continuation keeps its parent's
    LoRA shape, so ``lora.*`` settings shape a new adapter only. Returns the TrainResult and the settings it
    trained with; ``progress`` hears its steps."""
    from mint.train.run import train

    if parent:
        settings = settings.without("lora")
    if plan:
        settings = planned_settings(plan, settings)
    data = (plan.get("data") if plan else None) or dataset
    result = train(ws, specialist=specialist, data=data, method=method, from_ref=parent,
                   base=None if parent else base, override=settings, progress=progress)
    return result, settings


@dataclass(frozen=True)
class Control:
    """A control trained beside a generation: ``arm`` placebo (the twin, on unverified answers) or steps (the same
    steps on the logs alone)."""
    arm: str
    trained: TrainResult       # its TrainResult (ref, revision_id, steps, examples)
    why: str                    # why it is rejected once measured


def train_controls(ws: Workspace, *, specialist: str, twin: ControlData, candidate: TrainOutput,
                   base: str, progress: StepProgress | None = None) -> list[Control]:
    """The placebo twin, trained as the candidate was (same parent, method and settings) on the twin dataset, and
    with a steps control in ``twin``, the same steps on the logs alone. Evaluated beside the candidate (one stream:
    ``mint.contract.evaluate.evaluate_many``) and judged by ``judge_controls``. ``progress`` hears each training's
    steps."""
    from mint.loop.heartbeat import training_progress

    controls = [Control("placebo", _train_control(ws, specialist, twin, candidate, base,
                                                  training_progress(progress, "placebo twin training")),
                        f"placebo twin of {candidate.revision}: trained on unverified answers, never promoted")]
    if twin.steps_control is not None:
        controls.append(Control("steps", _train_control(ws, specialist, twin.steps_control, candidate, base,
                                                        training_progress(progress, "steps control training")),
                                f"steps control of {candidate.revision}: the same steps on the logs alone, never "
                                "promoted"))
    return controls


def judge_controls(ws: Workspace, controls: list[Control], reports: list[str], evaluation: EvalOutput) -> dict:
    """Reject every control once measured (``reports``, in order), and compare the generation with each: the twin
    first; a gain that more training without any experience also gives is no experience effect, so with a steps
    control the verdict asks for a significant gain over both."""
    from mint.registry import queries
    from mint.registry.promotion import reject

    for control in controls:
        if queries.status(ws, control.trained.revision_id) != "rejected":   # a killed loop may have rejected it
            reject(ws, control.trained.ref, why=control.why)
    (twin, twin_report), *rest = [(c, r) for c, r in zip(controls, reports)]
    trained = twin.trained
    result = {"revision": trained.ref, "revision_id": trained.revision_id, "steps": trained.steps,
              "examples": trained.examples, "report": twin_report, **compare_with_twin(evaluation, twin_report)}
    for control, report in rest:
        if result["metric"] is None:
            break
        result = with_steps_control(result, evaluation, report)
        result["steps_control"].update(revision=control.trained.ref, revision_id=control.trained.revision_id,
                                       steps=control.trained.steps, examples=control.trained.examples)
    return result


def with_steps_control(twin: dict, evaluation: EvalOutput, control_report: str) -> dict:
    """The twin's comparison with the steps control's added: the generation against the same steps on the logs
    alone, paired, and an experience effect only when the gain is significant over that control too."""
    vs_control = paired_on_examples(evaluation.report, control_report, twin["metric"])
    beaten = vs_control.pop("significant_gain")
    result = {**twin, "steps_control": {"report": control_report, "vs_control": vs_control}}
    if twin["verdict"] == EXPERIENCE_EFFECT and not beaten:
        result.update(verdict=NO_EXPERIENCE_EFFECT,
                      why="the same steps on the logs alone do as well: the gain is from training longer")
    return result


def _train_control(ws: Workspace, specialist: str, data: ControlData, candidate: TrainOutput, base: str,
                   progress: TrainProgress | None = None):
    """A control trained as the candidate was (same parent, method and settings) on ``data``'s dataset. One that a
    killed loop trained before it could judge it (the same dataset version, parent and method, still registered)
    is taken, not trained again: a resumed loop makes the revisions an uninterrupted one makes."""
    from mint.train.run import registered_run, train

    earlier = registered_run(ws, specialist=specialist, dataset=f"{data.dataset}@{data.version}",
                             method=candidate.method, parent=candidate.parent)
    if earlier is not None:
        return earlier
    return train(ws, specialist=specialist, data=data.dataset, method=candidate.method, from_ref=candidate.parent,
                 base=None if candidate.parent else base, override=candidate.settings, progress=progress)
