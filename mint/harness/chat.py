"""Chat: closeness to a reference answer, verifiable instructions, and empty or refusing answers."""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from mint.harness.base import Harness, RecordProblem

_TOKEN = re.compile(r"\w+")
_REFUSAL = re.compile(r"\b(?:i\s*(?:'m| am)\s*(?:sorry|unable|not able)|i\s*can(?:'t|not)\s+(?:help|assist|do|provide)|"
                      r"as an ai(?: language model)?|i\s*(?:won't|will not)\s+(?:help|provide))", re.I)
CHECKS = ("max_words", "min_words", "must_include", "must_not_include", "format")
FORMATS = ("json", "bullets", "one_line", "lowercase", "no_commas")


def tokens(text: str) -> list[str]:
    return _TOKEN.findall(text.lower())


def token_f1(prediction: str, reference: str) -> float:
    predicted, expected = tokens(prediction), tokens(reference)
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def rouge_l(prediction: str, reference: str) -> float:
    """ROUGE-L F1: the longest common subsequence of tokens."""
    a, b = tokens(prediction), tokens(reference)
    if not a or not b:
        return float(a == b)
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    lcs = previous[-1]
    if lcs == 0:
        return 0.0
    precision, recall = lcs / len(a), lcs / len(b)
    return 2 * precision * recall / (precision + recall)


def follows(output: str, checks: dict) -> bool:
    words = len(output.split())
    if "max_words" in checks and words > checks["max_words"]:
        return False
    if "min_words" in checks and words < checks["min_words"]:
        return False
    lowered = output.lower()
    if any(w.lower() not in lowered for w in checks.get("must_include", [])):
        return False
    if any(w.lower() in lowered for w in checks.get("must_not_include", [])):
        return False
    fmt = checks.get("format")
    if fmt == "json":
        try:
            json.loads(output.strip())
        except ValueError:
            return False
    elif fmt == "bullets":
        lines = [line for line in output.strip().splitlines() if line.strip()]
        return bool(lines) and all(re.match(r"\s*(?:[-*•]|\d+[.)])\s", line) for line in lines)
    elif fmt == "one_line":
        return "\n" not in output.strip()
    elif fmt == "lowercase":
        return output == output.lower()
    elif fmt == "no_commas":
        return "," not in output
    return True


@dataclass
class ChatHarness(Harness):
    name: str = "chat"
    metrics: tuple[str, ...] = ("rouge_l", "token_f1", "instruction_pass_rate", "empty_rate", "refusal_rate")
    lower_is_better: tuple[str, ...] = ("empty_rate", "refusal_rate")

    def check_record(self, record: dict) -> None:
        super().check_record(record)
        if not self.request(record).strip():
            raise RecordProblem("messages", "no user message")
        if "reference" in record and not isinstance(record["reference"], str):
            raise RecordProblem("reference", "expected a string")
        checks = record.get("checks")
        if checks is not None:
            if not isinstance(checks, dict) or set(checks) - set(CHECKS):
                raise RecordProblem("checks", f"expected an object with {', '.join(CHECKS)}")
            if checks.get("format") not in (None, *FORMATS):
                raise RecordProblem("checks.format", f"expected one of {', '.join(FORMATS)}")

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        n = len(outputs)
        reference = record.get("reference")
        checks = record.get("checks")
        return {
            "rouge_l": sum(rouge_l(o, reference) for o in outputs) / n if reference is not None else None,
            "token_f1": sum(token_f1(o, reference) for o in outputs) / n if reference is not None else None,
            "instruction_pass_rate": sum(follows(o, checks) for o in outputs) / n if checks else None,
            "empty_rate": sum(not o.strip() for o in outputs) / n,
            "refusal_rate": sum(bool(_REFUSAL.search(o)) for o in outputs) / n,
        }
