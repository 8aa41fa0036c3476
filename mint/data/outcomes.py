"""What one ingested record became (an episode kept, a record quarantined, a feedback event, an episode for the
router to place), the settings a record is read with, and the keys that link records of one conversation."""
from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import NamedTuple

from mint.data.readers import RAW_KEEP_CHARS
from mint.data.schema import Episode, Feedback
from mint.data.scrub import scrub_text
from mint.routing.labels import Labeler


@dataclass(frozen=True)
class IngestSettings:
    """How the records of one source are read, labelled and scrubbed (in worker processes too: it pickles)."""
    fmt: str
    labeler: Labeler
    scrub: bool
    specialist: str | None = None    # --specialist: every record of the sources is this specialist's
    layout: dict | None = None       # the source's LLaMA-Factory columns and tags
    fallback: str | None = None      # the specialist of episodes no rule labels, when no router places them
    route: bool = False              # a router champion places the episodes no rule labels (in this process)


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
    """A record that is not an episode: why, and its quarantine entry (UTF-8 JSON); ``reads_as``: the format
    that reads it when another was forced on it (``--format``) and failed."""
    reason: str
    entry: bytes
    scrubbed: Counter | None
    reads_as: str | None = None


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
OUTCOME_TYPES = (Kept, Quarantined, FeedbackEvent, Unplaced)


def kept(episode: Episode, how: str, found: Counter | None) -> Kept:
    """The outcome of an episode with its specialist and source: serialized once for its id, its line and its
    conversation keys. Encoding is where a lone surrogate fails (UnicodeEncodeError)."""
    serialized = episode.serialize()
    return Kept(serialized.line.encode("utf-8"), bytes.fromhex(serialized.id[:32]), episode.specialist, how,
                conversation_keys(episode, serialized.message_jsons), episode.preference is not None, found)


def quarantine_line(source: str, reason: str, content: str | None, settings: IngestSettings, found: Counter) -> bytes:
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
    upstream = conversation_key("upstream", episode.upstream_id) if episode.upstream_id else None
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


def conversation_key(kind: str, value: str) -> bytes:
    return hashlib.sha256(f"{kind}\0{value}".encode("utf-8")).digest()[:16]
