"""Locks held in a shared registry, so that hosts which share it take turns: a PostgreSQL session advisory lock.

The server holds the lock for the connection that took it, so a holder that dies (killed, its host gone) drops
its connection and the lock with it; nothing to clean up by hand. The ``loop_locks`` table names the holder
(host, pid, since) for the message of a host that is refused; a row a dead holder left is overwritten by the
next one to take the lock, and is never what decides who holds it.
"""
from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass

from mint.errors import BadInput, Refused
from mint.registry import store
from mint.workspace import Workspace


HOLDER_WAIT_S = 2.0   # how long a refused process waits for the holder to write its name


class LockHeld(Refused):
    """Another process (on this host or another) holds the lock."""


@dataclass(frozen=True)
class Holder:
    host: str
    pid: int
    since: str

    def describe(self) -> str:
        return f"host {self.host}, pid {self.pid}, since {self.since}"


class RegistryLock:
    """An exclusive, non-blocking lock named ``name`` in the shared registry of ``ws``; a context manager."""

    def __init__(self, ws: Workspace, name: str) -> None:
        if not ws.registry_url:
            raise BadInput("a registry lock needs a shared registry (MINT_REGISTRY_URL=postgresql://...)",
                           field="MINT_REGISTRY_URL")
        self.ws, self.name = ws, name
        self.conn: store.Connection | None = None

    def __enter__(self) -> RegistryLock:
        # a connection of its own: it holds the lock for as long as it lives, and closing it releases the lock
        conn = store.open_store(self.ws, reuse=False)
        try:
            taken = conn.execute("SELECT pg_try_advisory_lock(hashtextextended(current_schema() || ?, 0))",
                                 (":lock:" + self.name,)).fetchone()[0]
            if not taken:
                holder = _wait_for_holder(conn, self.name)
                raise LockHeld(f"another `mint loop` holds the lock {self.name!r} in the registry at "
                               f"{conn.location} ({holder.describe() if holder else 'another process'})")
            conn.execute("INSERT INTO loop_locks (name, host, pid, since) VALUES (?, ?, ?, ?) "
                         "ON CONFLICT (name) DO UPDATE SET host = excluded.host, pid = excluded.pid, "
                         "since = excluded.since", (self.name, socket.gethostname(), os.getpid(), store.now()))
        except BaseException:
            conn.close()
            raise
        self.conn = conn
        return self

    def __exit__(self, *exc) -> None:
        if self.conn is None:
            return
        try:
            self.conn.execute("DELETE FROM loop_locks WHERE name = ? AND host = ? AND pid = ?",
                              (self.name, socket.gethostname(), os.getpid()))
            self.conn.execute("SELECT pg_advisory_unlock(hashtextextended(current_schema() || ?, 0))",
                              (":lock:" + self.name,))
        finally:
            self.conn.close()   # closing alone releases the lock too
            self.conn = None


def holder_of(conn, name: str) -> Holder | None:
    """Who wrote that they hold ``name`` (None when nobody has, or the holder has not written it yet)."""
    row = conn.execute("SELECT host, pid, since FROM loop_locks WHERE name = ?", (name,)).fetchone()
    return Holder(row[0], row[1], row[2]) if row else None


def _wait_for_holder(conn, name: str) -> Holder | None:
    """The holder writes its name just after taking the lock: a process refused in between waits briefly for
    it rather than report nobody."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while (holder := holder_of(conn, name)) is None and time.monotonic() < deadline:
        time.sleep(0.02)
    return holder
