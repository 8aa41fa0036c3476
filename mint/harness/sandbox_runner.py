"""The trusted half of the coding sandbox. Run as ``python -I -S sandbox_runner.py NONCE_FD RESULT_FD``.

It imports nothing from mint (and with -I -S cannot): it reads the job from stdin
and the nonce from its pipe while still trusted, confines itself (network
namespace, resource limits, an unprivileged user, an audit hook that refuses
sockets, subprocesses, signals, ctypes, frame access and writes outside the
working directory), then runs the program and its tests. Only when the tests
return normally does it write ``PASS <nonce>`` to the result pipe; exiting
early, raising SystemExit or dying writes nothing the parent accepts.
"""
import builtins
import json
import os
import resource
import sys

CLONE_NEWNET = 0x40000000
NOBODY = 65534
PLAIN_TYPES = (type(None), bool, int, float, complex, str, bytes, list, tuple, dict, set, frozenset, range)
BLOCKED_EVENTS = {
    "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
    "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
    "ctypes.call_function", "sys._getframe", "sys._current_frames", "sys.settrace", "sys.setprofile",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.chdir", "os.chmod", "os.chown", "os.rmdir",
    "os.remove", "os.rename", "os.symlink", "os.link", "os.truncate", "shutil.rmtree", "sys.addaudithook",
    "os.putenv", "os.unsetenv", "code.__new__", "object.__delattr__", "function.__new__", "pty.spawn",
}
# Imported while still privileged: run as root, the child drops to `nobody`, which may not be able to
# read the standard library (under /root with pyenv). These cover what test programs usually import.
PRELOAD = ("typing", "math", "cmath", "collections", "collections.abc", "itertools", "functools", "operator", "re",
           "string", "heapq", "bisect", "hashlib", "random", "statistics", "fractions", "decimal", "datetime",
           "json", "copy", "time", "array", "numbers", "textwrap", "unicodedata", "enum", "dataclasses", "abc",
           "struct", "io", "calendar", "queue", "pprint", "contextlib", "base64", "binascii", "zlib", "difflib",
           "locale", "inspect", "traceback", "warnings", "weakref", "keyword", "secrets", "uuid", "csv")
BLOCKED_MODULES = {"ctypes", "_ctypes", "mint", "multiprocessing", "subprocess", "socket", "_socket", "gc",
                   "pty", "signal", "_signal", "resource", "fcntl", "mmap"}


def confine(workdir, limits):
    if os.geteuid() == 0:
        try:   # no network: a fresh, empty network namespace
            import ctypes
            ctypes.CDLL(None, use_errno=True).unshare(CLONE_NEWNET)
        except Exception:
            pass
    resource.setrlimit(resource.RLIMIT_CPU, (limits["cpu_s"], limits["cpu_s"] + 1))
    resource.setrlimit(resource.RLIMIT_AS, (limits["memory_bytes"], limits["memory_bytes"]))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limits["file_bytes"], limits["file_bytes"]))
    resource.setrlimit(resource.RLIMIT_NOFILE, (64, 64))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.geteuid() == 0:   # an unprivileged user cannot signal, read or write what root owns
        os.setgroups([])
        os.setgid(NOBODY)
        os.setuid(NOBODY)
    resource.setrlimit(resource.RLIMIT_NPROC, (limits["processes"], limits["processes"]))
    os.chdir(workdir)


def install_guard(workdir):
    root = os.path.realpath(workdir) + os.sep

    def guard(event, args):
        if event in BLOCKED_EVENTS:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and args[0].split(".")[0] in BLOCKED_MODULES:
            raise ImportError(f"sandbox: import of {args[0]} is not allowed")
        if event == "open":
            path, mode = args[0], args[1]
            if isinstance(path, int):
                return
            path = os.fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
            full = os.path.realpath(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(args[2], int) and args[2] & (os.O_WRONLY | os.O_RDWR | os.O_CREAT))
            if writing and not full.startswith(root):
                raise PermissionError(f"sandbox: writing {path} is not allowed")
            if full.startswith("/proc/") and not full.startswith(("/proc/self/", f"/proc/{os.getpid()}/")):
                raise PermissionError(f"sandbox: reading {path} is not allowed")
            if full.startswith(("/etc/shadow", "/root", "/home")):
                raise PermissionError(f"sandbox: reading {path} is not allowed")

    sys.addaudithook(guard)


def check_plain(value, depth=0):
    """Refuse results that are not plain data: an object whose __eq__ always says True is not an answer."""
    if type(value) not in PLAIN_TYPES or depth > 50:
        raise TypeError(f"sandbox: the function returned a {type(value).__name__}, not plain data")
    if type(value) in (list, tuple, set, frozenset):
        for item in value:
            check_plain(item, depth + 1)
    elif type(value) is dict:
        for key, item in value.items():
            check_plain(key, depth + 1)
            check_plain(item, depth + 1)


def main():
    nonce_fd, result_fd = int(sys.argv[1]), int(sys.argv[2])
    job = json.loads(sys.stdin.read())
    with os.fdopen(nonce_fd, "rb") as pipe:
        nonce = pipe.read(64)
    result = os.fdopen(result_fd, "wb", buffering=0)
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass
    pristine = dict(builtins.__dict__)
    write, check, err = result.write, check_plain, sys.stderr
    confine(job["workdir"], job["limits"])
    install_guard(job["workdir"])

    program_globals = {"__name__": "__candidate__", "__builtins__": builtins}
    try:
        exec(compile(job["program"], "program.py", "exec"), program_globals)
        function = program_globals.get(job["entry_point"])
        if not callable(function):
            raise NameError(f"the program defines no function {job['entry_point']}")

        def guarded(*args, **kwargs):
            value = function(*args, **kwargs)
            check(value)
            return value

        # the tests see the builtins as they were before the program ran, whatever it patched
        # (the tests may call the program's other functions by name, as HumanEval's do)
        test_globals = {**program_globals, "__name__": "__test__", "__builtins__": dict(pristine)}
        exec(compile(job["test"], "test.py", "exec"), test_globals)
        test_globals["check"](guarded)
    except BaseException as exc:   # SystemExit and KeyboardInterrupt too: they are not a pass
        try:
            err.write(f"{type(exc).__name__}: {exc}\n"[:2000])
        except BaseException:
            pass
        write(b"FAIL " + nonce + b"\n")
        os._exit(1)
    write(b"PASS " + nonce + b"\n")
    os._exit(0)


if __name__ == "__main__":
    main()
