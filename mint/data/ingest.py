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
import dataclasses
import hashlib
import json
import multiprocessing
import os
from json.encoder import encode_basestring  # the C string escaper json.dumps uses
import sqlite3
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mint.data import datasets
from mint.data.episode import FORMATS, RecordError, normalize, normalize_feedback, upstream_id
from mint.data.labels import Labeler
from mint.data.llamafactory import remap
from mint.data.readers import (DEFAULT_MAX_RECORD_BYTES, RAW_KEEP_CHARS, RawRecord, Source, discover, parse_line,
                               read_line_batches, read_source)
from mint.data.scrub import scrub_text, scrub_value
from mint.errors import BadInput
from mint.faults import checkpoint
from mint.project import Project
from mint.text import LONE_SURROGATE, closest, lone_surrogate_at
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
    updated: int = 0      # kept episodes that replace an earlier one (later feedback, a longer re-log)
    pairs: int = 0        # kept episodes with a chosen/rejected preference
    reasons: dict[str, int] = field(default_factory=dict)   # quarantine reasons of this source

    @property
    def kept_nothing(self) -> bool:
        """Every record of a non-empty source was quarantined: the source was misread or is not logs."""
        return self.read > 0 and self.quarantined == self.read


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
    episodes_updated: int = 0    # earlier episodes replaced by a newer record of the same conversation
    skipped: list[str] = field(default_factory=list)   # files in the folders given that are not logs

    @property
    def failed_sources(self) -> list[SourceStats]:
        """The sources that kept nothing: every record quarantined."""
        return [s for s in self.sources if s.kept_nothing]

    @property
    def kept_nothing(self) -> bool:
        """Records were read and every one was quarantined (the CLI exits 2 with the top reasons)."""
        read = sum(s.read for s in self.sources)
        return read > 0 and sum(s.quarantined for s in self.sources) == read


