"""Starting a server for a bench or reliability script: a free local port, and waiting until the server answers."""
from __future__ import annotations

import socket
import subprocess
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_ready(process: subprocess.Popen, url: str, *, log: Path, limit_s: float, what: str,
               headers: dict | None = None, every_s: float = 0.2) -> None:
    """Return once ``url`` answers 200; raise RuntimeError naming ``log`` if ``process`` exits first or
    ``limit_s`` passes (the process is left to the caller to stop)."""
    import httpx

    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}: see {log}")
        try:
            if httpx.get(url, headers=headers, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(every_s)
    raise RuntimeError(f"{what} did not start within {limit_s:.0f} s: see {log}")
