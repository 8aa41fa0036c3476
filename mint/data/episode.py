"""The canonical episode (DESIGN.md) and the normalizers that turn log records into one.

A record that cannot become an episode raises ``RecordError`` naming the field
and the reason; ingest quarantines it and goes on.
"""
from __future__ import annotations

import email.utils
import hashlib
import json
import math
import re
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
        "upstream_id": upstream_id(record),
        "label": _optional_str(record, ("specialist",)) or _meta_label(record),
    }


_UPSTREAM_KEYS = ("upstream_id", "request_id", "response_id", "completion_id")


def upstream_id(record: dict) -> str | None:
    """The id the serving stack gave this conversation (``chatcmpl-…``), which later feedback names.

    A bare top-level ``id`` counts only when it looks like such an id (8+ characters, not only digits):
    row numbers of an unrelated dataset must not make two conversations one.
    """
    found = _optional_str(record, _UPSTREAM_KEYS)
    if found is None and isinstance(record.get("response"), dict):
        found = _optional_str(record["response"], ("id",))
    if found is None:
        value = record.get("id")
        if isinstance(value, str) and len(value) >= 8 and not value.isdigit():
            found = value
    return found


# --- messages -----------------------------------------------------------------

def _openai_messages(record: dict) -> list[dict]:
    raw = record.get("messages")
    if raw is None and isinstance(record.get("request"), dict):
        # a server log: {"request": {"messages": [...]}, "response": {"choices": [{"message": ...}]}}
        raw = record["request"].get("messages")
        if isinstance(raw, list):
            raw = [*raw, _response_message(record)]
    if raw is None:
        raise RecordError("messages", "missing")
    if not isinstance(raw, list):
        raise RecordError("messages", f"expected a list, got {type(raw).__name__}")
    messages: list[dict] = []
    for i, m in enumerate(raw):
        messages.extend(_message(m, f"messages[{i}]"))
    return messages


def _response_message(record: dict) -> dict:
    """The answer of a server log, with its finish_reason; a failed or missing answer is a RecordError
    (a user-only episode would teach nothing and look like an unanswered turn)."""
    response = record.get("response")
    error = record.get("error") or (response.get("error") if isinstance(response, dict) else None)
    if error:
        detail = error.get("message", error) if isinstance(error, dict) else error
        raise RecordError("response", f"the request failed: {str(detail)[:200]}")
    if not isinstance(response, dict):
        raise RecordError("response", "missing: the request got no answer")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise RecordError("response.choices", "no answer (expected choices[0].message)")
    message = dict(choices[0]["message"])
    if isinstance(choices[0].get("finish_reason"), str):
        message.setdefault("finish_reason", choices[0]["finish_reason"])
    return message


def _message(raw: Any, where: str) -> list[dict]:
    """One logged message as canonical messages: usually one; an Anthropic user turn with
    ``tool_result`` blocks becomes a tool message per result, then the user's own text."""
    if not isinstance(raw, dict):
        raise RecordError(where, f"expected an object, got {type(raw).__name__}")
    role_raw = raw.get("role")
    if not isinstance(role_raw, str):
        raise RecordError(f"{where}.role", "missing" if role_raw is None else "expected a string")
    role = ROLES.get(role_raw.strip().lower())
    if role is None:
        raise RecordError(f"{where}.role", f"unknown role {role_raw!r}")
    content = raw.get("content")
    parts = _NO_PARTS
    if isinstance(content, str):
        text = content
    elif content is None:
        text = ""
    elif role == "tool" and isinstance(content, (dict, list)) and not _is_parts(content):
        text = json.dumps(content, ensure_ascii=False)   # a tool's structured result
    else:
        parts = _Parts()
        text = _content(content, f"{where}.content", parts)
    message: dict = {"role": role, "content": text}
    calls = raw.get("tool_calls")
    if calls is None and isinstance(raw.get("function_call"), dict):   # legacy OpenAI field
        calls = [raw["function_call"]]
    if calls or parts.calls:
        if role != "assistant":
            raise RecordError(f"{where}.tool_calls", f"only assistant messages make tool calls, not {role}")
        if calls and not isinstance(calls, list):
            raise RecordError(f"{where}.tool_calls", "expected a list")
        message["tool_calls"] = [_tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls or ())] \
            + parts.calls
    for key in ("name", "tool_call_id") if role != "assistant" else ("name",):
        if isinstance(raw.get(key), str) and raw[key]:
            message[key] = raw[key]
    reasoning = raw.get("reasoning_content", raw.get("reasoning"))
    reasoning = [reasoning] if isinstance(reasoning, str) and reasoning else []
    if reasoning or parts.reasoning:
        message["reasoning"] = "\n".join(reasoning + parts.reasoning)
    if isinstance(raw.get("finish_reason"), str):
        message["finish_reason"] = raw["finish_reason"]
    weight = raw.get("weight")
    if weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
        raise RecordError(f"{where}.weight", f"{weight!r} is not 0 or 1")
    # weight 0: keep the turn as context but never train on it; an answer cut off by the length limit
    # is not a complete answer to learn
    if weight == 0 or message.get("finish_reason") == "length":
        message["weight"] = 0
    if parts.results:
        if role != "user":
            raise RecordError(f"{where}.content", f"only user turns carry tool_result blocks, not {role}")
        return parts.results + ([message] if message["content"].strip() else [])
    return [message]


