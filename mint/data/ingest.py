"""``mint ingest``: logs in, an immutable content-addressed dataset version out.

A dataset is a chain of versions; each version holds the episodes that were
new when it was made, so reading version V reads the chain up to V. The
``index.sqlite`` beside the versions remembers every episode id already in the
dataset (a cache rebuilt from the chain when it disagrees with HEAD), which
keeps deduplication exact at constant memory.

Write order, each step atomic: the version directory is renamed into place,
then HEAD is replaced, then the index commits. A kill before HEAD moves leaves
only an unreferenced directory that readers never see.
"""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mint.data import datasets
from mint.data.episode import FORMATS, RecordError, episode_id, normalize
from mint.data.labels import Labeler
from mint.data.readers import DEFAULT_MAX_RECORD_BYTES, RAW_KEEP_CHARS, RawRecord, discover, read_source
from mint.data.scrub import scrub_text, scrub_value
from mint.errors import BadInput
from mint.faults import checkpoint
from mint.project import Project
from mint.workspace import Workspace, atomic_write_text, file_lock, publish_dir, remove_stale_temps, staging_dir

# (source label, bytes just read, total bytes of that source)
IngestProgress = Callable[[str, int, int], None]


@dataclass
class SourceStats:
    path: str
    format: str
    bytes: int
    read: int = 0
    kept: int = 0
    duplicate: int = 0
    quarantined: int = 0
    scrubbed: int = 0


@dataclass
class IngestResult:
    dataset: str
    version: str | None          # the dataset's version after this ingest (None: still empty)
    created: bool                # False: nothing new, no version was made
    parent: str | None
    episodes_added: int
    total_episodes: int
    sources: list[SourceStats]
    by_specialist: dict[str, int]
    labeled_by: dict[str, int]
    scrubbed: dict[str, int]
    quarantine_file: str
    quarantined_new: int
    seconds: float
    reasons: dict[str, int] = field(default_factory=dict)


