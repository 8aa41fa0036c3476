"""Revision directories: written once, atomically; verified by the sha256 of every file on load.

A revision directory is a standard PEFT adapter directory plus ``mint.json``
(the revision's metadata and the sha256 of every other file). The database
keeps the sha256 of that file list, so editing ``mint.json`` to hide a change
is caught too.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import asdict
from pathlib import Path

from mint.errors import BadInput, Refused
from mint.faults import checkpoint
from mint.registry import store
from mint.registry.refs import check_name
from mint.workspace import Workspace, file_lock, publish_dir, staging_dir

MINT_JSON = "mint.json"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def hash_files(directory: Path) -> dict[str, str]:
    """sha256 of every file under ``directory`` except ``mint.json``, by relative path."""
    return {str(p.relative_to(directory)): sha256_file(p) for p in sorted(directory.rglob("*"))
            if p.is_file() and p.name != MINT_JSON}


def files_digest(hashes: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(hashes, sort_keys=True).encode()).hexdigest()


def check_adapter_dir(directory: Path) -> dict:
    """The adapter config of a PEFT directory with safetensors weights; a pickle adapter is refused."""
    if not directory.is_dir():
        raise BadInput("no such adapter directory", file=str(directory))
    pickles = sorted(p.name for p in directory.iterdir() if p.suffix in PICKLE_SUFFIXES)
    if pickles:
        raise BadInput(f"{pickles[0]} is a pickle file, which can run code when loaded; mint accepts safetensors "
                       "adapters only: re-save it with `model.save_pretrained(dir, safe_serialization=True)`",
                       file=str(directory))
    config_path = directory / ADAPTER_CONFIG
    if not config_path.is_file():
        raise BadInput(f"not a PEFT adapter directory: no {ADAPTER_CONFIG}", file=str(directory))
    if not (directory / ADAPTER_WEIGHTS).is_file():
        raise BadInput(f"no {ADAPTER_WEIGHTS} (mint accepts safetensors adapters only)", file=str(directory))
    try:
        config = json.loads(config_path.read_text())
    except ValueError as exc:
        raise BadInput(f"invalid JSON: {exc}", file=str(config_path)) from None
    if not isinstance(config, dict) or "peft_type" not in config:
        raise BadInput("not a PEFT adapter config: no peft_type", file=str(config_path))
    return config


def adapter_files(source: Path) -> tuple[list[Path], list[str]]:
    """The top-level files of an adapter directory that a revision copies, and what it leaves out (with why).

    A symlink is followed only when it stays inside ``source``; one that leaves it is refused, so an
    "adapter" cannot smuggle in ~/.ssh/id_rsa or /dev/zero.
    """
    if not source.is_dir():
        raise BadInput("no such adapter directory", file=str(source))
    root = source.resolve()
    files, skipped = [], []
    for item in sorted(source.iterdir()):
        if item.is_symlink():
            target = item.resolve()
            if not target.is_relative_to(root):
                raise BadInput(f"is a symlink to {target}, outside the adapter directory; copy the file in instead",
                               file=str(item))
        if item.name == MINT_JSON:
            skipped.append(f"{item.name} (mint's own metadata: written anew)")
        elif item.is_dir():
            skipped.append(f"{item.name}/ (a subdirectory: only the adapter's top-level files are kept)")
        elif not item.is_file():
            skipped.append(f"{item.name} (not a regular file)")
        elif not os.access(item, os.R_OK):
            raise BadInput("cannot be read (permission denied)", file=str(item))
        else:
            files.append(item)
    return files, skipped


def staging_lock(ws: Workspace) -> Path:
    """Held shared by every register (train, import) from staging to commit, exclusively by gc's sweep of
    ``.tmp-`` folders, so gc never deletes the files of a revision being written."""
    return ws.adapters / ".staging.lock"


def register(ws: Workspace, source: Path, *, specialist: str, parent: str | None = None, base: str | None = None,
             base_fingerprint: str | None = None, dataset: str | None = None, method: str | None = None,
             recipe: str | None = None, config_hash: str | None = None, metrics: dict | None = None
             ) -> store.Revision:
    """Copy the adapter at ``source`` into the registry as the next candidate revision of ``specialist``."""
    check_name(specialist)
    files, _skipped = adapter_files(source)
    check_adapter_dir(source)
    conn = store.open_store(ws)
    try:
        with file_lock(staging_lock(ws), shared=True), staging_dir(ws.adapters, "revision") as tmp:
            for item in files:
                shutil.copy2(item, tmp / item.name)
            hashes = hash_files(tmp)
            checkpoint("register.staged")
            with store.write(conn):   # holds the write lock from version allocation to commit
                if parent and store.get_revision(conn, parent) is None:
                    raise BadInput(f"parent revision {parent} is not in the registry", field="--from")
                version = store.next_version(conn, specialist)
                created_at = store.now()
                digest = files_digest(hashes)
                revision_id = hashlib.sha256(f"{specialist}:{version}:{digest}:{created_at}:{parent}".encode()
                                             ).hexdigest()[:32]
                revision = store.Revision(
                    id=revision_id, specialist=specialist, version=version, parent=parent, status="candidate",
                    base=base, base_fingerprint=base_fingerprint, dataset=dataset, method=method, recipe=recipe,
                    config_hash=config_hash, files_sha256=digest, metrics=metrics or {}, created_at=created_at)
                (tmp / MINT_JSON).write_text(json.dumps({**asdict(revision), "files": hashes}, indent=2,
                                                        sort_keys=True) + "\n")
                final = ws.adapters / revision_id
                publish_dir(tmp, final)
                try:
                    checkpoint("register.published")   # a kill here leaves an unlisted directory, swept by gc
                    store.insert_revision(conn, revision)
                except BaseException:
                    shutil.rmtree(final, ignore_errors=True)
                    raise
            checkpoint("register.committed")
    finally:
        conn.close()
    return revision


def revision_dir(ws: Workspace, revision: store.Revision) -> Path:
    return ws.adapters / revision.id


def verify_revision(ws: Workspace, revision: store.Revision) -> list[str]:
    """Every problem with the revision's files, each naming the file; empty when intact."""
    directory = revision_dir(ws, revision)
    if not directory.is_dir():
        return [f"{directory}: missing"]
    try:
        metadata = json.loads((directory / MINT_JSON).read_text())
        recorded = metadata.pop("files")
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return [f"{directory / MINT_JSON}: missing or unreadable"]
    problems = []
    if files_digest(recorded) != revision.files_sha256:
        problems.append(f"{directory / MINT_JSON}: its file list differs from the one registered")
    # the rest of mint.json must say what the registry says; it was written at registration, when every
    # revision is a candidate (the status moves in the registry only)
    registered = {**asdict(revision), "status": "candidate"}
    changed = sorted(k for k in registered.keys() | metadata.keys()
                     if metadata.get(k, object()) != registered.get(k, object()))
    if changed:
        problems.append(f"{directory / MINT_JSON}: {', '.join(changed)} differ from the registry's")
    actual = {str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file() and p.name != MINT_JSON}
    for name, digest in sorted(recorded.items()):
        path = directory / name
        if name not in actual:
            problems.append(f"{path}: missing")
        elif sha256_file(path) != digest:
            problems.append(f"{path}: sha256 differs from the registered one")
    for name in sorted(actual - set(recorded)):
        problems.append(f"{directory / name}: not part of the revision")
    return problems


def load_revision(ws: Workspace, ref: str) -> tuple[store.Revision, Path]:
    """Resolve ``ref``, verify every file's hash and return the revision and its PEFT directory.

    Refused when a file was changed or added; BadInput for a pickle adapter.
    """
    conn = store.open_store(ws, create=False)
    try:
        revision = store.resolve(conn, ref)
    finally:
        conn.close()
    directory = revision_dir(ws, revision)
    problems = verify_revision(ws, revision)
    if problems:
        raise Refused(f"{revision.ref} ({revision.id[:12]}) failed verification: " + "; ".join(problems))
    check_adapter_dir(directory)
    return revision, directory
