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
import json
import multiprocessing
import os
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, cast

from mint.data import datasets
from mint.data.episode_index import append_quarantine, apply_feedback, earlier_episode, open_index, remember_conversation
from mint.data.formats import FORMATS, RecordError, normalize, sniff_format
from mint.data.formats.fields import check_feedback_read, normalize_feedback, upstream_id
from mint.data.formats.llamafactory import remap
from mint.data.outcomes import (OUTCOME_TYPES, FeedbackEvent, IngestSettings, Outcome, Quarantined, Unplaced, kept,
                                Kept, quarantine_line)
from mint.data.placing import ChampionRouter
from mint.data.readers import (DEFAULT_MAX_RECORD_BYTES, NOT_TEXT, RAW_KEEP_CHARS, READABLE, RawRecord, Source, parse_line,
                               read_line_batches)
from mint.data.schema import Feedback
from mint.data.scrub import scrub_episode, scrub_text
from mint.data.sources import discover, read_source
from mint.errors import BadInput
from mint.faults import checkpoint
from mint.project import Project
from mint.routing.labels import Labeler
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
    # formats that auto-detection reads the records with that a forced --format failed on
    reads_as: dict[str, int] = field(default_factory=dict)
    hint: str | None = None   # what to do about the records this source had quarantined

    @property
    def kept_nothing(self) -> bool:
        """Every record of a non-empty source was quarantined: the source was misread or is not logs."""
        return self.read > 0 and self.quarantined == self.read

    @property
    def empty(self) -> bool:
        """The source held no record at all (an empty file: a day nothing was logged, or the wrong file)."""
        return self.read == 0

    def advice(self) -> str | None:
        """What to do about this source's quarantined records, when its reasons say more than "see them"."""
        if not self.quarantined:
            return None
        if any(kind.startswith(NOT_TEXT) for kind in self.reasons):
            return f"not a log mint can read: {READABLE}"
        if self.kept_nothing and all(kind.startswith("not UTF-") for kind in self.reasons):
            return f"not UTF-8 text: a log in another encoding needs converting to UTF-8 (iconv); else {READABLE}"
        if self.reads_as:
            fmt = max(self.reads_as, key=self.reads_as.__getitem__)
            return f"this file reads as {fmt}: use --format auto or --format {self.path}={fmt}"
        return None


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
    router = ChampionRouter.find(ws, project) if specialist is None else None
    settings = IngestSettings(fmt, Labeler(project), scrub, specialist, fallback=project.fallback,
                         route=router is not None)
    directory = ws.datasets / dataset
    directory.mkdir(parents=True, exist_ok=True)

    with file_lock(directory / ".lock"):
        remove_stale_temps(directory)
        parent = datasets.read_head(directory)
        parent_manifest = datasets.read_manifest(directory, parent) if parent else None
        index = open_index(directory, parent)
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
                                outcome = apply_feedback(index, directory, tmp, outcome, settings)
                            if isinstance(outcome, Quarantined):
                                source_stats.quarantined += 1
                                reasons[datasets.reason_kind(outcome.reason)] += 1
                                _count(source_stats.reasons, datasets.reason_kind(outcome.reason))
                                if outcome.reads_as:
                                    _count(source_stats.reads_as, outcome.reads_as)
                                quarantine.write(outcome.entry)
                                continue
                            outcome = cast(Kept, outcome)     # Unplaced ones come only with a router: it placed them
                            keys = outcome.keys
                            if index.execute("INSERT OR IGNORE INTO seen(id) VALUES (?)",
                                             (outcome.key,)).rowcount == 0:
                                source_stats.duplicate += 1
                                continue
                            earlier = earlier_episode(index, keys) if keys else None
                            if earlier is not None:
                                earlier_id, earlier_specialist, same_messages = earlier
                                if same_messages and not keys.has_feedback:
                                    source_stats.duplicate += 1   # logged again without anything new
                                    continue
                                superseded.write(earlier_id.hex() + "\n")
                                replaced[earlier_specialist] += 1
                                source_stats.updated += 1
                            if keys:
                                remember_conversation(index, keys, outcome.key, outcome.specialist, None, out.tell())
                            source_stats.kept += 1
                            source_stats.pairs += outcome.pair
                            added += 1
                            by_specialist[outcome.specialist] += 1
                            labeled_by[outcome.how] += 1
                            if outcome.how in ("routed", "fallback"):
                                unmatched[outcome.specialist] += 1
                            out.write(outcome.line)
                        source_stats.hint = source_stats.advice()
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
                quarantined_new = append_quarantine(directory, index, quarantine, head)
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


