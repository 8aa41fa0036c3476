"""A message in any shape mint reads, as a canonical ``Message``: OpenAI's (``content`` a string or parts,
``tool_calls``, the legacy ``function_call``), Anthropic's content blocks (an assistant's ``tool_use``, a user
turn's ``tool_result``s, ``thinking``), LLaMA-Factory v1's ``{"type", "value"}`` parts (``text``, ``reasoning``,
``tool_call``) with ``loss_weight``, and ShareGPT's role names.

Reasoning (``reasoning_content``, ``reasoning``, reasoning and thinking parts, or an OpenAI reasoning item in a
message list before the assistant message it belongs to) is kept as the message's ``reasoning``, apart from
its answer. Content parts other than text become marks (``[IMAGE]``, ``[AUDIO]``, ``[FILE name]``).
"""
from __future__ import annotations

import json
import math
from dataclasses import replace
from typing import Any

from mint.data.formats.fields import RecordError
from mint.data.schema import Message

ROLES = {
    "user": "user", "human": "user", "customer": "user",
    "assistant": "assistant", "gpt": "assistant", "bot": "assistant", "model": "assistant",
    "chatgpt": "assistant", "ai": "assistant",
    "system": "system", "developer": "system",
    "tool": "tool", "function": "tool", "observation": "tool", "ipython": "tool", "function_response": "tool",
}


_TEXT_PARTS = (None, "text", "input_text", "output_text")
_IMAGE_PARTS = ("image_url", "image", "input_image")


class Parts:
    """What a list of content parts holds."""

    __slots__ = ("texts", "calls", "results", "reasoning")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.calls: list[dict] = []
        self.results: list[Message] = []
        self.reasoning: list[str] = []

    @property
    def text(self) -> str:
        return "\n".join(self.texts)


def is_parts(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(p, str) or (isinstance(p, dict) and "type" in p)
                                           for p in value)


def content(raw: Any, where: str) -> Parts:
    """The parts of a message's content (a string, None, or a list of parts)."""
    parts = Parts()
    if raw is None:
        return parts
    if isinstance(raw, str):
        parts.texts.append(raw)
        return parts
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
        # LLaMA-Factory's v1 format writes a part's text under "value"
        text = part.get("text", part.get("value"))
        if kind in _TEXT_PARTS and isinstance(text, str):
            parts.texts.append(text)
        elif kind in _TEXT_PARTS:
            raise RecordError(f"{here}.text", "missing: a text part holds its text under `text` or `value`"
                              if text is None else f"expected a string, got {type(text).__name__}")
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
        elif kind == "reasoning":
            found = reasoning_text(part, here)
            if found:
                parts.reasoning.append(found)
        elif kind == "redacted_thinking":
            continue   # encrypted: nothing a model can learn from
        elif kind == "tool_use":
            parts.calls.append(tool_call({"id": part.get("id"), "name": part.get("name"),
                                          "arguments": part.get("input", {})}, here))
        elif kind == "tool_call":
            parts.calls.append(tool_call(_call_value(part, here), here))
        elif kind == "tool_result":
            result = part.get("content")
            text = content(result, f"{here}.content").text \
                if is_parts(result) or not isinstance(result, (dict, list)) else json.dumps(result, ensure_ascii=False)
            parts.results.append(Message("tool", text, tool_call_id=part["tool_use_id"]
                                         if isinstance(part.get("tool_use_id"), str) else None))
        else:
            raise RecordError(here, f"unsupported content part {kind!r} (expected text, image, audio, file, "
                              "refusal, reasoning, thinking, tool_call, tool_use or tool_result)")
    return parts


def reasoning_text(part: dict, where: str) -> str:
    """The text of a reasoning part or item: LLaMA-Factory v1's ``value``, a ``text``, or an OpenAI reasoning
    item's ``content`` (its reasoning_text parts), else its ``summary`` (summary_text parts); "" when it holds
    only ``encrypted_content``, which no model can learn from."""
    text = part.get("text", part.get("value"))
    if isinstance(text, str):
        return text
    if text is not None:
        raise RecordError(f"{where}.value", f"expected a string, got {type(text).__name__}")
    for key in ("content", "summary"):
        items = part.get(key)
        if items is None:
            continue
        if not isinstance(items, list) or not all(isinstance(p, dict) and isinstance(p.get("text"), str)
                                                  for p in items):
            raise RecordError(f"{where}.{key}", "expected a list of {type, text} parts")
        if items:
            return "\n".join(p["text"] for p in items)
    return ""


def _call_value(part: dict, where: str) -> dict:
    """A LLaMA-Factory v1 tool_call part's call: ``{"name", "arguments"}`` as JSON text (or an object)."""
    value = part.get("value", part.get("tool_call"))
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise RecordError(f"{where}.value", "a tool_call part holds its call as JSON {\"name\", \"arguments\"}") \
                from None
    if not isinstance(value, dict):
        raise RecordError(f"{where}.value", "expected the call as {\"name\", \"arguments\"}")
    return value


