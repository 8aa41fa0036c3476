"""Dataset versions on disk: reading the chain, listing, showing and exporting.

Layout of ``$MINT_HOME/datasets/<name>/``::

    HEAD               the current version
    <version>/         episodes.jsonl (the episodes new in that version) + manifest.json
                       + superseded.txt (ids of earlier episodes this version replaces: the same
                       conversation with later feedback, or re-logged with more turns)
    quarantine.jsonl   append-only: every record that could not become an episode, keyed by its
                       content, with file:line, the reason and the version its ingest left
                       (``clear_quarantine`` rewrites it without the entries a user clears)
    index.sqlite       ids of every episode in the dataset (a cache, rebuilt from the chain)
"""
from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

# the held-out split (mint.data.split): the slice that contract suites evaluate on and training never sees
from mint.data.split import (  # noqa: F401 - the split's names, read from here by its callers
    HELDOUT_FRACTION, HELDOUT_KEY, heldout_key, heldout_position, heldout_rule, is_heldout)
from mint.errors import BadInput, Refused
from mint.faults import checkpoint
from mint.jsonl import read_jsonl
from mint.text import closest
from mint.workspace import Workspace, fsync_dir, publish_dir, staging_dir

HEAD_FILE = "HEAD"
EPISODES_FILE = "episodes.jsonl"
MANIFEST_FILE = "manifest.json"
QUARANTINE_FILE = "quarantine.jsonl"
SUPERSEDED_FILE = "superseded.txt"
VERSION_CHARS = 12
EXPORT_FORMATS = ("openai", "hf")
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}\Z")


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
    for _number, episode in read_jsonl(directory / version / EPISODES_FILE):
        yield episode


def remove_tree(path: Path) -> None:
    shutil.rmtree(path)


@contextlib.contextmanager
def quarantine_appender(directory: Path) -> Iterator[Callable[[bytes], int]]:
    """Append whole lines to the quarantine, then fsync. A torn last line (a kill mid-append) is cut
    first, so every line stays valid JSON."""
    path = directory / QUARANTINE_FILE
    with open(path, "ab+") as f:
        size = f.seek(0, os.SEEK_END)
        if size:
            f.seek(max(0, size - (1 << 20)))
            tail = f.read()
            if not tail.endswith(b"\n"):
                cut = tail.rfind(b"\n")
                f.truncate(size - len(tail) + cut + 1 if cut >= 0 else (0 if size <= 1 << 20 else size))
        yield f.write
        f.flush()
        os.fsync(f.fileno())


def quarantine_keys(directory: Path) -> Iterator[bytes]:
    """The content key of every quarantine entry (entries written before keys existed get one from
    their reason and raw text)."""
    path = directory / QUARANTINE_FILE
    if not path.exists():
        return
    for _number, entry in read_jsonl(path, torn="skip"):   # a torn line: cut at the next append
        key = _entry_key(entry)
        if key is not None:
            yield key


def _entry_key(entry) -> bytes | None:
    """A quarantine entry's content key; None for a line mint did not write."""
    try:
        key = entry.get("key") or hashlib.sha256(
            f"{entry['reason']}\0{entry.get('raw') or entry['source']}".encode("utf-8", "surrogatepass")
        ).hexdigest()[:32]
        return bytes.fromhex(key)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


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


def resolve_version(ws: Workspace, name: str, version: str | None = None, *,
                    field: str = "--version") -> tuple[Path, dict]:
    """The manifest of ``version`` (a hash prefix, ``vN``, ``latest`` or None for the head); an error names
    ``field``, the option the version came from (``--data`` takes ``NAME@VERSION``)."""
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
    given = f"{name}@{version}" if field == "--data" else repr(version)
    raise BadInput(f"{given}: {version!r} {why} of dataset {name!r} (it has {listing}; a version is vN or a "
                   "hash prefix)" if field == "--data" else f"{given} {why} of dataset {name!r} ({listing})",
                   field=field)


def version_hash(parent: str | None, episodes: Path, superseded: Path) -> str:
    """A version's name: the hash of its parent's name, its episodes and the ids it superseded."""
    digest = hashlib.sha256((parent or "").encode() + b"\n")
    for path in (episodes, superseded):
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()[:VERSION_CHARS]


