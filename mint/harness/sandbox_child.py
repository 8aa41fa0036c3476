"""What both sandbox children share: the tagged plain-data codec, resource limits and the audit guard.

Standard library only: the children run as ``python -I -S`` (inside bubblewrap they see only /usr,
the Python installation and this directory), so they cannot import mint.

Values cross between the program's process and the judge's as JSON lines of tagged plain data:
``["i", hex]`` int, ``["f", float.hex()]`` float (nan, inf and -0.0 survive), ``["s", str]``,
``["b", base64]`` bytes, ``["o", bool]``, ``["n"]`` None, and ``["l"|"t"|"S"|"z", [items]]`` list,
tuple, set, frozenset, ``["d", [[key, value], ...]]`` dict. Anything else is not an answer.
"""
import base64
import os
import resource
import sys

MAX_DEPTH = 100
MAX_LINE = 32 << 20          # one message: a larger answer is a failure, not an out-of-memory judge
NOBODY = 65534
MAX_CREATED_FILES = 64       # fallback only: with RLIMIT_FSIZE this bounds the disk a program can fill
# Imported before the guard and before dropping to `nobody`, who may not be able to read the standard
# library (under /root with pyenv). These cover what programs and tests usually import.
PRELOAD = ("typing", "math", "cmath", "collections", "collections.abc", "itertools", "functools", "operator", "re",
           "string", "heapq", "bisect", "hashlib", "random", "statistics", "fractions", "decimal", "datetime",
           "json", "copy", "time", "array", "numbers", "textwrap", "unicodedata", "enum", "dataclasses", "abc",
           "struct", "io", "calendar", "queue", "pprint", "contextlib", "base64", "binascii", "zlib", "difflib",
           "locale", "inspect", "traceback", "warnings", "weakref", "keyword", "secrets", "uuid", "csv", "ast")


class NotPlain(Exception):
    """A value that is not tagged plain data."""


