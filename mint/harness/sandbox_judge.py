"""The trusted side of the coding sandbox: runs the tests and decides the verdict.

Run as ``python -I -S sandbox_judge.py REQUEST_FD RESPONSE_FD`` with the job (test, prompt, entry
point, working directory, limits) on stdin; writes one JSON verdict on stdout. It never runs the
program under test: every call the test makes to the candidate (or to another function the program
defines) is sent to the program's process as tagged plain data, and what comes back is decoded into
built-in values only, so no object of the program's making ever exists here. The test's globals are
the prompt's definitions (trusted: ``poly`` in HumanEval/32 is the prompt's, whatever the program says)
and those proxies; the builtins are this interpreter's own.

The judge is confined as well (the tests of a training prompt come from logs), but not for the verdict's
sake: the verdict's integrity rests on this process never touching the program's objects.
"""
import ast
import builtins
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import sandbox_child as child  # noqa: E402


class ChannelBroken(BaseException):
    """The program's process died, said something malformed, or answered with something that is not
    plain data. A BaseException, so a test's ``except Exception`` cannot swallow it (and the verdict
    is a failure even if a bare ``except`` does)."""


class CandidateRaised(Exception):
    """The candidate raised an exception that is not one of Python's built-in exceptions."""


# raised by the candidate, these would end a caller's iteration early (all(map(candidate, xs)) is True)
NOT_MAPPED = (StopIteration, StopAsyncIteration)


class Channel:
    def __init__(self, request_fd, response_fd):
        self.request_fd = request_fd
        self.responses = os.fdopen(response_fd, "rb")
        self.broken = None
        self.calls = 0

    def receive(self):
        try:
            message = child.read_message(self.responses)
        except Exception as exc:   # malformed, too deep, too large to decode (MemoryError): never the test's to catch
            self.fail(f"the program's process sent a malformed message ({type(exc).__name__})")
        if message is None:
            self.fail("the program's process ended without answering")
        return message

    def fail(self, reason):
        if self.broken is None:
            self.broken = reason
        raise ChannelBroken(self.broken)

    def call(self, name, args, kwargs):
        if self.broken is not None:
            raise ChannelBroken(self.broken)
        try:
            request = {"call": name, "args": child.encode(tuple(args)), "kwargs": child.encode(dict(kwargs))}
        except (child.NotPlain, RecursionError) as exc:
            self.fail(f"the test passes {name} an argument that cannot be sent: {exc}")
        self.calls += 1
        try:
            child.write_message(self.request_fd, request)
        except OSError:
            self.fail("the program's process ended without answering")
        response = self.receive()
        if "return" in response:
            try:
                return child.decode(response["return"])
            except Exception as exc:   # NotPlain, RecursionError, MemoryError
                self.fail(f"{name} returned malformed data: {type(exc).__name__} {exc}")
        if "raise" in response:
            raise candidate_exception(response.get("raise"), response.get("message"))
        self.fail(str(response.get("error", "the program's process said something unexpected"))[:500])

    def proxy(self, name):
        def candidate(*args, **kwargs):
            return self.call(name, args, kwargs)
        candidate.__name__ = candidate.__qualname__ = name
        return candidate


def candidate_exception(names, message):
    """A built-in exception of the first built-in class the candidate's exception derives from."""
    names = [n for n in names if type(n) is str][:50] if type(names) is list else []
    message = str(message)[:500] if type(message) is str else ""
    for name in names:
        klass = getattr(builtins, name, None)
        if isinstance(klass, type) and issubclass(klass, Exception) and not issubclass(klass, NOT_MAPPED):
            try:
                return klass(message)
            except Exception:   # a class whose constructor wants more than a message
                break
    return CandidateRaised(f"{names[0] if names else 'an exception'}: {message}")


def called_names(test):
    """Names the test calls without defining them: the entry point and the program's other functions."""
    tree = ast.parse(test)
    called = {node.func.id for node in ast.walk(tree) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    defined = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
    return called - defined - set(dir(builtins))


def prompt_definitions(prompt):
    """What the prompt defines (its imports and helper functions), run here: the prompt is trusted."""
    namespace = {"__name__": "__prompt__", "__builtins__": builtins}
    try:
        exec(compile(prompt, "prompt.py", "exec"), namespace)
    except BaseException:   # a prompt that is only a fragment of a program defines nothing usable
        return {}
    return {k: v for k, v in namespace.items() if not k.startswith("__")}


def failing_line(exc):
    tb = exc.__traceback__
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "test.py":
            line = tb.tb_lineno
        tb = tb.tb_next
    return f" (test.py line {line})" if line else ""


def judge(job, channel):
    try:
        ready = channel.receive()
    except ChannelBroken:
        return "crashed", channel.broken
    if ready.get("ready") is not True:
        return "crashed", str(ready.get("error", "the program's process did not start"))[:500]
    test_globals = {**prompt_definitions(job["prompt"]), "__name__": "__test__", "__builtins__": builtins}
    entry = job["entry_point"]
    for name in called_names(job["test"]) | {entry}:
        if name == entry or name not in test_globals:
            test_globals[name] = channel.proxy(name)
    try:
        exec(compile(job["test"], "test.py", "exec"), test_globals)
        check = test_globals.get("check")
        if not callable(check):
            return "crashed", "the test defines no check(candidate)"
        check(channel.proxy(entry))
    except ChannelBroken:
        pass
    except BaseException as exc:
        if channel.broken is None:
            return "failed", (f"{type(exc).__name__}{failing_line(exc)}: {exc}")[:500]
    if channel.broken is not None:
        return "crashed", channel.broken
    return "passed", ""


def main():
    request_fd, response_fd = int(sys.argv[1]), int(sys.argv[2])
    verdict_fd = os.dup(1)   # the verdict's own descriptor: what the test prints goes nowhere
    job = json.loads(sys.stdin.buffer.read())
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)
    os.close(devnull)
    child.preload(always=False)   # the judge's guard allows frames: it may import lazily
    try:   # not dumpable: a process of the same user cannot ptrace this one or read its memory
        import ctypes
        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)   # PR_SET_DUMPABLE
    except Exception:
        pass
    child.confine(job["workdir"], job["limits"])
    if job["guard"]:
        child.install_guard(job["workdir"], frames=True)   # frames: the tests' own tracebacks
    channel = Channel(request_fd, response_fd)
    try:
        status, detail = judge(job, channel)
    except BaseException as exc:   # the judge's own failure is never a pass
        status, detail = "crashed", f"the judge failed: {type(exc).__name__}: {exc}"[:500]
    child.write_message(verdict_fd, {"status": status, "detail": detail, "calls": channel.calls})
    os._exit(0)


if __name__ == "__main__":
    main()
