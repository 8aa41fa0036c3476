"""The canonical episode (docs/data.md) and the normalizers that turn log records into one.

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

FORMATS = ("auto", "openai", "sharegpt", "mint", "hf", "alpaca", "prompt_completion", "preference")

THUMBS = {
    "up": 1, "down": -1, "thumbs_up": 1, "thumbs_down": -1, "thumbsup": 1, "thumbsdown": -1,
    "like": 1, "dislike": -1, "positive": 1, "negative": -1, "good": 1, "bad": -1,
    "yes": 1, "no": -1, "+1": 1, "-1": -1, "\U0001f44d": 1, "\U0001f44e": -1, "neutral": 0,
}


class RecordError(Exception):
    """A record that cannot become an episode: ``field`` and ``reason`` go to the quarantine."""

    def __init__(self, field: str, reason: str) -> None:
        if reason.startswith("expected ") and reason.endswith(", got NoneType"):   # absent, or null: say so
            reason = f"missing ({reason[:-len(', got NoneType')]})"
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field, self.reason = field, reason


def episode_id(messages: list, tools: list, feedback: dict, preference: dict | None = None) -> str:
    """Content hash: the same conversation with the same tools, feedback and rejected answer is the same
    episode (an episode without a preference hashes as it did before preferences existed)."""
    content = [messages, tools, feedback] + ([preference] if preference else [])
    blob = json.dumps(content, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


# whole chosen/rejected conversations (the prompt is their common beginning)
_PAIRED_CONVERSATIONS = (("chosen_messages", "rejected_messages"), ("chosen_conversations", "rejected_conversations"))
# OpenAI's preference fine-tuning format: {"input": {"messages", "tools"}, "preferred_output", "non_preferred_output"}
_OPENAI_PREFERENCE = ("preferred_output", "non_preferred_output")


def _whole_conversation(value: Any) -> bool:
    """Whether a ``chosen`` value is a whole conversation (it starts with a user or system turn), not an answer."""
    if not isinstance(value, list) or not value or not isinstance(value[0], dict):
        return False
    role = value[0].get("role", value[0].get("from"))
    return isinstance(role, str) and ROLES.get(role.strip().lower()) in ("user", "system")


def sniff_format(record: dict) -> str:
    # chosen/rejected written as whole conversations (UltraFeedback's shape) win over a `messages` copy of them
    if "rejected" in record and _whole_conversation(record.get("chosen")):
        return "preference"
    if "instruction" in record and ("output" in record or "chosen" in record):
        return "alpaca"
    if "chosen" in record and "rejected" in record and "conversations" not in record and "messages" not in record:
        return "preference"
    if any(chosen in record and rejected in record for chosen, rejected in (*_PAIRED_CONVERSATIONS, _OPENAI_PREFERENCE)):
        return "preference"
    if "conversations" in record:
        return "sharegpt"
    if "messages" in record and (isinstance(record.get("feedback"), dict) or "served_by" in record):
        return "mint"
    if "messages" in record or "request" in record:
        return "openai"
    if "prompt" in record and ("completion" in record or "response" in record):
        return "prompt_completion"
    if isinstance(record.get("input"), list) and "ideal" in record:   # an OpenAI evals sample
        return "prompt_completion"
    if "instruction" in record and "output" in record:
        return "alpaca"
    if "prompt" in record:
        raise RecordError("completion", "missing: a prompt-only record has no answer to learn (give `completion`, "
                          "or `chosen` and `rejected`)")
    if "text" in record:
        raise RecordError("text", "plain text (a pretraining corpus) is not a conversation: mint trains on "
                          "messages with an assistant answer")
    raise RecordError("", "unknown record shape: found keys " + ", ".join(repr(k) for k in list(record)[:8])
                      + "; expected `messages` (OpenAI/mint), `conversations` (ShareGPT), `prompt`+`completion`, "
                      "`instruction`+`output` (Alpaca) or `chosen`+`rejected` (preference)")


def normalize(record: Any, fmt: str = "auto") -> dict:
    """One log record as a canonical episode (without ``id``, ``specialist`` and ``source``)."""
    if not isinstance(record, dict):
        raise RecordError("", f"expected a JSON object, got {type(record).__name__}")
    kind = sniff_format(record) if fmt in ("auto", "hf") else fmt
    preference = None
    if kind == "sharegpt":
        messages = _sharegpt_messages(record)
    elif kind in ("openai", "mint"):
        messages = _openai_messages(record)
    elif kind == "prompt_completion":
        messages = _prompt_completion_messages(record)
    elif kind == "alpaca":
        messages = _alpaca_messages(record)
    elif kind == "preference":
        messages, preference = _preference_messages(record)
    else:   # pragma: no cover - FORMATS is checked by the caller
        raise RecordError("", f"unknown format {fmt}")
    if preference is None and kind in ("sharegpt", "alpaca", "openai") and ("chosen" in record or "rejected" in record):
        # LLaMA-Factory's ranking format: the conversation is the prompt, chosen/rejected its two answers
        preference = _ranking_answers(record, messages)
        messages = messages + preference.pop("chosen")
    _check_conversation(messages, "conversations" if kind == "sharegpt" else "messages", preference)
    media = _media(record)
    replace_media_placeholders(messages + (preference["rejected"] if preference else []), media)
    return {
        "session": _optional_str(record, ("session", "session_id", "conversation_id", "thread_id")),
        "ts": _timestamp(record),
        "messages": messages,
        "tools": _tools(record),
        "feedback": normalize_feedback(record),
        "served_by": _optional_str(record, ("served_by",)),
        "upstream_id": upstream_id(record),
        "label": _optional_str(record, ("specialist",)) or _meta_label(record),
        "preference": preference,
        "media": media,
        "parallel_tool_calls": _parallel_tool_calls(record),
    }


def _parallel_tool_calls(record: dict) -> bool | None:
    """OpenAI's ``parallel_tool_calls`` (top level, or in a server log's request or a preference's input)."""
    for holder in (record, record.get("request"), record.get("input")):
        if isinstance(holder, dict) and "parallel_tool_calls" in holder:
            value = holder["parallel_tool_calls"]
            if not isinstance(value, bool):
                raise RecordError("parallel_tool_calls", f"expected true or false, got {value!r}")
            return value
    return None


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
    system = _system(record)
    if system and not (raw and isinstance(raw[0], dict) and raw[0].get("role") in ("system", "developer")):
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(raw):
        messages.extend(_message(m, f"messages[{i}]"))
    return messages