def ingest(ws: Workspace, paths: list[Path], *, dataset: str = "default", fmt: str = "auto",
           project: Project, scrub: bool = True, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
           progress: IngestProgress | None = None, workers: int | None = None, specialist: str | None = None,
           file_formats: dict[Path, str] | None = None) -> IngestResult:
    """Ingest ``paths`` into ``dataset``. ``workers``: processes that parse and scrub big JSON Lines
    files (default: one per core when there are several; 0 or 1 parses in this process).
    ``specialist`` labels every record (a public dataset meant for one specialist); ``file_formats``
    gives the format of single files (``--format FILE=FORMAT``) where sniffing cannot tell."""
    started = time.perf_counter()
    datasets.check_name(dataset)
    for path, name in [(None, fmt), *(file_formats or {}).items()]:
        if name not in FORMATS:
            given = f"{path}={name}: " if path is not None else ""
            raise BadInput(f"{given}unknown format {name!r}{closest(name, FORMATS)} (formats: {', '.join(FORMATS)})",
                           field="--format")
    if specialist is not None and specialist not in project.names:
        raise BadInput(f"{specialist!r} is not a specialist in mint.yaml{closest(specialist, project.names)} "
                       f"({', '.join(sorted(project.names))})", field="--specialist")
    if max_record_bytes < 1:
        raise BadInput("must be a positive number of bytes", field="--max-record-bytes")
    if not paths:
        raise BadInput("give at least one file or folder to ingest")
    skipped: list[str] = []
    sources = discover(paths, fmt, skipped=skipped)   # missing or unreadable paths fail here, before any write
    file_formats = {Path(p).resolve(): f for p, f in (file_formats or {}).items()}
    unmatched = set(file_formats) - {source.path.resolve() for source in sources}
    if unmatched:
        raise BadInput("--format names a file that is not among the paths given", file=str(sorted(unmatched)[0]))
    settings = _Settings(fmt, Labeler(project), scrub, specialist)
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
        replaced: Counter = Counter()   # specialist -> episodes of the chain replaced by newer ones
        # bad records stream to a scratch file beside the versions, appended to quarantine.jsonl at the end
        quarantine = tempfile.TemporaryFile("w+b", dir=directory, prefix=".tmp-quarantine-")
        try:
            with staging_dir(directory, "version") as tmp:
                with open(tmp / datasets.EPISODES_FILE, "wb") as out, \
                        open(tmp / datasets.SUPERSEDED_FILE, "w", encoding="ascii") as superseded:
                    for source in sources:
                        label = str(source.path)
                        source_stats = SourceStats(label, source.kind, source.size)
                        stats.append(source_stats)
                        report = (lambda n, label=label, size=source.size: progress(label, n, size)) \
                            if progress else None
                        here = _source_settings(settings, source, file_formats)
                        for line, specialist, how, found, keys, pair in _outcomes(source, label, here,
                                                                            max_record_bytes, report, workers):
                            source_stats.read += 1
                            if found:
                                scrubbed.update(found)
                                source_stats.scrubbed += sum(found.values())
                            if how == "feedback":   # a rating for an episode logged earlier: rewrite that one
                                out.flush()
                                line, specialist, bad = _apply_feedback(index, directory, tmp, line, settings)
                                if bad is not None:
                                    source_stats.quarantined += 1
                                    reasons[datasets.reason_kind(specialist)] += 1
                                    _count(source_stats.reasons, datasets.reason_kind(specialist))
                                    quarantine.write(bad)
                                    continue
                                keys = conversation_keys(json.loads(line))
                            if how == "quarantine":
                                source_stats.quarantined += 1
                                reasons[datasets.reason_kind(specialist)] += 1
                                _count(source_stats.reasons, datasets.reason_kind(specialist))
                                quarantine.write(line)
                                continue
                            key = bytes.fromhex(line[7:39].decode("ascii"))   # the first 128 bits of the id
                            if index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)", (key,)).rowcount == 0:
                                source_stats.duplicate += 1
                                continue
                            earlier = _earlier_episode(index, keys) if keys else None
                            if earlier is not None:
                                earlier_id, earlier_specialist, same_messages = earlier
                                if same_messages and not keys.has_feedback:
                                    source_stats.duplicate += 1   # logged again without anything new
                                    continue
                                superseded.write(earlier_id.hex() + "\n")
                                replaced[earlier_specialist] += 1
                                source_stats.updated += 1
                            if keys:
                                _remember_conversation(index, keys, key, specialist, None, out.tell())
                            source_stats.kept += 1
                            source_stats.pairs += pair
                            added += 1
                            by_specialist[specialist] += 1
                            labeled_by[how] += 1
                            out.write(line)
                checkpoint("ingest.episodes_written")
                if not added:
                    raise _NothingNew
                version = datasets.version_hash(parent, tmp / datasets.EPISODES_FILE, tmp / datasets.SUPERSEDED_FILE)
                manifest = _manifest(dataset, version, parent, parent_manifest, fmt, scrub, stats,
                                     by_specialist, scrubbed, added, replaced)
                (tmp / datasets.MANIFEST_FILE).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
                if (directory / version).exists():   # an unreferenced leftover of a killed ingest
                    datasets.remove_tree(directory / version)
                publish_dir(tmp, directory / version)
            # the version directory is in place but invisible until HEAD names it
            checkpoint("ingest.version_published")
            atomic_write_text(directory / datasets.HEAD_FILE, version + "\n")
            checkpoint("ingest.head_written")
            index.execute("UPDATE conversation SET version = ? WHERE version IS NULL", (version,))
            index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('head', ?)", (version,))
            index.commit()
            head, created = version, True
        except _NothingNew:
            index.rollback()
            head, created = parent, False
        try:
            with quarantine:
                quarantine.seek(0)
                quarantined_new = _append_quarantine(directory, index, quarantine, head)
        finally:
            index.close()

    updated = sum(replaced.values()) if created else 0
    total = (parent_manifest or {}).get("total_episodes", 0) + (added - updated if created else 0)
    return IngestResult(
        dataset=dataset, version=head, created=created, parent=parent, episodes_added=added if created else 0,
        total_episodes=total, sources=stats, by_specialist=dict(by_specialist), labeled_by=dict(labeled_by),
        scrubbed=dict(scrubbed), quarantine_file=str(directory / datasets.QUARANTINE_FILE),
        quarantined_new=quarantined_new, seconds=time.perf_counter() - started, reasons=dict(reasons),
        episodes_updated=updated, skipped=skipped)


def _count(counts: dict[str, int], key: str) -> None:
    counts[key] = counts.get(key, 0) + 1