def tool_call(raw: Any, where: str) -> dict:
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


def system(record: dict) -> str:
    """A top-level system prompt (Bedrock's and Anthropic's fine-tuning shape, ShareGPT's ``system``): a
    string or a list of text blocks; empty when there is none."""
    raw = record.get("system")
    if raw is None or raw == "":
        return ""
    if isinstance(raw, str):
        return raw if raw.strip() else ""
    if isinstance(raw, list):
        return content(raw, "system").text
    raise RecordError("system", f"expected a string or a list of text blocks, got {type(raw).__name__}")


def system_messages(record: dict) -> list[Message]:
    """The record's top-level system prompt as the first message, or none."""
    text = system(record)
    return [Message("system", text)] if text else []


def message_list(raw: list, where: str) -> list[Message]:
    """A list of messages; an OpenAI reasoning item (``{"type": "reasoning"}``, no role) is the reasoning of
    the assistant message after it."""
    messages: list[Message] = []
    pending: list[str] = []
    for i, item in enumerate(raw):
        here = f"{where}[{i}]"
        if isinstance(item, dict) and "role" not in item and item.get("type") == "reasoning":
            found = reasoning_text(item, here)
            if found:
                pending.append(found)
            continue
        for read in message(item, here):
            if pending and read.role == "assistant":
                read = _with_reasoning(read, pending)
                pending = []
            messages.append(read)
    return messages


def _with_reasoning(message: Message, earlier: list[str]) -> Message:
    return replace(message, reasoning="\n".join(earlier + ([message.reasoning] if message.reasoning else [])))


def message(raw: Any, where: str) -> list[Message]:
    """One logged message as canonical messages: usually one; an Anthropic user turn with ``tool_result``
    blocks becomes a tool message per result, then the user's own text."""
    if not isinstance(raw, dict):
        raise RecordError(where, f"expected an object, got {type(raw).__name__}")
    role_raw = raw.get("role")
    if not isinstance(role_raw, str):
        raise RecordError(f"{where}.role", "missing" if role_raw is None else "expected a string")
    role = ROLES.get(role_raw.strip().lower())
    if role is None:
        raise RecordError(f"{where}.role", f"unknown role {role_raw!r}")
    raw_content = raw.get("content")
    parts = None
    if isinstance(raw_content, str):
        text = raw_content
    elif raw_content is None:
        text = ""
    elif role == "tool" and isinstance(raw_content, (dict, list)) and not is_parts(raw_content):
        text = json.dumps(raw_content, ensure_ascii=False)   # a tool's structured result
    else:
        parts = content(raw_content, f"{where}.content")
        text = parts.text
    calls = raw.get("tool_calls")
    if calls is None and isinstance(raw.get("function_call"), dict):   # legacy OpenAI field
        calls = [raw["function_call"]]
    tool_calls = None
    if calls or (parts is not None and parts.calls):
        if role != "assistant":
            raise RecordError(f"{where}.tool_calls", f"only assistant messages make tool calls, not {role}")
        if calls and not isinstance(calls, list):
            raise RecordError(f"{where}.tool_calls", "expected a list")
        tool_calls = tuple([tool_call(c, f"{where}.tool_calls[{i}]") for i, c in enumerate(calls or ())]
                           + (parts.calls if parts is not None else []))
    name = raw.get("name") if isinstance(raw.get("name"), str) and raw["name"] else None
    call_id = raw.get("tool_call_id") if role != "assistant" and isinstance(raw.get("tool_call_id"), str) \
        and raw["tool_call_id"] else None
    reasoning = raw.get("reasoning_content", raw.get("reasoning"))
    reasoning = [reasoning] if isinstance(reasoning, str) and reasoning else []
    if parts is not None:
        reasoning += parts.reasoning
    finish = raw.get("finish_reason") if isinstance(raw.get("finish_reason"), str) else None
    weight = raw.get("weight")
    if weight is not None and (isinstance(weight, bool) or weight not in (0, 1)):
        raise RecordError(f"{where}.weight", f"{weight!r} is not 0 or 1")
    loss_weight = raw.get("loss_weight")   # LLaMA-Factory v1: a float scale; 0 means context only
    if loss_weight is not None:
        if isinstance(loss_weight, bool) or not isinstance(loss_weight, (int, float)) \
                or not math.isfinite(loss_weight) or loss_weight < 0:
            raise RecordError(f"{where}.loss_weight", f"{loss_weight!r} is not a number >= 0")
        if loss_weight == 0:
            weight = 0
    # weight 0: keep the turn as context but never train on it; an answer cut off by the length limit
    # is not a complete answer to learn
    message = Message(role, text, tool_calls, name, call_id, "\n".join(reasoning) if reasoning else None, finish,
                      0 if weight == 0 or finish == "length" else None)
    if parts is not None and parts.results:
        if role != "user":
            raise RecordError(f"{where}.content", f"only user turns carry tool_result blocks, not {role}")
        return parts.results + ([message] if text.strip() else [])
    return [message]