def _system(record: dict) -> str:
    """A top-level system prompt (Bedrock's and Anthropic's fine-tuning shape, ShareGPT's ``system``): a
    string or a list of text blocks; empty when there is none."""
    raw = record.get("system")
    if raw is None or raw == "":
        return ""
    if isinstance(raw, str):
        return raw if raw.strip() else ""
    if isinstance(raw, list):
        return _content(raw, "system")
    raise RecordError("system", f"expected a string or a list of text blocks, got {type(raw).__name__}")


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
    loss_weight = raw.get("loss_weight")   # LLaMA-Factory v1: a float scale; 0 means context only
    if loss_weight is not None:
        if isinstance(loss_weight, bool) or not isinstance(loss_weight, (int, float)) \
                or not math.isfinite(loss_weight) or loss_weight < 0:
            raise RecordError(f"{where}.loss_weight", f"{loss_weight!r} is not a number >= 0")
        if loss_weight == 0:
            weight = 0
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
        # LLaMA-Factory's v1 format writes a text part's text under "value"
        text = part.get("text", part.get("value"))
        if kind in (None, "text", "input_text", "output_text") and isinstance(text, str):
            parts.texts.append(text)
        elif kind in (None, "text", "input_text", "output_text"):
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
    if _system(record):
        messages.append({"role": "system", "content": _system(record)})
    for i, turn in enumerate(raw):
        where = f"conversations[{i}]"
        if not isinstance(turn, dict):
            raise RecordError(where, f"expected an object, got {type(turn).__name__}")
        speaker = turn.get("from", turn.get("role"))
        if not isinstance(speaker, str):
            raise RecordError(f"{where}.from", "missing" if speaker is None else "expected a string")
        if "value" not in turn and "content" not in turn:
            raise RecordError(f"{where}.value", "missing (a ShareGPT turn holds its text under `value`)")
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
    if "prompt" not in record and isinstance(record.get("input"), list):
        # OpenAI evals: {"input": [messages], "ideal": answer or [acceptable answers]}; the first is learnt
        ideal = record.get("ideal")
        ideal = ideal[0] if isinstance(ideal, list) and ideal else ideal
        if not isinstance(ideal, str):
            raise RecordError("ideal", "expected the ideal answer as a string (or a list of strings)")
        return [out for i, m in enumerate(record["input"]) for out in _message(m, f"input[{i}]")] + \
            [{"role": "assistant", "content": ideal}]
    prompt, completion = record.get("prompt"), record.get("completion", record.get("response"))
    if isinstance(prompt, list) and isinstance(completion, list):   # TRL conversational
        return [out for i, m in enumerate(prompt) for out in _message(m, f"prompt[{i}]")] + \
               [out for i, m in enumerate(completion) for out in _message(m, f"completion[{i}]")]
    if isinstance(prompt, str) and isinstance(completion, str):
        return [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]
    raise RecordError("prompt", "expected prompt and completion as two strings or two message lists")


