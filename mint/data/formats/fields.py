"""What every format shares: the record's session, time, tools, feedback, media and upstream id around its
messages, the checks a conversation must pass, and the ``Episode`` they make together.

A record that cannot become an episode raises ``RecordError`` naming the field and the reason; ingest
quarantines it and goes on.
"""
from __future__ import annotations

import email.utils
import functools
import json
import math
import re
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from typing import Any, Iterator

from mint.data.schema import NO_FEEDBACK, Episode, Feedback, Message, Preference


class RecordError(Exception):
    """A record that cannot become an episode: ``field`` and ``reason`` go to the quarantine."""

    def __init__(self, field: str, reason: str) -> None:
        if reason.startswith("expected ") and reason.endswith(", got NoneType"):   # absent, or null: say so
            reason = f"missing ({reason[:-len(', got NoneType')]})"
        super().__init__(f"{field}: {reason}" if field else reason)
        self.field, self.reason = field, reason


def episode(record: dict, messages: list[Message], preference: Preference | None, where: str) -> Episode:
    """The episode of ``record`` whose messages (``where`` in the record) a format has read: checked, with
    the fields every format shares. ``specialist`` is the record's own label, if it has one."""
    check_conversation(messages, where, preference)
    if preference is None:
        check_feedback_read(record)
    media = _media(record)
    if media:
        messages = _with_media_marks(messages, media)
        if preference is not None:
            preference = Preference(preference.prompt_messages, tuple(_with_media_marks(preference.rejected, media)))
    return Episode(
        messages=tuple(messages), tools=_tools(record), feedback=normalize_feedback(record),
        specialist=optional_str(record, ("specialist",)) or _meta_label(record),
        session=optional_str(record, ("session", "session_id", "conversation_id", "thread_id")),
        ts=_timestamp(record), served_by=optional_str(record, ("served_by",)), upstream_id=upstream_id(record),
        preference=preference, media=media, parallel_tool_calls=_parallel_tool_calls(record))


def check_conversation(messages: list[Message], where: str, preference: Preference | None = None) -> None:
    if not messages:
        raise RecordError(where, "empty")
    said = asked = answered = False
    for m in messages:
        if m.content.strip():
            said = True
            asked = asked or m.role == "user"
        elif m.tool_calls:
            said = True
        answered = answered or m.role == "assistant"
    if not said:
        raise RecordError(where, "every message is empty")
    if not asked:
        raise RecordError(where, "no user message")
    # an empty answer a server logged still counts (its prompt is the loop's experience); no answer at all does not
    if preference is None and not answered:
        raise RecordError(where, "no assistant answer (and no chosen/rejected pair): a prompt alone teaches "
                          "nothing; a preference record needs both `chosen` and `rejected`")


def optional_str(record: dict, keys: tuple[str, ...]) -> str | None:
    for key in keys:
        value = record.get(key)
        if value is None:
            continue
        if type(value) is str:
            if value:
                return value
        elif isinstance(value, int) and not isinstance(value, bool):
            return str(value)
    return None


_UPSTREAM_KEYS = ("upstream_id", "request_id", "response_id", "completion_id")


def upstream_id(record: dict) -> str | None:
    """The id the serving stack gave this conversation (``chatcmpl-…``), which later feedback names.

    A bare top-level ``id`` counts only when it looks like such an id (8+ characters, not only digits) and the
    record is not a canonical episode (which says ``upstream_id`` itself, its ``id`` being its content hash):
    row numbers of an unrelated dataset must not make two conversations one.
    """
    found = optional_str(record, _UPSTREAM_KEYS)
    if found is None and isinstance(record.get("response"), dict):
        found = optional_str(record["response"], ("id",))
    if found is None and "upstream_id" not in record:
        value = record.get("id")
        if isinstance(value, str) and len(value) >= 8 and not value.isdigit():
            found = value
    return found


def _parallel_tool_calls(record: dict) -> bool | None:
    """OpenAI's ``parallel_tool_calls`` (top level, or in a server log's request or a preference's input)."""
    for holder in (record, record.get("request"), record.get("input")):
        if isinstance(holder, dict) and "parallel_tool_calls" in holder:
            value = holder["parallel_tool_calls"]
            if not isinstance(value, bool):
                raise RecordError("parallel_tool_calls", f"expected true or false, got {value!r}")
            return value
    return None