def verify_version(directory: Path, version: str) -> None:
    """Refuse a version whose episodes or superseded ids no longer hash to its name (changed after ingest)."""
    parent = read_manifest(directory, version).get("parent")
    try:
        actual = version_hash(parent, directory / version / EPISODES_FILE, directory / version / SUPERSEDED_FILE)
    except FileNotFoundError as exc:
        raise Refused(f"{directory / version}: {Path(exc.filename).name} is missing") from None
    if actual != version:
        raise Refused(f"{directory / version}: changed after ingest ({EPISODES_FILE} and {SUPERSEDED_FILE} hash "
                      f"to {actual}, not to the version's name); ingest the logs again into a fresh dataset")


def superseded_ids(directory: Path, versions: list[str]) -> set[bytes]:
    """First 128 bits of the ids of episodes that ``versions`` replaced by a later record."""
    gone: set[bytes] = set()
    for v in versions:
        path = directory / v / SUPERSEDED_FILE
        if path.exists():
            with open(path, encoding="ascii") as f:
                gone.update(bytes.fromhex(line[:32]) for line in f if line.strip())
    return gone


SPLITS = (None, "train", "heldout")


def iter_episodes(ws: Workspace, name: str, version: str | None = None,
                  specialist: str | None = None, split: str | None = None) -> Iterator[dict]:
    """Every episode of the dataset as of ``version``, oldest first, without those a later record of
    the same conversation replaced (up to ``version``). ``split="train"`` leaves out the held-out split
    (every reader of training data asks for it: `mint train`, the loop's experience, `mint data export`);
    ``split="heldout"`` keeps only that split (live contract suites). Held out: below the dataset share, or a
    request the served traffic holds out (mint.data.split.heldout_rule)."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r}")
    held = heldout_rule(ws) if split is not None else None
    directory, manifest = resolve_version(ws, name, version)
    versions = chain(directory, manifest["version"])
    for v in versions:   # before the first episode: nothing downstream may see a changed version
        verify_version(directory, v)
    gone = superseded_ids(directory, versions)
    for v in versions:
        for episode in read_episodes(directory, v):
            if (specialist is None or episode["specialist"] == specialist) and \
                    (not gone or bytes.fromhex(episode["id"][:32]) not in gone) and \
                    (held is None or held(episode) == (split == "heldout")):
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


def _quarantine_only(ws: Workspace) -> list[str]:
    """Datasets whose every ingest kept nothing: no version, but a quarantine that says why."""
    if not ws.datasets.is_dir():
        return []
    return sorted(p.name for p in ws.datasets.iterdir() if p.is_dir() and not read_head(p)
                  and _quarantine_count(p))


def list_datasets(ws: Workspace) -> list[DatasetSummary]:
    out = []
    for name in list_names(ws):
        directory, manifest = resolve_version(ws, name)
        out.append(DatasetSummary(name, manifest["version"], manifest["number"], manifest["total_episodes"],
                                  manifest["by_specialist"], _quarantine_count(directory), manifest["created_at"]))
    for name in _quarantine_only(ws):
        out.append(DatasetSummary(name, "(empty)", 0, 0, {}, _quarantine_count(ws.datasets / name), "-"))
    return sorted(out, key=lambda summary: summary.name)


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
    check_name(name)
    if name in _quarantine_only(ws) and version in (None, "", "latest", "head"):
        empty = {"version": "(empty)", "number": 0, "parent": None, "created_at": "-", "episodes": 0,
                 "total_episodes": 0, "by_specialist": {}}
        return DatasetView(name, empty, [], [], _quarantine_count(ws.datasets / name),
                           str(ws.datasets / name / QUARANTINE_FILE))
    directory, manifest = resolve_version(ws, name, version)
    versions = [read_manifest(directory, v) for v in chain(directory, read_head(directory))]
    first: list = []
    for episode in iter_episodes(ws, name, manifest["version"]):
        if len(first) >= head:
            break
        first.append(episode)
    summaries = [{k: m[k] for k in ("version", "number", "parent", "created_at", "episodes", "total_episodes")}
                 for m in versions]
    return DatasetView(name, manifest, summaries, first, _quarantine_count(directory),
                       str(directory / QUARANTINE_FILE))


# --- the quarantine, as people read it --------------------------------------------

def reason_kind(reason: str) -> str:
    """A quarantine reason without its specifics, for the summary: ``messages[].role: unknown role '…'``."""
    for prefix in ("invalid JSON", "record over the size cap", "not UTF-", "unreadable", "could not be processed"):
        if reason.startswith(prefix):
            return prefix
    return re.sub(r"'[^']*'", "'…'", re.sub(r"\[\d+\]", "[]", reason))


_FIELD_PATH = re.compile(r"[A-Za-z_][\w-]*(\[\d+\])*(\.[A-Za-z_][\w-]*(\[\d+\])*)*")
_MISSING = object()


@dataclass(frozen=True)
class QuarantineEntry:
    """One record ingest set aside: where it was, which field, what it held there and why it was refused."""

    file: str
    line: int | None
    field: str | None               # ``conversations[0].from``; None when the whole record was refused
    value: str | None               # the field's value as JSON (``"usr"``), ``missing``, or None when not known
    reason: str                     # the reason without its field: ``unknown role 'usr'``
    raw: str | None                 # the record as read (cut to its first characters, scrubbed)
    version: str | None             # the dataset version the ingest that set it aside left


@dataclass(frozen=True)
class QuarantineView:
    dataset: str
    file: str                       # quarantine.jsonl
    total: int
    reasons: dict[str, int]         # reason kinds, most frequent first
    entries: list[QuarantineEntry]  # the newest ``limit``, newest last


def _field_value(raw: str | None, field: str) -> str | None:
    """The JSON of what ``raw`` holds at ``field`` (``messages[0].role``), ``missing`` where the record has no
    such field, None where ``raw`` is not JSON (or was cut short)."""
    try:
        value = json.loads(raw) if raw else _MISSING
    except ValueError:
        return None
    if value is _MISSING:
        return None
    for key, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", field):
        if index:
            value = value[int(index)] if isinstance(value, list) and int(index) < len(value) else _MISSING
        else:
            value = value.get(key, _MISSING) if isinstance(value, dict) else _MISSING
        if value is _MISSING:
            return "missing"
    return json.dumps(value, ensure_ascii=False)[:200]


def quarantine_entry(record: dict) -> QuarantineEntry:
    """A quarantine line as mint wrote it (``source``, ``reason``, ``raw``) read into its parts."""
    source = str(record.get("source") or "")
    file, _, line = source.rpartition(":")
    if not line.isdigit():
        file, line = source, ""
    reason = str(record.get("reason") or "")
    field, sep, rest = reason.partition(": ")
    raw = record.get("raw") if isinstance(record.get("raw"), str) else None
    if sep and _FIELD_PATH.fullmatch(field):
        value = _field_value(raw, field)
        return QuarantineEntry(file, int(line) if line else None, field, value, rest, raw, record.get("version"))
    return QuarantineEntry(file, int(line) if line else None, None, None, reason, raw, record.get("version"))


def read_quarantine(ws: Workspace, name: str, *, limit: int = 20, reason: str | None = None) -> QuarantineView:
    """What ingests into ``name`` set aside: every reason with its count, and the newest ``limit`` entries
    (those whose reason contains ``reason``, when given) with file, line, field and value."""
    from collections import Counter, deque

    if limit < 0:
        raise BadInput("must be 0 or more", field="--limit")
    directory = _quarantine_dir(ws, name)
    path = directory / QUARANTINE_FILE
    kinds: Counter = Counter()
    newest: deque = deque(maxlen=limit)     # the file is append-only, oldest first
    total = 0
    if path.exists():
        for _number, record in read_jsonl(path, torn="skip"):
            if not isinstance(record, dict) or "reason" not in record:
                continue   # not an entry mint wrote
            total += 1
            kinds[reason_kind(str(record["reason"]))] += 1
            if reason is None or reason in str(record["reason"]):
                newest.append(record)
    return QuarantineView(name, str(path), total, dict(kinds.most_common()),
                          [quarantine_entry(record) for record in newest])


def _quarantine_dir(ws: Workspace, name: str) -> Path:
    check_name(name)
    directory = ws.datasets / name
    if not directory.is_dir():
        known = ", ".join(list_names(ws) + _quarantine_only(ws)) or "none yet"
        raise BadInput(f"no dataset {name!r}{closest(name, list_names(ws) + _quarantine_only(ws))} "
                       f"(datasets: {known})", field="DATASET")
    return directory


@dataclass(frozen=True)
class QuarantineCleared:
    dataset: str
    file: str                       # quarantine.jsonl
    removed: int
    left: int
    removed_by_file: dict[str, int]  # the source files whose entries went, with how many


def _from_source(file: str, source: Path) -> bool:
    """Whether a quarantine entry's file is ``source`` or inside it (a folder ingested whole)."""
    if file == str(source):
        return True
    entry, given = Path(file).resolve(), source.resolve()
    return entry == given or given in entry.parents


