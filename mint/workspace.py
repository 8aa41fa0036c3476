"""The workspace ($MINT_HOME): where datasets, adapters and reports live, and how they are written.

Every artifact is written into a sibling temporary path and renamed into
place, so a reader never sees a half-written file or directory.
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

DEFAULT_HOME = ".mint"
_UMASK = os.umask(0)
os.umask(_UMASK)   # read once: temp files are made 0600/0700, published ones follow the umask


@dataclass(frozen=True)
class Workspace:
    home: Path
    # where the registry's tables live: None for $MINT_HOME/registry.sqlite, or a postgresql:// URL that
    # several hosts share (mint.registry.backend)
    registry_url: str | None = None
    # where revisions' and reports' files live: $MINT_HOME by default, a shared directory beside a shared registry
    artifacts: Path | None = None

    @property
    def datasets(self) -> Path:
        return self.home / "datasets"

    @property
    def adapters(self) -> Path:
        return (self.artifacts or self.home) / "adapters"

    @property
    def reports(self) -> Path:
        return (self.artifacts or self.home) / "reports"

    @property
    def runs(self) -> Path:
        """Training runs (`mint train`): one folder each, with its plan, examples, metrics and result."""
        return self.home / "runs"


def workspace(home: str | os.PathLike | None = None, registry_url: str | None = None) -> Workspace:
    """The workspace at ``home``, else ``$MINT_HOME``, else ``./.mint``; its registry at ``registry_url``, else
    ``$MINT_REGISTRY_URL``, else the workspace's SQLite file; its artifacts under ``$MINT_ARTIFACTS`` if set."""
    chosen = home or os.environ.get("MINT_HOME") or DEFAULT_HOME
    artifacts = os.environ.get("MINT_ARTIFACTS")
    return Workspace(Path(chosen).expanduser().absolute(),
                     registry_url=registry_url or os.environ.get("MINT_REGISTRY_URL") or None,
                     artifacts=Path(artifacts).expanduser().absolute() if artifacts else None)


def cache_dir() -> Path:
    """The per-user cache for converted base models (``$MINT_CACHE``, default ``~/.cache/mint``)."""
    chosen = os.environ.get("MINT_CACHE") or Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache") / "mint"
    return Path(chosen).expanduser().absolute()


def fsync_dir(path: Path) -> None:
    """Make a rename or a new file in ``path`` survive a power loss."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(root: Path) -> None:
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            with open(os.path.join(dirpath, name), "rb") as f:
                os.fsync(f.fileno())
        fsync_dir(Path(dirpath))


@contextlib.contextmanager
def staging_dir(parent: Path, prefix: str = "stage") -> Iterator[Path]:
    """A fresh ``.tmp-`` directory under ``parent``, removed if the block raises.

    Readers ignore ``.tmp-`` names, so what a killed writer leaves is invisible;
    ``remove_stale_temps`` sweeps it later.
    """
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{prefix}-", dir=parent))
    os.chmod(tmp, 0o777 & ~_UMASK)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def publish_dir(tmp: Path, final: Path) -> None:
    """fsync ``tmp`` and rename it to ``final`` (which must not exist) in one step."""
    fsync_tree(tmp)
    os.rename(tmp, final)
    fsync_dir(final.parent)


@contextlib.contextmanager
def atomic_dir(final: Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it becomes ``final`` in one rename."""
    with staging_dir(final.parent, final.name) as tmp:
        yield tmp
        publish_dir(tmp, final)


def atomic_write_text(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".tmp-{path.name}-", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_UMASK)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def atomic_write_json(path: Path, data: Any) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False) + "\n")


def remove_stale_temps(directory: Path) -> None:
    """Remove ``.tmp-*`` leftovers of killed writers (call while holding the directory's lock)."""
    if not directory.is_dir():
        return
    for entry in directory.iterdir():
        if entry.name.startswith(".tmp-"):
            if entry.is_dir():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    entry.unlink()


@contextlib.contextmanager
def file_lock(path: Path, *, shared: bool = False, wait: bool = True) -> Iterator[bool]:
    """An advisory lock held for the block (released by the OS if the process dies); exclusive unless ``shared``.

    With ``wait=False`` the block runs at once and gets False when another process holds the lock.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        mode = (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | (0 if wait else fcntl.LOCK_NB)
        try:
            fcntl.flock(handle.fileno(), mode)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)