def _meta_label(record: dict) -> str | None:
    meta = record.get("metadata") or record.get("meta")
    if isinstance(meta, dict) and isinstance(meta.get("specialist"), str):
        return meta["specialist"]
    return None


# --- tools ----------------------------------------------------------------------

def _tools(record: dict) -> tuple[dict, ...]:
    raw = record.get("tools")
    if raw is None and isinstance(record.get("request"), dict):
        raw = record["request"].get("tools")
    if raw is None and isinstance(record.get("input"), dict):   # OpenAI's preference format
        raw = record["input"].get("tools")
    if raw is None:
        raw = record.get("functions")
    if raw is None:
        return ()
    if isinstance(raw, str):   # some ShareGPT exports keep the tool list as a JSON string
        try:
            raw = json.loads(raw) if raw.strip() else []
        except ValueError:
            raise RecordError("tools", "not valid JSON") from None
    if not isinstance(raw, list):
        raise RecordError("tools", f"expected a list, got {type(raw).__name__}")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict):
            raise RecordError(f"tools[{i}]", "expected an object")
        fn = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if not isinstance(fn.get("name"), str):
            raise RecordError(f"tools[{i}].function.name", "missing")
        tools.append({"type": "function", "function": fn})
    return tuple(tools)


# --- media ----------------------------------------------------------------------

_MEDIA = {"images": ("<image>", "[IMAGE]"), "videos": ("<video>", "[VIDEO]"), "audios": ("<audio>", "[AUDIO]")}


def _media(record: dict) -> dict | None:
    """The media lists a multimodal record names (LLaMA-Factory's ``images``/``videos``/``audios``): paths or
    URLs, kept as written; None when it has none."""
    found = {}
    for key in _MEDIA:
        value = record.get(key)
        if value is None or value == []:
            continue
        items = [value] if isinstance(value, str) else value
        if not isinstance(items, list) or not all(isinstance(v, str) for v in items):
            raise RecordError(key, "expected a list of paths or URLs")
        found[key] = items
    return found or None


def _with_media_marks(messages, media: dict) -> list[Message]:
    """``<image>`` (and ``<video>``, ``<audio>``) as the ``[IMAGE]`` a content part becomes, in a record that
    lists that kind of media: the model never learns to write a placeholder another stack expands."""
    out = []
    for message in messages:
        text = message.content
        for key, (tag, mark) in _MEDIA.items():
            if key in media and tag in text:
                text = text.replace(tag, mark)
        out.append(message if text is message.content else replace(message, content=text))
    return out


# --- time -------------------------------------------------------------------------

_TIME_KEYS = ("ts", "timestamp", "created_at", "created", "time")
EARLIEST_TIME = datetime(2000, 1, 1, tzinfo=timezone.utc)
FUTURE_SLACK = timedelta(days=1)   # clocks of the hosts that wrote the logs may run a little ahead


def _timestamp(record: dict) -> str | None:
    """The record's time as ISO-8601 UTC (``2026-11-29T10:00:00Z``): epoch seconds, milliseconds or
    microseconds, ISO-8601 (naive means UTC) or an RFC 2822 date. A server log with no time of its own
    takes its response's (``response.created``, epoch seconds as the OpenAI API writes it)."""
    found = _own_timestamp(record, "")
    if found is None and isinstance(record.get("response"), dict):
        found = _own_timestamp(record["response"], "response.")
    return found


def _own_timestamp(holder: dict, prefix: str) -> str | None:
    for key in _TIME_KEYS:
        value = holder.get(key)
        if isinstance(value, bool) or value is None or value == "":
            continue
        if isinstance(value, str) and re.fullmatch(r"\s*\d+(\.\d+)?\s*", value):
            value = float(value)
        if isinstance(value, (int, float)):
            return _plausible(_from_epoch(value, prefix + key), holder[key], prefix + key)
        if isinstance(value, str):
            return _plausible(_from_text(value, prefix + key), value, prefix + key)
        # another kind of value under a time-like name (a {"start", "end"} span): not this record's time
    return None


