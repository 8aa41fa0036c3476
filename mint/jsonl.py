"""JSON Lines files: read with line numbers, written in one rename.

A line that is not JSON is bad input naming the file and line; files that a killed writer may have
cut mid-line (metrics, predictions) are read with ``torn="skip"``, which passes such a line over.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Iterator

from mint.errors import BadInput
from mint.workspace import atomic_write_text


def read_jsonl(path: Path, *, torn: str = "refuse") -> Iterator[tuple[int, Any]]:
    """(line number, value) for each non-blank line of ``path``; a line that is not JSON is BadInput at
    ``file:line`` (``torn="refuse"``) or passed over (``torn="skip"``)."""
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except (ValueError, RecursionError) as exc:     # UnicodeDecodeError is a ValueError
                if torn == "skip":
                    continue
                reason = exc.msg if isinstance(exc, json.JSONDecodeError) else type(exc).__name__
                raise BadInput(f"not a JSON line ({reason})", file=str(path), line=number) from None
            yield number, value


def jsonl_text(rows: Iterable[Any]) -> str:
    """One JSON line per row (non-ASCII text kept as it is)."""
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def write_jsonl(path: Path, rows: Iterable[Any]) -> None:
    """Replace ``path`` with one JSON line per row, in one rename: a reader sees the old file or the new."""
    atomic_write_text(path, jsonl_text(rows))