def _lines(path: Path) -> Iterator[bytes]:
    if path.exists():
        with open(path, "rb") as f:
            yield from f


def clear_quarantine(ws: Workspace, name: str, *, source: Path | None = None) -> QuarantineCleared:
    """Remove the quarantine entries of ``name`` that came from ``source`` (a file, or a folder: the files
    inside it), or every entry when ``source`` is None: failed tries need not stay for good.

    The kept entries are written to a temporary file that replaces the quarantine in one rename, under the
    lock ingest holds. The episode index forgets the removed entries first, so a kill in between can only
    record one of them again later, never lose one; a record ingested again after clearing is quarantined
    again."""
    import sqlite3

    from mint.workspace import file_lock

    directory = _quarantine_dir(ws, name)
    path = directory / QUARANTINE_FILE
    removed: dict[str, int] = {}
    removed_keys: list[bytes] = []
    files: set[str] = set()
    left = 0
    with file_lock(directory / ".lock"):
        fd, tmp_name = tempfile.mkstemp(prefix=f".tmp-{QUARANTINE_FILE}-", dir=directory)
        tmp = Path(tmp_name)
        try:
            with os.fdopen(fd, "wb") as out:
                for line in _lines(path):
                    try:
                        entry = json.loads(line)
                    except ValueError:
                        entry = None   # a torn last line: the next append cuts it anyway
                    file = quarantine_entry(entry).file if isinstance(entry, dict) else None
                    if file is not None:
                        files.add(file)
                    if file is not None and (source is None or _from_source(file, source)):
                        removed[file] = removed.get(file, 0) + 1
                        key = _entry_key(entry)
                        if key is not None:
                            removed_keys.append(key)
                        continue
                    if entry is not None:
                        out.write(line if line.endswith(b"\n") else line + b"\n")
                        left += 1
                out.flush()
                os.fsync(out.fileno())
            if source is not None and not removed:
                shown = sorted(files)
                raise BadInput(f"no quarantine entry of {name} comes from {source}{closest(str(source), shown)} "
                               f"(files: {', '.join(shown[:10]) or 'none'})", field="--clear-source")
            index_path = directory / "index.sqlite"
            if removed_keys and index_path.exists():
                index = sqlite3.connect(index_path)
                try:
                    index.executemany("DELETE FROM quarantined WHERE key = ?", ((k,) for k in removed_keys))
                    index.commit()
                except sqlite3.OperationalError:
                    pass   # an index without the table: it is rebuilt from the files on the next ingest
                finally:
                    index.close()
            checkpoint("quarantine.index_cleared")
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        fsync_dir(directory)
    return QuarantineCleared(name, str(path), sum(removed.values()), left, removed)