def _alpaca_messages(record: dict) -> list[dict]:
    parts = [record.get("instruction"), record.get("input") or ""]
    for key, value in zip(("instruction", "input"), parts):
        if not isinstance(value, str):
            raise RecordError(key, f"expected a string, got {type(value).__name__}")
    ranking = "output" not in record and "chosen" in record   # the answers are chosen and rejected
    if not ranking and not isinstance(record.get("output"), str):
        raise RecordError("output", "missing" if record.get("output") is None else "expected a string")
    user = parts[0] + ("\n\n" + parts[1] if parts[1].strip() else "")
    messages = [{"role": "system", "content": _system(record)}] if _system(record) else []
    history = record.get("history")   # LLaMA-Factory: earlier [instruction, answer] pairs
    if isinstance(history, list):
        for i, pair in enumerate(history):
            if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(t, str) for t in pair)):
                raise RecordError(f"history[{i}]", "expected [instruction, answer] as two strings")
            messages += [{"role": "user", "content": pair[0]}, {"role": "assistant", "content": pair[1]}]
    messages.append({"role": "user", "content": user})
    if not ranking:
        messages.append({"role": "assistant", "content": record["output"]})
    return messages


# --- preferences -------------------------------------------------------------------

def _preference_messages(record: dict) -> tuple[list[dict], dict]:
    """(prompt + chosen messages, preference) of a TRL preference record (``prompt``/``chosen``/``rejected``,
    strings or message lists, the prompt implicit when absent), an HH-RLHF pair of ``\n\nHuman:`` /
    ``\n\nAssistant:`` transcripts, or ``chosen_messages``/``rejected_messages`` conversations."""
    keys = next(((c, r) for c, r in (*_PAIRED_CONVERSATIONS, _OPENAI_PREFERENCE) if c in record and r in record),
                ("chosen", "rejected"))
    chosen = _answer_messages(record[keys[0]], keys[0])
    rejected = _answer_messages(record[keys[1]], keys[1])
    prompt: list[dict] = [{"role": "system", "content": _system(record)}] if _system(record) else []
    raw_prompt, prompt_field = record.get("prompt"), "prompt"
    if keys == _OPENAI_PREFERENCE:
        if not isinstance(record.get("input"), dict) or not isinstance(record["input"].get("messages"), list):
            raise RecordError("input.messages", "missing: the prompt of a preferred/non-preferred pair")
        raw_prompt, prompt_field = record["input"]["messages"], "input.messages"
    if raw_prompt is not None:
        raw = raw_prompt
        if isinstance(raw, str):
            prompt.append({"role": "user", "content": raw})
        elif isinstance(raw, list):
            prompt += [out for i, m in enumerate(raw) for out in _any_message(m, f"{prompt_field}[{i}]")]
        else:
            raise RecordError(prompt_field, f"expected a string or a list of messages, got {type(raw).__name__}")
        # both sides written as whole conversations that repeat the prompt: keep only what follows it
        asked = [m for m in prompt if m["role"] != "system"]
        for side in (chosen, rejected):
            begins = [m for m in side[:len(asked) + 1] if m["role"] != "system"][:len(asked)]
            if asked and len(side) > len(asked) and [(m["role"], m["content"]) for m in begins] == \
                    [(m["role"], m["content"]) for m in asked]:
                del side[:side.index(begins[-1]) + 1]
        return prompt + chosen, {"prompt_messages": len(prompt), "rejected": rejected}
    # implicit prompt: the two conversations share it, and differ from the first answer that differs
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == len(chosen) and shared == len(rejected):
        raise RecordError(keys[1], f"the same conversation as `{keys[0]}`: no preference")
    if shared == 0 or not any(m["role"] == "user" for m in chosen[:shared]):
        raise RecordError(keys[0], f"no prompt: give `prompt`, or write `{keys[0]}` and `{keys[1]}` as whole "
                          "conversations that begin with the same user turn")
    return prompt + chosen, {"prompt_messages": len(prompt) + shared, "rejected": rejected[shared:]}


def _ranking_answers(record: dict, prompt: list[dict]) -> dict:
    """LLaMA-Factory's ranking format: ``chosen`` and ``rejected`` answers to the record's conversation."""
    for key in ("chosen", "rejected"):
        if key not in record:
            other = "rejected" if key == "chosen" else "chosen"
            raise RecordError(key, f"missing: a preference record has both `chosen` and `rejected` "
                              f"(this one has only `{other}`)")
    chosen, rejected = (_answer_messages(record[k], k) for k in ("chosen", "rejected"))
    if chosen == rejected:
        raise RecordError("rejected", "the same answer as `chosen`: no preference")
    return {"chosen": chosen, "prompt_messages": len(prompt), "rejected": rejected}