def _plausible(moment: datetime, value: Any, key: str) -> str:
    """``moment`` as ISO-8601 UTC, or a RecordError when no log could have been written then: an epoch in
    the wrong unit or a clock gone wrong would otherwise date the episode centuries away, silently."""
    latest = datetime.now(timezone.utc) + FUTURE_SLACK
    if not EARLIEST_TIME <= moment <= latest:
        raise RecordError(key, f"{str(value)[:40]} reads as {moment.isoformat(timespec='seconds')}, outside "
                          f"the plausible range {EARLIEST_TIME:%Y-%m-%d} to a day from now (epoch seconds, ms, µs "
                          "or ns are told apart by their size)")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _from_epoch(value: float, key: str) -> datetime:
    # the magnitude says the unit: seconds until the year 5138, then ms, µs and ns
    seconds = value
    for divisor in (1, 1e3, 1e6, 1e9):
        seconds = value / divisor
        if abs(seconds) < 1e11:
            break
    try:
        if not math.isfinite(seconds):
            raise ValueError
        moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    except (OverflowError, OSError, ValueError):
        raise RecordError(key, f"{value} is not a valid time") from None
    return moment


def _from_text(value: str, key: str) -> datetime:
    text = value.strip()
    try:
        moment = datetime.fromisoformat(text[:-1] + "+00:00" if text[-1:] in "Zz" else text)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            raise RecordError(key, f"{value[:40]!r} is not a time (expected ISO-8601, an RFC 2822 date or "
                              "epoch seconds, ms or µs)") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    return moment.astimezone(timezone.utc)


# --- feedback -----------------------------------------------------------------------

THUMBS = {
    "up": 1, "down": -1, "thumbs_up": 1, "thumbs_down": -1, "thumbsup": 1, "thumbsdown": -1,
    "like": 1, "dislike": -1, "positive": 1, "negative": -1, "good": 1, "bad": -1,
    "yes": 1, "no": -1, "+1": 1, "-1": -1, "\U0001f44d": 1, "\U0001f44e": -1, "neutral": 0,
}


_RATING_KEYS = ("rating", "thumbs", "stars", "score", "label", "kto_tag")   # the first one given decides
_FEEDBACK_KEYS = frozenset(("feedback", *_RATING_KEYS, "correction"))
# A key of one of these words that mint does not read is feedback it would drop: "like" only as a whole word
# (likelihood is not feedback), the others also inside a word (thumbsUp, upvote, user_rating) but not as the end
# of another word (operating, generating).
_FEEDBACK_STEMS = ("thumb", "rating", "vote", "feedback", "score")
_LIKE_WORDS = frozenset(("like", "likes", "liked", "dislike", "dislikes", "disliked"))
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
# where feedback could sit besides the record's top level: containers mint reads (the served log's request and
# response, metadata) and each message
_FEEDBACK_CONTAINERS = ("metadata", "meta", "request", "response")
_MESSAGE_LISTS = ("messages", "conversations")
FEEDBACK_SHAPES = ("`feedback` as an object with rating, thumbs, stars, score, label, kto_tag or correction, or as "
                   "a thumbs string or a number; or those keys at the top level")


@functools.lru_cache(maxsize=4096)
def looks_like_feedback(key: str) -> bool:
    """Whether a key's name says it holds feedback (``thumbs_up``, ``userRating``, ``upvotes``, ``liked``)."""
    for word in _WORDS.findall(key):
        word = word.lower()
        if word in _LIKE_WORDS or word.startswith(_FEEDBACK_STEMS) or word.endswith(("vote", "votes", "thumbs")):
            return True
    return False


def unread_feedback(record: dict) -> str | None:
    """The first field of ``record`` whose name says feedback but which mint does not read (a
    ``user_feedback`` object, ``feedback.thumbs_up``, a message's ``rating``), or None."""
    for key in record:
        if key not in _FEEDBACK_KEYS and looks_like_feedback(key):
            return key
    found = record.get("feedback")
    if isinstance(found, dict):
        for key in found:
            if key not in _FEEDBACK_KEYS and looks_like_feedback(key):
                return f"feedback.{key}"
    for where, holder in _feedback_holders(record):
        if isinstance(holder, dict):
            for key in holder:
                if looks_like_feedback(key):
                    return f"{where}.{key}"
    return None


def _feedback_holders(record: dict) -> Iterator[tuple[str, Any]]:
    """(where, value) of every container and message in which mint reads no feedback key."""
    for key in _FEEDBACK_CONTAINERS:
        if key in record:
            yield key, record[key]
    request, response = record.get("request"), record.get("response")
    lists = [(name, record.get(name)) for name in _MESSAGE_LISTS]
    if isinstance(request, dict):
        lists.append(("request.messages", request.get("messages")))
    if isinstance(response, dict):
        lists.append(("response.choices", response.get("choices")))
    for name, items in lists:
        if isinstance(items, list):
            for i, item in enumerate(items):
                yield f"{name}[{i}]", item
                if name == "response.choices" and isinstance(item, dict):
                    yield f"{name}[{i}].message", item.get("message")