def encode(value, depth=0):
    """``value`` as tagged plain data; exact types only, so no subclass or proxy passes as an answer."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH}")
    kind = type(value)
    if value is None:
        return ["n"]
    if kind is bool:
        return ["o", value]
    if kind is int:
        return ["i", format(value, "x")]    # hex: no limit on digits, unlike str(int)
    if kind is float:
        return ["f", value.hex()]
    if kind is str:
        return ["s", value]
    if kind is bytes:
        return ["b", base64.b64encode(value).decode("ascii")]
    for tag, container in (("l", list), ("t", tuple), ("S", set), ("z", frozenset)):
        if kind is container:
            return [tag, [encode(item, depth + 1) for item in value]]
    if kind is dict:
        return ["d", [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]]
    raise NotPlain(f"a value of type {kind.__name__}, which is not plain data (int, float, str, bytes, bool, "
                   f"None, list, tuple, dict, set, frozenset)")


def decode(data, depth=0):
    """The value ``data`` (as produced by ``encode``) stands for; NotPlain for anything malformed."""
    if depth > MAX_DEPTH:
        raise NotPlain(f"nested deeper than {MAX_DEPTH}")
    if type(data) is not list or not data or type(data[0]) is not str:
        raise NotPlain("malformed value")
    tag, rest = data[0], data[1:]
    try:
        if tag == "n" and not rest:
            return None
        (payload,) = rest
        if tag == "o" and type(payload) is bool:
            return payload
        if tag == "i" and type(payload) is str:
            return int(payload, 16)
        if tag == "f" and type(payload) is str:
            return float.fromhex(payload)
        if tag == "s" and type(payload) is str:
            return payload
        if tag == "b" and type(payload) is str:
            return base64.b64decode(payload, validate=True)
        if tag in ("l", "t", "S", "z") and type(payload) is list:
            items = [decode(item, depth + 1) for item in payload]
            return {"l": list, "t": tuple, "S": set, "z": frozenset}[tag](items)
        if tag == "d" and type(payload) is list:
            pairs = []
            for pair in payload:
                if type(pair) is not list or len(pair) != 2:
                    raise NotPlain("malformed dict item")
                pairs.append((decode(pair[0], depth + 1), decode(pair[1], depth + 1)))
            return dict(pairs)
    except NotPlain:
        raise
    except (ValueError, TypeError, OverflowError, RecursionError) as exc:   # unhashable key, bad hex, ...
        raise NotPlain(f"malformed value: {type(exc).__name__}") from None
    raise NotPlain(f"malformed value (tag {tag[:10]!r})")


def write_message(fd, message):
    import json
    data = (json.dumps(message, separators=(",", ":")) + "\n").encode("utf-8", "surrogatepass")
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def read_message(stream):
    """One JSON message from a binary stream; None at the end, ValueError when it is not one."""
    import json
    line = stream.readline(MAX_LINE + 1)
    if not line:
        return None
    if len(line) > MAX_LINE or not line.endswith(b"\n"):
        raise ValueError(f"a message longer than {MAX_LINE} bytes")
    message = json.loads(line.decode("utf-8", "surrogatepass"))
    if type(message) is not dict:
        raise ValueError("a message that is not an object")
    return message


def preload(always=True):
    """Import what programs usually import while nothing refuses it: run as root, the child becomes
    `nobody`, who may not be able to read the standard library later, and some modules (typing) take
    frames when imported, which the guard refuses to the program."""
    if not always and os.geteuid() != 0:
        return
    for name in PRELOAD:
        try:
            __import__(name)
        except ImportError:
            pass


def confine(workdir, limits):
    """Resource limits, and (run as root without bubblewrap) an empty network namespace and `nobody`."""
    if os.geteuid() == 0:
        try:   # no network: a fresh, empty network namespace
            import ctypes
            ctypes.CDLL(None, use_errno=True).unshare(0x40000000)   # CLONE_NEWNET
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


def install_guard(workdir, frames=False):
    """An audit hook that refuses processes, sockets, signals, native code, frames (unless ``frames``)
    and writes outside ``workdir``. Its tables live only in this closure: nothing reachable from the
    program can edit them."""
    frame_events = frozenset({"sys._getframe", "sys._current_frames", "object.__getattr__",
                              "sys._getframemodulename"})
    blocked_events = frozenset({
        "socket.__new__", "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.sendto",
        "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty",
        "os.kill", "os.killpg", "signal.pthread_kill", "ctypes.dlopen", "ctypes.dlsym", "ctypes.cdata",
        "ctypes.call_function", "sys.settrace", "sys.setprofile",
        "gc.get_objects", "gc.get_referrers", "gc.get_referents", "os.chdir", "os.chmod", "os.chown", "os.rmdir",
        "os.remove", "os.rename", "os.symlink", "os.link", "os.truncate", "shutil.rmtree", "sys.addaudithook",
        "os.putenv", "os.unsetenv", "code.__new__", "object.__delattr__", "function.__new__", "pty.spawn",
        "os.chflags", "os.lchflags", "os.setxattr", "os.removexattr", "os.startfile", "os.add_dll_directory",
        "cpython.run_command", "cpython.run_file", "cpython.run_module",
        "cpython._PySys_ClearAuditHooks", "sys.monitoring.register_callback",
    }) | (frozenset() if frames else frame_events)   # object.__getattr__: tb_frame, gi_frame, cr_frame
    blocked_modules = frozenset({
        "ctypes", "_ctypes", "mint", "multiprocessing", "_multiprocessing", "subprocess", "_posixsubprocess",
        "socket", "_socket", "gc", "pty", "signal", "_signal", "resource", "fcntl", "mmap", "_xxsubinterpreters",
        "_interpreters", "_xxinterpchannels", "posix", "nt", "_imp", "_testcapi", "_testinternalcapi",
        "faulthandler", "tracemalloc", "_tracemalloc", "sandbox_child", "termios", "xxsubtype",
    })
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND | getattr(os, "O_TMPFILE", 0)
    root = os.path.realpath(workdir) + os.sep
    realpath, isdir, exists, fsdecode = os.path.realpath, os.path.isdir, os.path.exists, os.fsdecode
    readable = (root, realpath(sys.base_prefix) + os.sep, "/usr/", "/dev/null/", "/dev/urandom/", "/dev/zero/",
                "/proc/self/", f"/proc/{os.getpid()}/")
    created = [0]

    def inside(path):
        return (realpath(path) + os.sep).startswith(root)

    def guard(event, args):
        if event in blocked_events:
            raise PermissionError(f"sandbox: {event} is not allowed")
        if event == "import" and str(args[0]).split(".")[0] in blocked_modules:
            raise ImportError(f"sandbox: import of {args[0]} is not allowed")
        if event in ("os.mkdir", "os.utime"):
            if args[-1] not in (None, -1) or isinstance(args[0], int) or not inside(fsdecode(args[0])):
                raise PermissionError(f"sandbox: {event} outside the working directory is not allowed")
        if event == "open":
            path, mode, flags = args[0], args[1], args[2]
            if isinstance(path, int):
                return
            path = fsdecode(path) if isinstance(path, (str, bytes)) else str(path)
            full = realpath(path)
            writing = (isinstance(mode, str) and any(c in mode for c in "wax+")) or \
                (isinstance(flags, int) and flags & write_flags)
            if writing and not inside(path):
                raise PermissionError(f"sandbox: writing {path} is not allowed")
            if writing and not exists(full):
                created[0] += 1
                if created[0] > MAX_CREATED_FILES:
                    raise PermissionError(f"sandbox: more than {MAX_CREATED_FILES} files")
            if isdir(full) and not inside(path):   # a directory descriptor would let dir_fd= write anywhere
                raise PermissionError(f"sandbox: opening the directory {path} is not allowed")
            if not (full + os.sep).startswith(readable):   # the answer key of a suite is a file too
                raise PermissionError(f"sandbox: reading {path} is not allowed")

    # mkfifo and mknod raise no audit event: take them away, and with them _imp's way to build a fresh
    # posix module; the harmless built-in modules are imported first, as nothing can import them later
    for name in sys.builtin_module_names:
        if name not in sys.modules and name.split(".")[0] not in blocked_modules:
            __import__(name)
    for module, names in ((os, ("mkfifo", "mknod")), (sys.modules.get("posix"), ("mkfifo", "mknod")),
                          (sys.modules.get("_imp"), ("create_builtin", "exec_builtin"))):
        for name in names:
            if module is not None and hasattr(module, name):
                delattr(module, name)
    sys.addaudithook(guard)
