"""Alpaca: ``{"instruction", "input"?, "output", "system"?, "history"?}`` (LLaMA-Factory's ``history`` holds
earlier ``[instruction, answer]`` pairs); with ``chosen``/``rejected`` in place of ``output``, LLaMA-Factory's
ranking layout."""
from __future__ import annotations

from mint.data.formats import preference
from mint.data.formats.fields import RecordError
from mint.data.formats.messages import system_messages
from mint.data.schema import Message, Preference


def sniff(record: dict) -> bool:
    return "instruction" in record and ("output" in record or "chosen" in record)


def normalize(record: dict) -> tuple[list[Message], Preference | None]:
    parts = [record.get("instruction"), record.get("input") or ""]
    for key, value in zip(("instruction", "input"), parts):
        if not isinstance(value, str):
            raise RecordError(key, f"expected a string, got {type(value).__name__}")
    ranking = "output" not in record and "chosen" in record   # the answers are chosen and rejected
    if not ranking and not isinstance(record.get("output"), str):
        raise RecordError("output", "missing" if record.get("output") is None else "expected a string")
    user = parts[0] + ("\n\n" + parts[1] if parts[1].strip() else "")
    messages = system_messages(record)
    history = record.get("history")
    if isinstance(history, list):
        for i, pair in enumerate(history):
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
                raise RecordError(f"history[{i}]", "expected [instruction, answer] as two strings")
            messages += [Message("user", pair[0]), Message("assistant", pair[1])]
    messages.append(Message("user", user))
    if not ranking:
        messages.append(Message("assistant", record["output"]))
    return preference.with_ranking(record, messages)
