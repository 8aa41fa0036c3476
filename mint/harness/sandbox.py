"""Run generated code against its tests so that the code cannot fake the verdict.

Each run starts two confined processes that share nothing but two pipes:

- the program's (``sandbox_runner.py``) runs the untrusted program and answers calls with tagged plain
  data (``sandbox_child.py``); it never sees the tests or the expected answers;
- the judge's (``sandbox_judge.py``) runs the test's ``check(candidate)``, sending every call of the
  candidate to the program's process and decoding the answer into built-in values. The verdict is the
  judge's: the untrusted code never ran in its process, so no patched builtin, walked frame or
  always-equal object can reach it.

Isolation, probed once: bubblewrap where it is installed and works (only /usr, the Python installation
and the sandbox scripts visible, read-only; no network; private size-limited /tmp and working directory;
new PID, IPC, UTS and user namespaces as `nobody`; no capabilities; killed with its parent), otherwise
resource limits, a fresh network namespace and `nobody` when run as root, and an audit hook. The limits
and the audit hook apply on both paths. ``MINT_SANDBOX_ISOLATION=rlimits`` forces the fallback,
``=bwrap`` requires bubblewrap.
"""
from __future__ import annotations

import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput

HERE = Path(__file__).resolve().parent
ISOLATION_ENV = "MINT_SANDBOX_ISOLATION"
BWRAP, FALLBACK = "bwrap", "rlimits+audit"
SCRIPTS_INSIDE = "/sandbox"      # where bubblewrap shows HERE
WORKDIR_INSIDE = "/work"
NOBODY = 65534
CHILD_ENV = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
DETAIL_KEEP = 500


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
    isolation: str = ""


def describe_isolation(isolation: str | None = None) -> dict:
    """Which isolation runs would get here: {"isolation": "bwrap" | "rlimits+audit", "detail": ...}."""
    mode = _choose(isolation)
    if mode == BWRAP:
        return {"isolation": BWRAP, "detail": "bubblewrap: read-only /usr and Python only, no network, private "
                "/tmp, new PID/user namespaces as nobody, no capabilities; plus rlimits and the audit hook"}
    why = _bwrap_problem() if (isolation or os.environ.get(ISOLATION_ENV)) != "rlimits" else \
        f"forced by {ISOLATION_ENV}=rlimits"
    return {"isolation": FALLBACK, "detail": f"rlimits, audit hook{', network namespace and nobody' if os.geteuid() == 0 else ''}"
                                             f" ({why})"}


