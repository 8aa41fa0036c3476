"""Error types and the exit codes the CLI maps them to.

Library code raises these; only ``mint.cli`` turns them into a message and an
exit code (README.md, "The CLI at a glance").
"""
from __future__ import annotations

import errno
import os
import sqlite3


class MintError(Exception):
    """Base class. A bare MintError is an internal error (exit 3)."""

    exit_code = 3


class BadInput(MintError):
    """Bad input or usage: a wrong path, a malformed file, an unknown name (exit 2)."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None,
                 field: str | None = None) -> None:
        self.file, self.line, self.field = file, line, field
        self.message = message
        where = ""
        if file is not None:
            where = f"{file}:{line}: " if line is not None else f"{file}: "
        if field:
            where += f"{field}: "
        super().__init__(where + message)


class Refused(MintError):
    """The request was well-formed but a rule refused it (a failed gate, a stale baseline): exit 1."""

    exit_code = 1


class Unwritable(Refused):
    """The machine refused a write: the disk is full or the workspace is read-only (exit 1). Every artifact is
    written to a temporary path and renamed into place, so what was published before is left as it was."""


# a path that cannot be what the command needs: a file where a folder must be, a folder that cannot be made
_PATH_ERRNOS = {errno.ENOTDIR, errno.EEXIST, errno.ENOENT, errno.EISDIR, errno.ENAMETOOLONG, errno.ELOOP}
_UNWRITABLE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM}
_UNWRITABLE_SQLITE = ("disk is full", "readonly database", "unable to open database file", "disk I/O error")


def unwritable(exc: BaseException) -> Unwritable | None:
    """The Unwritable that ``exc``, or an exception it was raised from, stands for; None for anything else."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _UNWRITABLE_ERRNOS:
            where = f"{seen.filename}: " if seen.filename else ""
            return Unwritable(f"{where}{os.strerror(seen.errno)}; nothing was published: free some space or make "
                              "the workspace writable, then run the command again")
        if isinstance(seen, sqlite3.OperationalError) and any(s in str(seen) for s in _UNWRITABLE_SQLITE):
            return Unwritable(f"cannot write the workspace database ({seen}: is the disk full or the workspace "
                              "read-only?); nothing was published: free some space or make the workspace writable, "
                              "then run the command again")
        seen = seen.__cause__ or seen.__context__
    return None


def bad_path(exc: BaseException) -> BadInput | None:
    """The BadInput (exit 2, naming the path) that ``exc``, or an exception it was raised from, stands for when
    it is a path the command could not use (``--out /dev/null/x``); None for anything else."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in _PATH_ERRNOS and seen.filename:
            path = os.fsdecode(seen.filename)
            if os.path.basename(path).startswith(".tmp-"):      # a staging file: the folder it was made in
                return BadInput(f"cannot write in this folder: {os.strerror(seen.errno)}",
                                file=os.path.dirname(path) or ".")
            if seen.errno == errno.EEXIST and os.path.exists(path) and not os.path.isdir(path):
                return BadInput("is a file, so nothing can be made inside it: choose a folder", file=path)
            return BadInput(f"cannot use this path: {os.strerror(seen.errno)}", file=path)
        seen = seen.__cause__ or seen.__context__
    return None