_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant|H|A):[ \t]?")


def _answer_messages(raw: Any, where: str) -> list[dict]:
    """An answer as messages: a string (an HH-RLHF transcript when it has ``Human:`` turns, else one
    assistant turn), one message (OpenAI or ShareGPT), or a list of them."""
    if isinstance(raw, str):
        if re.search(r"(?:^|\n\n)Human:", raw):
            return _transcript(raw, where)
        return [{"role": "assistant", "content": raw}]
    if isinstance(raw, dict):
        messages = _any_message(raw, where)
    elif isinstance(raw, list):
        messages = [out for i, m in enumerate(raw) for out in _any_message(m, f"{where}[{i}]")]
    else:
        raise RecordError(where, f"expected a string, a message or a list of messages, got {type(raw).__name__}")
    if not messages:
        raise RecordError(where, "empty")
    return messages


def _any_message(raw: Any, where: str) -> list[dict]:
    if isinstance(raw, dict) and "role" not in raw and "from" in raw:   # a ShareGPT turn
        raw = {"role": raw["from"], "content": raw.get("value")}
    return _message(raw, where)


def _transcript(text: str, where: str) -> list[dict]:
    """An HH-RLHF transcript (``\n\nHuman: …\n\nAssistant: …``) as messages."""
    marks = list(_HH_TURN.finditer(text))
    if not marks or text[:marks[0].start()].strip():
        raise RecordError(where, "a transcript must start with `Human:`")
    messages = []
    for mark, following in zip(marks, [*marks[1:], None]):
        body = text[mark.end():following.start() if following else len(text)]
        role = "user" if mark.group(1) in ("Human", "H") else "assistant"
        messages.append({"role": role, "content": body.strip()})
    return messages


# --- media ----------------------------------------------------------------------

_MEDIA = {"images": ("<image>", "[IMAGE]"), "videos": ("<video>", "[VIDEO]"), "audios": ("<audio>", "[AUDIO]")}


def _media(record: dict) -> dict | None:
    """The media lists a multimodal record names (LLaMA-Factory's ``images``/``videos``/``audios``): paths or
    URLs, kept as written; None when it has none."""
    found = {}
    for key in _MEDIA:
        value = record.get(key)
        if value is None or value == []:
            continue
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise RecordError(key, "expected a list of paths or URLs")
        found[key] = items
    return found or None


def replace_media_placeholders(messages: list[dict], media: dict | None) -> None:
    """``<image>`` (and ``<video>``, ``<audio>``) as the ``[IMAGE]`` a content part becomes, in a record that
    lists that kind of media: the model never learns to write a placeholder another stack expands."""
    for key, (tag, mark) in _MEDIA.items():
        if media and key in media:
            for message in messages:
                if tag in message["content"]:
                    message["content"] = message["content"].replace(tag, mark)


def _check_conversation(messages: list[dict], where: str, preference: dict | None = None) -> None:
    if not messages:
        raise RecordError(where, "empty")
    if not any(m["content"].strip() or m.get("tool_calls") for m in messages):
        raise RecordError(where, "every message is empty")
    if not any(m["role"] == "user" and m["content"].strip() for m in messages):
        raise RecordError(where, "no user message")
    # an empty answer a server logged still counts (its prompt is the loop's experience); no answer at all does not
    if preference is None and not any(m["role"] == "assistant" for m in messages):
        raise RecordError(where, "no assistant answer (and no chosen/rejected pair): a prompt alone teaches "
                          "nothing; a preference record needs both `chosen` and `rejected`")


# --- the rest of the episode ---------------------------------------------------

def _tools(record: dict) -> list[dict]:
    raw = record.get("tools")
    if raw is None and isinstance(record.get("request"), dict):
        raw = record["request"].get("tools")
    if raw is None and isinstance(record.get("input"), dict):   # OpenAI's preference format
        raw = record["input"].get("tools")
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
        raw, where = {k: record[k] for k in ("rating", "thumbs", "stars", "score", "label", "kto_tag", "correction")
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
    for key in ("rating", "thumbs", "stars", "score", "label", "kto_tag"):
        value = raw.get(key)
        if value is None:
            continue
        rating = _rating(key, value, field(key))
        break
    return {"rating": rating, "correction": _correction(raw.get("correction"), correction_where)}


def _top_level_feedback(key: str, value: Any) -> bool:
    """Whether a top-level ``label`` or ``score`` is feedback: other datasets use these names for class
    labels and quality scores, so only a boolean label (KTO) and a score in [0, 1] count."""
    if key in ("label", "kto_tag"):
        return isinstance(value, bool)
    if key == "score":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return True


def _rating(key: str, value: Any, where: str) -> int:
    if key in ("label", "kto_tag") or isinstance(value, bool):
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
