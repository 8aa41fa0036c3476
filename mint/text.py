"""Text from outside (command-line arguments, request bodies, log lines) checked before a tokenizer or a
UTF-8 file sees it, and the "did you mean" hint every error about an unknown name ends with.

A lone surrogate (half of a UTF-16 pair) is a Python string no UTF-8 encoder or tokenizer accepts: JSON
escapes such as ``"\\ud83d"`` (an emoji cut in half) decode to one, and so do command-line bytes that are not
UTF-8 (Python keeps them as surrogates). Found early, it is bad input naming its field, not a crash.
"""
from __future__ import annotations

import difflib

from mint.errors import BadInput

LONE_SURROGATE = ("a lone surrogate (half of a UTF-16 pair, e.g. a truncated emoji, or bytes that are not "
                  "UTF-8) is not valid Unicode")


def lone_surrogate_at(value, where: str = "") -> str | None:
    """The path (``messages[0].content``) of the first string in ``value``, a JSON-like value, that cannot be
    UTF-8; ``where`` itself for a string, and None when every string can."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, (list, tuple)) \
        else ()
    for key, item in items:
        if isinstance(key, str) and lone_surrogate_at(key, where) is not None:
            return where or key
        here = f"{where}.{key}" if isinstance(key, str) and where else key if isinstance(key, str) \
            else f"{where}[{key}]"
        found = lone_surrogate_at(item, here)
        if found is not None:
            return found
    return None


def check_unicode(value, field: str, *, file: str | None = None) -> None:
    """BadInput naming the field (``TEXT``, ``messages[1].content``) where ``value`` holds a lone surrogate."""
    where = lone_surrogate_at(value, field)
    if where is not None:
        raise BadInput(LONE_SURROGATE, file=file, field=where or field)


def closest(word, choices, *, listing: str | None = None) -> str:
    """`` (did you mean X?)`` for the nearest of ``choices`` to ``word``; when none is near, ``listing`` and
    every choice (`` (expected one of a, b)`` for ``listing="expected one of"``), or nothing without one."""
    names = [str(choice) for choice in choices]
    match = difflib.get_close_matches(str(word), names, n=1, cutoff=0.6) if word is not None else []
    if match:
        return f" (did you mean {match[0]}?)"
    return f" ({listing} {', '.join(names)})" if listing else ""

