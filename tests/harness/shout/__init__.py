"""A specialist added the way a user adds one: this folder and one line in mint.harness.SPECIALISTS.

``shout`` answers in capitals. Its harness scores how many of an answer's letters are capitals; its verifier
passes an answer whose letters all are; a logged episode makes a live-suite record whose reference is the
endorsed answer.
"""
from __future__ import annotations

from dataclasses import dataclass

from mint.harness import Harness, LoggedAnswer, Specialist
from mint.harness.specialist import completion_text


def capitals(answer: str) -> float | None:
    """The share of the answer's letters that are capitals; None without letters."""
    letters = [c for c in answer if c.isalpha()]
    return sum(c.isupper() for c in letters) / len(letters) if letters else None


def verify(request, answer: str) -> tuple[bool, str]:
    share = capitals(answer)
    if share is None:
        return False, "no letters"
    return share == 1.0, "all capitals" if share == 1.0 else f"{share:.0%} capitals"


def reward(prompts, completions, **_) -> list[float]:
    return [capitals(completion_text(c)) or 0.0 for c in completions]


@dataclass
class ShoutHarness(Harness):
    name: str = "shout"
    metrics: tuple[str, ...] = ("shouted", "capitals")
    request_metrics: tuple[str, ...] = ("shouted", "capitals")

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        shares = [capitals(o) or 0.0 for o in outputs]
        return {"shouted": sum(s == 1.0 for s in shares) / len(shares), "capitals": sum(shares) / len(shares)}


def suite_record(record: dict, logged: LoggedAnswer) -> dict:
    if logged.text.strip():
        record["reference"] = logged.text
    return record


SPECIALIST = Specialist("shout", ShoutHarness, verify=verify, reward=reward, suite_record=suite_record)