class _NothingNew(Exception):
    """Every record was a duplicate or bad: no version is made."""


@dataclass(frozen=True)
class _Settings:
    fmt: str
    labeler: Labeler
    scrub: bool
    specialist: str | None = None    # --specialist: every record of the sources is this specialist's
    layout: dict | None = None       # the source's LLaMA-Factory columns and tags


def _source_settings(settings: _Settings, source: Source, file_formats: dict[Path, str]) -> _Settings:
    """The settings for one source: its own --format, or the layout its dataset_info.json entry gives."""
    own = file_formats.get(source.path.resolve())
    if own is not None:
        return dataclasses.replace(settings, fmt=own)
    if source.layout is not None:
        return dataclasses.replace(settings, fmt="auto", layout=source.layout)
    return settings


# What one record became: (line, specialist, how, scrub counts, conversation keys). ``how`` is the
# labeling rule for an episode, whose line is its JSON in UTF-8; for a bad record it is "quarantine",
# ``line`` is the quarantine entry and ``specialist`` the reason.
# ``pair``: the episode carries a chosen/rejected preference.
Outcome = tuple[bytes, str, str, "Counter | None", "ConversationKeys | None", bool]

PARALLEL_MIN_BYTES = 4 << 20     # smaller files are done before worker processes would have started
_BATCH_LINES = 2000


def _process(record: RawRecord, settings: _Settings) -> Outcome:
    found: Counter = Counter()
    if record.error:
        return _quarantine_outcome(record, record.error, settings, found)
    try:
        return _episode_outcome(record, settings, found)
    except RecordError as exc:
        return _quarantine_outcome(record, str(exc), settings, Counter())
    except RecursionError:
        return _quarantine_outcome(record, "nested too deeply to process", settings, Counter())
    except UnicodeEncodeError:
        return _quarantine_outcome(record, _surrogate_reason(record.data), settings, Counter())
    except Exception as exc:  # noqa: BLE001 - one odd record must never stop the run; its reason says why
        return _quarantine_outcome(record, f"could not be processed ({type(exc).__name__}: {exc}); "
                                   "please report this record", settings, Counter())


# a record with any of these is a conversation; without them, an upstream id and feedback, a feedback event
_CONVERSATION_FIELDS = ("messages", "conversations", "request", "prompt", "instruction", "chosen", "rejected",
                        "chosen_messages", "rejected_messages")


def _feedback_event(record: RawRecord, settings: _Settings, found: Counter) -> Outcome | None:
    data = record.data
    if not isinstance(data, dict) or any(k in data for k in _CONVERSATION_FIELDS):
        return None
    upstream = upstream_id(data)
    if upstream is None:
        return None
    feedback = normalize_feedback(data)
    if feedback["rating"] is None and not feedback["correction"]:
        return None
    if settings.scrub and feedback["correction"]:
        feedback["correction"] = scrub_text(feedback["correction"], found)
    event = {"upstream_id": upstream, "feedback": feedback, "source": record.source,
             "raw": record.raw if record.raw is not None else json.dumps(data, ensure_ascii=False)[:RAW_KEEP_CHARS]}
    return (json.dumps(event, ensure_ascii=False).encode("utf-8"), "", "feedback", found or None,
            ConversationKeys(_key("upstream", upstream), None, (), True), False)


def _episode_outcome(record: RawRecord, settings: _Settings, found: Counter) -> Outcome:
    if settings.layout is not None:
        record = dataclasses.replace(record, data=remap(record.data, settings.layout))
    event = _feedback_event(record, settings, found)
    if event is not None:
        return event
    episode = normalize(record.data, settings.fmt)
    labeler = settings.labeler
    own = episode.pop("label")
    if settings.specialist is not None:
        specialist, how = settings.specialist, "--specialist"
    else:
        specialist, how = labeler.label(own, episode["messages"], episode["tools"], served_by=episode["served_by"])
    if how == "record" and specialist not in labeler.names:
        reason = (f"specialist: {specialist!r} is not a specialist in mint.yaml "
                  f"({', '.join(sorted(labeler.names))})")
        return _quarantine_outcome(record, reason, settings, found)
    rejected = episode["preference"]["rejected"] if episode["preference"] else []
    if settings.scrub:
        for message in episode["messages"] + rejected:
            message["content"] = scrub_text(message["content"], found)
            if "reasoning" in message:
                message["reasoning"] = scrub_text(message["reasoning"], found)
            for call in message.get("tool_calls", ()):
                call["function"]["arguments"] = scrub_value(call["function"]["arguments"], found)
        if episode["feedback"]["correction"]:
            episode["feedback"]["correction"] = scrub_text(episode["feedback"]["correction"], found)
        if episode["session"]:
            episode["session"] = scrub_text(episode["session"], found)
        if episode["tools"]:   # a tool's description or default can quote a key or an address as well
            episode["tools"] = scrub_value(episode["tools"], found)
    line, messages_json = _episode_line(episode, specialist, record.source)
    # encoding is where a lone surrogate fails
    return (line.encode("utf-8"), specialist, how, found or None, conversation_keys(episode, messages_json),
            episode["preference"] is not None)


