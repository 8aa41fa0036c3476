"""References to revisions: ``coding:v7``, ``coding:champion``, ``coding:previous`` or an id prefix."""
from __future__ import annotations

import re
from dataclasses import dataclass

from mint.errors import BadInput
from mint.project import NAME_RE

ALIASES = ("champion", "previous")
_ID_RE = re.compile(r"^[0-9a-f]{4,64}\Z")


def check_name(name: str, what: str = "specialist") -> str:
    """A specialist name: lowercase letters, digits, ``-`` and ``_``; no separators, dots or control characters."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise BadInput(f"invalid {what} name {name!r}: use lowercase letters, digits, '-' or '_', starting with a "
                       "letter (no path separators, '..' or control characters)", field=f"--{what}")
    return name


@dataclass(frozen=True)
class Ref:
    text: str
    specialist: str | None = None
    version: int | None = None
    alias: str | None = None
    id_prefix: str | None = None


def parse_ref(text: str) -> Ref:
    if not isinstance(text, str) or not text or any(ord(c) < 32 for c in text):
        raise BadInput(f"invalid revision reference {text!r}", field="REF")
    if ":" in text:
        specialist, _, rest = text.partition(":")
        check_name(specialist)
        if rest in ALIASES:
            return Ref(text, specialist=specialist, alias=rest)
        match = re.fullmatch(r"v([1-9][0-9]{0,9})", rest)
        if match:
            return Ref(text, specialist=specialist, version=int(match.group(1)))
        raise BadInput(f"invalid revision reference {text!r}: after ':' comes vN, champion or previous", field="REF")
    if _ID_RE.match(text):
        return Ref(text, id_prefix=text)
    raise BadInput(f"invalid revision reference {text!r}: use SPECIALIST:vN, SPECIALIST:champion, "
                   "SPECIALIST:previous or an id prefix (4+ hex digits)", field="REF")


def adapter_name(ref: str) -> str:
    """The name a revision is served under on vLLM (``coding:v3`` -> ``coding-v3``): one name per revision,
    never reused, so a reloaded adapter can never answer under an older one's name."""
    return ref.replace(":", "-")