# --- export ----------------------------------------------------------------------

@dataclass
class ExportResult:
    dataset: str
    version: str
    format: str
    out: str
    episodes: int
    split: str = "train"
    # episodes of the version not written, by why: "held-out split", "rated below N", "specialist X"
    left_out: dict[str, int] = field(default_factory=dict)
    # hf: TRL's dataset type written, "preference" (prompt, chosen, rejected) or "conversation" (messages)
    trl_type: str | None = None
    preference_pairs: int = 0       # preference episodes among those written


EXPORT_SPLITS = ("train", "heldout", "all")
# --format hf --type: TRL's preference type (prompt, chosen, rejected), its conversational language-modeling type
# (messages), or preference when every episode written is a pair and messages otherwise
EXPORT_TYPES = ("auto", "preference", "conversation")
# file suffixes that say a single file; --format hf writes a folder
_FILE_SUFFIXES = (".jsonl", ".json", ".ndjson", ".parquet", ".csv", ".gz", ".zst", ".txt")


# the message keys OpenAI's fine-tuning format accepts; canonical extras (reasoning, finish_reason) stay home
_OPENAI_MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "weight")


def tool_call_id(episode_id: str, message: int, call: int) -> str:
    """A stable id for a logged call that came without one: the same episode always exports the same ids."""
    return "call_" + hashlib.sha256(f"{episode_id}\0{message}\0{call}".encode()).hexdigest()[:24]


