"""Prompt/completion records: ``{"prompt", "completion"}`` (or ``response``) as two strings or, TRL's
conversational form, two message lists; and OpenAI evals samples, ``{"input": [messages], "ideal"}``."""
from __future__ import annotations

from mint.data.formats.fields import RecordError
from mint.data.formats.messages import message_list
from mint.data.schema import Message, Preference


def sniff(record: dict) -> bool:
    if "prompt" in record and ("completion" in record or "response" in record):
        return True
    return isinstance(record.get("input"), list) and "ideal" in record   # an OpenAI evals sample


def normalize(record: dict) -> tuple[list[Message], Preference | None]:
    if "prompt" not in record and isinstance(record.get("input"), list):
        # OpenAI evals: {"input": [messages], "ideal": answer or [acceptable answers]}; the first is learnt
        ideal = record.get("ideal")
        ideal = ideal[0] if isinstance(ideal, list) and ideal else ideal
        if not isinstance(ideal, str):
            raise RecordError("ideal", "expected the ideal answer as a string (or a list of strings)")
        return message_list(record["input"], "input") + [Message("assistant", ideal)], None
    prompt, completion = record.get("prompt"), record.get("completion", record.get("response"))
    if isinstance(prompt, list) and isinstance(completion, list):   # TRL conversational
        return message_list(prompt, "prompt") + message_list(completion, "completion"), None
    if isinstance(prompt, str) and isinstance(completion, str):
        return [Message("user", prompt), Message("assistant", completion)], None
    raise RecordError("prompt", "expected prompt and completion as two strings or two message lists")