def run_tests(program: str, test: str, entry_point: str, limits: Limits = Limits(), *, prompt: str = "",
              isolation: str | None = None, audit_hook: bool = True) -> SandboxResult:
    """Run ``test`` (which defines ``check``) as ``check(entry_point)`` against ``program``.

    ``prompt`` is the trusted source the test may rely on (HumanEval's helper functions, its imports);
    ``isolation`` is "bwrap", "rlimits" or None (the best available, or ``$MINT_SANDBOX_ISOLATION``);
    ``audit_hook=False`` leaves the audit hook out, only to test what bubblewrap alone contains.
    """
    mode = _choose(isolation)
    started = time.perf_counter()
    workdir = tempfile.mkdtemp(prefix="mint-sandbox-")
    os.chmod(workdir, 0o711)   # `nobody` may enter its own subdirectory, not list the others
    fds = []
    children = []
    try:
        request_read, request_write = os.pipe()
        fds += [request_read, request_write]
        response_read, response_write = os.pipe()
        fds += [response_read, response_write]
        child_limits = {"cpu_s": limits.cpu_s, "memory_bytes": limits.memory_mb << 20,
                        "file_bytes": limits.file_mb << 20, "processes": limits.processes}
        guard = audit_hook or mode != BWRAP
        argv, inside, cwd = _child("runner", mode, workdir, limits)
        runner = subprocess.Popen(argv + [str(request_read), str(response_write)], stdin=subprocess.PIPE,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  pass_fds=(request_read, response_write), cwd=cwd, env=CHILD_ENV,
                                  start_new_session=True, close_fds=True)
        children.append(runner)
        argv, inside_judge, cwd = _child("judge", mode, workdir, limits)
        judge = subprocess.Popen(argv + [str(request_write), str(response_read)], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 pass_fds=(request_write, response_read), cwd=cwd, env=CHILD_ENV,
                                 start_new_session=True, close_fds=True)
        children.append(judge)
        for fd in fds:
            os.close(fd)
        fds = []
        runner_job = json.dumps({"program": program, "entry_point": entry_point, "workdir": inside,
                                 "limits": child_limits, "guard": guard}).encode()
        # fed from a thread: a large program must not block this one past the timeout
        threading.Thread(target=_feed, args=(runner.stdin, runner_job), daemon=True).start()
        judge_job = json.dumps({"test": test, "prompt": prompt, "entry_point": entry_point,
                                "workdir": inside_judge, "limits": child_limits, "guard": guard})
        try:
            out, err = judge.communicate(judge_job.encode(), timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            return SandboxResult(False, "timeout", f"no verdict within {limits.timeout_s:g}s",
                                 time.perf_counter() - started, mode)
        return _verdict(judge.returncode, out, err, time.perf_counter() - started, mode)
    finally:
        for child in children:
            _kill_group(child)
        for fd in fds:
            os.close(fd)
        shutil.rmtree(workdir, ignore_errors=True)


def _child(script: str, mode: str, workdir: str, limits: Limits) -> tuple[list[str], str, str]:
    """The command for one child (``runner`` or ``judge``), its working directory as it sees it, and the
    directory to start it in."""
    if mode == BWRAP:
        return (_bwrap_argv(limits.file_mb * 4) + [_python(), "-I", "-S", f"{SCRIPTS_INSIDE}/sandbox_{script}.py"],
                WORKDIR_INSIDE, "/")
    own = os.path.join(workdir, script)
    os.mkdir(own, 0o700)
    if os.geteuid() == 0:
        os.chown(own, NOBODY, NOBODY)
    return [_python(), "-I", "-S", str(HERE / f"sandbox_{script}.py")], own, own


def _feed(stream, data: bytes) -> None:
    try:
        stream.write(data)
        stream.close()
    except (OSError, ValueError):   # the child is gone (the judge will say so), or its pipe already closed
        pass


def _verdict(returncode: int, out: bytes, err: bytes, seconds: float, mode: str) -> SandboxResult:
    try:
        verdict = json.loads(out.decode("utf-8", "replace"))
        status, detail = verdict["status"], str(verdict["detail"])[:DETAIL_KEEP]
    except (ValueError, KeyError, TypeError):
        why = err.decode("utf-8", "replace").strip()[-300:]
        return SandboxResult(False, "crashed", f"the judge gave no verdict (exit {returncode}) {why}", seconds, mode)
    if status == "passed" and returncode == 0:
        return SandboxResult(True, "passed", "", seconds, mode)
    return SandboxResult(False, status if status in ("failed", "crashed") else "crashed", detail, seconds, mode)


def _kill_group(child: subprocess.Popen) -> None:
    """Kill the child and everything it started (its session; bubblewrap's sandbox dies with bubblewrap)."""
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for stream in (child.stdin, child.stdout, child.stderr):
        if stream is not None:
            try:
                stream.close()
            except OSError:
                pass
    child.wait()


def _python() -> str:
    """The interpreter itself, not a virtualenv's link to it (bubblewrap shows no virtualenv)."""
    return os.path.realpath(sys.executable)


def _bwrap_argv(tmpfs_mb: int) -> list[str]:
    size = str(max(tmpfs_mb, 8) << 20)
    argv = ["bwrap", "--unshare-all", "--unshare-user", "--uid", str(NOBODY), "--gid", str(NOBODY),
            "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--ro-bind", "/usr", "/usr"]
    for top in ("/bin", "/sbin", "/lib", "/lib64", "/lib32", "/libx32"):
        if os.path.islink(top):
            argv += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            argv += ["--ro-bind", top, top]
    for needed in {os.path.realpath(sys.base_prefix), os.path.dirname(_python())}:
        if not needed.startswith("/usr/"):
            argv += ["--ro-bind", needed, needed]
    return argv + ["--ro-bind", str(HERE), SCRIPTS_INSIDE, "--proc", "/proc", "--dev", "/dev",
                   "--size", size, "--tmpfs", "/tmp", "--size", size, "--tmpfs", WORKDIR_INSIDE,
                   "--chdir", WORKDIR_INSIDE, "--"]


@functools.lru_cache(maxsize=1)
def _bwrap_problem() -> str:
    """Why bubblewrap cannot be used here ("" when it can): probed once per process."""
    if shutil.which("bwrap") is None:
        return "bwrap is not installed"
    try:
        probe = subprocess.run(_bwrap_argv(8) + [_python(), "-I", "-S", "-c", "import math"], env=CHILD_ENV,
                               stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"bwrap did not run: {exc}"
    if probe.returncode != 0:
        return f"bwrap does not work here: {probe.stderr.decode('utf-8', 'replace').strip()[-200:]}"
    return ""


def _choose(isolation: str | None) -> str:
    requested = isolation or os.environ.get(ISOLATION_ENV) or "auto"
    if requested not in ("auto", "bwrap", "rlimits"):
        raise BadInput(f"unknown isolation {requested!r} (auto, bwrap or rlimits)", field=ISOLATION_ENV)
    if requested == "rlimits":
        return FALLBACK
    problem = _bwrap_problem()
    if requested == "bwrap" and problem:
        raise BadInput(f"bubblewrap was asked for but {problem}", field=ISOLATION_ENV)
    return FALLBACK if problem else BWRAP
