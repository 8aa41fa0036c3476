"""What every harness shares: the settings a contract gives it, the prompt, the scoring protocol."""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from mint.generation.settings import HarnessSettings
from mint.render import conversation

# Deeper model output is refused before any scorer walks it: recursive code (jsonschema, ==, repr) would
# otherwise hit Python's recursion limit on a 1,000-deep answer.
MAX_NESTING = 64


def too_deep(value: Any, limit: int = MAX_NESTING) -> bool:
    """Whether lists, tuples, sets and dicts (keys included) nest more than ``limit`` levels in ``value``;
    iterative, so any depth is safe to ask about."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children = [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            children = list(item)
        else:
            continue
        if depth > limit:
            return True
        stack.extend((child, depth + 1) for child in children)
    return False


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of pass@k from ``n`` samples of which ``c`` passed (Chen et al. 2021):
    1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def as_record(request: Any) -> dict:
    """A request given to a verifier as a record: a suite record or canonical episode as it is, the user's text
    as one user message, anything else as an empty record."""
    if isinstance(request, dict):
        return request
    if isinstance(request, str):
        return {"messages": [{"role": "user", "content": request}]}
    return {}


def joined_reasons(reasons: list[str | None]) -> str | None:
    """One reason string for the samples of one record (numbered when there are several), or None
    when every sample passed."""
    failed = [(i, r) for i, r in enumerate(reasons) if r]
    if not failed:
        return None
    if len(reasons) == 1:
        return failed[0][1]
    return "; ".join(f"sample {i}: {r}" for i, r in failed)


class RecordProblem(Exception):
    """A suite record the harness cannot use: names the field."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass
class Harness:
    settings: HarnessSettings
    name: str = ""
    metrics: tuple[str, ...] = field(default=())
    lower_is_better: tuple[str, ...] = field(default=())
    # the metrics it scores from the request alone, without a reference answer: what a suite drawn from served
    # traffic, where nobody wrote one, can measure (none: such a suite is refused for this harness)
    request_metrics: tuple[str, ...] = field(default=())
    # it runs the answers' code (in mint.harness.sandbox): `mint contract check` says how that code is isolated
    runs_untrusted_code: ClassVar[bool] = False

    def knows_metric(self, metric: str) -> bool:
        """Whether a suite may name ``metric``."""
        return metric in self.metrics

    def respond(self, loaded, adapter_dir, records: list[dict], revision_ref: str | None) -> list[str] | None:
        """The outputs of a harness that scores something other than generated text (one per record), from
        the base ``loaded`` and the revision's artifact in ``adapter_dir`` (None: the bare base); None: the
        model generates them."""
        return None

    def report_fields(self, records: list[dict], outputs: list[list[str]]) -> dict:
        """What the report carries beside the metrics, over every suite's records and outputs."""
        return {}

    def check_record(self, record: dict) -> None:
        """Raise RecordProblem when ``record`` lacks what this harness needs."""
        if not isinstance(record, dict):
            raise RecordProblem("", "expected a JSON object")

    def request(self, record: dict) -> str:
        """The user's request in the record (the last user message, or a prompt field)."""
        messages = record.get("messages")
        if isinstance(messages, list):
            for message in reversed(messages):
                if isinstance(message, dict) and message.get("role") == "user":
                    return str(message.get("content") or "")
        return str(record.get("prompt") or "")

    def family(self, record: dict) -> str | None:
        """The family of requests ``record`` belongs to, read from the request alone as the harness's verifier
        reads it (GenUI: the root component it names), so statistics can say which kinds of request a model
        solves; None where the harness tells no families apart."""
        return None

    def answer_schema(self, record: dict) -> dict | None:
        """The JSON schema every answer to ``record`` fits, for decoding constrained to it (with llguidance's
        ``x-guidance`` layout where the answers have one); None where answers have no one shape."""
        return None

    def system(self, record: dict) -> str | None:
        messages = record.get("messages")
        own = next((m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "system"),
                   None) if isinstance(messages, list) else None
        return self.settings.system or own

    def messages(self, record: dict) -> list[dict]:
        """The chat the model is given for ``record``."""
        user = self.settings.template.replace("{prompt}", self.request(record))
        return conversation([{"role": "user", "content": user}], system=self.system(record))

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        """Per-example scores for the samples drawn for ``record``."""
        raise NotImplementedError

    def score_many(self, records: list[dict], outputs: list[list[str]]) -> list[dict[str, float | None]]:
        return [self.score(r, o) for r, o in zip(records, outputs)]

    def aggregate(self, scores: list[dict[str, float | None]]) -> dict[str, float]:
        """Mean of each metric over the examples that have it."""
        out = {}
        for metric in self.metrics:
            values = [s[metric] for s in scores if s.get(metric) is not None]
            if values:
                out[metric] = sum(values) / len(values)
        return out
