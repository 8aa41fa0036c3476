"""Reading JSON text as it is written, before it parses: which characters lie outside strings, where a bracket
closes."""
from __future__ import annotations


def outside_strings(text: str, start: int = 0):
    """(index, char) of every character of ``text`` from ``start`` that is not inside a JSON string (a
    string's quotes included, so a caller sees where each string starts and ends)."""
    in_string, escaped = False, False
    for index in range(start, len(text)):
        char = text[index]
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
                yield index, char
        else:
            if char == '"':
                in_string = True
            yield index, char


def json_bracket_end(text: str, start: int = 0) -> int | None:
    """Index just past the bracket that closes the ``{`` or ``[`` at ``text[start]``, or None when it never
    closes (a cut-off answer). Only brackets of that kind count, and none inside JSON strings. The one JSON
    bracket scanner: finding a tree (mint.harness.genui), and deciding that an answer is complete
    (mint.generation.stops)."""
    opener = text[start]
    closer = "}" if opener == "{" else "]"
    depth = 0
    for index, char in outside_strings(text, start):
        if char == opener:
            depth += 1
        elif char == closer:
            depth -= 1
            if depth == 0:
                return index + 1
    return None
