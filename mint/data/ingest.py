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

import collections
import hashlib
import json
import multiprocessing
import os
from json.encoder import encode_basestring  # the C string escaper json.dumps uses
import re
import sqlite3
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mint.data import datasets
from mint.data.episode import FORMATS, RecordError, episode_id, normalize
from mint.data.labels import Labeler
from mint.data.readers import (DEFAULT_MAX_RECORD_BYTES, RAW_KEEP_CHARS, RawRecord, Source, discover, parse_line,
                               read_line_batches, read_source)
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
           progress: IngestProgress | None = None, workers: int | None = None) -> IngestResult:
    """Ingest ``paths`` into ``dataset``. ``workers``: processes that parse and scrub big JSON Lines
    files (default: one per core when there are several; 0 or 1 parses in this process)."""
    started = time.perf_counter()
    datasets.check_name(dataset)
    if fmt not in FORMATS:
        raise BadInput(f"unknown format {fmt!r} (expected one of {', '.join(FORMATS)})", field="--format")
    if max_record_bytes < 1:
        raise BadInput("must be a positive number of bytes", field="--max-record-bytes")
    if not paths:
        raise BadInput("give at least one file or folder to ingest")
    sources = discover(paths, fmt)   # missing or unreadable paths fail here, before any write
    settings = _Settings(fmt, Labeler(project), scrub)
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
        added = 0
        # bad records stream to a scratch file beside the versions, merged into quarantine.jsonl at the end
        quarantine_scratch = tempfile.NamedTemporaryFile("w+", encoding="utf-8", dir=directory,
                                                         prefix=".tmp-quarantine-", suffix=".jsonl")
        quarantine = quarantine_scratch.file
        try:
            with staging_dir(directory, "version") as tmp:
                with open(tmp / datasets.EPISODES_FILE, "w", encoding="utf-8") as out:
                    for source in sources:
                        label = str(source.path)
                        source_stats = SourceStats(label, source.kind, source.size)
                        stats.append(source_stats)
                        report = (lambda n, label=label, size=source.size: progress(label, n, size)) \
                            if progress else None
                        for line, specialist, how, found in _outcomes(source, label, settings, max_record_bytes,
                                                                      report, workers):
                            source_stats.read += 1
                            if found:
                                scrubbed.update(found)
                                source_stats.scrubbed += sum(found.values())
                            if how == "quarantine":
                                source_stats.quarantined += 1
                                reasons[_reason_kind(specialist)] += 1
                                quarantine.write(line)
                                continue
                            key = bytes.fromhex(line[7:39])   # the first 128 bits of the id
                            if index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)", (key,)).rowcount == 0:
                                source_stats.duplicate += 1
                                continue
                            source_stats.kept += 1
                            added += 1
                            by_specialist[specialist] += 1
                            labeled_by[how] += 1
                            out.write(line)
                checkpoint("ingest.episodes_written")
                if not added:
                    raise _NothingNew
                version = _version_hash(parent, tmp / datasets.EPISODES_FILE)
                manifest = _manifest(dataset, version, parent, parent_manifest, fmt, scrub, stats,
                                     by_specialist, scrubbed, added)
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
        with quarantine_scratch:
            quarantine.flush()
            quarantine.seek(0)
            quarantined_new = datasets.append_quarantine(directory, quarantine)

    total = (parent_manifest or {}).get("total_episodes", 0) + added
    return IngestResult(
        dataset=dataset, version=head, created=created, parent=parent, episodes_added=added,
        total_episodes=total, sources=stats, by_specialist=dict(by_specialist), labeled_by=dict(labeled_by),
        scrubbed=dict(scrubbed), quarantine_file=str(directory / datasets.QUARANTINE_FILE),
        quarantined_new=quarantined_new, seconds=time.perf_counter() - started, reasons=dict(reasons))


class _NothingNew(Exception):
    """Every record was a duplicate or bad: no version is made."""


@dataclass(frozen=True)
class _Settings:
    fmt: str
    labeler: Labeler
    scrub: bool


# What one record became: (line, specialist, how, scrub counts). ``how`` is the labeling rule for an
# episode, whose line is its JSON; for a bad record it is "quarantine", ``line`` is the quarantine
# entry and ``specialist`` the reason.
Outcome = tuple[str, str, str, Counter | None]

PARALLEL_MIN_BYTES = 4 << 20     # smaller files are done before worker processes would have started
_BATCH_LINES = 2000


