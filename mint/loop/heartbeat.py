"""What a long step is doing, told as it goes: the callback the loop's steps hand the library functions they call
(experience sampling, contract decoding, training, serving). Library functions call it; the CLI prints it."""
from __future__ import annotations

import time
from typing import Callable

from mint.train.rundir import TrainProgress

# a running step says each kind of thing it is doing at most this often
HEARTBEAT_S = 30.0

# (what, done, total or None, detail, share=None): "round 1: prompts answered", 12, 56, ""; "training", 30, 72,
# "loss 1.234". A contract's EvalProgress (label, done, total, share=...) is one: ``share`` is the share of a
# decoding stream's token budget spent, which tells how far a batch is before its rows finish.
StepProgress = Callable[..., None]


def training_progress(progress: StepProgress | None, what: str = "training") -> TrainProgress | None:
    """A training run's progress (step, max steps, its latest logged values) told as ``what`` step k of N with
    its loss, and its phases by name (after ``what``, where it names one)."""
    if progress is None:
        return None

    def heard(step: int, max_steps: int, logs: dict) -> None:
        if logs.get("phase"):
            progress(f"{what}: {logs['phase']}" if what else logs["phase"], step, max_steps or None)
            return
        loss = logs.get("loss")
        progress(what, step, max_steps, f"loss {loss:.3f}" if isinstance(loss, (int, float)) else "")
    return heard


def labelled(progress: StepProgress | None, prefix: str) -> StepProgress | None:
    """``progress`` with every ``what`` told after ``prefix`` (a round's number, a control's arm)."""
    if progress is None:
        return None
    return lambda what, done, total, detail="", **more: progress(f"{prefix}{what}", done, total, detail, **more)


class Heartbeat:
    """Which of a loop's progress events (mint.loop.runner) are worth a line: the first of each kind, then at most
    one of that kind every ``every_s`` seconds. Its kind is what it reports: the iteration, the step and the
    ``what`` ("round 1: prompts sampled", "training"), not its count, so a message of another kind always gets
    through, however soon after the last one (answers accepted right after prompts sampled), while a step's
    many counts of one kind make a line every ``every_s``."""

    def __init__(self, every_s: float = HEARTBEAT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.every_s, self.clock = every_s, clock
        self.said: dict[tuple, float] = {}     # when each kind was last let through

    def due(self, event: dict) -> bool:
        """Whether ``event`` (a progress event) is said now; when it is, its kind's clock starts again."""
        kind, now = (event["iteration"], event["step"], event["what"]), self.clock()
        if kind in self.said and now - self.said[kind] < self.every_s:
            return False
        self.said[kind] = now
        return True
