"""ShareGPT: ``{"conversations": [{"from": "human", "value": ...}, ...], "system"?, "tools"?}``; a
``function_call`` turn holds the assistant's call(s) as JSON. A ``chosen``/``rejected`` pair beside the
conversation is LLaMA-Factory's ranking layout."""
from __future__ import annotations

import json

from mint.data.formats import preference
from mint.data.formats.fields import RecordError
from mint.data.formats.messages import ROLES, content, system_messages, tool_call
from mint.data.schema import Message, Preference

# ShareGPT exports of tool-use data write the assistant's call as its own turn
CALL_ROLES = {"function_call", "tool_call", "tool_calls"}


def sniff(record: dict) -> bool:
    return "conversations" in record


def normalize(record: dict) -> tuple[list[Message], Preference | None]:
    raw = record.get("conversations")
    if raw is None:
        raise RecordError("conversations", "missing")
    if not isinstance(raw, list):
        raise RecordError("conversations", f"expected a list, got {type(raw).__name__}")
    messages = system_messages(record)
    for i, turn in enumerate(raw):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise RecordError(where, f"expected an object, got {type(turn).__name__}")
        speaker = turn.get("from", turn.get("role"))
        if not isinstance(speaker, str):
            raise RecordError(f"{where}.from", "missing" if speaker is None else "expected a string")
        if "value" not in turn and "content" not in turn:
            raise RecordError(f"{where}.value", "missing (a ShareGPT turn holds its text under `value`)")
        value = content(turn.get("value", turn.get("content")), f"{where}.value").text
        if speaker.strip().lower() in CALL_ROLES:
            try:
                parsed = json.loads(value)
            except ValueError:
                raise RecordError(f"{where}.value", "a function_call turn must hold JSON") from None
            calls = parsed if isinstance(parsed, list) else [parsed]
            messages.append(Message("assistant", "", tuple(tool_call(c, f"{where}.value[{j}]")
                                                           for j, c in enumerate(calls))))
            continue
        role = ROLES.get(speaker.strip().lower())
        if role is None:
            raise RecordError(f"{where}.from", f"unknown role {speaker!r}")
        messages.append(Message(role, value))
    return preference.with_ranking(record, messages)
