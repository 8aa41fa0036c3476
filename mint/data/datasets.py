"""Dataset versions on disk: reading the chain, listing, showing and exporting.

Layout of ``$MINT_HOME/datasets/<name>/``::

    HEAD               the current version
    <version>/         episodes.jsonl (the episodes new in that version) + manifest.json
    quarantine.jsonl   every record that could not become an episode, with file:line and reason
    index.sqlite       ids of every episode in the dataset (a cache, rebuilt from the chain)
"""
from __future__ import annotations

import itertools
import json
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from mint.errors import BadInput
from mint.workspace import Workspace, publish_dir, staging_dir

HEAD_FILE = "HEAD"
EPISODES_FILE = "episodes.jsonl"
MANIFEST_FILE = "manifest.json"
QUARANTINE_FILE = "quarantine.jsonl"
VERSION_CHARS = 12
EXPORT_FORMATS = ("openai", "hf")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def check_name(name: str) -> None:
    if not _NAME_RE.match(name) or ".." in name:
        raise BadInput(f"invalid dataset name {name!r}: use letters, digits, '.', '_' or '-' "
                       "(no path separators, no '..')", field="--dataset")


def read_head(directory: Path) -> str | None:
    try:
        return (directory / HEAD_FILE).read_text().strip() or None
    except FileNotFoundError:
        return None


def read_manifest(directory: Path, version: str) -> dict:
    return json.loads((directory / version / MANIFEST_FILE).read_text())


def chain(directory: Path, head: str | None) -> list[str]:
    """Versions from the first to ``head``."""
    versions = []
    while head:
        versions.append(head)
        head = read_manifest(directory, head).get("parent")
    return versions[::-1]


def read_episodes(directory: Path, version: str) -> Iterator[dict]:
    with open(directory / version / EPISODES_FILE, encoding="utf-8") as f:
        for line in f:
            yield json.loads(line)


def remove_tree(path: Path) -> None:
    shutil.rmtree(path)


def append_quarantine(directory: Path, entries: Iterable[str]) -> int:
    """Add JSON-line entries not already quarantined (same source and reason); returns how many were new.

    The file is rewritten whole and renamed into place, so a kill never leaves a torn line.
    """
    path = directory / QUARANTINE_FILE
    seen = set()
    if path.exists():
        with open(path, encoding="utf-8") as f:
            for line in f:
                entry = json.loads(line)
                seen.add((entry["source"], entry["reason"]))
    new = []
    for line in entries:
        entry = json.loads(line)
        key = (entry["source"], entry["reason"])
        if key not in seen:
            seen.add(key)
            new.append(line if line.endswith("\n") else line + "\n")
    if new:
        with staging_dir(directory, "quarantine") as tmp:
            with open(tmp / QUARANTINE_FILE, "w", encoding="utf-8") as out:
                if path.exists():
                    with open(path, encoding="utf-8") as old:
                        shutil.copyfileobj(old, out)
                out.writelines(new)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp / QUARANTINE_FILE, path)
        shutil.rmtree(tmp, ignore_errors=True)
    return len(new)


# --- reading for users and later stages ----------------------------------------

def dataset_dir(ws: Workspace, name: str) -> Path:
    check_name(name)
    directory = ws.datasets / name
    if read_head(directory) is None:
        known = ", ".join(list_names(ws)) or "none yet"
        raise BadInput(f"no dataset {name!r} in {ws.datasets} (datasets: {known}); "
                       f"create it with `mint ingest PATH --dataset {name}`")
    return directory


def list_names(ws: Workspace) -> list[str]:
    if not ws.datasets.is_dir():
        return []
    return sorted(p.name for p in ws.datasets.iterdir() if p.is_dir() and read_head(p))


def resolve_version(ws: Workspace, name: str, version: str | None = None) -> tuple[Path, dict]:
    """The manifest of ``version`` (a hash prefix, ``vN``, ``latest`` or None for the head)."""
    directory = dataset_dir(ws, name)
    versions = chain(directory, read_head(directory))
    if version in (None, "", "latest", "head"):
        return directory, read_manifest(directory, versions[-1])
    if re.fullmatch(r"v\d+", version) and 1 <= int(version[1:]) <= len(versions):
        return directory, read_manifest(directory, versions[int(version[1:]) - 1])
    matches = [v for v in versions if v.startswith(version)]
    if len(matches) == 1:
        return directory, read_manifest(directory, matches[0])
    listing = ", ".join(f"v{i}={v}" for i, v in enumerate(versions, 1))
    why = "is ambiguous" if matches else "matches no version"
    raise BadInput(f"{version!r} {why} of dataset {name!r} ({listing})", field="--version")


def iter_episodes(ws: Workspace, name: str, version: str | None = None,
                  specialist: str | None = None) -> Iterator[dict]:
    """Every episode of the dataset as of ``version``, oldest first."""
    directory, manifest = resolve_version(ws, name, version)
    for v in chain(directory, manifest["version"]):
        for episode in read_episodes(directory, v):
            if specialist is None or episode["specialist"] == specialist:
                yield episode


