"""Error types and the exit codes the CLI maps them to.

Library code raises these; only ``mint.cli`` turns them into a message and an
exit code (DESIGN.md, "Command-line conventions").
"""
from __future__ import annotations


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
