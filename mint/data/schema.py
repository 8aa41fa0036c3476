"""The canonical episode (DESIGN.md) as types, and the one serializer that writes it.

An episode is written as one JSON line with sorted keys inside every value; its ``id`` is the sha256 of its
messages, tools, feedback and (when it has one) preference, serialized once for both the id and the line.
Everything that makes an episode (ingest, the served-turn log, experience, tool-environment rollouts) writes
it here, so every writer gives the same content the same id.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from json.encoder import encode_basestring   # the C string escaper json.dumps uses (ensure_ascii=False)
from typing import Any


def _quick_init(cls):
    """``cls`` (a frozen slots dataclass) with an ``__init__`` that sets each slot through its descriptor, at half
    the cost of the generated one (``object.__setattr__`` per field): ingest makes several per record."""
    fields = dataclasses.fields(cls)
    names = [f.name for f in fields]
    args = ", ".join(f.name if f.default is dataclasses.MISSING else f"{f.name}=_default_{f.name}" for f in fields)
    body = "\n".join(f"    _set_{name}(self, {name})" for name in names)
    scope = {f"_set_{name}": cls.__dict__[name].__set__ for name in names}
    scope.update({f"_default_{f.name}": f.default for f in fields if f.default is not dataclasses.MISSING})
    exec(f"def __init__(self, {args}):\n{body}\n", scope)
    cls.__init__ = scope["__init__"]
    return cls


@_quick_init
@dataclass(frozen=True, slots=True)
class Message:
    role: str                                   # system | user | assistant | tool
    content: str
    tool_calls: tuple[dict, ...] | None = None  # {"id"?, "type": "function", "function": {"name", "arguments": {}}}
    name: str | None = None
    tool_call_id: str | None = None
    reasoning: str | None = None                # the assistant's reasoning before its answer, kept apart from it
    finish_reason: str | None = None
    weight: int | None = None                   # 0: shown to the model as context, never trained on

    def to_dict(self) -> dict:
        """The message as stored: only the fields it has."""
        out: dict = {"role": self.role, "content": self.content}
        for key in ("tool_calls", "name", "tool_call_id", "reasoning", "finish_reason", "weight"):
            value = getattr(self, key)
            if value is not None:
                out[key] = list(value) if key == "tool_calls" else value
        return out

    @classmethod
    def from_dict(cls, data: dict) -> Message:
        """A stored (canonical) message; other shapes are read by ``mint.data.formats``."""
        calls = data.get("tool_calls")
        return cls(data["role"], data.get("content") or "", tuple(calls) if calls is not None else None,
                   data.get("name"), data.get("tool_call_id"), data.get("reasoning"), data.get("finish_reason"),
                   data.get("weight"))

    def json(self) -> str:
        """The message as one JSON object with sorted keys (what ``to_dict`` gives, written by hand: the keys are
        known, so no dict is built and sorted per message)."""
        parts = ['{"content":', encode_basestring(self.content)]
        if self.finish_reason is not None:
            parts += [',"finish_reason":', encode_basestring(self.finish_reason)]
        if self.name is not None:
            parts += [',"name":', encode_basestring(self.name)]
        if self.reasoning is not None:
            parts += [',"reasoning":', encode_basestring(self.reasoning)]
        parts += [',"role":', encode_basestring(self.role)]
        if self.tool_call_id is not None:
            parts += [',"tool_call_id":', encode_basestring(self.tool_call_id)]
        if self.tool_calls is not None:
            parts += [',"tool_calls":', dumps(list(self.tool_calls))]
        if self.weight is not None:
            parts += [',"weight":', dumps(self.weight)]
        parts.append("}")
        return "".join(parts)


@_quick_init
@dataclass(frozen=True, slots=True)
class Feedback:
    rating: int | None = None       # -1, 0 or 1
    correction: str | None = None   # the answer that should have been given

    @property
    def given(self) -> bool:
        return self.rating is not None or bool(self.correction)

    def to_dict(self) -> dict:
        return {"rating": self.rating, "correction": self.correction}


NO_FEEDBACK = Feedback()


@_quick_init
@dataclass(frozen=True, slots=True)
class Preference:
    """The episode's messages up to ``prompt_messages`` are the prompt, the rest its chosen answer; ``rejected``
    is the answer it was preferred to."""

    prompt_messages: int
    rejected: tuple[Message, ...]

    def json(self) -> str:
        return f'{{"prompt_messages":{self.prompt_messages},"rejected":[{",".join(m.json() for m in self.rejected)}]}}'


@dataclass(frozen=True, slots=True)
class ServedRoute:
    """How a served turn was routed and how long it took (the served-turn log keeps it; ingest does not)."""

    probabilities: dict[str, float]
    decided_by: str               # rules | probe
    revision: str | None          # the router revision whose probe decided
    latency_ms: float
    route_ms: float


@_quick_init
@dataclass(frozen=True, slots=True)
class Serialized:
    id: str
    line: str                     # the episode as one JSON line, with its newline
    message_jsons: tuple[str, ...]   # each message's JSON, as hashed into the id (conversation keys reuse them)


@_quick_init
@dataclass(frozen=True, slots=True)
class Episode:
    messages: tuple[Message, ...]
    tools: tuple[dict, ...] = ()
    feedback: Feedback = NO_FEEDBACK
    specialist: str | None = None
    session: str | None = None
    ts: str | None = None             # ISO-8601 UTC
    served_by: str | None = None      # the revision that answered (coding:v3)
    upstream_id: str | None = None    # the id the serving stack gave the conversation, which feedback names
    preference: Preference | None = None
    media: dict | None = None         # {"images": [...], ...}: paths or URLs the messages' [IMAGE] marks stand for
    parallel_tool_calls: bool | None = None
    source: str | None = None         # file:line it was read from
    served: ServedRoute | None = None
    labeled_by: str | None = None     # the rule that gave ``specialist`` at ingest (mint.data.ingest.Kept.how)

    def serialize(self) -> Serialized:
        """The id and the line, each part serialized once."""
        message_jsons = tuple(m.json() for m in self.messages)
        messages = "[" + ",".join(message_jsons) + "]"
        tools = dumps(list(self.tools))
        feedback = f'{{"correction":{_string(self.feedback.correction)},"rating":{_number(self.feedback.rating)}}}'
        hashed = [messages, tools, feedback]
        # a preference is part of what the episode is (the same prompt and chosen answer against another rejected
        # one is another pair); episodes without one keep the ids they had before preferences existed
        preference = self.preference.json() if self.preference is not None else None
        if preference is not None:
            hashed.append(preference)
        digest = hashlib.sha256(("[" + ",".join(hashed) + "]").encode("utf-8")).hexdigest()
        labeled = f',"labeled_by":{_string(self.labeled_by)}' if self.labeled_by is not None else ""
        parts = [f'{{"id":"{digest}","session":{_string(self.session)},"ts":{_string(self.ts)},'
                 f'"specialist":{_string(self.specialist)}{labeled},"messages":{messages},"tools":{tools},'
                 f'"feedback":{feedback},"served_by":{_string(self.served_by)},'
                 f'"upstream_id":{_string(self.upstream_id)}']
        if preference is not None:
            parts.append(f',"preference":{preference}')
        if self.media is not None:
            parts.append(f',"media":{dumps(self.media)}')
        if self.parallel_tool_calls is not None:
            parts.append(f',"parallel_tool_calls":{dumps(self.parallel_tool_calls)}')
        if self.source is not None:
            parts.append(f',"source":{_string(self.source)}')
        if self.served is not None:
            served = self.served
            parts.append(f',"route":{dumps({"probabilities": served.probabilities, "decided_by": served.decided_by, "revision": served.revision})}'
                         f',"latency_ms":{dumps(served.latency_ms)},"route_ms":{dumps(served.route_ms)}')
        parts.append("}\n")
        return Serialized(digest, "".join(parts), message_jsons)

    def placed(self, specialist: str | None, source: str | None, labeled_by: str | None = None) -> Episode:
        """This episode under ``specialist`` (given by the rule ``labeled_by``), read from ``source``."""
        return Episode(self.messages, self.tools, self.feedback, specialist, self.session, self.ts, self.served_by,
                       self.upstream_id, self.preference, self.media, self.parallel_tool_calls, source, self.served,
                       labeled_by)

    @property
    def id(self) -> str:
        return self.serialize().id

    def line(self) -> str:
        return self.serialize().line

    def record(self) -> dict:
        """The episode as the JSON object its line holds."""
        return json.loads(self.serialize().line)

    @classmethod
    def from_dict(cls, data: dict) -> Episode:
        """A stored (canonical) episode, as ``record`` or a dataset's line gives it."""
        feedback = data.get("feedback") or {}
        preference = data.get("preference")
        route = data.get("route")
        served = None
        if isinstance(route, dict):
            served = ServedRoute(route.get("probabilities") or {}, route.get("decided_by"), route.get("revision"),
                                 data.get("latency_ms"), data.get("route_ms"))
        return cls(
            messages=tuple(Message.from_dict(m) for m in data["messages"]),
            tools=tuple(data.get("tools") or ()),
            feedback=Feedback(feedback.get("rating"), feedback.get("correction")),
            specialist=data.get("specialist"), session=data.get("session"), ts=data.get("ts"),
            served_by=data.get("served_by"), upstream_id=data.get("upstream_id"),
            preference=Preference(preference["prompt_messages"],
                                  tuple(Message.from_dict(m) for m in preference["rejected"])) if preference else None,
            media=data.get("media"), parallel_tool_calls=data.get("parallel_tool_calls"), source=data.get("source"),
            served=served, labeled_by=data.get("labeled_by"))


def episode_id(messages: list[dict], tools: list, feedback: dict, preference: dict | None = None) -> str:
    """The id of stored (canonical) episode content: the hash ``Episode.serialize`` computes."""
    content = [messages, tools, feedback] + ([preference] if preference else [])
    return hashlib.sha256(dumps(content).encode("utf-8")).hexdigest()


def _fail(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not JSON data")


# json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":")) without building an encoder per call
_C_MAKE_ENCODER = getattr(json.encoder, "c_make_encoder", None)     # json's C accelerator: private, not in its stubs
_ENCODE = _C_MAKE_ENCODER(None, _fail, encode_basestring, None, ":", ",", True, False, True) \
    if _C_MAKE_ENCODER is not None else None
_PY_DUMPS = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":"), default=_fail).encode


def dumps(value: Any) -> str:
    """``value`` as compact JSON with sorted keys, non-ASCII kept: the form every part of an episode is hashed in."""
    if _ENCODE is None or isinstance(value, str):
        return _PY_DUMPS(value)
    return "".join(_ENCODE(value, 0))


def _string(value: str | None) -> str:
    return "null" if value is None else encode_basestring(value)


def _number(value: int | None) -> str:
    return "null" if value is None else dumps(value)