def check_feedback_read(record: dict) -> None:
    """Refuse a record that carries feedback in a shape mint does not read: trained on as unrated, an answer
    its user rejected would be learned as a good one. A preference pair is exempt: its chosen and rejected
    answers are the feedback, and scores beside them (UltraFeedback's ``score_chosen``) only rank them."""
    where = unread_feedback(record)
    if where is not None:
        raise RecordError(where, f"looks like feedback in a shape mint does not read (it reads {FEEDBACK_SHAPES}; "
                          "see docs/data.md); rename it to one of these, or remove it to ingest the record unrated")


def normalize_feedback(record: dict) -> Feedback:
    """Thumbs, 1-5 stars, scores in [0, 1] and KTO labels as ``rating`` -1/0/1, plus any correction.

    ``rating`` itself may be -1/0/1 or a 2-5 star value; for one star write ``stars: 1``.
    """
    if _FEEDBACK_KEYS.isdisjoint(record):
        return NO_FEEDBACK
    raw = record.get("feedback")
    where = "feedback"
    if raw is None:
        raw, where = {k: record[k] for k in (*_RATING_KEYS, "correction")
                      if k in record and _top_level_feedback(k, record[k])}, ""
    elif isinstance(raw, (str, int, float, bool)):
        raw = {"thumbs" if isinstance(raw, str) else "rating": raw}
    elif not isinstance(raw, dict):
        raise RecordError("feedback", f"expected an object, got {type(raw).__name__}")
    if where and raw.get("correction") is None and record.get("correction") is not None:
        raw = {**raw, "correction": record["correction"]}
        correction_where = "correction"
    else:
        correction_where = f"{where}.correction" if where else "correction"

    def field(key: str) -> str:
        return f"{where}.{key}" if where else key

    rating = None
    for key in _RATING_KEYS:
        value = raw.get(key)
        if value is None:
            continue
        rating = _rating(key, value, field(key))
        break
    return Feedback(rating, _correction(raw.get("correction"), correction_where))


def score_rating(score: float) -> int:
    """A score in [0, 1] as a rating: 1 from 0.6, -1 up to 0.4, else 0."""
    return 1 if score >= 0.6 else -1 if score <= 0.4 else 0


def _top_level_feedback(key: str, value: Any) -> bool:
    """Whether a top-level ``label`` or ``score`` is feedback: other datasets use these names for class
    labels and quality scores, so only a boolean label (KTO) and a score in [0, 1] count."""
    if key in ("label", "kto_tag"):
        return isinstance(value, bool)
    if key == "score":
        return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value <= 1
    return True


def _rating(key: str, value: Any, where: str) -> int:
    if key in ("label", "kto_tag") or isinstance(value, bool):
        if not isinstance(value, bool):
            raise RecordError(where, "expected true or false")
        return 1 if value else -1
    if isinstance(value, str):
        mapped = THUMBS.get(value.strip().lower())
        if mapped is None:
            raise RecordError(where, f"unknown thumbs value {value!r} (expected up or down)")
        return mapped
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        raise RecordError(where, f"expected a number, got {type(value).__name__}")
    if key == "thumbs":
        if value not in (-1, 0, 1):
            raise RecordError(where, f"{value} is not -1, 0 or 1")
        return int(value)
    if key == "score":
        if not 0 <= value <= 1:
            raise RecordError(where, f"{value} is outside [0, 1]")
        return score_rating(value)
    if key == "rating" and value in (-1, 0, 1):
        return int(value)
    if not 1 <= value <= 5:
        raise RecordError(where, f"{value} is not -1, 0, 1 or a 1-5 star value")
    return 1 if value >= 4 else 0 if value >= 3 else -1


def _correction(value: Any, where: str) -> str | None:
    if value is None:
        return None
    if isinstance(value, str):
        return value if value.strip() else None
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    if isinstance(value, list):   # a corrected conversation: its last assistant turn
        for message in reversed(value):
            if isinstance(message, dict) and message.get("role") in ("assistant", "gpt") \
                    and isinstance(message.get("content"), str):
                return message["content"]
    raise RecordError(where, "expected the corrected answer as a string")