def to_openai(episode: dict) -> dict:
    """An episode in OpenAI chat-completions fine-tuning form (tool arguments as JSON strings). Every tool
    call has an id (a stable one when the log had none) and every tool result the ``tool_call_id`` of the
    call it answers (the calls of the turn before it, in order), as OpenAI and several chat templates need."""
    messages = []
    pending: list[str] = []   # ids of the last assistant turn's calls that no tool result answered yet
    for i, m in enumerate(episode["messages"]):
        message = {k: m[k] for k in _OPENAI_MESSAGE_KEYS if k in m and (k != "weight" or m["role"] == "assistant")}
        if "tool_calls" in m:
            calls: list[dict[str, Any]]
            calls = [{"id": call.get("id") or tool_call_id(episode["id"], i, j), "type": "function",
                      "function": {"name": call["function"]["name"],
                                   "arguments": json.dumps(call["function"]["arguments"], ensure_ascii=False)}}
                     for j, call in enumerate(m["tool_calls"])]
            message["tool_calls"] = calls
            pending = [call["id"] for call in calls]
        elif m["role"] == "tool":
            if "tool_call_id" in m and m["tool_call_id"] in pending:
                pending.remove(m["tool_call_id"])
            elif "tool_call_id" not in m and pending:
                message["tool_call_id"] = pending.pop(0)
        else:
            pending = []
        messages.append(message)
    record: dict = {"messages": messages}
    if episode["tools"]:
        record["tools"] = episode["tools"]
    if episode.get("parallel_tool_calls") is not None:
        record["parallel_tool_calls"] = episode["parallel_tool_calls"]
    return record


# fine-tuning formats leave out thumbs-down answers unless asked (--min-rating -1)
DEFAULT_MIN_RATING = {"openai": 0, "hf": None}


def rated(episodes: Iterator[dict], min_rating: int | None, left_out: dict | None = None) -> Iterator[dict]:
    """Episodes rated at least ``min_rating`` (unrated ones count as 0); one rated lower that carries a
    correction comes with the correction as its last answer. Those left out are counted in ``left_out``."""
    for episode in episodes:
        rating = episode["feedback"]["rating"]
        if min_rating is None or (rating if rating is not None else 0) >= min_rating:
            yield episode
        elif episode["feedback"]["correction"]:
            yield with_correction(episode)
        elif left_out is not None:
            why = f"rated below {min_rating} (--min-rating)"
            left_out[why] = left_out.get(why, 0) + 1


def _selected(episodes: Iterator[dict], specialist: str | None, split: str, left_out: dict,
              held: Callable[[dict], bool]) -> Iterator[dict]:
    """The episodes of ``specialist`` in ``split`` (``held``: the workspace's held-out rule); the others are
    counted in ``left_out`` by why."""
    for episode in episodes:
        if specialist is not None and episode["specialist"] != specialist:
            why = f"specialist {episode['specialist']} (--specialist {specialist})"
        elif split != "all" and held(episode) != (split == "heldout"):
            why = "held-out split (--split all or heldout)" if split == "train" else "training split"
        else:
            yield episode
            continue
        left_out[why] = left_out.get(why, 0) + 1


