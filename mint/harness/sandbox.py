"""Run generated code against its tests in a separate, confined process.

The child is ``python -I -S`` (no site-packages, so not even mint is importable)
in a fresh temporary directory, with a scrubbed environment, CPU-time, memory,
file-size, open-file and process limits, a wall-clock timeout that kills its
whole process group, no network (a new network namespace when run as root),
an unprivileged user when run as root, and an audit hook (see
``sandbox_runner.py``). The verdict travels on a pipe as ``PASS <nonce>``: the
nonce is random per run and reaches the child on a second pipe, so an early
``exit(0)``, a crash or a printed "PASS" is a failure.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

RUNNER = Path(__file__).with_name("sandbox_runner.py")
OUTPUT_KEEP = 2000


@dataclass(frozen=True)
class Limits:
    timeout_s: float = 10.0
    cpu_s: int = 10
    memory_mb: int = 1024
    file_mb: int = 16
    processes: int = 64


@dataclass(frozen=True)
class SandboxResult:
    passed: bool
    status: str        # passed | failed | timeout | crashed
    detail: str
    seconds: float


def run_tests(program: str, test: str, entry_point: str, limits: Limits = Limits()) -> SandboxResult:
    """Run ``program``, then ``test`` (which defines ``check``), then ``check(entry_point)``."""
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="mint-sandbox-")
    nonce = secrets.token_hex(16).encode()
    nonce_read, nonce_write = os.pipe()
    result_read, result_write = os.pipe()
    try:
        if os.geteuid() == 0:
            os.chown(workdir, 65534, 65534)
        job = json.dumps({"program": program, "test": test, "entry_point": entry_point, "workdir": workdir,
                          "limits": {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_mb << 20,
                                     "file_bytes": limits.file_mb << 20, "processes": limits.processes}})
        os.write(nonce_write, nonce)
        os.close(nonce_write)
        nonce_write = -1   # closed: never close a number another thread's pipe may reuse by now
        with open(os.path.join(workdir, ".stdout"), "w+b") as out:
            child = subprocess.Popen(
                [sys.executable, "-I", "-S", str(RUNNER), str(nonce_read), str(result_write)],
                stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT, pass_fds=(nonce_read, result_write),
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0",
                     "PYTHONDONTWRITEBYTECODE": "1"},
                cwd=workdir, start_new_session=True, close_fds=True)
            os.close(nonce_read)
            os.close(result_write)
            nonce_read = result_write = -1
            try:
                child.communicate(job.encode(), timeout=limits.timeout_s)
                timed_out = False
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(child)
            out.seek(0)
            output = out.read(OUTPUT_KEEP).decode("utf-8", "replace")
        verdict = _read_verdict(result_read)
        seconds = time.perf_counter() - started
        if timed_out:
            return SandboxResult(False, "timeout", f"no result within {limits.timeout_s:g}s", seconds)
        if verdict == b"PASS " + nonce and child.returncode == 0:
            return SandboxResult(True, "passed", "", seconds)
        if verdict == b"FAIL " + nonce:
            return SandboxResult(False, "failed", output.strip()[-500:], seconds)
        return SandboxResult(False, "crashed", f"exit status {child.returncode} without a verdict; "
                                               f"{output.strip()[-300:]}", seconds)
    finally:
        for fd in (nonce_read, nonce_write, result_read, result_write):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        shutil.rmtree(workdir, ignore_errors=True)


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child and everything it started (they share its session and process group)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    child.wait()


def _read_verdict(fd: int) -> bytes:
    os.set_blocking(fd, False)
    try:
        data = os.read(fd, 4096)
    except BlockingIOError:
        return b""
    lines = data.split(b"\n")
    # exactly one verdict line: anything else written to the pipe voids it
    return lines[0] if len(lines) == 2 and lines[1] == b"" else b""
