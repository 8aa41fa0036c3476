"""The canonical episode (DESIGN.md) and the normalizers that turn log records into one.

A record that cannot become an episode raises ``RecordError`` naming the field
and the reason; ingest quarantines it and goes on.
"""
from __future__ import annotations

import hashlib
import json
import math
from datetime import datetime, timezone
from typing import Any

ROLES = {
    "user": "user", "human": "user", "customer": "user",
    "assistant": "assistant", "gpt": "assistant", "bot": "assistant", "model": "assistant",
    "chatgpt": "assistant", "ai": "assistant",
    "system": "system", "developer": "system",
    "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool", "function_response": "tool",
}
# ShareGPT exports of tool-use data write the assistant's call as its own turn
CALL_ROLES = {"function_call", "tool_call", "tool_calls"}

FORMATS = ("auto", "openai", "sharegpt", "mint", "hf")

THUMBS = {
    "up": 1, "down": -1, "thumbs_up": 1, "thumbs_down": -1, "thumbsup": 1, "thumbsdown": -1,
    "like": 1, "dislike": -1, "positive": 1, "negative": -1, "good": 1, "bad": -1,
    "yes": 1, "no": -1, "+1": 1, "-1": -1, "\U0001f44d": 1, "\U0001f44e": -1, "neutral": 0,
}


class RecordError(Exception):
    """A record that cannot become an episode: ``field`` and ``reason`` go to the quarantine."""

    def __init__(self, field: str, reason: str) -> None:
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field, self.reason = field, reason


