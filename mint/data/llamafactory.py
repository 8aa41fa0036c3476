"""LLaMA-Factory's dataset layouts: a record read through its ``dataset_info.json`` entry (the columns
and tags it names) as the plain alpaca or ShareGPT record the episode normalizer reads.

The entry's shape is LLaMA-Factory's ``data/README.md``: ``formatting`` (alpaca | sharegpt | openai),
``ranking`` (chosen/rejected answers), ``columns`` (which field holds the prompt, query, response,
history, messages, system, tools, images, videos, audios, chosen, rejected, kto_tag) and, for ShareGPT,
``tags`` (the role and content keys and the value of each role).
"""
from __future__ import annotations

from typing import Any

from mint.data.episode import RecordError

_ALPACA_COLUMNS = {"prompt": "instruction", "query": "input", "response": "output", "history": "history",
                   "system": "system", "tools": "tools", "images": "images", "videos": "videos",
                   "audios": "audios", "chosen": "chosen", "rejected": "rejected", "kto_tag": "kto_tag"}
_SHAREGPT_COLUMNS = {"messages": "conversations", "system": "system", "tools": "tools", "images": "images",
                     "videos": "videos", "audios": "audios", "chosen": "chosen", "rejected": "rejected",
                     "kto_tag": "kto_tag"}
_SHAREGPT_TAGS = {"role_tag": "from", "content_tag": "value", "user_tag": "human", "assistant_tag": "gpt",
                  "observation_tag": "observation", "function_tag": "function_call", "system_tag": "system"}
# the openai formatting is ShareGPT with OpenAI's keys and role names
_OPENAI_TAGS = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant",
                "observation_tag": "tool", "function_tag": "function_call", "system_tag": "system"}
# the ShareGPT speaker each tag's value stands for
_SPEAKER = {"user_tag": "human", "assistant_tag": "gpt", "observation_tag": "observation",
            "function_tag": "function_call", "system_tag": "system"}


def remap(record: Any, layout: dict) -> Any:
    """``record`` with the entry's columns renamed to the standard alpaca or ShareGPT fields."""
    if not isinstance(record, dict):
        return record
    formatting = layout["formatting"]
    defaults = _ALPACA_COLUMNS if formatting == "alpaca" else _SHAREGPT_COLUMNS
    if formatting == "openai":
        defaults = {**defaults, "messages": "messages"}
    columns = {**defaults, **layout["columns"]}
    out: dict = {}
    for standard, column in columns.items():
        if isinstance(column, str) and column in record:
            out[_ALPACA_COLUMNS.get(standard, standard) if formatting == "alpaca" else standard] = record[column]
    if formatting == "alpaca":
        return {**_passthrough(record, columns), **out}
    tags = {**(_OPENAI_TAGS if formatting == "openai" else _SHAREGPT_TAGS), **layout["tags"]}
    speakers = {tags[tag]: speaker for tag, speaker in _SPEAKER.items() if isinstance(tags.get(tag), str)}
    turns = out.pop("messages", None)
    if turns is None:
        raise RecordError(columns["messages"], "missing (the column dataset_info.json names for the messages)")
    out["conversations"] = _turns(turns, tags, speakers, columns["messages"])
    for key in ("chosen", "rejected"):
        if isinstance(out.get(key), dict):
            out[key] = _turns([out[key]], tags, speakers, columns[key])[0]
    return {**_passthrough(record, columns), **out}


def _passthrough(record: dict, columns: dict) -> dict:
    """The fields no column names (ids, sessions, times), kept for the episode."""
    mapped = {c for c in columns.values() if isinstance(c, str)}
    return {k: v for k, v in record.items() if k not in mapped}


def _turns(turns: Any, tags: dict, speakers: dict, where: str) -> list:
    if not isinstance(turns, list):
        raise RecordError(where, f"expected a list of turns, got {type(turns).__name__}")
    out = []
    for i, turn in enumerate(turns):
        if not isinstance(turn, dict):
            raise RecordError(f"{where}[{i}]", f"expected an object, got {type(turn).__name__}")
        role = turn.get(tags["role_tag"])
        if role not in speakers:
            raise RecordError(f"{where}[{i}].{tags['role_tag']}", f"{role!r} is none of the tags dataset_info.json "
                              f"names ({', '.join(map(repr, speakers))})")
        out.append({"from": speakers[role], "value": turn.get(tags["content_tag"])})
    return out
