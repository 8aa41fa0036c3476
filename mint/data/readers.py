"""Stream log records out of files and folders, one at a time, with their ``file:line``.

JSONL (also ``.gz``) is read line by line; a JSON array or a file of
concatenated JSON values is decoded one value at a time from a bounded
buffer; Parquet in row batches; a Hugging Face dataset saved with
``save_to_disk`` row by row from its memory-mapped Arrow files. Memory stays
bounded by the size cap whatever the file size.
"""
from __future__ import annotations

import gzip
import io
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from mint.errors import BadInput

JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonl.gz", ".ndjson.gz")
JSON_SUFFIXES = (".json", ".json.gz")
PARQUET_SUFFIXES = (".parquet",)
DEFAULT_MAX_RECORD_BYTES = 1_000_000
RAW_KEEP_CHARS = 2_000            # how much of a bad record the quarantine keeps
_CHUNK = 1 << 20

ProgressFn = Callable[[int], None]   # called with bytes consumed since the last call


@dataclass
class RawRecord:
    """One record as read: ``data`` when it parsed, else ``error`` (the quarantine reason)."""

    source: str
    data: Any = None
    error: str | None = None
    raw: str | None = None


@dataclass(frozen=True)
class Source:
    path: Path
    kind: str        # jsonl | json | parquet | hf
    size: int


def _is_hf_dataset_dir(path: Path) -> bool:
    return (path / "dataset_info.json").is_file() or (path / "dataset_dict.json").is_file() \
        or (path / "state.json").is_file()


def _kind(path: Path) -> str | None:
    name = path.name.lower()
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl"
    if name.endswith(JSON_SUFFIXES):
        return "json"
    if name.endswith(PARQUET_SUFFIXES):
        return "parquet"
    return None


def discover(paths: list[Path], fmt: str) -> list[Source]:
    """Every readable source under ``paths``; a missing or unreadable path is BadInput before any read."""
    sources: list[Source] = []
    for path in paths:
        if not path.exists():
            raise BadInput("no such file or directory", file=str(path))
        if path.is_dir():
            if fmt == "hf" or _is_hf_dataset_dir(path):
                if not _is_hf_dataset_dir(path):
                    raise BadInput("not a dataset saved with save_to_disk (no dataset_info.json or "
                                   "dataset_dict.json)", file=str(path))
                sources.append(Source(path, "hf", _tree_size(path)))
                continue
            found = []
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames.sort()
                here = Path(dirpath)
                for dirname in list(dirnames):
                    if _is_hf_dataset_dir(here / dirname):
                        found.append(Source(here / dirname, "hf", _tree_size(here / dirname)))
                        dirnames.remove(dirname)
                for filename in sorted(filenames):
                    kind = _kind(here / filename)
                    if kind and not filename.startswith("."):
                        found.append(Source(here / filename, kind, (here / filename).stat().st_size))
            if not found:
                raise BadInput("no .jsonl, .json, .gz, .parquet or saved dataset inside", file=str(path))
            sources.extend(found)
        else:
            # an explicit file is read whatever its suffix: JSON Lines unless it says otherwise
            sources.append(Source(path, _kind(path) or "jsonl", path.stat().st_size))
    for source in sources:
        _check_readable(source.path)
    return sources


def _tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _check_readable(path: Path) -> None:
    try:
        if path.is_dir():
            os.listdir(path)
            if _is_hf_dataset_dir(path):
                _load_hf(path)   # memory-mapped: cheap, and a broken folder fails before any write
        else:
            with open(path, "rb") as f:
                head = f.read(2)
            if path.name.lower().endswith(".gz") and head != b"\x1f\x8b":
                raise BadInput("not a gzip file", file=str(path))
    except PermissionError:
        raise BadInput("permission denied", file=str(path)) from None
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", file=str(path)) from None


