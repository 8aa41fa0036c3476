"""A dataset's episode index (``index.sqlite`` beside its versions): the episode ids already in it, the keys of
each conversation (a conversation logged again, feedback for an earlier episode) and the quarantine's keys. A
cache, rebuilt from the chain of versions when it disagrees with HEAD."""
from __future__ import annotations

import dataclasses
import json
import sqlite3
from collections import Counter
from pathlib import Path

from mint.data import datasets
from mint.data.outcomes import (ConversationKeys, FeedbackEvent, IngestSettings, Kept, Quarantined, conversation_key,
                                conversation_keys, kept, quarantine_line)
from mint.data.schema import Episode, Feedback

def earlier_episode(index: sqlite3.Connection, keys: ConversationKeys) -> tuple[bytes, str, bool] | None:
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


def remember_conversation(index: sqlite3.Connection, keys: ConversationKeys, episode: bytes,
                           specialist: str, version: str | None, offset: int) -> None:
    """Map the conversation's keys to its episode and where its line is (version None: this ingest's)."""
    for key in (keys.upstream, keys.full):
        if key is not None:
            index.execute("INSERT OR REPLACE INTO conversation(key, id, specialist, version, offset) "
                          "VALUES (?, ?, ?, ?, ?)", (key, episode, specialist, version, offset))


def apply_feedback(index: sqlite3.Connection, directory: Path, staging: Path, event: FeedbackEvent,
                    settings: IngestSettings) -> Kept | Quarantined:
    """The earlier episode with the event's feedback merged in, or the event quarantined when no episode of
    this dataset has its upstream id."""
    row = index.execute("SELECT specialist, version, offset FROM conversation WHERE key = ?",
                        (conversation_key("upstream", event.upstream_id),)).fetchone()
    if row is None:
        reason = (f"feedback for {event.upstream_id!r}: no earlier episode in this dataset has that id "
                  "(ingest the conversation first)")
        return Quarantined(reason, quarantine_line(event.source, reason, event.raw, settings, Counter()), None)
    specialist, version, offset = row
    path = (directory / version if version else staging) / datasets.EPISODES_FILE
    with open(path, "rb") as f:
        f.seek(offset)
        episode = Episode.from_dict(json.loads(f.readline()))
    given = event.feedback
    feedback = Feedback(given.rating if given.rating is not None else episode.feedback.rating,
                        given.correction if given.correction is not None else episode.feedback.correction)
    return kept(dataclasses.replace(episode, feedback=feedback), "feedback", None)


INDEX_SCHEMA = "4"   # 4: conversation keys (with where each episode is) and quarantine keys


def open_index(directory: Path, head: str | None) -> sqlite3.Connection:
    index = sqlite3.connect(directory / "index.sqlite", isolation_level="DEFERRED")
    index.execute("PRAGMA synchronous=NORMAL")
    index.execute("PRAGMA journal_mode=WAL")
    index.execute("PRAGMA cache_size=-32000")   # 32 MB: random 128-bit keys touch pages all over the tree
    index.execute("CREATE TABLE IF NOT EXISTS seen (id BLOB PRIMARY KEY) WITHOUT ROWID")
    has_meta = index.execute("SELECT 1 FROM sqlite_master WHERE name = 'meta'").fetchone()
    schema = index.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone() if has_meta else None
    if schema is None or schema[0] != INDEX_SCHEMA:
        index.execute("DROP TABLE IF EXISTS conversation")   # its columns changed; rebuilt below
    index.execute("CREATE TABLE IF NOT EXISTS conversation (key BLOB PRIMARY KEY, id BLOB, specialist TEXT, "
                  "version TEXT, offset INTEGER) WITHOUT ROWID")
    index.execute("CREATE TABLE IF NOT EXISTS quarantined (key BLOB PRIMARY KEY) WITHOUT ROWID")
    index.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT)")
    index.commit()
    meta = dict(index.execute("SELECT key, value FROM meta").fetchall())
    if meta.get("head") != head or meta.get("schema") != INDEX_SCHEMA:
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
                        remember_conversation(index, keys, key, stored["specialist"], version, f.tell() - len(line))
        for entry_key in datasets.quarantine_keys(directory):
            index.execute("INSERT OR IGNORE INTO quarantined(key) VALUES (?)", (entry_key,))
        index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('head', ?)", (head,))
        index.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', ?)", (INDEX_SCHEMA,))
        index.commit()
    return index


def append_quarantine(directory: Path, index: sqlite3.Connection, scratch, version: str | None) -> int:
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
