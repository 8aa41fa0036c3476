"""A specialist, as one object: how its answers are scored, verified, repaired and rewarded, where an answer
ends, and what suite record a logged episode makes for it.

Each module named in ``mint.harness.SPECIALISTS`` defines one ``SPECIALIST``; the contract step, the engine's
stops, the live suites, GRPO's default reward and the loop's experience all ask it, never a table of names.
What a project routes to it (its keywords and rules) is the project's, in mint.yaml (mint.project).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class LoggedAnswer:
    """What an episode logged after its request, as a live suite reads it for a reference."""
    message: dict | None        # the last assistant turn; None when the episode ends on the request
    correction: str | None      # the user's correction of it, when they gave one
    endorsed: bool              # an answer was logged and the user did not disown it (rating >= 0)
    tools: list                 # the tools the episode defined

    @property
    def text(self) -> str:
        """The answer a reference is made of: the correction, else the endorsed answer's text, else empty."""
        return self.correction or (((self.message or {}).get("content") or "") if self.endorsed else "")


@dataclass(frozen=True)
class Specialist:
    name: str
    # scores a suite record's answers: a contract's ``harness:`` names the specialist whose harness it uses, and a
    # project's specialist uses the harness mint.yaml names (by default the one of its own name: mint.project)
    harness: type
    # ``verify(request, answer) -> (passed, detail)``: an answer judged without a reference, by the metric its
    # contract gates; the loop's experience keeps only what passes. None: judged by the reward instead
    verify: Callable[[Any, str], tuple[bool, Any]] | None = None
    # ``repair(answer) -> str | None``: a failing answer put into form without adding to what it says (which
    # ``verify`` then judges as any other); None where answers have no such repair
    repair: Callable[[str], str | None] | None = None
    # GRPO's default reward, with TRL's arguments (``prompts``, ``completions``, the dataset's columns)
    reward: Callable[..., list[float]] | None = None
    # the kinds of answer end a decode may stop at (mint.generation.stops.answer_complete): "json", "fence",
    # "tool_call"; none: the row stops at EOS
    answer_ends: tuple[str, ...] = ()
    # ``suite_record(record, logged) -> record | None``: the live-suite record of an episode whose request is
    # ``record`` (id and messages) and whose answer is ``logged``: the record with its reference, or None when
    # the episode cannot be scored. None: no live suite is drawn for this specialist
    suite_record: Callable[[dict, LoggedAnswer], dict | None] | None = None

    def make_harness(self, settings):
        """The harness with a contract's settings (mint.generation.settings.HarnessSettings)."""
        return self.harness(settings)

    def answer_end(self, settings) -> tuple[str, ...]:
        """The answer ends a decode under ``settings`` stops at: only where the contract asks
        (``decoding.stop_at_answer_end``), since cutting what follows a complete answer can change its score
        (trailing text fails a strict parse)."""
        return self.answer_ends if settings.stop_at_answer_end else ()


def completion_text(completion) -> str:
    """A TRL completion as text (a conversational completion is a list of messages)."""
    if isinstance(completion, list):
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
    return str(completion)


def last_user_text(prompt) -> str:
    """The last user turn of a TRL prompt (a conversational one is a list of messages)."""
    if isinstance(prompt, list):
        return next((m.get("content") or "" for m in reversed(prompt) if m.get("role") == "user"), "")
    return str(prompt)