def with_correction(episode: dict) -> dict:
    """``episode`` with its last assistant turn replaced by the user's correction."""
    messages = list(episode["messages"])
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=len(messages))
    messages[last:] = [{"role": "assistant", "content": episode["feedback"]["correction"]}]
    return {**episode, "messages": messages}


def export_dataset(ws: Workspace, name: str, fmt: str, out: Path, version: str | None = None,
                   specialist: str | None = None, force: bool = False, *,
                   min_rating: int | None | str = "default", split: str = "train",
                   trl_type: str = "auto") -> ExportResult:
    """Write ``version`` of ``name`` to ``out``. ``min_rating``: leave out episodes rated lower
    (-1, 0 or 1; None keeps all; "default": 0 for fine-tuning formats, None for a dataset folder).
    ``split``: train (default: what `mint train` sees), heldout (what live contract suites draw) or all.
    ``trl_type`` (hf): ``preference`` writes preference episodes as TRL's conversational ``prompt``, ``chosen``,
    ``rejected`` columns (DPOTrainer reads the folder as it is), ``conversation`` every episode as ``messages``;
    ``auto`` the first when every episode written is a pair. The result counts what was left out and why."""
    if fmt not in EXPORT_FORMATS:
        raise BadInput(f"unknown export format {fmt!r}{closest(fmt, EXPORT_FORMATS)} (expected "
                       f"{' or '.join(EXPORT_FORMATS)})", field="--format")
    if split not in EXPORT_SPLITS:
        raise BadInput(f"unknown split {split!r}{closest(split, EXPORT_SPLITS)} (expected {', '.join(EXPORT_SPLITS)})", field="--split")
    if trl_type not in EXPORT_TYPES:
        raise BadInput(f"unknown type {trl_type!r}{closest(trl_type, EXPORT_TYPES)} (expected {', '.join(EXPORT_TYPES)})",
                       field="--type")
    if trl_type != "auto" and fmt != "hf":
        raise BadInput("--type chooses the columns of --format hf; --format openai writes messages", field="--type")
    if fmt == "hf" and out.suffix.lower() in _FILE_SUFFIXES:
        raise BadInput(f"--format hf writes a dataset folder (save_to_disk), not a {out.suffix} file; give a "
                       "folder path, or use --format openai for JSON Lines", file=str(out))
    if fmt == "openai" and out.is_dir():
        raise BadInput("is a folder; --format openai writes one JSON Lines file", file=str(out))
    if min_rating == "default":
        min_rating = DEFAULT_MIN_RATING[fmt]
    if min_rating not in (None, -1, 0, 1):
        raise BadInput(f"{min_rating} is not -1, 0 or 1", field="--min-rating")
    _directory, manifest = resolve_version(ws, name, version)
    if out.exists() and not force:
        raise BadInput("already exists; choose another path or pass --force", file=str(out))
    left_out: dict[str, int] = {}
    held = heldout_rule(ws)
    episodes = rated(_selected(iter_episodes(ws, name, manifest["version"]), specialist, split, left_out, held),
                     min_rating, left_out)
    first = next(episodes, None)
    if first is None:
        which = f"of specialist {specialist!r}" if specialist else "at all"
        rating = f" rated {min_rating} or more (--min-rating)" if min_rating is not None else ""
        why = "; left out: " + ", ".join(f"{k} {v}" for k, v in left_out.items()) if left_out else ""
        raise BadInput(f"dataset {name!r} has no episodes {which}{rating} in the {split} split{why}",
                       field="--specialist")
    episodes = itertools.chain([first], episodes)
    out = out.absolute()
    count = pairs = 0
    with staging_dir(out.parent, out.name) as tmp:
        if fmt == "openai":
            target = tmp / "export.jsonl"
            with open(target, "w", encoding="utf-8") as f:
                for episode in episodes:
                    f.write(json.dumps(to_openai(episode), ensure_ascii=False) + "\n")
                    count += 1
                    if episode.get("preference"):   # a chat file holds the chosen side only
                        pairs += 1
                        why = "rejected answers of preference pairs (--format hf keeps them)"
                        left_out[why] = left_out.get(why, 0) + 1
            final_tmp = target
        else:
            # what the rows will be, counted here: the worker that makes the dataset only writes them
            left_out, pairs, conversations = {}, 0, 0
            for episode in rated(_selected(iter_episodes(ws, name, manifest["version"]), specialist, split,
                                           left_out, held), min_rating, left_out):
                if episode.get("preference"):
                    pairs += 1
                else:
                    conversations += 1
            if trl_type == "auto":
                trl_type = "preference" if pairs and not conversations else "conversation"
            if trl_type == "preference":
                if not pairs:
                    raise BadInput(f"{name}@{manifest['version']} has no preference episodes to write as prompt, "
                                   "chosen and rejected here; --type conversation writes its episodes as messages",
                                   field="--type")
                if conversations:
                    left_out["episodes without a rejected answer (--type conversation writes them)"] = conversations
            count = _save_hf(ws, name, manifest["version"], specialist, tmp / "dataset", min_rating, split, trl_type)
            final_tmp = tmp / "dataset"
        if out.exists():
            (shutil.rmtree if out.is_dir() else Path.unlink)(out)
        if final_tmp.is_dir():
            publish_dir(final_tmp, out)
        else:
            final_tmp.rename(out)
    shutil.rmtree(tmp, ignore_errors=True)
    return ExportResult(name, manifest["version"], fmt, str(out), count, split, left_out,
                        trl_type if fmt == "hf" else None, pairs)