def _source_settings(settings: IngestSettings, source: Source, file_formats: dict[Path, str]) -> IngestSettings:
    """The settings for one source: its own --format, or the layout its dataset_info.json entry gives."""
    own = file_formats.get(source.path.resolve())
    if own is not None:
        return dataclasses.replace(settings, fmt=own)
    if source.layout is not None:
        return dataclasses.replace(settings, fmt="auto", layout=source.layout)
    return settings


PARALLEL_MIN_BYTES = 4 << 20     # smaller files are done before worker processes would have started
_BATCH_LINES = 2000


def _process(record: RawRecord, settings: IngestSettings) -> Outcome:
    found: Counter = Counter()
    if record.error:
        return _quarantined(record, record.error, settings, found)
    try:
        return _episode_outcome(record, settings, found)
    except RecordError as exc:
        return _quarantined(record, str(exc), settings, Counter())._replace(reads_as=_reads_as(record, settings))
    except RecursionError:
        return _quarantined(record, "nested too deeply to process", settings, Counter())
    except UnicodeEncodeError:
        return _quarantined(record, _surrogate_reason(record.data), settings, Counter())
    except Exception as exc:  # noqa: BLE001 - one odd record must never stop the run; its reason says why
        return _quarantined(record, f"could not be processed ({type(exc).__name__}: {exc}); "
                            "please report this record", settings, Counter())


def _reads_as(record: RawRecord, settings: IngestSettings) -> str | None:
    """The format auto-detection reads a record with, when a forced format failed on it (None: none does)."""
    if settings.fmt in ("auto", "hf") or not isinstance(record.data, dict):
        return None
    try:
        detected = sniff_format(record.data)
        normalize(record.data, detected)
    except (RecordError, RecursionError, ValueError, TypeError):
        return None
    return detected if detected != settings.fmt else None


# a record with any of these is a conversation; without them, an upstream id and feedback, a feedback event
_CONVERSATION_FIELDS = frozenset(("messages", "conversations", "request", "prompt", "instruction", "chosen",
                                  "rejected", "chosen_messages", "rejected_messages"))


def _feedback_event(record: RawRecord, data, settings: IngestSettings, found: Counter) -> FeedbackEvent | None:
    if not isinstance(data, dict) or not _CONVERSATION_FIELDS.isdisjoint(data):
        return None
    upstream = upstream_id(data)
    if upstream is None:
        return None
    check_feedback_read(data)
    feedback = normalize_feedback(data)
    if not feedback.given:
        return None
    if settings.scrub and feedback.correction:
        feedback = Feedback(feedback.rating, scrub_text(feedback.correction, found))
    raw = record.raw if record.raw is not None else json.dumps(data, ensure_ascii=False)[:RAW_KEEP_CHARS]
    return FeedbackEvent(upstream, feedback, record.source, raw, found or None)


def _episode_outcome(record: RawRecord, settings: IngestSettings, found: Counter) -> Outcome:
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


def _surrogate_reason(data) -> str:
    return f"{lone_surrogate_at(data) or 'record'}: {LONE_SURROGATE}"


def _quarantined(record: RawRecord, reason: str, settings: IngestSettings, found: Counter) -> Quarantined:
    content = record.raw
    if content is None and record.data is not None:
        try:
            content = json.dumps(record.data, ensure_ascii=False, sort_keys=True, default=str)
        except (RecursionError, ValueError):
            content = None
    return Quarantined(reason, quarantine_line(record.source, reason, content, settings, found), found or None)


def _outcomes(source: Source, label: str, settings: IngestSettings, cap: int, progress,
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


_worker_settings: IngestSettings | None = None


def _init_worker(settings: IngestSettings) -> None:
    global _worker_settings
    _worker_settings = settings


def _process_batch(label: str, batch: list) -> list[tuple[int, tuple]]:
    """The batch's outcomes as (type, fields), the form that pickles cheapest."""
    out = []
    for item in batch:
        record = parse_line(label, item)
        if record is not None:
            outcome = _process(record, _worker_settings)
            out.append((OUTCOME_TYPES.index(type(outcome)), tuple(outcome)))
    return out


def _typed(batch: list[tuple[int, tuple]]) -> Iterator[Outcome]:
    for kind, fields in batch:
        yield OUTCOME_TYPES[kind]._make(fields)


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