def episode_id(messages: list, tools: list, feedback: dict) -> str:
    """Content hash: the same conversation with the same tools and feedback is the same episode."""
    blob = json.dumps([messages, tools, feedback], sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def sniff_format(record: dict) -> str:
    if "conversations" in record:
        return "sharegpt"
    if "messages" in record and (isinstance(record.get("feedback"), dict) or "served_by" in record):
        return "mint"
    if "messages" in record or "request" in record:
        return "openai"
    if "prompt" in record and ("completion" in record or "response" in record):
        return "prompt_completion"
    if "instruction" in record and "output" in record:
        return "alpaca"
    raise RecordError("", "unknown record shape: expected `messages` (OpenAI/mint) or `conversations` (ShareGPT)")


def normalize(record: Any, fmt: str = "auto") -> dict:
    """One log record as a canonical episode (without ``id``, ``specialist`` and ``source``)."""
    if not isinstance(record, dict):
        raise RecordError("", f"expected a JSON object, got {type(record).__name__}")
    kind = sniff_format(record) if fmt in ("auto", "hf") else fmt
    if kind == "sharegpt":
        messages = _sharegpt_messages(record)
    elif kind in ("openai", "mint"):
        messages = _openai_messages(record)
    elif kind == "prompt_completion":
        messages = _prompt_completion_messages(record)
    elif kind == "alpaca":
        messages = _alpaca_messages(record)
    else:   # pragma: no cover - FORMATS is checked by the caller
        raise RecordError("", f"unknown format {fmt}")
    _check_conversation(messages, "conversations" if kind == "sharegpt" else "messages")
    return {
        "session": _optional_str(record, ("session", "session_id", "conversation_id", "thread_id")),
        "ts": _timestamp(record),
        "messages": messages,
        "tools": _tools(record),
        "feedback": normalize_feedback(record),
        "served_by": _optional_str(record, ("served_by",)),
        "label": _optional_str(record, ("specialist",)) or _meta_label(record),
    }


# --- messages -----------------------------------------------------------------

def _openai_messages(record: dict) -> list[dict]:
    raw = record.get("messages")
    if raw is None and isinstance(record.get("request"), dict):
        # a server log: {"request": {"messages": [...]}, "response": {"choices": [{"message": ...}]}}
        raw = record["request"].get("messages")
        reply = _response_message(record.get("response"))
        if isinstance(raw, list) and reply is not None:
            raw = [*raw, reply]
    if raw is None:
        raise RecordError("messages", "missing")
    if not isinstance(raw, list):
        raise RecordError("messages", f"expected a list, got {type(raw).__name__}")
    return [_message(m, f"messages[{i}]") for i, m in enumerate(raw)]


def _response_message(response: Any) -> Any:
    if isinstance(response, dict):
        choices = response.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            return choices[0].get("message")
    return None


def _message(raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise RecordError(where, f"expected an object, got {type(raw).__name__}")
    role_raw = raw.get("role")
    if not isinstance(role_raw, str):
        raise RecordError(f"{where}.role", "missing" if role_raw is None else "expected a string")
    role = ROLES.get(role_raw.strip().lower())
    if role is None:
        raise RecordError(f"{where}.role", f"unknown role {role_raw!r}")
    message: dict = {"role": role, "content": _content(raw.get("content"), f"{where}.content")}
    calls = raw.get("tool_calls")
    if calls is None and isinstance(raw.get("function_call"), dict):   # legacy OpenAI field
        calls = [raw["function_call"]]
    if calls:
        if role != "assistant":
            raise RecordError(f"{where}.tool_calls", f"only assistant messages make tool calls, not {role}")
        if not isinstance(calls, list):
            raise RecordError(f"{where}.tool_calls", "expected a list")
        message["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls)]
    if role == "tool":
        for key in ("name", "tool_call_id"):
            if isinstance(raw.get(key), str):
                message[key] = raw[key]
    return message


def _content(raw: Any, where: str) -> str:
    if raw is None:
        return ""
    if isinstance(raw, str):
        return raw
    if isinstance(raw, list):   # OpenAI content parts
        texts = []
        for i, part in enumerate(raw):
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and part.get("type") in ("image_url", "image", "input_image"):
                texts.append("[IMAGE]")
            else:
                raise RecordError(f"{where}[{i}]", "expected a text part")
        return "\n".join(texts)
    raise RecordError(where, f"expected a string or a list of content parts, got {type(raw).__name__}")


def _tool_call(raw: Any, where: str) -> dict:
    if not isinstance(raw, dict):
        raise RecordError(where, "expected an object")
    fn = raw.get("function") if isinstance(raw.get("function"), dict) else raw
    name = fn.get("name")
    if not isinstance(name, str) or not name:
        raise RecordError(f"{where}.function.name", "missing")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            raise RecordError(f"{where}.function.arguments", "not valid JSON") from None
    if not isinstance(args, dict):
        raise RecordError(f"{where}.function.arguments", "expected a JSON object")
    call = {"type": "function", "function": {"name": name, "arguments": args}}
    if isinstance(raw.get("id"), str):
        call = {"id": raw["id"], **call}
    return call


def _sharegpt_messages(record: dict) -> list[dict]:
    raw = record.get("conversations")
    if raw is None:
        raise RecordError("conversations", "missing")
    if not isinstance(raw, list):
        raise RecordError("conversations", f"expected a list, got {type(raw).__name__}")
    messages: list[dict] = []
    if isinstance(record.get("system"), str) and record["system"].strip():
        messages.append({"role": "system", "content": record["system"]})
    for i, turn in enumerate(raw):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise RecordError(where, f"expected an object, got {type(turn).__name__}")
        speaker = turn.get("from", turn.get("role"))
        if not isinstance(speaker, str):
            raise RecordError(f"{where}.from", "missing" if speaker is None else "expected a string")
        value = _content(turn.get("value", turn.get("content")), f"{where}.value")
        if speaker.strip().lower() in CALL_ROLES:
            try:
                parsed = json.loads(value)
            except ValueError:
                raise RecordError(f"{where}.value", "a function_call turn must hold JSON") from None
            calls = parsed if isinstance(parsed, list) else [parsed]
            messages.append({"role": "assistant", "content": "",
                             "tool_calls": [_tool_call(c, f"{where}.value[{j}]") for j, c in enumerate(calls)]})
            continue
        role = ROLES.get(speaker.strip().lower())
        if role is None:
            raise RecordError(f"{where}.from", f"unknown role {speaker!r}")
        messages.append({"role": role, "content": value})
    return messages


def _prompt_completion_messages(record: dict) -> list[dict]:
    prompt, completion = record.get("prompt"), record.get("completion", record.get("response"))
    if isinstance(prompt, list) and isinstance(completion, list):   # TRL conversational
        return [_message(m, f"prompt[{i}]") for i, m in enumerate(prompt)] + \
               [_message(m, f"completion[{i}]") for i, m in enumerate(completion)]
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    raise RecordError("prompt", "expected prompt and completion as two strings or two message lists")


def _alpaca_messages(record: dict) -> list[dict]:
    parts = [record.get("instruction"), record.get("input") or ""]
    if not all(isinstance(p, str) for p in parts) or not isinstance(record.get("output"), str):
        raise RecordError("instruction", "expected instruction, input and output as strings")
    user = parts[0] + ("\n\n" + parts[1] if parts[1].strip() else "")
    return [{"role": "user", "content": user}, {"role": "assistant", "content": record["output"]}]


def _check_conversation(messages: list[dict], where: str) -> None:
    if not messages:
        raise RecordError(where, "empty")
    if not any(m["content"].strip() or m.get("tool_calls") for m in messages):
        raise RecordError(where, "every message is empty")
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise RecordError(where, "no user message")


# --- the rest of the episode ---------------------------------------------------

def _tools(record: dict) -> list[dict]:
    raw = record.get("tools")
    if raw is None and isinstance(record.get("request"), dict):
        raw = record["request"].get("tools")
    if raw is None:
        raw = record.get("functions")
    if raw is None:
        return []
    if isinstance(raw, str):   # some ShareGPT exports keep the tool list as a JSON string
        try:
            raw = json.loads(raw) if raw.strip() else []
        except ValueError:
            raise RecordError("tools", "not valid JSON") from None
    if not isinstance(raw, list):
        raise RecordError("tools", f"expected a list, got {type(raw).__name__}")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise RecordError(f"tools[{i}]", "expected an object")
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if not isinstance(fn.get("name"), str):
            raise RecordError(f"tools[{i}].function.name", "missing")
        tools.append({"type": "function", "function": fn})
    return tools


def _optional_str(record: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = record.get(key)
        if isinstance(value, (str, int)) and not isinstance(value, bool) and str(value):
            return str(value)
    return None


def _meta_label(record: dict) -> str | None:
    meta = record.get("metadata") or record.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("specialist"), str):
        return meta["specialist"]
    return None


def _timestamp(record: dict) -> str | None:
    for key in ("ts", "timestamp", "created_at", "created", "time"):
        value = record.get(key)
        if isinstance(value, bool) or value is None:
            continue
        if isinstance(value, (int, float)) and math.isfinite(value):
            seconds = value / 1000 if value > 1e11 else value   # milliseconds since the epoch
            try:
                return datetime.fromtimestamp(seconds, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            except (OverflowError, OSError, ValueError):
                raise RecordError(key, f"{value} is not a valid time") from None
        if isinstance(value, str) and value:
            return value
    return None


def normalize_feedback(record: dict) -> dict:
    """Thumbs, 1-5 stars, scores in [0, 1] and KTO labels as ``rating`` -1/0/1, plus any correction.

    ``rating`` itself may be -1/0/1 or a 2-5 star value; for one star write ``stars: 1``.
    """
    raw = record.get("feedback")
    where = "feedback"
    if raw is None:
        raw, where = {k: record[k] for k in ("rating", "thumbs", "stars", "score", "label", "correction")
                      if k in record}, ""
    elif isinstance(raw, (str, int, float, bool)):
        raw = {"thumbs" if isinstance(raw, str) else "rating": raw}
    elif not isinstance(raw, dict):
        raise RecordError("feedback", f"expected an object, got {type(raw).__name__}")

    def field(key: str) -> str:
        return f"{where}.{key}" if where else key

    rating = None
    for key in ("rating", "thumbs", "stars", "score", "label"):
        value = raw.get(key)
        if value is None:
            continue
        rating = _rating(key, value, field(key))
        break
    return {"rating": rating, "correction": _correction(raw.get("correction"), field("correction"))}


def _rating(key: str, value: Any, where: str) -> int:
    if key == "label" or isinstance(value, bool):
        if not isinstance(value, bool):
            raise RecordError(where, "expected true or false")
        return 1 if value else -1
    if isinstance(value, str):
        mapped = THUMBS.get(value.strip().lower())
        if mapped is None:
            raise RecordError(where, f"unknown thumbs value {value!r} (expected up or down)")
        return mapped
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(where, f"expected a number, got {type(value).__name__}")
    if key == "thumbs":
        if value not in (-1, 0, 1):
            raise RecordError(where, f"{value} is not -1, 0 or 1")
        return int(value)
    if key == "score":
        if not 0 <= value <= 1:
            raise RecordError(where, f"{value} is outside [0, 1]")
        return 1 if value >= 0.6 else -1 if value <= 0.4 else 0
    if key == "rating" and value in (-1, 0, 1):
        return int(value)
    if not 1 <= value <= 5:
        raise RecordError(where, f"{value} is not -1, 0, 1 or a 1-5 star value")
    return 1 if value >= 4 else 0 if value >= 3 else -1


def _correction(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, list):   # a corrected conversation: its last assistant turn
        for message in reversed(value):
            if isinstance(message, dict) and message.get("role") in ("assistant", "gpt") \
                    and isinstance(message.get("content"), str):
                return message["content"]
    raise RecordError(where, "expected the corrected answer as a string")
