"""Stream log records out of files, one at a time, with their ``file:line``.

JSON Lines (plain, ``.gz``, ``.zst``, ``.bz2``, ``.xz``, rotated ``.1``) is read
line by line; a JSON array or a file of concatenated JSON values is split into
values by a bracket scanner, so one invalid or oversized value costs only
itself; Parquet in row groups (a corrupt group costs only its rows). A
byte-order mark picks the encoding (UTF-8, UTF-16 or UTF-32); a binary file is
reported once. Memory stays bounded by the size cap whatever the file size.
Which files of a folder are read, and how, is ``mint.data.sources``.
"""
from __future__ import annotations

import bz2
import codecs
import contextlib
import datetime as dt
import decimal
import gzip
import io
import json
import lzma
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator


JSONL_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIXES = (".json",)
PARQUET_SUFFIXES = (".parquet",)
# compression by suffix, with the magic bytes a real file of that kind starts with
COMPRESSIONS = {".gz": ("gzip", b"\x1f\x8b"), ".zst": ("zstd", b"\x28\xb5\x2f\xfd"),
                ".bz2": ("bzip2", b"BZh"), ".xz": ("xz", b"\xfd7zXZ\x00")}
DEFAULT_MAX_RECORD_BYTES = 1_000_000
RAW_KEEP_CHARS = 2_000            # how much of a bad record the quarantine keeps
_CHUNK = 1 << 20
_ROTATED = re.compile(r"\.\d{1,4}$")   # logrotate's app.jsonl.1, app.jsonl.2.gz

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
    compression: str | None = field(default=None)   # gzip | zstd | bzip2 | xz
    fmt: str | None = None            # the record format when the source says it (a dataset_info.json entry)
    layout: dict | None = None        # a LLaMA-Factory entry's formatting, ranking, columns and tags


def file_kind(path: Path) -> tuple[str | None, str | None]:
    """(kind, compression) from the file name; kind None: not a log file by its name."""
    name = path.name.lower()
    compression = None
    for suffix, (codec, _magic) in COMPRESSIONS.items():
        if name.endswith(suffix):
            compression, name = codec, name[:-len(suffix)]
            break
    name = _ROTATED.sub("", name)
    if name.endswith(JSONL_SUFFIXES):
        return "jsonl", compression
    if name.endswith(JSON_SUFFIXES):
        return "json", compression
    if name.endswith(PARQUET_SUFFIXES) and compression is None:
        return "parquet", None
    return None, compression


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


class _Utf8Transcoder(io.RawIOBase):
    """Bytes of another encoding in, UTF-8 bytes out (so JSON Lines stays one byte-level reader)."""

    def __init__(self, inner, encoding: str) -> None:
        self.inner = inner
        self.decoder = codecs.getincrementaldecoder(encoding)("strict")
        self.pending = b""

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self.pending:
            chunk = self.inner.read(_CHUNK)
            self.pending = self.decoder.decode(chunk, final=not chunk).encode("utf-8", "surrogatepass")
            if not chunk:
                break
        n = min(len(buffer), len(self.pending))
        buffer[:n] = self.pending[:n]
        self.pending = self.pending[n:]
        return n


NOT_TEXT = "not text: binary data (NUL bytes) and no byte-order mark; expected UTF-8, UTF-16 or UTF-32 JSON"
# what mint reads instead, for a file that is not a log at all
READABLE = ("mint reads JSON Lines, JSON and Parquet files (plain or .gz, .zst, .bz2, .xz) and folders of them; "
            "a Hugging Face dataset saved with save_to_disk or a LLaMA-Factory dataset is a folder: give the folder")


class Undecodable(Exception):
    """The file is not text in any encoding a byte-order mark or its NUL pattern names."""


# Errors a damaged compressed stream raises part-way through (gzip's deflate raises zlib.error, not OSError).
_STREAM_ERRORS: tuple[type[BaseException], ...] = (OSError, EOFError, lzma.LZMAError, ValueError, zlib.error)


