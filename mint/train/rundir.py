"""What a training run's directory holds, and how a run reports its progress: shared by the step that
prepares a run (mint.train.run) and the one that trains it (mint.train.trainer)."""
from __future__ import annotations

from typing import Callable

# (step, max steps, latest logged values); step 0 with a "phase" while the run starts up
TrainProgress = Callable[[int, int, dict], None]
RUN_FILE, EXAMPLES_FILE, METRICS_FILE, RESULT_FILE = "run.json", "examples.jsonl", "metrics.jsonl", "result.json"
TEMPLATE_FILE = "chat_template.jinja"


def phase(progress: TrainProgress | None, name: str) -> None:
    """Tell the progress display what the run is doing before its first step."""
    if progress is not None:
        progress(0, 0, {"phase": name})
