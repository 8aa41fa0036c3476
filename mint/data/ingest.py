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
import sqlite3
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, NamedTuple

from mint.data import datasets
from mint.data.formats import FORMATS, RecordError, normalize
from mint.data.formats.fields import normalize_feedback, upstream_id
from mint.data.formats.llamafactory import remap
from mint.routing.labels import Labeler
from mint.data.readers import DEFAULT_MAX_RECORD_BYTES, RAW_KEEP_CHARS, RawRecord, Source, parse_line, read_line_batches
from mint.data.schema import Episode, Feedback, Message
from mint.data.scrub import scrub_episode, scrub_text
from mint.data.sources import discover, read_source
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
    # where the new episodes that no record label, serving specialist, tool or keyword placed went: to the
    # router champion (``router``, its revision) when there is one, else to mint.yaml's ``fallback``
    unmatched: dict[str, int] = field(default_factory=dict)
    fallback: str | None = None
    router: str | None = None

    @property
    def failed_sources(self) -> list[SourceStats]:
        """The sources that kept nothing: every record quarantined."""
        return [s for s in self.sources if s.kept_nothing]

    @property
    def kept_nothing(self) -> bool:
        """Records were read and every one was quarantined (the CLI exits 2 with the top reasons)."""
        read = sum(s.read for s in self.sources)
        return read > 0 and sum(s.quarantined for s in self.sources) == read

    @property
    def unmatched_note(self) -> str | None:
        """Where the episodes no rule labelled went, and how to send them elsewhere; None when there were none."""
        total = sum(self.unmatched.values())
        if not total:
            return None
        if self.router is not None:
            where = ", ".join(f"{name} {n:,}" for name, n in sorted(self.unmatched.items(), key=lambda kv: -kv[1]))
            return (f"{total:,} new episode(s) matched no label, tool or keyword of mint.yaml: the router champion "
                    f"{self.router} placed them ({where}); to label a file yourself, ingest it with --specialist NAME")
        return (f"{total:,} new episode(s) matched no label, tool or keyword of mint.yaml and went to {self.fallback}, "
                "its fallback specialist; to send them elsewhere set `fallback: NAME` in mint.yaml (or train a "
                "router champion, which then places them), or ingest a file with --specialist NAME")


def ingest(ws: Workspace, paths: list[Path], *, dataset: str = "default", fmt: str = "auto",
           project: Project, scrub: bool = True, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
           progress: IngestProgress | None = None, workers: int | None = None, specialist: str | None = None,
           file_formats: dict[Path, str] | None = None) -> IngestResult:
    """Ingest ``paths`` into ``dataset``. ``workers``: processes that parse and scrub big JSON Lines
    files (default: one per core when there are several; 0 or 1 parses in this process).
    ``specialist`` labels every record (a public dataset meant for one specialist); ``file_formats``
    gives the format of single files (``--format FILE=FORMAT``) where sniffing cannot tell. Episodes that no
    rule labels go to the router champion where one exists, else to the project's fallback specialist."""
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
    unmatched_formats = set(file_formats) - {source.path.resolve() for source in sources}
    if unmatched_formats:
        raise BadInput("--format names a file that is not among the paths given",
                       file=str(sorted(unmatched_formats)[0]))
    router = _ChampionRouter.find(ws, project) if specialist is None else None
    settings = _Settings(fmt, Labeler(project), scrub, specialist, fallback=project.fallback,
                         route=router is not None)
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
        unmatched: Counter = Counter()
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
                        outcomes = _outcomes(source, label, here, max_record_bytes, report, workers)
                        for outcome in router.place(outcomes) if router is not None else outcomes:
                            source_stats.read += 1
                            if outcome.scrubbed:
                                scrubbed.update(outcome.scrubbed)
                                source_stats.scrubbed += sum(outcome.scrubbed.values())
                            if isinstance(outcome, FeedbackEvent):   # a rating for an episode logged earlier
                                out.flush()
                                outcome = _apply_feedback(index, directory, tmp, outcome, settings)
                            if isinstance(outcome, Quarantined):
                                source_stats.quarantined += 1
                                reasons[datasets.reason_kind(outcome.reason)] += 1
                                _count(source_stats.reasons, datasets.reason_kind(outcome.reason))
                                quarantine.write(outcome.entry)
                                continue
                            keys = outcome.keys
                            if index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)",
                                             (outcome.key,)).rowcount == 0:
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
                                _remember_conversation(index, keys, outcome.key, outcome.specialist, None, out.tell())
                            source_stats.kept += 1
                            source_stats.pairs += outcome.pair
                            added += 1
                            by_specialist[outcome.specialist] += 1
                            labeled_by[outcome.how] += 1
                            if outcome.how in ("routed", "fallback"):
                                unmatched[outcome.specialist] += 1
                            out.write(outcome.line)
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
        episodes_updated=updated, skipped=skipped, unmatched=dict(unmatched) if created else {},
        fallback=settings.fallback if specialist is None else None,
        router=router.revision if router is not None else None)


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
    fallback: str | None = None      # the specialist of episodes no rule labels, when no router places them
    route: bool = False              # a router champion places the episodes no rule labels (in this process)