def read_source(source: Source, label: str, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                progress: ProgressFn | None = None) -> Iterator[RawRecord]:
    """Yield the records of one source; ``label`` is the path shown in ``file:line``."""
    if source.kind == "hf":
        yield from _read_hf(source.path, label, progress)
        return
    if source.kind == "parquet":
        yield from _read_parquet(source.path, label, progress)
        return
    with open(source.path, "rb") as raw_file:
        counted = io.BufferedReader(_CountingReader(raw_file, progress), _CHUNK)
        stream = gzip.GzipFile(fileobj=counted) if source.path.name.lower().endswith(".gz") else counted
        try:
            if source.kind == "json":
                text = io.TextIOWrapper(stream, encoding="utf-8", errors="strict", newline="\n")
                yield from _read_json_values(text, label, max_record_bytes)
            else:
                yield from _read_jsonl(stream, label, max_record_bytes)
        except (OSError, EOFError, gzip.BadGzipFile) as exc:   # truncated or corrupt gzip stream
            yield RawRecord(f"{label}:?", error=f"unreadable from here on: {exc}")


class _CountingReader(io.RawIOBase):
    """Passes bytes through and reports how many were read, for the progress bar."""

    def __init__(self, inner, progress: ProgressFn | None) -> None:
        self.inner, self.progress = inner, progress

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        n = self.inner.readinto(buffer)
        if n and self.progress:
            self.progress(n)
        return n or 0


# One line of a JSON Lines file before parsing: (line number, text, error). Parsing happens in
# parse_line, which ingest may run in worker processes.
LineItem = tuple[int, str, str | None]


def _jsonl_lines(stream, cap: int) -> Iterator[LineItem]:
    number = 0
    while True:
        line = stream.readline(cap + 1)
        if not line:
            return
        number += 1
        if len(line) > cap and not line.endswith(b"\n"):
            size = len(line)
            while True:   # drain the oversized line in bounded pieces
                rest = stream.readline(_CHUNK)
                size += len(rest)
                if not rest or rest.endswith(b"\n"):
                    break
            yield number, line[:RAW_KEEP_CHARS].decode("utf-8", "replace"), \
                f"record over the size cap ({size:,} > {cap:,} bytes)"
            continue
        try:
            yield number, line.decode("utf-8"), None
        except UnicodeDecodeError as exc:
            yield number, line[:RAW_KEEP_CHARS].decode("utf-8", "replace"), \
                f"not UTF-8 text: {exc.reason} at byte {exc.start}"


def parse_line(label: str, item: LineItem) -> RawRecord | None:
    """A JSON Lines line as a record; None for a blank line."""
    number, text, error = item
    source = f"{label}:{number}"
    if error:
        return RawRecord(source, error=error, raw=text)
    stripped = text.strip()
    if not stripped:
        return None
    try:
        return RawRecord(source, data=json.loads(stripped), raw=stripped if len(stripped) <= RAW_KEEP_CHARS else None)
    except ValueError as exc:
        return RawRecord(source, error=f"invalid JSON: {exc.msg} at column {exc.colno}", raw=stripped[:RAW_KEEP_CHARS])


def _read_jsonl(stream, label: str, cap: int) -> Iterator[RawRecord]:
    for item in _jsonl_lines(stream, cap):
        record = parse_line(label, item)
        if record is not None:
            yield record


def read_line_batches(source: Source, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                      progress: ProgressFn | None = None, batch: int = 2000) -> Iterator[list[LineItem]]:
    """The unparsed lines of a JSON Lines source in batches, for parsing elsewhere (see ``parse_line``)."""
    assert source.kind == "jsonl"
    with open(source.path, "rb") as raw_file:
        counted = io.BufferedReader(_CountingReader(raw_file, progress), _CHUNK)
        stream = gzip.GzipFile(fileobj=counted) if source.path.name.lower().endswith(".gz") else counted
        pending: list[LineItem] = []
        try:
            for item in _jsonl_lines(stream, max_record_bytes):
                pending.append(item)
                if len(pending) >= batch:
                    yield pending
                    pending = []
        except (OSError, EOFError, gzip.BadGzipFile) as exc:   # truncated or corrupt gzip stream
            pending.append((pending[-1][0] + 1 if pending else 0, "", f"unreadable from here on: {exc}"))
        if pending:
            yield pending


