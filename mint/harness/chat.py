"""Chat: closeness to a reference answer, verifiable instructions, and empty or refusing answers."""
from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from mint.harness.base import Harness, RecordProblem, as_record, joined_reasons
from mint.harness.specialist import LoggedAnswer, Specialist, completion_text

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


def check_problems(checks: object) -> list[tuple[str, str]]:
    """(field, what is wrong) for each malformed instruction check; empty when ``checks`` is usable."""
    if not isinstance(checks, dict):
        return [("checks", f"expected an object with {', '.join(CHECKS)}")]
    problems = [(f"checks.{key}", f"unknown check (checks: {', '.join(CHECKS)})") for key in checks
                if key not in CHECKS]
    for key in ("max_words", "min_words"):
        value = checks.get(key)
        if key in checks and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append((f"checks.{key}", f"expected a whole number >= 0, got {json.dumps(value)[:60]}"))
    for key in ("must_include", "must_not_include"):
        value = checks.get(key)
        if key in checks and not (isinstance(value, list) and all(isinstance(w, str) for w in value)):
            problems.append((f"checks.{key}", "expected a list of strings"))
    if "format" in checks and not (isinstance(checks["format"], str) and checks["format"] in FORMATS):
        problems.append(("checks.format", f"expected one of {', '.join(FORMATS)}"))
    return problems


def unmet_checks(output: str, checks: object) -> list[str]:
    """Why ``output`` does not follow ``checks`` (empty when it does); a malformed check is never met."""
    problems = check_problems(checks)
    if problems:
        return [f"{field}: {message}" for field, message in problems]
    assert isinstance(checks, dict)
    unmet = []
    words = len(output.split())
    if "max_words" in checks and words > checks["max_words"]:
        unmet.append(f"{words} words > max_words {checks['max_words']}")
    if "min_words" in checks and words < checks["min_words"]:
        unmet.append(f"{words} words < min_words {checks['min_words']}")
    lowered = output.lower()
    unmet += [f"missing {w!r}" for w in checks.get("must_include", []) if w.lower() not in lowered]
    unmet += [f"includes {w!r}" for w in checks.get("must_not_include", []) if w.lower() in lowered]
    fmt = checks.get("format")
    if fmt == "json":
        try:
            json.loads(output.strip())
        except (ValueError, RecursionError):
            unmet.append("not JSON")
    elif fmt == "bullets":
        lines = [line for line in output.strip().splitlines() if line.strip()]
        if not lines or not all(re.match(r"\s*(?:[-*•]|\d+[.)])\s", line) for line in lines):
            unmet.append("not a bullet list")
    elif fmt == "one_line" and "\n" in output.strip():
        unmet.append("more than one line")
    elif fmt == "lowercase" and output != output.lower():
        unmet.append("not all lowercase")
    elif fmt == "no_commas" and "," in output:
        unmet.append("has commas")
    return unmet


def follows(output: str, checks: object) -> bool:
    return not unmet_checks(output, checks)


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
            problems = check_problems(checks)
            if problems:
                raise RecordProblem(*problems[0])

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        n = max(1, len(outputs))
        outputs = [o if isinstance(o, str) else "" for o in outputs]
        reference = record.get("reference")
        reference = reference if isinstance(reference, str) else None
        checks = record.get("checks")
        unmet = [unmet_checks(o, checks) for o in outputs] if checks else []
        scores: dict = {
            "rouge_l": sum(rouge_l(o, reference) for o in outputs) / n if reference is not None else None,
            "token_f1": sum(token_f1(o, reference) for o in outputs) / n if reference is not None else None,
            "instruction_pass_rate": sum(not u for u in unmet) / n if checks else None,
            "empty_rate": sum(not o.strip() for o in outputs) / n,
            "refusal_rate": sum(bool(_REFUSAL.search(o)) for o in outputs) / n,
        }
        reason = joined_reasons(["; ".join(u) for u in unmet])
        if reason:
            scores["_reason"] = reason
        return scores


def verify(request: dict | str, answer: str) -> tuple[bool, str]:
    """Whether ``answer`` follows the verifiable instructions ``request`` carries (its ``checks``: words to
    include or leave out, a length, a format) and is neither empty nor a refusal: what ``instruction_pass_rate``
    gates.

    What it cannot check: whether an answer is true, helpful or on topic. A request without ``checks`` is
    not verified (False): closeness to a reference (ROUGE-L) needs the reference, and without one nothing
    here tells a good reply from a constant one."""
    record = as_record(request)
    text = answer if isinstance(answer, str) else ""
    if not text.strip():
        return False, "empty answer"
    if _REFUSAL.search(text):
        return False, "a refusal"
    checks = record.get("checks")
    if not checks:
        return False, "the request carries no checks to verify against"
    unmet = unmet_checks(text, checks)
    return not unmet, "; ".join(unmet) or "follows every check the request carries"


def reward(prompts, completions, reference=None, **_) -> list[float]:
    """GRPO's default chat reward: token F1 against the logged answer; an empty answer earns nothing."""
    return [token_f1(completion_text(c), reference[i]) if reference and reference[i] and completion_text(c).strip()
            else 0.0 for i, c in enumerate(completions)]


def suite_record(record: dict, logged: LoggedAnswer) -> dict:
    """A live record: the request, with the endorsed (or corrected) answer as its reference when there is one."""
    if logged.text.strip():
        record["reference"] = logged.text
    return record


SPECIALIST = Specialist("chat", ChatHarness, verify=verify, reward=reward, suite_record=suite_record)