def _sniff_encoding(head: bytes) -> tuple[str, int]:
    """(encoding, BOM length) from the first bytes; JSON starts with ASCII, so NULs reveal UTF-16/32."""
    for bom, encoding in ((codecs.BOM_UTF32_LE, "utf-32-le"), (codecs.BOM_UTF32_BE, "utf-32-be"),
                          (codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"),
                          (codecs.BOM_UTF16_BE, "utf-16-be")):
        if head.startswith(bom):
            return encoding, len(bom)
    if b"\x00" not in head:
        return "utf-8", 0
    if len(head) >= 4 and head[1:4] == b"\x00\x00\x00" and head[0]:
        return "utf-32-le", 0
    if len(head) >= 4 and head[:3] == b"\x00\x00\x00" and head[3]:
        return "utf-32-be", 0
    if len(head) >= 4 and head[1] == 0 and head[0] and head[2::2].count(0) == 0 and head[3::2].strip(b"\x00") == b"":
        return "utf-16-le", 0
    if len(head) >= 4 and head[0] == 0 and head[1] and head[1::2].count(0) == 0 and head[0::2].strip(b"\x00") == b"":
        return "utf-16-be", 0
    raise Undecodable(NOT_TEXT)


@contextlib.contextmanager
def open_decoded(source: Source, progress: ProgressFn | None) -> Iterator[tuple[io.BufferedReader, str]]:
    """The decompressed bytes of ``source`` past any byte-order mark, and their encoding."""
    with open(source.path, "rb") as raw_file:
        stream: Any = io.BufferedReader(_CountingReader(raw_file, progress), _CHUNK)
        if source.compression == "gzip":
            stream = gzip.GzipFile(fileobj=stream)
        elif source.compression == "bzip2":
            stream = bz2.BZ2File(stream)
        elif source.compression == "xz":
            stream = lzma.LZMAFile(stream)
        elif source.compression == "zstd":
            import zstandard
            stream = zstandard.ZstdDecompressor().stream_reader(stream, read_across_frames=True)
        stream = io.BufferedReader(stream, _CHUNK)
        encoding, bom = _sniff_encoding(stream.peek(64)[:64])
        stream.read(bom)
        yield stream, encoding


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
    return parse_value(source, stripped)


def parse_value(source: str, text: str) -> RawRecord:
    """One JSON value's text as a record, or the reason it is not one."""
    raw = text if len(text) <= RAW_KEEP_CHARS else None
    try:
        return RawRecord(source, data=json.loads(text), raw=raw)
    except json.JSONDecodeError as exc:
        where = f"column {exc.colno}" if exc.lineno == 1 else f"line +{exc.lineno - 1} column {exc.colno}"
        # some of json's messages end in "at" ("Unterminated string starting at"): add the place, not another "at"
        message = exc.msg if exc.msg.endswith(" at") else f"{exc.msg} at"
        return RawRecord(source, error=f"invalid JSON: {message} {where}", raw=text[:RAW_KEEP_CHARS])
    except ValueError as exc:   # valid syntax json will not read, e.g. an integer of more than 4,300 digits
        return RawRecord(source, error=f"invalid JSON: {exc}", raw=text[:RAW_KEEP_CHARS])
    except RecursionError:
        return RawRecord(source, error="invalid JSON: nested too deeply to read", raw=text[:RAW_KEEP_CHARS])


def read_line_batches(source: Source, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                      progress: ProgressFn | None = None, batch: int = 2000) -> Iterator[list[LineItem]]:
    """The unparsed lines of a JSON Lines source in batches, for parsing elsewhere (see ``parse_line``)."""
    assert source.kind == "jsonl"
    pending: list[LineItem] = []
    try:
        with open_decoded(source, progress) as (stream, encoding):
            if encoding != "utf-8":
                stream = io.BufferedReader(_Utf8Transcoder(stream, encoding), _CHUNK)
            for item in _jsonl_lines(stream, max_record_bytes):
                pending.append(item)
                if len(pending) >= batch:
                    yield pending
                    pending = []
    except Undecodable as exc:
        pending.append((1, "", str(exc)))
    except UnicodeDecodeError as exc:   # a transcoded (UTF-16/32) file that breaks part-way
        pending.append((pending[-1][0] + 1 if pending else 1, "", f"not {exc.encoding} text from here on: "
                        f"{exc.reason}"))
    except _STREAM_ERRORS as exc:   # truncated or corrupt compressed stream
        pending.append((pending[-1][0] + 1 if pending else 1, "", f"unreadable from here on: {exc}"))
    if pending:
        yield pending


# --- JSON arrays and concatenated values -----------------------------------------------------

_IN_STRING = re.compile(r'["\\]')
_IN_CONTAINER = re.compile(r'[\[\]{}"]')
_SCALAR_END = re.compile(r'[\s,\[\]{}"]')
_CLOSER = {"]": "[", "}": "{"}


def read_json_file(source: Source, label: str, cap: int, progress: ProgressFn | None) -> Iterator[RawRecord]:
    line = 1
    try:
        with open_decoded(source, progress) as (stream, encoding):
            text = io.TextIOWrapper(stream, encoding=encoding, errors="strict", newline="\n")
            for line, value, size, note in _json_values(text):
                where = f"{label}:{line}"
                if value is None or size > cap:
                    yield RawRecord(where, error=f"record over the size cap ({size:,} > {cap:,} bytes)",
                                    raw=value[:RAW_KEEP_CHARS] if value else None)
                elif note:
                    yield RawRecord(where, error=f"invalid JSON: {note}", raw=value[:RAW_KEEP_CHARS])
                else:
                    yield parse_value(where, value)
    except Undecodable as exc:
        yield RawRecord(f"{label}:1", error=str(exc))
    except UnicodeDecodeError as exc:
        yield RawRecord(f"{label}:{line}", error=f"not {exc.encoding} text from here on: {exc.reason}")
    except _STREAM_ERRORS as exc:
        yield RawRecord(f"{label}:{line}", error=f"unreadable from here on: {exc}")


# Kept rather than replaced by ijson, the well-kept streaming JSON parser, for what it does that ijson cannot, as
# scripts/bench_json_values.py measures (a 9.6 MB ShareGPT-like array of 20,000 records, one of them broken in the
# middle): ijson.items stops at the broken record and loses the 9,999 after it, and its events carry no position,
# so no record could name its line; this scanner quarantines that one record, reads the other 19,999 and names
# each one's line. ijson is faster on a clean file (0.52 s against 2.37 s, scan and json.loads, on a busy 2-core
# host), a cost only JSON-array files pay (JSON Lines never come here).
def _json_values(text: io.TextIOBase, cap: int = DEFAULT_MAX_RECORD_BYTES
                 ) -> Iterator[tuple[int, str | None, int, str | None]]:
    """Split a top-level JSON array (or values one after another) into (line, text, size, note).

    Only brackets and strings are tracked, not full JSON, so an invalid value ends where its brackets
    close and the next value is read as usual. ``text`` is None for a value over ``cap``, whose pieces
    were counted and dropped (its size in UTF-8 bytes is exact whatever the read chunks).
    """
    buf, pos, line = "", 0, 1

    def fill() -> bool:
        nonlocal buf, pos
        chunk = text.read(_CHUNK)
        buf, pos = buf[pos:] + chunk, 0
        return bool(chunk)

    def skip(chars: str) -> bool:
        """Skip whitespace and ``chars``; False at the end of the input."""
        nonlocal pos, line
        while True:
            while pos < len(buf) and (buf[pos] in chars or buf[pos].isspace()):
                if buf[pos] == "\n":
                    line += 1
                pos += 1
            if pos < len(buf):
                return True
            if not fill():
                return False

    in_array = skip("") and buf[pos] == "["
    if in_array:
        pos += 1
    while skip("," if in_array else ""):
        if in_array and buf[pos] == "]":
            pos += 1
            if skip(""):
                yield line, buf[pos:pos + RAW_KEEP_CHARS], 0, "data after the closing ] of the array"
            return
        start_line = line
        pieces: list[str] | None = []
        size = 0
        stack: list[str] = []
        in_string = escaped = False
        first = buf[pos]
        scalar = first not in "[{\""
        note = None
        start = pos
        while True:
            if pos >= len(buf):
                piece = buf[start:]
                line_add = piece.count("\n")
                line += line_add
                size, pieces = _keep(pieces, piece, size, cap)
                if not fill():
                    if stack or in_string:
                        note = "the file ends inside this value"
                    break
                start = 0
                continue
            if escaped:
                escaped = False
                pos += 1
                continue
            if in_string:
                m = _IN_STRING.search(buf, pos)
                if m is None:
                    pos = len(buf)
                    continue
                pos = m.end()
                if m.group() == "\\":
                    escaped = True
                    continue
                in_string = False
                if not stack and not scalar:
                    break
                continue
            if scalar:
                m = _SCALAR_END.search(buf, pos + (1 if pos == start and buf[pos] not in "]}" else 0))
                if m is None:
                    pos = len(buf)
                    continue
                pos = m.start()
                if pos == start:   # a stray closer: take it as a one-character invalid value
                    pos += 1
                break
            m = _IN_CONTAINER.search(buf, pos)
            if m is None:
                pos = len(buf)
                continue
            pos = m.end()
            char = m.group()
            if char == '"':
                in_string = True
            elif char in "[{":
                stack.append(char)
            else:
                # a mismatched closer closes every bracket up to its partner (or all), so the
                # splitter resynchronises at the value's end instead of swallowing the file
                while stack and stack.pop() != _CLOSER[char]:
                    pass
                if not stack:
                    break
        piece = buf[start:pos]
        line += piece.count("\n")
        size, pieces = _keep(pieces, piece, size, cap)
        yield start_line, None if pieces is None else "".join(pieces), size, note
    if in_array:
        yield line, "", 0, "the array is never closed"


def _keep(pieces: list[str] | None, piece: str, size: int, cap: int) -> tuple[int, list[str] | None]:
    """Add ``piece`` to a value's pieces and its UTF-8 size; drop them all once the value is over ``cap``."""
    # a character is at most 4 bytes, so short pieces are measured without encoding them
    size += len(piece) if piece.isascii() else len(piece.encode("utf-8", "surrogatepass"))
    if pieces is None or size > cap:
        return size, None
    pieces.append(piece)
    return size, pieces


# --- Arrow (Parquet, saved datasets) --------------------------------------------------

class NotPlain(Exception):
    """An Arrow value with no JSON form (binary that is not text, a non-finite decimal)."""


def plain(value: Any, where: str = "") -> Any:
    """An Arrow value as JSON data: times as ISO-8601 UTC, decimals as numbers, UTF-8 bytes as text."""
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    if isinstance(value, dict):
        return {k: plain(v, f"{where}.{k}" if where else str(k)) for k, v in value.items() if v is not None}
    if isinstance(value, (list, tuple)):
        return [plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dt.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return value.isoformat(timespec="seconds" if not value.microsecond else "milliseconds") + "Z"
    if isinstance(value, (dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, decimal.Decimal):
        if not value.is_finite():
            raise NotPlain(f"{where}: {value} is not a finite number")
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        try:
            return bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            raise NotPlain(f"{where}: a binary value ({len(value):,} bytes) that is not UTF-8 text") from None
    raise NotPlain(f"{where}: a {type(value).__name__} value has no JSON form")


def arrow_record(where: str, row: dict) -> RawRecord:
    try:
        return RawRecord(where, data=plain(row))
    except NotPlain as exc:
        return RawRecord(where, error=str(exc))
    except RecursionError:
        return RawRecord(where, error="nested too deeply to read")


def read_parquet(path: Path, label: str, progress: ProgressFn | None) -> Iterator[RawRecord]:
    import pyarrow.parquet as pq

    try:
        table = pq.ParquetFile(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
        yield RawRecord(f"{label}:?", error=f"unreadable Parquet file: {exc}")
        return
    meta = table.metadata
    per_row = max(1, path.stat().st_size // max(1, meta.num_rows))
    first = 1
    for group in range(meta.num_row_groups):
        rows = meta.row_group(group).num_rows
        row = first
        try:   # a corrupt page costs the rows of its group, not the file
            for batch in table.iter_batches(batch_size=1024, row_groups=[group]):
                for record in batch.to_pylist():
                    if progress:
                        progress(per_row)
                    yield arrow_record(f"{label}:{row}", record)
                    row += 1
        except Exception as exc:  # noqa: BLE001 - pyarrow raises OSError, ArrowInvalid, ...
            yield RawRecord(f"{label}:{row}", error=f"unreadable Parquet row group {group} (rows {row}-"
                            f"{first + rows - 1}): {exc}")
        first += rows
