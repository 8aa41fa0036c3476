"""Which files of the paths given are logs, and how each is read: JSON Lines, JSON, Parquet (``readers``), a
LLaMA-Factory folder through its ``dataset_info.json`` and a saved Hugging Face dataset (``formats``)."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator

from mint.data.formats import hf, llamafactory
from mint.data.readers import (COMPRESSIONS, DEFAULT_MAX_RECORD_BYTES, ProgressFn, RawRecord, Source, file_kind,
                               parse_line, read_json_file, read_line_batches, read_parquet)
from mint.errors import BadInput


def discover(paths: list[Path], fmt: str, *, skipped: list[str] | None = None) -> list[Source]:
    """Every readable source under ``paths``; a missing or unreadable path is BadInput before any read.

    Files a folder walk passes over (other suffixes) are appended to ``skipped``; hidden files are not.
    """
    sources: list[Source] = []
    for path in paths:
        if not path.exists():
            raise BadInput("no such file or directory", file=str(path))
        if path.is_dir():
            info = llamafactory.folder_info(path) if fmt != "hf" else None
            if info is not None:
                found = llamafactory.folder_sources(path, info, skipped)
                if not found:
                    raise BadInput("its dataset_info.json names no file of this folder", file=str(path))
                sources.extend(found)
                continue
            if fmt == "hf" or hf.is_saved_dataset(path):
                if not hf.is_saved_dataset(path):
                    raise BadInput("not a dataset saved with save_to_disk (no dataset_info.json or "
                                   "dataset_dict.json)", file=str(path))
                sources.append(Source(path, "hf", hf.tree_size(path)))
                continue
            found = []
            for dirpath, dirnames, filenames in os.walk(path):
                dirnames.sort()
                here = Path(dirpath)
                for dirname in list(dirnames):
                    info = llamafactory.folder_info(here / dirname)
                    if info is not None:
                        found.extend(llamafactory.folder_sources(here / dirname, info, skipped))
                        dirnames.remove(dirname)
                    elif hf.is_saved_dataset(here / dirname):
                        found.append(Source(here / dirname, "hf", hf.tree_size(here / dirname)))
                        dirnames.remove(dirname)
                for filename in sorted(filenames):
                    if filename.startswith("."):
                        continue
                    kind, compression = file_kind(here / filename)
                    if kind:
                        found.append(Source(here / filename, kind, (here / filename).stat().st_size, compression))
                    elif skipped is not None:
                        skipped.append(str(here / filename))
            if not found:
                raise BadInput("no .jsonl, .json, .parquet (plain or .gz/.zst/.bz2/.xz) or saved dataset inside",
                               file=str(path))
            sources.extend(found)
        else:
            # an explicit file is read whatever its suffix: JSON Lines unless it says otherwise
            kind, compression = file_kind(path)
            sources.append(Source(path, kind or "jsonl", path.stat().st_size, compression))
    for source in sources:
        _check_readable(source)
    return sources


def _check_readable(source: Source) -> None:
    path = source.path
    try:
        if path.is_dir():
            os.listdir(path)
            if hf.is_saved_dataset(path):
                hf.load(path)   # memory-mapped: cheap, and a broken folder fails before any write
        else:
            with open(path, "rb") as f:
                head = f.read(6)
            if source.compression:
                magic = next(m for codec, m in COMPRESSIONS.values() if codec == source.compression)
                if not head.startswith(magic):
                    raise BadInput(f"not a {source.compression} file", file=str(path))
    except PermissionError:
        raise BadInput("permission denied", file=str(path)) from None
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", file=str(path)) from None


def read_source(source: Source, label: str, *, max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
                progress: ProgressFn | None = None) -> Iterator[RawRecord]:
    """Yield the records of one source; ``label`` is the path shown in ``file:line``."""
    if source.kind == "hf":
        yield from hf.read(source.path, label, progress)
        return
    if source.kind == "parquet":
        yield from read_parquet(source.path, label, progress)
        return
    if source.kind == "json":
        yield from read_json_file(source, label, max_record_bytes, progress)
        return
    for batch in read_line_batches(source, max_record_bytes=max_record_bytes, progress=progress):
        for item in batch:
            record = parse_line(label, item)
            if record is not None:
                yield record