@dataclass
class DatasetSummary:
    name: str
    version: str
    number: int
    episodes: int
    by_specialist: dict[str, int]
    quarantined: int
    created_at: str


def _quarantine_count(directory: Path) -> int:
    path = directory / QUARANTINE_FILE
    if not path.exists():
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def list_datasets(ws: Workspace) -> list[DatasetSummary]:
    out = []
    for name in list_names(ws):
        directory, manifest = resolve_version(ws, name)
        out.append(DatasetSummary(name, manifest["version"], manifest["number"], manifest["total_episodes"],
                                  manifest["by_specialist"], _quarantine_count(directory), manifest["created_at"]))
    return out


@dataclass
class DatasetView:
    name: str
    manifest: dict
    versions: list[dict]
    head: list[dict]
    quarantined: int
    quarantine_file: str


def show_dataset(ws: Workspace, name: str, version: str | None = None, head: int = 5) -> DatasetView:
    if head < 0:
        raise BadInput("must be 0 or more", field="--head")
    directory, manifest = resolve_version(ws, name, version)
    versions = [read_manifest(directory, v) for v in chain(directory, read_head(directory))]
    first = []
    for episode in iter_episodes(ws, name, manifest["version"]):
        if len(first) >= head:
            break
        first.append(episode)
    summaries = [{k: m[k] for k in ("version", "number", "parent", "created_at", "episodes", "total_episodes")}
                 for m in versions]
    return DatasetView(name, manifest, summaries, first, _quarantine_count(directory),
                       str(directory / QUARANTINE_FILE))


# --- export ----------------------------------------------------------------------

@dataclass
class ExportResult:
    dataset: str
    version: str
    format: str
    out: str
    episodes: int


def to_openai(episode: dict) -> dict:
    """An episode in OpenAI chat-completions fine-tuning form (tool arguments as JSON strings)."""
    messages = []
    for m in episode["messages"]:
        message = dict(m)
        if "tool_calls" in m:
            message["tool_calls"] = [
                {**call, "function": {"name": call["function"]["name"],
                                      "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False)}}
                for call in m["tool_calls"]]
        messages.append(message)
    record: dict = {"messages": messages}
    if episode["tools"]:
        record["tools"] = episode["tools"]
    return record


def export_dataset(ws: Workspace, name: str, fmt: str, out: Path, version: str | None = None,
                   specialist: str | None = None, force: bool = False) -> ExportResult:
    if fmt not in EXPORT_FORMATS:
        raise BadInput(f"unknown export format {fmt!r} (expected {' or '.join(EXPORT_FORMATS)})", field="--format")
    _directory, manifest = resolve_version(ws, name, version)
    if out.exists() and not force:
        raise BadInput("already exists; choose another path or pass --force", file=str(out))
    episodes = iter_episodes(ws, name, manifest["version"], specialist)
    first = next(episodes, None)
    if first is None:
        raise BadInput(f"dataset {name!r} has no episodes of specialist {specialist!r}", field="--specialist")
    episodes = itertools.chain([first], episodes)
    out = out.absolute()
    count = 0
    with staging_dir(out.parent, out.name) as tmp:
        if fmt == "openai":
            target = tmp / "export.jsonl"
            with open(target, "w", encoding="utf-8") as f:
                for episode in episodes:
                    f.write(json.dumps(to_openai(episode), ensure_ascii=False) + "\n")
                    count += 1
            final_tmp = target
        else:
            count = _save_hf(ws, name, manifest["version"], specialist, tmp / "dataset")
            final_tmp = tmp / "dataset"
        if out.exists():
            (shutil.rmtree if out.is_dir() else Path.unlink)(out)
        if final_tmp.is_dir():
            publish_dir(final_tmp, out)
        else:
            final_tmp.rename(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(name, manifest["version"], fmt, str(out), count)


def _hf_rows(home: str, name: str, version: str, specialist: str | None) -> Iterator[dict]:
    for episode in iter_episodes(Workspace(Path(home)), name, version, specialist):
        record = to_openai(episode)
        yield {
            "id": episode["id"], "specialist": episode["specialist"],
            "messages": [{"role": m["role"], "content": m["content"],
                          "tool_calls": json.dumps(m["tool_calls"], ensure_ascii=False) if "tool_calls" in m else None,
                          "name": m.get("name"), "tool_call_id": m.get("tool_call_id")}
                         for m in record["messages"]],
            "tools": json.dumps(episode["tools"], ensure_ascii=False) if episode["tools"] else None,
            "rating": episode["feedback"]["rating"], "correction": episode["feedback"]["correction"],
            "source": episode["source"],
        }


def _save_hf(ws: Workspace, name: str, version: str, specialist: str | None, target: Path) -> int:
    """A ``datasets.Dataset`` saved with ``save_to_disk``; tool calls and tools as JSON text, since
    Arrow needs one schema for arguments whose keys differ from call to call."""
    from datasets import Dataset

    dataset = Dataset.from_generator(
        _hf_rows, gen_kwargs={"home": str(ws.home), "name": name, "version": version, "specialist": specialist},
        cache_dir=str(target.parent / "cache"))
    dataset.save_to_disk(str(target))
    return len(dataset)
