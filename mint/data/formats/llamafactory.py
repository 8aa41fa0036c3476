"""LLaMA-Factory's datasets: a folder whose ``dataset_info.json`` names its files, each with its layout
(``formatting``: alpaca | sharegpt | openai, ``ranking``, ``columns``, ``tags``), and a record read through its
entry as the plain alpaca or ShareGPT record those formats read (``remap``).

The entry's shape is LLaMA-Factory's ``data/README.md``: ``columns`` says which field holds the prompt, query,
response, history, messages, system, tools, images, videos, audios, chosen, rejected, kto_tag and, for
ShareGPT, ``tags`` the role and content keys and the value of each role. LLaMA-Factory's v1 files (messages
whose content parts are ``{"type", "value"}`` with ``text``, ``reasoning`` and ``tool_call`` parts, and
``loss_weight``) are OpenAI-shaped, read by ``mint.data.formats.messages``.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mint.data.formats.fields import RecordError
from mint.data.readers import Source, file_kind
from mint.errors import BadInput

def folder_info(path: Path) -> dict | None:
    """The entries of a LLaMA-Factory ``dataset_info.json`` in the folder (name -> {file_name, formatting,
    ranking, columns, tags}), or None when the folder has none (a ``save_to_disk`` dataset_info.json
    describes one dataset's features instead)."""
    where = path / "dataset_info.json"
    try:
        info = json.loads(where.read_text(encoding="utf-8-sig"))
    except OSError:
        return None
    except json.JSONDecodeError as exc:   # both LLaMA-Factory and save_to_disk write JSON: neither layout is this
        raise BadInput(f"invalid JSON: {exc.msg} (column {exc.colno})", file=str(where), line=exc.lineno) from None
    except ValueError as exc:              # not UTF-8
        raise BadInput(f"not UTF-8 JSON: {exc}", file=str(where)) from None
    if not isinstance(info, dict) or not info or "features" in info or "builder_name" in info:
        return None
    sources = ("file_name", "hf_hub_url", "ms_hub_url", "om_hub_url", "script_url", "cloud_file_name")
    if not all(isinstance(v, dict) for v in info.values()) or \
            not any(any(k in v for k in sources) for v in info.values()):
        return None
    return info


def folder_sources(path: Path, info: dict, skipped: list[str] | None) -> list[Source]:
    """A source per local file the folder's dataset_info.json names, with its format and columns; entries
    that live on a hub, and files of the folder no entry names, go to ``skipped``."""
    found, named = [], {path / "dataset_info.json"}
    for name, entry in info.items():
        file_name = entry.get("file_name")
        if not isinstance(file_name, str) or not file_name:
            if skipped is not None:
                skipped.append(f"{path / 'dataset_info.json'}:{name} (not in this folder: a hub dataset)")
            continue
        target = path / file_name
        if not target.exists():
            if skipped is not None:
                skipped.append(f"{path / 'dataset_info.json'}:{name} ({file_name} is not in the folder)")
            continue
        formatting = entry.get("formatting", "alpaca")
        if formatting not in ("alpaca", "sharegpt", "openai"):
            raise BadInput(f"{name}.formatting: {formatting!r} (expected alpaca, sharegpt or openai)",
                           file=str(path / "dataset_info.json"))
        for key in ("columns", "tags"):
            if key in entry and not isinstance(entry[key], dict):
                raise BadInput(f"{name}.{key}: expected an object", file=str(path / "dataset_info.json"))
        layout = {"formatting": formatting, "ranking": bool(entry.get("ranking")),
                  "columns": entry.get("columns") or {}, "tags": entry.get("tags") or {}}
        files = sorted(p for p in target.rglob("*") if p.is_file()) if target.is_dir() else [target]
        for file in files:
            kind, compression = file_kind(file)
            if kind is None:
                if skipped is not None:
                    skipped.append(str(file))
                continue
            named.add(file)
            found.append(Source(file, kind, file.stat().st_size, compression, "llamafactory", layout))
    if skipped is not None:
        skipped.extend(str(p) for p in sorted(path.iterdir()) if p.is_file() and p not in named
                       and not p.name.startswith("."))
    return found



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