def _hf_message(m: dict) -> dict:
    """One message as an Arrow row: every message has the same fields (tool calls as JSON text, since their
    arguments' keys differ from call to call)."""
    return {"role": m["role"], "content": m["content"],
            "tool_calls": json.dumps(m["tool_calls"], ensure_ascii=False) if "tool_calls" in m else None,
            "name": m.get("name"), "tool_call_id": m.get("tool_call_id"), "weight": m.get("weight", 1)}


def _hf_rows(home: str, name: str, version: str, specialist: str | None,
             min_rating: int | None = None, split: str = "train", trl_type: str = "conversation") -> Iterator[dict]:
    episodes = iter_episodes(Workspace(Path(home)), name, version, specialist, split=None if split == "all" else split)
    for episode in rated(episodes, min_rating):
        preference = episode.get("preference")
        if trl_type == "preference" and not preference:
            continue
        record = to_openai(episode)
        row = {"id": episode["id"], "specialist": episode["specialist"]}
        if trl_type == "preference":
            # TRL's conversational preference type: the prompt once, then each answer as the messages after it
            cut = preference["prompt_messages"]
            rejected = to_openai({**episode, "messages": episode["messages"][:cut] + preference["rejected"]})
            row.update(prompt=[_hf_message(m) for m in record["messages"][:cut]],
                       chosen=[_hf_message(m) for m in record["messages"][cut:]],
                       rejected=[_hf_message(m) for m in rejected["messages"][cut:]])
        else:
            row["messages"] = [_hf_message(m) for m in record["messages"]]
        row.update({
            "tools": json.dumps(episode["tools"], ensure_ascii=False) if episode["tools"] else None,
            "rating": episode["feedback"]["rating"], "correction": episode["feedback"]["correction"],
            "media": json.dumps(episode["media"], ensure_ascii=False) if episode.get("media") else None,
            "source": episode["source"],
        })
        if trl_type != "preference":
            # JSON text, as tools are: {"prompt_messages": N, "rejected": [...]}
            row["preference"] = json.dumps(preference, ensure_ascii=False) if preference else None
        yield row


def _save_hf(ws: Workspace, name: str, version: str, specialist: str | None, target: Path,
             min_rating: int | None = None, split: str = "train", trl_type: str = "conversation") -> int:
    """A ``datasets.Dataset`` saved with ``save_to_disk``; tool calls and tools as JSON text, since
    Arrow needs one schema for arguments whose keys differ from call to call."""
    from datasets import Dataset

    dataset = Dataset.from_generator(
        _hf_rows, gen_kwargs={"home": str(ws.home), "name": name, "version": version, "specialist": specialist,
                              "min_rating": min_rating, "split": split, "trl_type": trl_type},
        cache_dir=str(target.parent / "cache"))
    dataset.save_to_disk(str(target))
    return len(dataset)
