"""Preference pairs: a prompt with a chosen and a rejected answer.

The shapes read: TRL's preference records (``prompt``/``chosen``/``rejected`` as strings or message lists, the
prompt implicit when absent: the common beginning of two whole conversations), Anthropic's HH-RLHF
(``\\n\\nHuman: …\\n\\nAssistant: …`` transcripts), ``chosen_messages``/``rejected_messages`` (and
``*_conversations``) conversations, OpenAI's preference fine-tuning format (``input.messages``,
``preferred_output``, ``non_preferred_output``), UltraFeedback-binarized's (a ``prompt`` beside whole
conversations that repeat it), and LLaMA-Factory's ranking layout (``chosen``/``rejected`` answers beside an
alpaca, ShareGPT or OpenAI conversation: ``with_ranking``).
"""
from __future__ import annotations

import re
from typing import Any

from mint.data.formats.fields import RecordError
from mint.data.formats.messages import ROLES, message, system_messages
from mint.data.schema import Message, Preference

# whole chosen/rejected conversations (the prompt is their common beginning)
_PAIRED_CONVERSATIONS = (("chosen_messages", "rejected_messages"), ("chosen_conversations", "rejected_conversations"))
# OpenAI's preference fine-tuning format: {"input": {"messages", "tools"}, "preferred_output", "non_preferred_output"}
_OPENAI_PREFERENCE = ("preferred_output", "non_preferred_output")


def sniff_conversations(record: dict) -> bool:
    """chosen/rejected written as whole conversations (UltraFeedback's shape), which win over a ``messages``
    copy of them."""
    return "rejected" in record and _whole_conversation(record.get("chosen"))


def sniff(record: dict) -> bool:
    if "chosen" in record and "rejected" in record and "conversations" not in record and "messages" not in record:
        return True
    return ("chosen_messages" in record and "rejected_messages" in record) or \
        ("chosen_conversations" in record and "rejected_conversations" in record) or \
        ("preferred_output" in record and "non_preferred_output" in record)


def _whole_conversation(value: Any) -> bool:
    """Whether a ``chosen`` value is a whole conversation (it starts with a user or system turn), not an answer."""
    if not isinstance(value, list) or not value or not isinstance(value[0], dict):
        return False
    role = value[0].get("role", value[0].get("from"))
    return isinstance(role, str) and ROLES.get(role.strip().lower()) in ("user", "system")


def normalize(record: dict) -> tuple[list[Message], Preference]:
    """(prompt + chosen messages, preference)."""
    keys = next(((c, r) for c, r in (*_PAIRED_CONVERSATIONS, _OPENAI_PREFERENCE) if c in record and r in record),
                ("chosen", "rejected"))
    chosen = _answer_messages(record[keys[0]], keys[0])
    rejected = _answer_messages(record[keys[1]], keys[1])
    prompt = system_messages(record)
    raw_prompt, prompt_field = record.get("prompt"), "prompt"
    if keys == _OPENAI_PREFERENCE:
        if not isinstance(record.get("input"), dict) or not isinstance(record["input"].get("messages"), list):
            raise RecordError("input.messages", "missing: the prompt of a preferred/non-preferred pair")
        raw_prompt, prompt_field = record["input"]["messages"], "input.messages"
    if raw_prompt is not None:
        if isinstance(raw_prompt, str):
            prompt.append(Message("user", raw_prompt))
        elif isinstance(raw_prompt, list):
            prompt += [out for i, m in enumerate(raw_prompt) for out in _any_message(m, f"{prompt_field}[{i}]")]
        else:
            raise RecordError(prompt_field, f"expected a string or a list of messages, got "
                              f"{type(raw_prompt).__name__}")
        # both sides written as whole conversations that repeat the prompt: keep only what follows it
        asked = [(m.role, m.content) for m in prompt if m.role != "system"]
        for side in (chosen, rejected):
            begins = [m for m in side[:len(asked) + 1] if m.role != "system"][:len(asked)]
            if asked and len(side) > len(asked) and [(m.role, m.content) for m in begins] == asked:
                del side[:side.index(begins[-1]) + 1]
        return prompt + chosen, Preference(len(prompt), tuple(rejected))
    # implicit prompt: the two conversations share it, and differ from the first answer that differs
    shared = 0
    while shared < min(len(chosen), len(rejected)) and chosen[shared] == rejected[shared]:
        shared += 1
    if shared == len(chosen) and shared == len(rejected):
        raise RecordError(keys[1], f"the same conversation as `{keys[0]}`: no preference")
    if shared == 0 or not any(m.role == "user" for m in chosen[:shared]):
        raise RecordError(keys[0], f"no prompt: give `prompt`, or write `{keys[0]}` and `{keys[1]}` as whole "
                          "conversations that begin with the same user turn")
    return prompt + chosen, Preference(len(prompt) + shared, tuple(rejected[shared:]))


def with_ranking(record: dict, conversation: list[Message]) -> tuple[list[Message], Preference | None]:
    """LLaMA-Factory's ranking layout: ``chosen`` and ``rejected`` answers to the record's conversation, which
    is their prompt; (the conversation, None) for a record without them."""
    if "chosen" not in record and "rejected" not in record:
        return conversation, None
    for key in ("chosen", "rejected"):
        if key not in record:
            other = "rejected" if key == "chosen" else "chosen"
            raise RecordError(key, f"missing: a preference record has both `chosen` and `rejected` "
                              f"(this one has only `{other}`)")
    chosen, rejected = (_answer_messages(record[k], k) for k in ("chosen", "rejected"))
    if chosen == rejected:
        raise RecordError("rejected", "the same answer as `chosen`: no preference")
    return conversation + chosen, Preference(len(conversation), tuple(rejected))


_HH_TURN = re.compile(r"(?:^|\n\n)(Human|Assistant|H|A):[ \t]?")


def _answer_messages(raw: Any, where: str) -> list[Message]:
    """An answer as messages: a string (an HH-RLHF transcript when it has ``Human:`` turns, else one
    assistant turn), one message (OpenAI or ShareGPT), or a list of them."""
    if isinstance(raw, str):
        if re.search(r"(?:^|\n\n)Human:", raw):
            return _transcript(raw, where)
        return [Message("assistant", raw)]
    if isinstance(raw, dict):
        messages = _any_message(raw, where)
    elif isinstance(raw, list):
        messages = [out for i, m in enumerate(raw) for out in _any_message(m, f"{where}[{i}]")]
    else:
        raise RecordError(where, f"expected a string, a message or a list of messages, got {type(raw).__name__}")
    if not messages:
        raise RecordError(where, "empty")
    return messages


def _any_message(raw: Any, where: str) -> list[Message]:
    if isinstance(raw, dict) and "role" not in raw and "from" in raw:   # a ShareGPT turn
        raw = {"role": raw["from"], "content": raw.get("value")}
    return message(raw, where)


def _transcript(text: str, where: str) -> list[Message]:
    """An HH-RLHF transcript (``\\n\\nHuman: …\\n\\nAssistant: …``) as messages."""
    marks = list(_HH_TURN.finditer(text))
    if not marks or text[:marks[0].start()].strip():
        raise RecordError(where, "a transcript must start with `Human:`")
    messages = []
    for mark, following in zip(marks, [*marks[1:], None]):
        body = text[mark.end():following.start() if following else len(text)]
        messages.append(Message("user" if mark.group(1) in ("Human", "H") else "assistant", body.strip()))
    return messages