def _process(record: RawRecord, settings: _Settings) -> Outcome:
    found: Counter = Counter()
    if record.error:
        return _quarantine_outcome(record, record.error, settings, found)
    try:
        episode = normalize(record.data, settings.fmt)
    except RecordError as exc:
        return _quarantine_outcome(record, str(exc), settings, found)
    labeler = settings.labeler
    specialist, how = labeler.label(episode.pop("label"), episode["messages"], episode["tools"])
    if how == "record" and specialist not in labeler.names:
        reason = (f"specialist: {specialist!r} is not a specialist in mint.yaml "
                  f"({', '.join(sorted(labeler.names))})")
        return _quarantine_outcome(record, reason, settings, found)
    if settings.scrub:
        for message in episode["messages"]:
            message["content"] = scrub_text(message["content"], found)
            for call in message.get("tool_calls", ()):
                call["function"]["arguments"] = scrub_value(call["function"]["arguments"], found)
        if episode["feedback"]["correction"]:
            episode["feedback"]["correction"] = scrub_text(episode["feedback"]["correction"], found)
    return _episode_line(episode, specialist, record.source), specialist, how, found or None


def _quarantine_outcome(record: RawRecord, reason: str, settings: _Settings, found: Counter) -> Outcome:
    raw = record.raw
    if raw is None and record.data is not None:
        raw = json.dumps(record.data, ensure_ascii=False, default=str)[:RAW_KEEP_CHARS]
    if raw and settings.scrub:
        raw = scrub_text(raw, found)
    entry = json.dumps({"source": record.source, "reason": reason, "raw": raw}, ensure_ascii=False) + "\n"
    return entry, reason, "quarantine", found or None


def _outcomes(source: Source, label: str, settings: _Settings, cap: int, progress, workers: int | None):
    """The outcome of every record of ``source``, in file order."""
    if workers is None:
        workers = os.cpu_count() or 1
    if source.kind != "jsonl" or workers < 2 or source.size < PARALLEL_MIN_BYTES:
        for record in read_source(source, label, max_record_bytes=cap, progress=progress):
            yield _process(record, settings)
        return
    # Parse, normalize, scrub and serialize in worker processes; this process only deduplicates and
    # writes. At most 2 batches per worker are in flight, so memory stays flat whatever the file size.
    context = multiprocessing.get_context("spawn")
    with context.Pool(workers, initializer=_init_worker, initargs=(settings,)) as pool:
        pending: collections.deque = collections.deque()
        for batch in read_line_batches(source, max_record_bytes=cap, progress=progress, batch=_BATCH_LINES):
            pending.append(pool.apply_async(_process_batch, (label, batch)))
            if len(pending) >= 2 * workers:
                yield from pending.popleft().get()
        while pending:
            yield from pending.popleft().get()


_worker_settings: _Settings | None = None


def _init_worker(settings: _Settings) -> None:
    global _worker_settings
    _worker_settings = settings


def _process_batch(label: str, batch: list) -> list[Outcome]:
    out = []
    for item in batch:
        record = parse_line(label, item)
        if record is not None:
            out.append(_process(record, _worker_settings))
    return out


def _episode_line(episode: dict, specialist: str, source: str) -> str:
    """The canonical episode as one JSON line; each part is serialized once, for the id and the line."""
    parts = [_dumps(episode["messages"]), _dumps(episode["tools"]), _dumps(episode["feedback"])]
    digest = hashlib.sha256(("[" + ",".join(parts) + "]").encode("utf-8")).hexdigest()
    return (f'{{"id":"{digest}","session":{_string(episode["session"])},"ts":{_string(episode["ts"])},'
            f'"specialist":{_string(specialist)},"messages":{parts[0]},"tools":{parts[1]},"feedback":{parts[2]},'
            f'"served_by":{_string(episode["served_by"])},"source":{_string(source)}}}\n')


_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _reason_kind(reason: str) -> str:
    """A quarantine reason without its specifics, for the summary: ``messages[].role: unknown role '…'``."""
    for prefix in ("invalid JSON", "record over the size cap", "not UTF-8", "unreadable"):
        if reason.startswith(prefix):
            return prefix
    return re.sub(r"'[^']*'", "'…'", re.sub(r"\[\d+\]", "[]", reason))


def _open_index(directory: Path, head: str | None) -> sqlite3.Connection:
    index = sqlite3.connect(directory / "index.sqlite", isolation_level="DEFERRED")
    index.execute("PRAGMA synchronous=NORMAL")
    index.execute("PRAGMA journal_mode=WAL")
    index.execute("PRAGMA cache_size=-32000")   # 32 MB: random 128-bit keys touch pages all over the tree
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