def _source_settings(settings: _Settings, source: Source, file_formats: dict[Path, str]) -> _Settings:
    """The settings for one source: its own --format, or the layout its dataset_info.json entry gives."""
    own = file_formats.get(source.path.resolve())
    if own is not None:
        return dataclasses.replace(settings, fmt=own)
    if source.layout is not None:
        return dataclasses.replace(settings, fmt="auto", layout=source.layout)
    return settings


# --- what one record became ------------------------------------------------------------------------------
# ``scrubbed``: what scrubbing found in the record (None: nothing). Outcomes are NamedTuples so that they cross
# from worker processes as plain tuples (``_process_batch``): a dataclass pickles at several times the cost.

class Kept(NamedTuple):
    """An episode, serialized: its line (UTF-8 JSON), the first 128 bits of its id, its specialist and the
    rule that labelled it, the keys that link it to other records of its conversation, and whether it
    carries a chosen/rejected preference."""
    line: bytes
    key: bytes
    specialist: str
    how: str               # record | served_by | tools | keywords | routed | fallback | --specialist | feedback
    keys: "ConversationKeys | None"
    pair: bool
    scrubbed: Counter | None


class Quarantined(NamedTuple):
    """A record that is not an episode: why, and its quarantine entry (UTF-8 JSON)."""
    reason: str
    entry: bytes
    scrubbed: Counter | None


class FeedbackEvent(NamedTuple):
    """A rating or correction for an episode logged earlier, named by its upstream id (its record as read is
    kept for the quarantine, should no episode have that id)."""
    upstream_id: str
    feedback: Feedback
    source: str
    raw: str
    scrubbed: Counter | None


class Unplaced(NamedTuple):
    """An episode that no rule labels, for the router champion to place (in the main process)."""
    episode: Episode
    scrubbed: Counter | None


Outcome = Kept | Quarantined | FeedbackEvent | Unplaced
_OUTCOME_TYPES = (Kept, Quarantined, FeedbackEvent, Unplaced)

PARALLEL_MIN_BYTES = 4 << 20     # smaller files are done before worker processes would have started
_BATCH_LINES = 2000


def _process(record: RawRecord, settings: _Settings) -> Outcome:
    found: Counter = Counter()
    if record.error:
        return _quarantined(record, record.error, settings, found)
    try:
        return _episode_outcome(record, settings, found)
    except RecordError as exc:
        return _quarantined(record, str(exc), settings, Counter())
    except RecursionError:
        return _quarantined(record, "nested too deeply to process", settings, Counter())
    except UnicodeEncodeError:
        return _quarantined(record, _surrogate_reason(record.data), settings, Counter())
    except Exception as exc:  # noqa: BLE001 - one odd record must never stop the run; its reason says why
        return _quarantined(record, f"could not be processed ({type(exc).__name__}: {exc}); "
                            "please report this record", settings, Counter())


# a record with any of these is a conversation; without them, an upstream id and feedback, a feedback event
_CONVERSATION_FIELDS = frozenset(("messages", "conversations", "request", "prompt", "instruction", "chosen",
                                  "rejected", "chosen_messages", "rejected_messages"))


def _feedback_event(record: RawRecord, data, settings: _Settings, found: Counter) -> FeedbackEvent | None:
    if not isinstance(data, dict) or not _CONVERSATION_FIELDS.isdisjoint(data):
        return None
    upstream = upstream_id(data)
    if upstream is None:
        return None
    feedback = normalize_feedback(data)
    if not feedback.given:
        return None
    if settings.scrub and feedback.correction:
        feedback = Feedback(feedback.rating, scrub_text(feedback.correction, found))
    raw = record.raw if record.raw is not None else json.dumps(data, ensure_ascii=False)[:RAW_KEEP_CHARS]
    return FeedbackEvent(upstream, feedback, record.source, raw, found or None)