def ingest(ws: Workspace, paths: list[Path], *, dataset: str = "default", fmt: str = "auto",
           project: Project, scrub: bool = True, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
           progress: IngestProgress | None = None) -> IngestResult:
    started = time.perf_counter()
    datasets.check_name(dataset)
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", field="--format")
    if max_record_bytes < 1:
        raise BadInput("must be a positive number of bytes", field="--max-record-bytes")
    if not paths:
        raise BadInput("give at least one file or folder to ingest")
    sources = discover(paths, fmt)   # missing or unreadable paths fail here, before any write
    labeler = Labeler(project)
    directory = ws.datasets / dataset
    directory.mkdir(parents=True, exist_ok=True)

    with file_lock(directory / ".lock"):
        remove_stale_temps(directory)
        parent = datasets.read_head(directory)
        parent_manifest = datasets.read_manifest(directory, parent) if parent else None
        index = _open_index(directory, parent)
        stats: list[SourceStats] = []
        by_specialist: Counter = Counter()
        labeled_by: Counter = Counter()
        scrubbed: Counter = Counter()
        reasons: Counter = Counter()
        quarantine: list[dict] = []
        new_ids: list[str] = []
        try:
            with staging_dir(directory, "version") as tmp:
                with open(tmp / datasets.EPISODES_FILE, "w", encoding="utf-8") as out:
                    for source in sources:
                        label = str(source.path)
                        source_stats = SourceStats(label, source.kind, source.size)
                        stats.append(source_stats)
                        report = (lambda n, label=label, size=source.size: progress(label, n, size)) \
                            if progress else None
                        for record in read_source(source, label, max_record_bytes=max_record_bytes,
                                                  progress=report):
                            source_stats.read += 1
                            episode, reason = _episode(record, fmt, labeler, scrub, scrubbed, source_stats)
                            if episode is None:
                                source_stats.quarantined += 1
                                reasons[_reason_kind(reason)] += 1
                                quarantine.append(_quarantined(record, reason, scrub, scrubbed, source_stats))
                                continue
                            key = bytes.fromhex(episode["id"][:32])
                            if index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)", (key,)).rowcount == 0:
                                source_stats.duplicate += 1
                                continue
                            source_stats.kept += 1
                            by_specialist[episode["specialist"]] += 1
                            labeled_by[episode.pop("_labeled_by")] += 1
                            new_ids.append(episode["id"])
                            out.write(json.dumps(episode, ensure_ascii=False, separators=(",", ":")) + "\n")
                checkpoint("ingest.episodes_written")
                if not new_ids:
                    raise _NothingNew
                version = _version_hash(parent, tmp / datasets.EPISODES_FILE)
                manifest = _manifest(dataset, version, parent, parent_manifest, fmt, scrub, stats,
                                     by_specialist, scrubbed, len(new_ids))
                (tmp / datasets.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
                if (directory / version).exists():   # an unreferenced leftover of a killed ingest
                    datasets.remove_tree(directory / version)
                publish_dir(tmp, directory / version)
            # the version directory is in place but invisible until HEAD names it
            checkpoint("ingest.version_published")
            atomic_write_text(directory / datasets.HEAD_FILE, version + "\n")
            checkpoint("ingest.head_written")
            index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('head', ?)", (version,))
            index.commit()
            head, created = version, True
        except _NothingNew:
            index.rollback()
            head, created = parent, False
        finally:
            index.close()
        quarantined_new = datasets.append_quarantine(directory, quarantine)

    total = (parent_manifest or {}).get("total_episodes", 0) + len(new_ids)
    return IngestResult(
        dataset=dataset, version=head, created=created, parent=parent, episodes_added=len(new_ids),
        total_episodes=total, sources=stats, by_specialist=dict(by_specialist), labeled_by=dict(labeled_by),
        scrubbed=dict(scrubbed), quarantine_file=str(directory / datasets.QUARANTINE_FILE),
        quarantined_new=quarantined_new, seconds=time.perf_counter() - started, reasons=dict(reasons))


class _NothingNew(Exception):
    """Every record was a duplicate or bad: no version is made."""


def _episode(record: RawRecord, fmt: str, labeler: Labeler, scrub: bool, scrubbed: Counter,
             stats: SourceStats) -> tuple[dict | None, str]:
    if record.error:
        return None, record.error
    try:
        episode = normalize(record.data, fmt)
    except RecordError as exc:
        return None, str(exc)
    specialist, how = labeler.label(episode.pop("label"), episode["messages"], episode["tools"])
    if how == "record" and specialist not in labeler.names:
        return None, (f"specialist: {specialist!r} is not a specialist in mint.yaml "
                      f"({', '.join(sorted(labeler.names))})")
    if scrub:
        found: Counter = Counter()
        for message in episode["messages"]:
            message["content"] = scrub_text(message["content"], found)
            for call in message.get("tool_calls", ()):
                call["function"]["arguments"] = scrub_value(call["function"]["arguments"], found)
        if episode["feedback"]["correction"]:
            episode["feedback"]["correction"] = scrub_text(episode["feedback"]["correction"], found)
        if found:
            scrubbed.update(found)
            stats.scrubbed += sum(found.values())
    return {
        "id": episode_id(episode["messages"], episode["tools"], episode["feedback"]),
        "session": episode["session"], "ts": episode["ts"], "specialist": specialist,
        "messages": episode["messages"], "tools": episode["tools"], "feedback": episode["feedback"],
        "served_by": episode["served_by"], "source": record.source, "_labeled_by": how,
    }, ""


def _reason_kind(reason: str) -> str:
    """A quarantine reason without its specifics, for the summary: ``messages[].role: unknown role '…'``."""
    for prefix in ("invalid JSON", "record over the size cap", "not UTF-8", "unreadable"):
        if reason.startswith(prefix):
            return prefix
    return re.sub(r"'[^']*'", "'…'", re.sub(r"\[\d+\]", "[]", reason))


def _quarantined(record: RawRecord, reason: str, scrub: bool, scrubbed: Counter, stats: SourceStats) -> dict:
    raw = record.raw
    if raw is None and record.data is not None:
        raw = json.dumps(record.data, ensure_ascii=False, default=str)[:RAW_KEEP_CHARS]
    if raw and scrub:
        found: Counter = Counter()
        raw = scrub_text(raw, found)
        scrubbed.update(found)
        stats.scrubbed += sum(found.values())
    return {"source": record.source, "reason": reason, "raw": raw}


def _open_index(directory: Path, head: str | None) -> sqlite3.Connection:
    index = sqlite3.connect(directory / "index.sqlite", isolation_level="DEFERRED")
    index.execute("PRAGMA synchronous=NORMAL")
    index.execute("CREATE TABLE IF NOT EXISTS seen (id BLOB PRIMARY KEY) WITHOUT ROWID")
    index.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    index.commit()
    row = index.execute("SELECT value FROM meta WHERE key = 'head'").fetchone()
    if (row[0] if row else None) != head:
        # HEAD moved without the index (a kill between the two): rebuild it from the chain
        index.execute("DELETE FROM seen")
        for version in datasets.chain(directory, head):
            for episode in datasets.read_episodes(directory, version):
                index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)", (bytes.fromhex(episode["id"][:32]),))
        index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('head', ?)", (head,))
        index.commit()
    return index


def _version_hash(parent: str | None, episodes: Path) -> str:
    digest = hashlib.sha256((parent or "").encode() + b"\n")
    with open(episodes, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:datasets.VERSION_CHARS]


def _manifest(dataset: str, version: str, parent: str | None, parent_manifest: dict | None, fmt: str,
              scrub: bool, stats: list[SourceStats], by_specialist: Counter, scrubbed: Counter,
              added: int) -> dict:
    cumulative = Counter((parent_manifest or {}).get("by_specialist", {}))
    cumulative.update(by_specialist)
    return {
        "dataset": dataset,
        "version": version,
        "number": (parent_manifest or {}).get("number", 0) + 1,
        "parent": parent,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "format": fmt,
        "scrubbed_pii": scrub,
        "episodes": added,
        "total_episodes": (parent_manifest or {}).get("total_episodes", 0) + added,
        "new_by_specialist": dict(by_specialist),
        "by_specialist": dict(cumulative),
        "scrubbed": dict(scrubbed),
        "sources": [vars(s) for s in stats],
    }
