"""What a long step is doing, told as it goes: the callback the loop's steps hand the library functions they call
(experience sampling, contract decoding, training, serving). Library functions call it; the CLI prints it."""
from __future__ import annotations

from typing import Callable

from mint.train.rundir import TrainProgress

# (what, done, total or None, detail, share=None): "round 1: prompts answered", 12, 56, ""; "training", 30, 72,
# "loss 1.234". A contract's EvalProgress (label, done, total, share=...) is one: ``share`` is the share of a
# decoding stream's token budget spent, which tells how far a batch is before its rows finish.
StepProgress = Callable[..., None]


def training_progress(progress: StepProgress | None, what: str = "training") -> TrainProgress | None:
    """A training run's progress (step, max steps, its latest logged values) told as ``what`` step k of N with
    its loss, and its start-up phases by name."""
    if progress is None:
        return None

    def heard(step: int, max_steps: int, logs: dict) -> None:
        if logs.get("phase"):
            progress(f"{what}: {logs['phase']}", step, max_steps or None)
            return
        loss = logs.get("loss")
        progress(what, step, max_steps, f"loss {loss:.3f}" if isinstance(loss, (int, float)) else "")
    return heard


def labelled(progress: StepProgress | None, prefix: str) -> StepProgress | None:
    """``progress`` with every ``what`` told after ``prefix`` (a round's number, a control's arm)."""
    if progress is None:
        return None
    return lambda what, done, total, detail="", **more: progress(f"{prefix}{what}", done, total, detail, **more)