def _episode_outcome(record: RawRecord, settings: _Settings, found: Counter) -> Outcome:
    data = record.data
    if settings.layout is not None:
        data = remap(data, settings.layout)
    event = _feedback_event(record, data, settings, found)
    if event is not None:
        return event
    episode = normalize(data, settings.fmt)
    labeler = settings.labeler
    if settings.specialist is not None:
        specialist, how = settings.specialist, "--specialist"
    else:
        asked, tools = [], bool(episode.tools)
        for m in episode.messages:
            if m.role == "user":
                asked.append(m.content)
            elif m.tool_calls or m.role == "tool":
                tools = True
        specialist, how = labeler.label(episode.specialist, "\n".join(asked), tools, episode.served_by)
        if how == "record" and specialist not in labeler.names:
            reason = (f"specialist: {specialist!r} is not a specialist in mint.yaml "
                      f"({', '.join(sorted(labeler.names))})")
            return _quarantined(record, reason, settings, found)
    if settings.scrub:
        episode = scrub_episode(episode, found)
    if specialist is None:
        if settings.route:
            episode = episode.placed(None, record.source)
            episode.serialize().line.encode("utf-8")   # a lone surrogate fails here, not in the main process
            return Unplaced(episode, found or None)
        specialist, how = settings.fallback, "fallback"
    return kept(episode.placed(specialist, record.source, how), how, found or None)


def kept(episode: Episode, how: str, found: Counter | None) -> Kept:
    """The outcome of an episode with its specialist and source: serialized once for its id, its line and its
    conversation keys. Encoding is where a lone surrogate fails (UnicodeEncodeError)."""
    serialized = episode.serialize()
    return Kept(serialized.line.encode("utf-8"), bytes.fromhex(serialized.id[:32]), episode.specialist, how,
                conversation_keys(episode, serialized.message_jsons), episode.preference is not None, found)


def _surrogate_reason(data) -> str:
    return f"{lone_surrogate_at(data) or 'record'}: {LONE_SURROGATE}"


def _quarantined(record: RawRecord, reason: str, settings: _Settings, found: Counter) -> Quarantined:
    content = record.raw
    if content is None and record.data is not None:
        try:
            content = json.dumps(record.data, ensure_ascii=False, sort_keys=True, default=str)
        except (RecursionError, ValueError):
            content = None
    return Quarantined(reason, _quarantine_line(record.source, reason, content, settings, found), found or None)


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


def _outcomes(source: Source, label: str, settings: _Settings, cap: int, progress,
              workers: int | None) -> Iterator[Outcome]:
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
                yield from _typed(pending.popleft().get())
        while pending:
            yield from _typed(pending.popleft().get())


_worker_settings: _Settings | None = None


def _init_worker(settings: _Settings) -> None:
    global _worker_settings
    _worker_settings = settings


def _process_batch(label: str, batch: list) -> list[tuple[int, tuple]]:
    """The batch's outcomes as (type, fields), the form that pickles cheapest."""
    out = []
    for item in batch:
        record = parse_line(label, item)
        if record is not None:
            outcome = _process(record, _worker_settings)
            out.append((_OUTCOME_TYPES.index(type(outcome)), tuple(outcome)))
    return out


def _typed(batch: list[tuple[int, tuple]]) -> Iterator[Outcome]:
    for kind, fields in batch:
        yield _OUTCOME_TYPES[kind]._make(fields)


# --- the router champion places what no rule labels --------------------------------------------------------

class _ChampionRouter:
    """The router champion, asked about the episodes no rule labels (their conversation up to the last user
    turn, as the mixture asks it about a turn), in batches and in file order; the base it reads is loaded
    on the first batch."""

    BATCH = 64

    def __init__(self, router, base: str, revision: str) -> None:
        self.router, self.base, self.revision = router, base, revision
        self._loaded = None

    @classmethod
    def find(cls, ws: Workspace, project: Project) -> "_ChampionRouter | None":
        from mint.routing.router import champion_router
        from mint.registry import store

        if not store.exists(ws):
            return None
        router, base = champion_router(ws, project)
        if router.probe is None:
            return None
        return cls(router, base or project.base, router.revision)

    def place(self, outcomes: Iterator[Outcome]) -> Iterator[Outcome]:
        """``outcomes`` in their order, each Unplaced one placed (a Kept labelled ``routed``)."""
        held: list[Outcome] = []
        waiting = 0
        for outcome in outcomes:
            if not held and not isinstance(outcome, Unplaced):
                yield outcome
                continue
            held.append(outcome)
            waiting += isinstance(outcome, Unplaced)
            if waiting >= self.BATCH:
                yield from self._placed(held)
                held, waiting = [], 0
        yield from self._placed(held)

    def _placed(self, held: list[Outcome]) -> list[Outcome]:
        unplaced = [o for o in held if isinstance(o, Unplaced)]
        if not unplaced:
            return held
        conversations = [_asked(o.episode.messages) for o in unplaced]
        routes = self.router.route(conversations, [False] * len(conversations), self._features)
        placed = iter(routes)
        out: list[Outcome] = []
        for outcome in held:
            if isinstance(outcome, Unplaced):
                episode = outcome.episode
                out.append(kept(episode.placed(next(placed).specialist, episode.source, "routed"), "routed",
                                outcome.scrubbed))
            else:
                out.append(outcome)
        return out

    def _features(self, conversations, layer, reads):
        from mint.base import load_base
        from mint.routing.router import probe_features

        if self._loaded is None:
            self._loaded = load_base(self.base)
        return probe_features(self._loaded.model, self._loaded.tokenizer, conversations, layer, reads)


