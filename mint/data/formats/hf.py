"""Hugging Face datasets saved with ``save_to_disk`` (a folder with ``dataset_info.json`` and ``state.json``, or
a ``dataset_dict.json`` of splits): read row by row, each row's shape sniffed like a line of JSON (``--format
hf`` says the folder is one, and sniffs its rows)."""
from __future__ import annotations

from pathlib import Path
from typing import Iterator

from mint.data.formats import llamafactory
from mint.data.readers import ProgressFn, RawRecord, arrow_record
from mint.errors import BadInput


def is_saved_dataset(path: Path) -> bool:
    if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
        return True
    return (path / "dataset_info.json").is_file() and llamafactory.folder_info(path) is None


def tree_size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def load(path: Path):
    """The saved dataset (memory-mapped); BadInput when the folder is not one."""
    from datasets import load_from_disk

    try:
        return load_from_disk(str(path))
    except Exception as exc:  # noqa: BLE001 - datasets raises several types for a bad folder
        raise BadInput(f"not a dataset saved with save_to_disk: {exc}", file=str(path)) from None


def read(path: Path, label: str, progress: ProgressFn | None) -> Iterator[RawRecord]:
    """Every row of every split, as ``label[/split]:row``."""
    from datasets import Dataset, DatasetDict

    loaded = load(path)
    splits = loaded.items() if isinstance(loaded, DatasetDict) else [(None, loaded)]
    total = max(1, sum(len(split) for _name, split in splits))
    per_row = max(1, tree_size(path) // total)
    for name, split in splits:
        assert isinstance(split, Dataset)
        where = f"{label}/{name}" if name else label
        for row, record in enumerate(split, start=1):
            if progress:
                progress(per_row)
            # Arrow fills absent struct fields with None: plain() drops them so sniffing sees the real shape
            yield arrow_record(f"{where}:{row}", record)