def _surrogate_reason(data) -> str:
    return f"{lone_surrogate_at(data) or 'record'}: {LONE_SURROGATE}"


def _quarantine_outcome(record: RawRecord, reason: str, settings: _Settings, found: Counter) -> Outcome:
    content = record.raw
    if content is None and record.data is not None:
        try:
            content = json.dumps(record.data, ensure_ascii=False, sort_keys=True, default=str)
        except (RecursionError, ValueError):
            content = None
    return (_quarantine_line(record.source, reason, content, settings, found), reason, "quarantine", found or None,
            None, False)


def _quarantine_line(source: str, reason: str, content: str | None, settings: _Settings, found: Counter) -> bytes:
    # the quarantine is keyed by what was read, not where: a rotated file's new bad lines are new
    digest = hashlib.sha256(f"{reason}\0{content if content is not None else source}".encode(
        "utf-8", "surrogatepass")).hexdigest()[:32]
    raw = content[:RAW_KEEP_CHARS] if content else content
    if raw and settings.scrub:
        raw = scrub_text(raw, found)
    entry = {"key": digest, "source": source, "reason": reason, "raw": raw}
    try:
        return (json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8")
    except UnicodeEncodeError:   # a lone surrogate: escaped, the entry is still valid JSON
        return (json.dumps(entry) + "\n").encode("ascii")


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


def _episode_line(episode: dict, specialist: str, source: str) -> tuple[str, str]:
    """The canonical episode as one JSON line, and its messages' JSON; each part is serialized once,
    for the id, the line and the conversation keys."""
    parts = [_dumps(episode["messages"]), _dumps(episode["tools"]), _dumps(episode["feedback"])]
    # a preference is part of what the episode is (the same prompt and chosen answer against another
    # rejected one is another pair); episodes without one keep the ids they always had
    if episode.get("preference"):
        parts.append(_dumps(episode["preference"]))
    digest = hashlib.sha256(("[" + ",".join(parts) + "]").encode("utf-8")).hexdigest()
    optional = "".join(f',"{key}":{_dumps(episode[key])}' for key in ("preference", "media", "parallel_tool_calls")
                       if episode.get(key) is not None)
    return (f'{{"id":"{digest}","session":{_string(episode["session"])},"ts":{_string(episode["ts"])},'
            f'"specialist":{_string(specialist)},"messages":{parts[0]},"tools":{parts[1]},"feedback":{parts[2]},'
            f'"served_by":{_string(episode["served_by"])},"upstream_id":{_string(episode["upstream_id"])}'
            f'{optional},"source":{_string(source)}}}\n'), parts[0]


# --- one conversation logged more than once -------------------------------------------------------

@dataclass(frozen=True)
class ConversationKeys:
    """What links records of one conversation: the upstream id (which feedback events name), and the
    session (else the upstream id) with the messages and with each shorter prefix of them (a conversation
    re-logged after every turn). Only content merges two conversation records: a shared id with other
    messages is two conversations (datasets reuse ``id`` values such as ``identity_0``)."""

    upstream: bytes | None
    full: bytes | None
    prefixes: tuple[bytes, ...]
    has_feedback: bool


def conversation_keys(episode: dict, messages_json: str | None = None) -> ConversationKeys | None:
    """The episode's keys; ``messages_json`` is its messages as ``_dumps`` wrote them, when at hand.

    A key is the hash of the session (else the upstream id) and the messages' JSON, so the prefix keys of
    a longer log equal the full key of each shorter one (``_dumps`` of a list joins the ``_dumps`` of its
    items with ",").
    """
    upstream = _key("upstream", episode.get("upstream_id")) if episode.get("upstream_id") else None
    full, prefixes = None, []
    if episode["session"]:
        head = b"session\0" + episode["session"].encode("utf-8") + b"\0"
    elif episode.get("upstream_id"):
        head = b"upstream\0" + episode["upstream_id"].encode("utf-8") + b"\0"
    else:
        head = None
    if head is not None:
        messages = episode["messages"]
        # a conversation is re-logged after an answer: prefixes that end with one are its earlier logs
        ends = {i for i in range(len(messages) - 1)
                if messages[i]["role"] == "assistant" and messages[i + 1]["role"] != "assistant"}
        if ends:
            running = hashlib.sha256(head + b"[")
            for i in range(max(ends) + 1):
                running.update((b"," if i else b"") + _dumps(messages[i]).encode("utf-8"))
                if i in ends:
                    prefix = running.copy()
                    prefix.update(b"]")
                    prefixes.append(prefix.digest()[:16])
        full = hashlib.sha256(head + (messages_json or _dumps(messages)).encode("utf-8")).digest()[:16]
    if upstream is None and full is None:
        return None
    feedback = episode["feedback"]
    return ConversationKeys(upstream, full, tuple(prefixes),
                            feedback["rating"] is not None or bool(feedback["correction"]))


def _key(kind: str, value: str) -> bytes:
    return hashlib.sha256(f"{kind}\0{value}".encode("utf-8")).digest()[:16]


def _earlier_episode(index: sqlite3.Connection, keys: ConversationKeys) -> tuple[bytes, str, bool] | None:
    """(id, specialist, same messages?) of the episode this record is a later copy of, if any: the same
    messages under the same session (or upstream id), else the longest earlier prefix of them. The
    upstream id alone never merges: it is what feedback events look up."""
    wanted = [k for k in (keys.full, *keys.prefixes) if k is not None]
    if not wanted:
        return None
    rows = dict((key, (episode, specialist)) for key, episode, specialist in index.execute(
        f"SELECT key, id, specialist FROM conversation WHERE key IN ({','.join('?' * len(wanted))})", wanted))
    if not rows:
        return None
    for key, same in ((keys.full, True), *((k, False) for k in reversed(keys.prefixes))):
        if key in rows:
            return *rows[key], same
    return None


def _remember_conversation(index: sqlite3.Connection, keys: ConversationKeys, episode: bytes,
                           specialist: str, version: str | None, offset: int) -> None:
    """Map the conversation's keys to its episode and where its line is (version None: this ingest's)."""
    for key in (keys.upstream, keys.full):
        if key is not None:
            index.execute("INSERT OR REPLACE INTO conversation(key, id, specialist, version, offset) "
                          "VALUES (?, ?, ?, ?, ?)", (key, episode, specialist, version, offset))


def _apply_feedback(index: sqlite3.Connection, directory: Path, staging: Path, event_line: bytes,
                    settings: _Settings) -> tuple[bytes, str, bytes | None]:
    """(episode line, specialist, None) for the earlier episode with the event's feedback merged in, or
    (b"", reason, quarantine line) when no episode of this dataset has the event's upstream id."""
    event = json.loads(event_line)
    row = index.execute("SELECT specialist, version, offset FROM conversation WHERE key = ?",
                        (_key("upstream", event["upstream_id"]),)).fetchone()
    if row is None:
        reason = (f"feedback for {event['upstream_id']!r}: no earlier episode in this dataset has that id "
                  "(ingest the conversation first)")
        return b"", reason, _quarantine_line(event["source"], reason, event["raw"], settings, Counter())
    specialist, version, offset = row
    path = (directory / version if version else staging) / datasets.EPISODES_FILE
    with open(path, "rb") as f:
        f.seek(offset)
        episode = json.loads(f.readline())
    episode["feedback"] = {**episode["feedback"], **{k: v for k, v in event["feedback"].items() if v is not None}}
    return _episode_line(episode, specialist, episode["source"])[0].encode("utf-8"), specialist, None


_dumps = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


_INDEX_SCHEMA = "4"   # 4: conversation keys (with where each episode is) and quarantine keys


def _open_index(directory: Path, head: str | None) -> sqlite3.Connection:
    index = sqlite3.connect(directory / "index.sqlite", isolation_level="DEFERRED")
    index.execute("PRAGMA synchronous=NORMAL")
    index.execute("PRAGMA journal_mode=WAL")
    index.execute("PRAGMA cache_size=-32000")   # 32 MB: random 128-bit keys touch pages all over the tree
    index.execute("CREATE TABLE IF NOT EXISTS seen (id BLOB PRIMARY KEY) WITHOUT ROWID")
    has_meta = index.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()
    schema = index.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() if has_meta else None
    if schema is None or schema[0] != _INDEX_SCHEMA:
        index.execute("DROP TABLE IF EXISTS conversation")   # its columns changed; rebuilt below
    index.execute("CREATE TABLE IF NOT EXISTS conversation (key BLOB PRIMARY KEY, id BLOB, specialist TEXT, "
                  "version TEXT, offset INTEGER) WITHOUT ROWID")
    index.execute("CREATE TABLE IF NOT EXISTS quarantined (key BLOB PRIMARY KEY) WITHOUT ROWID")
    index.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    index.commit()
    meta = dict(index.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("head") != head or meta.get("schema") != _INDEX_SCHEMA:
        # HEAD moved without the index (a kill between the two), or an older index: rebuild from the files
        index.execute("DELETE FROM seen")
        index.execute("DELETE FROM conversation")
        index.execute("DELETE FROM quarantined")
        for version in datasets.chain(directory, head):
            with open(directory / version / datasets.EPISODES_FILE, "rb") as f:
                while line := f.readline():
                    episode = json.loads(line)
                    key = bytes.fromhex(episode["id"][:32])
                    index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)", (key,))
                    keys = conversation_keys({"upstream_id": None, **episode})
                    if keys:
                        _remember_conversation(index, keys, key, episode["specialist"], version, f.tell() - len(line))
        for entry_key in datasets.quarantine_keys(directory):
            index.execute("INSERT OR IGNORE INTO quarantined(key) VALUES (?)", (entry_key,))
        index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('head', ?)", (head,))
        index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', ?)", (_INDEX_SCHEMA,))
        index.commit()
    return index


def _append_quarantine(directory: Path, index: sqlite3.Connection, scratch, version: str | None) -> int:
    """Append the entries not quarantined before (by content key), each naming the version this ingest
    left; returns how many. Append-only: earlier entries are never read into memory or rewritten."""
    new = 0
    with datasets.quarantine_appender(directory) as append:
        for line in scratch:
            entry = json.loads(line)
            key = bytes.fromhex(entry["key"])
            if index.execute("INSERT OR IGNORE INTO quarantined(key) VALUES (?)", (key,)).rowcount == 0:
                continue
            entry["version"] = version
            try:
                append((json.dumps(entry, ensure_ascii=False) + "\n").encode("utf-8"))
            except UnicodeEncodeError:
                append((json.dumps(entry) + "\n").encode("ascii"))
            new += 1
    index.commit()   # after the entries are on disk: a kill in between repeats entries, never loses them
    return new


def _manifest(dataset: str, version: str, parent: str | None, parent_manifest: dict | None, fmt: str,
              scrub: bool, stats: list[SourceStats], by_specialist: Counter, scrubbed: Counter,
              added: int, replaced: Counter) -> dict:
    cumulative = Counter((parent_manifest or {}).get("by_specialist", {}))
    cumulative.update(by_specialist)
    cumulative.subtract(replaced)
    cumulative = +cumulative   # drop specialists whose every episode was replaced
    return {
        "dataset": dataset,
        "version": version,
        "number": (parent_manifest or {}).get("number", 0) + 1,
        "parent": parent,
        "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "format": fmt,
        "scrubbed_pii": scrub,
        "episodes": added,
        "superseded": sum(replaced.values()),
        "total_episodes": (parent_manifest or {}).get("total_episodes", 0) + added - sum(replaced.values()),
        "new_by_specialist": dict(by_specialist),
        "by_specialist": dict(cumulative),
        "scrubbed": dict(scrubbed),
        "sources": [vars(s) for s in stats],
    }