class _Parts:
    """What a list of content parts holds, sorted into the canonical fields it maps to."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[dict] = []
        self.results: list[dict] = []
        self.reasoning: list[str] = []


_NO_PARTS = _Parts()   # read-only: a plain string content has no calls, results or reasoning parts


_IMAGE_PARTS = ("image_url", "image", "input_image")


def _is_parts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, str) or (isinstance(p, dict) and "type" in p)
                                           for p in value)


def _content(raw: Any, where: str, parts: _Parts | None = None) -> str:
    """Text of a message's content; OpenAI and Anthropic parts other than text go to ``parts``."""
    parts = parts if parts is not None else _Parts()
    if raw is None:
        return ""
    if isinstance(raw, str):
        parts.texts.append(raw)
        return raw
    if not isinstance(raw, list):
        raise RecordError(where, f"expected a string or a list of content parts, got {type(raw).__name__}")
    for i, part in enumerate(raw):
        here = f"{where}[{i}]"
        if isinstance(part, str):
            parts.texts.append(part)
            continue
        if not isinstance(part, dict):
            raise RecordError(here, "expected a content part")
        kind = part.get("type")
        if kind in (None, "text", "input_text", "output_text") and isinstance(part.get("text"), str):
            parts.texts.append(part["text"])
        elif kind in _IMAGE_PARTS:
            parts.texts.append("[IMAGE]")
        elif kind == "refusal" and isinstance(part.get("refusal"), str):
            parts.texts.append(part["refusal"])
        elif kind in ("input_audio", "audio"):
            parts.texts.append("[AUDIO]")
        elif kind in ("file", "input_file", "document"):
            info = part.get("file") if isinstance(part.get("file"), dict) else part
            name = info.get("filename") or info.get("title")
            parts.texts.append(f"[FILE {name}]" if isinstance(name, str) and name else "[FILE]")
        elif kind == "thinking" and isinstance(part.get("thinking"), str):
            parts.reasoning.append(part["thinking"])
        elif kind == "redacted_thinking":
            continue   # encrypted: nothing a model can learn from
        elif kind == "tool_use":
            parts.calls.append(_tool_call({"id": part.get("id"), "name": part.get("name"),
                                           "arguments": part.get("input", {})}, here))
        elif kind == "tool_result":
            result = part.get("content")
            text = _content(result, f"{here}.content") if _is_parts(result) or not isinstance(result, (dict, list)) \
                else json.dumps(result, ensure_ascii=False)
            tool: dict = {"role": "tool", "content": text}
            if isinstance(part.get("tool_use_id"), str):
                tool["tool_call_id"] = part["tool_use_id"]
            parts.results.append(tool)
        else:
            raise RecordError(here, f"unsupported content part {kind!r} (expected text, image, audio, file, "
                              "refusal, thinking, tool_use or tool_result)")
    return "\n".join(parts.texts)


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
        return [out for i, m in enumerate(prompt) for out in _message(m, f"prompt[{i}]")] + \
               [out for i, m in enumerate(completion) for out in _message(m, f"completion[{i}]")]
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
    """The record's time as ISO-8601 UTC (``2026-11-29T10:00:00Z``): epoch seconds, milliseconds or
    microseconds, ISO-8601 (naive means UTC) or an RFC 2822 date."""
    for key in ("ts", "timestamp", "created_at", "created", "time"):
        value = record.get(key)
        if isinstance(value, bool) or value is None or value == "":
            continue
        if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
            value = float(value)
        if isinstance(value, (int, float)):
            return _from_epoch(value, key)
        if isinstance(value, str):
            return _from_text(value, key)
        # another kind of value under a time-like name (a {"start", "end"} span): not this record's time
    return None


def _from_epoch(value: float, key: str) -> str:
    # the magnitude says the unit: seconds until the year 5138, then ms, µs and ns
    seconds = value
    for divisor in (1, 1e3, 1e6, 1e9):
        seconds = value / divisor
        if abs(seconds) < 1e11:
            break
    try:
        if not math.isfinite(seconds):
            raise ValueError
        moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise RecordError(key, f"{value} is not a valid time") from None
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_text(value: str, key: str) -> str:
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            raise RecordError(key, f"{value[:40]!r} is not a time (expected ISO-8601, an RFC 2822 date or "
                              "epoch seconds, ms or µs)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def normalize_feedback(record: dict) -> dict:
    """Thumbs, 1-5 stars, scores in [0, 1] and KTO labels as ``rating`` -1/0/1, plus any correction.

    ``rating`` itself may be -1/0/1 or a 2-5 star value; for one star write ``stars: 1``.
    """
    raw = record.get("feedback")
    where = "feedback"
    if raw is None:
        raw, where = {k: record[k] for k in ("rating", "thumbs", "stars", "score", "label", "correction")
                      if k in record and _top_level_feedback(k, record[k])}, ""
    elif isinstance(raw, (str, int, float, bool)):
        raw = {"thumbs" if isinstance(raw, str) else "rating": raw}
    elif not isinstance(raw, dict):
        raise RecordError("feedback", f"expected an object, got {type(raw).__name__}")
    if where and raw.get("correction") is None and record.get("correction") is not None:
        raw = {**raw, "correction": record["correction"]}
        correction_where = "correction"
    else:
        correction_where = f"{where}.correction" if where else "correction"

    def field(key: str) -> str:
        return f"{where}.{key}" if where else key

    rating = None
    for key in ("rating", "thumbs", "stars", "score", "label"):
        value = raw.get(key)
        if value is None:
            continue
        rating = _rating(key, value, field(key))
        break
    return {"rating": rating, "correction": _correction(raw.get("correction"), correction_where)}


def _top_level_feedback(key: str, value: Any) -> bool:
    """Whether a top-level ``label`` or ``score`` is feedback: other datasets use these names for class
    labels and quality scores, so only a boolean label (KTO) and a score in [0, 1] count."""
    if key == "label":
        return isinstance(value, bool)
    if key == "score":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return True


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