def _asked(messages: tuple[Message, ...]) -> list[dict]:
    """The conversation up to its last user turn, as plain role/content turns."""
    last_user = max((i for i, m in enumerate(messages) if m.role == "user"), default=len(messages) - 1)
    return [{"role": m.role, "content": m.content} for m in messages[:last_user + 1]
            if m.role in ("system", "user", "assistant")]


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


def conversation_keys(episode: Episode, message_jsons: tuple[str, ...] | None = None) -> ConversationKeys | None:
    """The episode's keys; ``message_jsons`` are its messages' JSON as ``serialize`` wrote them, when at hand.

    A key is the hash of the session (else the upstream id) and the messages' JSON, so the prefix keys of
    a longer log equal the full key of each shorter one.
    """
    upstream = _key("upstream", episode.upstream_id) if episode.upstream_id else None
    full, prefixes = None, []
    if episode.session:
        head = b"session\0" + episode.session.encode("utf-8") + b"\0"
    elif episode.upstream_id:
        head = b"upstream\0" + episode.upstream_id.encode("utf-8") + b"\0"
    else:
        head = None
    if head is not None:
        messages = episode.messages
        jsons = message_jsons if message_jsons is not None else tuple(m.json() for m in messages)
        # a conversation is re-logged after an answer: prefixes that end with one are its earlier logs
        ends = {i for i in range(len(messages) - 1)
                if messages[i].role == "assistant" and messages[i + 1].role != "assistant"}
        if ends:
            running = hashlib.sha256(head + b"[")
            for i in range(max(ends) + 1):
                running.update((b"," if i else b"") + jsons[i].encode("utf-8"))
                if i in ends:
                    prefix = running.copy()
                    prefix.update(b"]")
                    prefixes.append(prefix.digest()[:16])
        full = hashlib.sha256(head + ("[" + ",".join(jsons) + "]").encode("utf-8")).digest()[:16]
    if upstream is None and full is None:
        return None
    return ConversationKeys(upstream, full, tuple(prefixes), episode.feedback.given)


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


def _apply_feedback(index: sqlite3.Connection, directory: Path, staging: Path, event: FeedbackEvent,
                    settings: _Settings) -> Kept | Quarantined:
    """The earlier episode with the event's feedback merged in, or the event quarantined when no episode of
    this dataset has its upstream id."""
    row = index.execute("SELECT specialist, version, offset FROM conversation WHERE key = ?",
                        (_key("upstream", event.upstream_id),)).fetchone()
    if row is None:
        reason = (f"feedback for {event.upstream_id!r}: no earlier episode in this dataset has that id "
                  "(ingest the conversation first)")
        return Quarantined(reason, _quarantine_line(event.source, reason, event.raw, settings, Counter()), None)
    specialist, version, offset = row
    path = (directory / version if version else staging) / datasets.EPISODES_FILE
    with open(path, "rb") as f:
        f.seek(offset)
        episode = Episode.from_dict(json.loads(f.readline()))
    given = event.feedback
    feedback = Feedback(given.rating if given.rating is not None else episode.feedback.rating,
                        given.correction if given.correction is not None else episode.feedback.correction)
    return kept(dataclasses.replace(episode, feedback=feedback), "feedback", None)


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
                    stored = json.loads(line)
                    key = bytes.fromhex(stored["id"][:32])
                    index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)", (key,))
                    keys = conversation_keys(Episode.from_dict(stored))
                    if keys:
                        _remember_conversation(index, keys, key, stored["specialist"], version, f.tell() - len(line))
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