def _read_json_values(text: io.TextIOWrapper, label: str, cap: int) -> Iterator[RawRecord]:
    """A top-level JSON array, or JSON values one after another, decoded one value at a time."""
    decoder = json.JSONDecoder()
    buf, pos, line, eof = "", 0, 1, False
    in_array, array_closed = None, False

    def fill() -> bool:
        nonlocal buf, pos, eof
        if eof:
            return False
        chunk = text.read(_CHUNK)
        if not chunk:
            eof = True
            return False
        buf, pos = buf[pos:] + chunk, 0
        return True

    def skip_space_and(chars: str) -> None:
        nonlocal pos, line
        while True:
            while pos < len(buf) and (buf[pos].isspace() or buf[pos] in chars):
                if buf[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buf) or not fill():
                return

    try:
        skip_space_and("")
        if pos < len(buf) and buf[pos] == "[":
            in_array = True
            pos += 1
        while True:
            skip_space_and(",")
            if pos >= len(buf):
                break
            if in_array and buf[pos] == "]":
                array_closed = True
                pos += 1
                skip_space_and("")
                if pos < len(buf):
                    yield RawRecord(f"{label}:{line}", error="invalid JSON: data after the closing ]")
                return
            start_line = line
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                    break
                except ValueError as exc:
                    if len(buf) - pos > cap or not fill():
                        reason = (f"record over the size cap (> {cap:,} bytes)" if len(buf) - pos > cap
                                  else f"invalid JSON: {exc.msg}")
                        yield RawRecord(f"{label}:{start_line}", error=reason + "; the rest of this file "
                                        "cannot be split into records and was not read",
                                        raw=buf[pos:pos + RAW_KEEP_CHARS])
                        return
            if end - pos > cap:
                yield RawRecord(f"{label}:{start_line}", error=f"record over the size cap ({end - pos:,} > {cap:,} bytes)",
                                raw=buf[pos:pos + RAW_KEEP_CHARS])
            else:
                yield RawRecord(f"{label}:{start_line}", data=value,
                                raw=buf[pos:end] if end - pos <= RAW_KEEP_CHARS else None)
            line += buf.count("\n", pos, end)
            pos = end
        if in_array and not array_closed:
            yield RawRecord(f"{label}:{line}", error="invalid JSON: the array is never closed")
    except UnicodeDecodeError as exc:
        yield RawRecord(f"{label}:{line}", error=f"not UTF-8 text from here on: {exc.reason}")


def _read_parquet(path: Path, label: str, progress: ProgressFn | None) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        yield RawRecord(f"{label}:?", error=f"unreadable Parquet file: {exc}")
        return
    row = 0
    per_row = max(1, path.stat().st_size // max(1, table.metadata.num_rows))
    for batch in table.iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            row += 1
            if progress:
                progress(per_row)
            yield RawRecord(f"{label}:{row}", data=record)


def _read_hf(path: Path, label: str, progress: ProgressFn | None) -> Iterator[RawRecord]:
    from datasets import Dataset, DatasetDict

    loaded = _load_hf(path)
    splits = loaded.items() if isinstance(loaded, DatasetDict) else [(None, loaded)]
    total = max(1, sum(len(split) for _name, split in splits))
    per_row = max(1, _tree_size(path) // total)
    for name, split in splits:
        assert isinstance(split, Dataset)
        where = f"{label}/{name}" if name else label
        for row, record in enumerate(split, start=1):
            if progress:
                progress(per_row)
            # Arrow fills absent struct fields with None: drop them so sniffing sees the real shape
            yield RawRecord(f"{where}:{row}", data=_drop_nones(record))


def _load_hf(path: Path):
    from datasets import load_from_disk

    try:
        return load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - datasets raises several types for a bad folder
        raise BadInput(f"not a dataset saved with save_to_disk: {exc}", file=str(path)) from None


def _drop_nones(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_nones(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_nones(v) for v in value]
    return value
