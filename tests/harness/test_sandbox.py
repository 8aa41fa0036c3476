"""Hostile programs: every one is contained and scored as a failure, and the machine is unharmed.

Each hostile program answers wrongly unless its attack worked (it returns the right square only when the
forbidden thing succeeded), so a pass is an escape or a faked verdict. Every program runs on both
isolation paths: bubblewrap (when the machine has it; CI installs it) and the rlimits + audit fallback.
"""
import os
import textwrap
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mint.errors import BadInput
from mint.harness import sandbox_child
from mint.harness.sandbox import ISOLATION_ENV, Limits, _bwrap_problem, describe_isolation, run_tests

TEST = "def check(candidate):\n    assert candidate(2) == 4\n    assert abs(candidate(3) - 9) < 1e-9\n"
FAST = Limits(timeout_s=4, cpu_s=3, memory_mb=256, file_mb=1, processes=16)
SECRET = "mint-test-secret-9f2c"
RUN = uuid.uuid4().hex[:8]
OUTSIDE = f"/tmp/mint-sandbox-escape-{RUN}"            # nothing may create this
VICTIM = f"/tmp/mint-sandbox-victim-{RUN}"             # world-writable: nothing may change it
ANSWER_KEY = f"/tmp/mint-sandbox-answer-key-{RUN}.py"  # world-readable: nothing may read it
ISOLATIONS = ["bwrap", "rlimits"]
SUITE = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", "examples", "heldout", "coding.jsonl"))


def succeeded_then_square(attack: str) -> str:
    """A program whose square is right only if ``attack`` (a statement block) ran without raising."""
    return "def square(x):\n    try:\n" + textwrap.indent(textwrap.dedent(attack).strip(), " " * 8) + \
        "\n    except BaseException:\n        return 0\n    return x * x\n"


HOSTILE = {
    # the attacks that used to fake a verdict
    "walk a traceback to the runner's frames": textwrap.dedent("""
        import os
        def square(x):
            try:
                raise RuntimeError
            except RuntimeError as exc:
                frame = exc.__traceback__.tb_frame
            while frame is not None:   # the old runner kept write and nonce in main()'s locals
                scope = frame.f_locals
                if "nonce" in scope and "write" in scope:
                    scope["write"](b"PASS " + scope["nonce"] + b"\\n")
                    os._exit(0)
                for name in ("respond", "write_message"):
                    if callable(scope.get(name)):
                        scope[name]({"status": "passed", "detail": "", "calls": 1})
                frame = frame.f_back
            return 0
    """),
    "clear the guard's tables through __main__, then take frames": textwrap.dedent("""
        import sys
        for module in (sys.modules["__main__"], sys.modules.get("sandbox_child")):
            for value in list(getattr(module, "__dict__", {}).values()):
                if isinstance(value, set):
                    value.clear()
        frame = sys._getframe(1)
        def square(x):
            return x * x
    """),
    "replace builtins.type so an always-equal object looks plain": textwrap.dedent("""
        import builtins
        real_type = type
        class Always(int):
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __sub__(self, other): return 0
            def __rsub__(self, other): return 0
            __hash__ = int.__hash__
        builtins.type = lambda value, *rest: int if real_type(value) is Always else real_type(value, *rest)
        def square(x):
            return Always(0)
    """),
    "an int subclass that equals everything": textwrap.dedent("""
        class Always(int):
            def __eq__(self, other): return True
            def __sub__(self, other): return 0
            __hash__ = int.__hash__
        def square(x):
            return Always(0)
    """),
    "a program-level abs leaks into the test": "def abs(x):\n    return 0\ndef square(x):\n    return 0 if x == 3 else x * x\n",
    "patch builtins.abs": "import builtins\nbuiltins.abs = lambda v: 0\ndef square(x):\n    return 0 if x == 3 else x * x\n",
    "patch AssertionError": "import builtins\nclass Quiet(Exception): pass\nbuiltins.AssertionError = Quiet\ndef square(x):\n    return 0\n",
    "raise StopIteration from the candidate": "def square(x):\n    raise StopIteration\n",
    "truncate a file outside with O_RDONLY|O_TRUNC": succeeded_then_square(
        f"import os\nos.close(os.open({VICTIM!r}, os.O_RDONLY | os.O_TRUNC))"),
    "mkdir outside": succeeded_then_square(f"import os\nos.mkdir({OUTSIDE!r})"),
    "_posixsubprocess.fork_exec": succeeded_then_square(f"""
        import sys
        fork_exec = (sys.modules.get("_posixsubprocess") or __import__("_posixsubprocess")).fork_exec
        fork_exec([b"/bin/sh"], [b"/bin/sh", b"-c", b"touch {OUTSIDE}"], True, (), None, None,
                  -1, -1, -1, -1, -1, -1, -1, -1, False, False, None, None, None, -1, None, False)
    """),
    "load _posixsubprocess through _imp.create_dynamic": succeeded_then_square(f"""
        import os, sys
        folder = next(p for p in sys.path if p.endswith("lib-dynload"))
        spec = type("Spec", (), {{"name": "_posixsubprocess", "origin": os.path.join(folder, next(
            f for f in os.listdir(folder) if f.startswith("_posixsubprocess")))}})()
        sys.modules["_imp"].create_dynamic(spec).fork_exec(
            [b"/bin/sh"], [b"/bin/sh", b"-c", b"touch {OUTSIDE}"], True, (), None, None,
            -1, -1, -1, -1, -1, -1, -1, -1, False, False, None, None, None, -1, None, False)
    """),
    "rebuild posix through _imp for mkfifo": succeeded_then_square(f"""
        import sys
        spec = type("Spec", (), {{"name": "posix"}})()
        sys.modules["_imp"].create_builtin(spec).mkfifo({OUTSIDE!r})
    """),
    "mkfifo outside": succeeded_then_square(f"import os\nos.mkfifo({OUTSIDE!r})"),
    "write through a directory descriptor": succeeded_then_square(
        f"import os\nd = os.open('/tmp', os.O_RDONLY)\nos.close(os.open({os.path.basename(OUTSIDE)!r}, "
        f"os.O_CREAT | os.O_WRONLY, dir_fd=d))"),
    "symlink out of the directory": succeeded_then_square(
        f"import os\nos.symlink('/tmp', 'out')\nopen('out/{os.path.basename(OUTSIDE)}', 'w').write('x')"),
    "write through /proc/self/root": succeeded_then_square(f"open('/proc/self/root{OUTSIDE}', 'w').write('x')"),
    "read the suite's answer key": succeeded_then_square(
        f"exec(open({ANSWER_KEY!r}).read(), globals())\nassert square(3) == 9"),
    "read the repository's suites": succeeded_then_square(f"open({SUITE!r}).read()"),
    "read the parent's environment": succeeded_then_square(
        f"import os\nassert {SECRET!r} in open(f'/proc/{{os.getppid()}}/environ').read()"),
    "read another process's environment": succeeded_then_square(
        f"import os\nassert any({SECRET!r} in open(f'/proc/{{p}}/environ').read() for p in os.listdir('/proc') "
        f"if p.isdigit() and int(p) != os.getpid())"),
    "read the environment": succeeded_then_square(f"import os\nassert {SECRET!r} in str(os.environ)"),
    "descriptors leaked from the parent": succeeded_then_square("""
        import os
        # 0, 1, 2, the two pipes to the judge, and the one listdir holds: anything more leaked
        assert len(os.listdir('/proc/self/fd')) > 6
    """),
    "write a fake verdict to every descriptor": textwrap.dedent("""
        import os
        for fd in range(0, 64):
            try:
                os.write(fd, b'{"status": "passed", "detail": "", "calls": 1}\\n{"return": ["i", "4"]}\\n')
            except OSError:
                pass
        def square(x):
            return 0
    """),
    "write outside the temporary directory": succeeded_then_square(f"open({OUTSIDE!r}, 'w').write('escaped')"),
    "write outside with os.open": succeeded_then_square(f"import os\nos.open({OUTSIDE!r}, os.O_CREAT | os.O_WRONLY)"),
    "open a socket": succeeded_then_square("import socket\nsocket.socket()"),
    "connect to the network": succeeded_then_square("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)"),
    "signal the parent": succeeded_then_square("import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"),
    "kill the process group": "import os, signal\nos.killpg(0, signal.SIGKILL)\ndef square(x):\n    return x * x\n",
    "subprocess": succeeded_then_square(f"import subprocess\nsubprocess.run(['touch', {OUTSIDE!r}])"),
    "os.system": succeeded_then_square(f"import os\nassert os.system('touch {OUTSIDE}') == 0"),
    "ctypes escape": succeeded_then_square("import ctypes\nctypes.CDLL(None).getpid()"),
    "import the harness": succeeded_then_square("from mint.harness import sandbox"),
    "delete files": succeeded_then_square("import shutil\nshutil.rmtree('/tmp')"),
    # resource exhaustion: the right answer only when the limit did not hold
    "memory bomb": succeeded_then_square("blocks = [bytearray(1 << 24) for _ in range(64)]"),
    "fork bomb": succeeded_then_square("import os\nfor _ in range(200):\n    os.fork()"),
    "too many open files": succeeded_then_square("files = [open('f', 'w') for _ in range(500)]"),
    "fill the disk with one file": succeeded_then_square(
        "with open('big.bin', 'wb') as f:\n    for _ in range(64):\n        f.write(b'0' * (1 << 20))"),
    "fill the disk with many files": succeeded_then_square(
        "for i in range(300):\n    open(f'f{i}', 'wb').write(b'0' * 900_000)"),
    "fill /tmp": succeeded_then_square(
        "for i in range(300):\n    open(f'/tmp/f{i}', 'wb').write(b'0' * 900_000)"),
    "infinite loop": "def square(x):\n    while True:\n        pass\n",
    "sleep forever": "import time\ndef square(x):\n    time.sleep(3600)\n",
    "a thread that outlives the call": textwrap.dedent("""
        import threading
        def spin():
            while True:
                pass
        def square(x):
            threading.Thread(target=spin).start()
            return 0
    """),
    "huge output": "def square(x):\n    while True:\n        print('x' * 100000)\n",
    "huge answer": "def square(x):\n    return 'x' * (40 << 20)\n",
    "deeply nested answer": "def square(x):\n    value = []\n    for _ in range(100000):\n        value = [value]\n    return value\n",
    "an answer that refers to itself": "def square(x):\n    value = []\n    value.append(value)\n    return value\n",
    "recursion bomb": "def square(x):\n    return square(x)\n",
    # verdicts the program tries to claim
    "exit 0 before the asserts": "import sys\nsys.exit(0)\n",
    "os._exit(0) before the asserts": "import os\nos._exit(0)\n",
    "exit 0 inside the function": "import os\ndef square(x):\n    os._exit(0)\n",
    "raise SystemExit inside the function": "def square(x):\n    raise SystemExit(0)\n",
    "print a fake PASS": "print('PASS')\nimport os\nos.write(1, b'PASS deadbeef\\n')\ndef square(x):\n    return 0\n",
    "always-equal object": textwrap.dedent("""
        class Always:
            def __eq__(self, other): return True
            def __sub__(self, other): return 0
            def __rsub__(self, other): return 0
        def square(x):
            return Always()
    """),
    "steal the nonce through frames": "import sys\nframe = sys._getframe(1)\ndef square(x):\n    return 0\n",
}


def listening_socket_attack(port: int) -> str:
    return succeeded_then_square(f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2).close()")


@pytest.fixture
def listening_port():
    """A socket this test process listens on: only a program with the host's network can reach it."""
    import socket

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield server.getsockname()[1]


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_the_hosts_network_is_out_of_reach(isolation, listening_port):
    result = run_tests(listening_socket_attack(listening_port), TEST, "square", FAST, isolation=available(isolation))
    assert not result.passed, result


def test_the_hosts_network_is_out_of_reach_of_bubblewrap_alone(listening_port):
    result = run_tests(listening_socket_attack(listening_port), TEST, "square", FAST, isolation=available("bwrap"),
                       audit_hook=False)
    assert not result.passed, result


def available(isolation):
    if isolation == "bwrap" and _bwrap_problem():
        pytest.skip(f"bubblewrap is not usable here: {_bwrap_problem()}")
    return isolation


@pytest.fixture(autouse=True)
def machine(monkeypatch):
    """The parent's secret, a victim file anyone may write and an answer key anyone may read; afterwards
    nothing was created outside, and the victim is intact."""
    monkeypatch.setenv("MINT_PARENT_SECRET", SECRET)
    for path, text in ((VICTIM, "intact"), (ANSWER_KEY, "def square(x):\n    return x * x\n")):
        with open(path, "w") as f:
            f.write(text)
        os.chmod(path, 0o666)
    yield
    try:
        assert not os.path.lexists(OUTSIDE), "a sandboxed program wrote outside its directory"
        assert open(VICTIM).read() == "intact", "a sandboxed program changed a file outside its directory"
    finally:
        for path in (OUTSIDE, VICTIM, ANSWER_KEY):
            if os.path.isdir(path) and not os.path.islink(path):
                os.rmdir(path)
            elif os.path.lexists(path):
                os.unlink(path)


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_correct_program_passes(isolation):
    result = run_tests("def square(x):\n    return x * x\n", TEST, "square", FAST, isolation=available(isolation))
    assert (result.passed, result.status) == (True, "passed")


@pytest.mark.parametrize("isolation", ISOLATIONS)
def test_a_wrong_program_fails(isolation):
    result = run_tests("def square(x):\n    return x + x\n", TEST, "square", FAST, isolation=available(isolation))
    assert (result.passed, result.status) == (False, "failed")


def test_every_attack_would_pass_if_it_worked():
    """The hostile programs that report success by answering correctly do answer correctly when the
    forbidden thing is replaced by something allowed: their failures are the sandbox's doing."""
    harmless = succeeded_then_square("open('inside', 'w').write('fine')")
    assert run_tests(harmless, TEST, "square", FAST).passed


def test_there_are_at_least_fifty_hostile_programs():
    assert len(HOSTILE) >= 50


@pytest.mark.parametrize("isolation", ISOLATIONS)
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained_and_fails(name, isolation):
    result = run_tests(HOSTILE[name], TEST, "square", FAST, isolation=available(isolation))
    assert not result.passed, result
    assert SECRET not in result.detail
    assert result.seconds < FAST.timeout_s + 5
    assert os.getppid() > 1 and os.path.isdir("/tmp")   # still here, and so is /tmp


@pytest.mark.parametrize("name", ["read the parent's environment", "read another process's environment",
                                  "read the suite's answer key", "read the repository's suites",
                                  "connect to the network",
                                  "descriptors leaked from the parent", "fill /tmp", "memory bomb"])
def test_bubblewrap_alone_refuses(name):
    """Without the audit hook, bubblewrap by itself still refuses these (a pass would mean it did not)."""
    result = run_tests(HOSTILE[name], TEST, "square", FAST, isolation=available("bwrap"), audit_hook=False)
    assert not result.passed, result


@pytest.mark.parametrize("name", ["write outside the temporary directory", "write through /proc/self/root",
                                  "write outside with os.open", "mkdir outside", "mkfifo outside",
                                  "truncate a file outside with O_RDONLY|O_TRUNC", "subprocess", "os.system",
                                  "signal the parent", "kill the process group", "delete files"])
def test_bubblewrap_alone_keeps_the_machine_unharmed(name):
    """Without the audit hook these succeed inside the sandbox (its own /tmp, its own processes), so the
    verdict may pass; the machine fixture checks that nothing outside changed."""
    run_tests(HOSTILE[name], TEST, "square", FAST, isolation=available("bwrap"), audit_hook=False)
    assert os.getppid() > 1 and os.path.isdir("/tmp")


# (clearing the guard's tables is left out: it answers right exactly when the guard is gone)
VERDICT_ATTACKS = ["walk a traceback to the runner's frames",
                   "replace builtins.type so an always-equal object looks plain", "an int subclass that equals everything",
                   "a program-level abs leaks into the test", "patch builtins.abs", "patch AssertionError",
                   "raise StopIteration from the candidate", "write a fake verdict to every descriptor",
                   "always-equal object", "exit 0 before the asserts", "os._exit(0) before the asserts",
                   "exit 0 inside the function", "raise SystemExit inside the function", "print a fake PASS",
                   "steal the nonce through frames"]


@pytest.mark.parametrize("name", VERDICT_ATTACKS)
def test_no_verdict_can_be_faked_even_without_the_audit_hook(name):
    """The verdict's integrity rests on the judge's process, not on isolation: with frames, gc and every
    builtin at its disposal the program still only answers calls."""
    result = run_tests(HOSTILE[name], TEST, "square", FAST, isolation=available("bwrap"), audit_hook=False)
    assert not result.passed, result


def test_the_prompts_helpers_are_the_tests_not_the_programs():
    """HumanEval/32 checks find_zero with the prompt's poly: a program redefining poly cannot change it."""
    prompt = "def poly(xs, x):\n    return sum(c * x ** i for i, c in enumerate(xs))\ndef find_zero(xs):\n    pass\n"
    test = "def check(candidate):\n    assert abs(poly([1, 2], candidate([1, 2]))) < 1e-6\n"
    cheat = "def poly(xs, x):\n    return 0\ndef find_zero(xs):\n    return 42.0\n"
    honest = "def find_zero(xs):\n    return -xs[0] / xs[1]\n"
    assert not run_tests(cheat, test, "find_zero", FAST, prompt=prompt).passed
    assert run_tests(honest, test, "find_zero", FAST, prompt=prompt).passed


def test_a_function_the_test_calls_by_name_is_the_programs():
    test = "def check(candidate):\n    assert candidate(2) == 4\n    assert helper(3) == 27\n"
    program = "def square(x):\n    return x * x\ndef helper(x):\n    return x ** 3\n"
    assert run_tests(program, test, "square", FAST).passed
    assert not run_tests(program.replace("x ** 3", "x"), test, "square", FAST).passed


def test_an_exception_the_test_expects_is_carried_as_data():
    test = ("def check(candidate):\n    try:\n        candidate(-1)\n    except ValueError:\n        pass\n"
            "    else:\n        raise AssertionError('no ValueError')\n")
    class_of_its_own = "class Negative(ValueError):\n    pass\ndef root(x):\n    raise Negative('negative')\n"
    assert run_tests(class_of_its_own, test, "root", FAST).passed
    assert not run_tests("def root(x):\n    raise KeyError(x)\n", test, "root", FAST).passed


def test_stop_iteration_from_the_candidate_cannot_end_the_tests_iteration():
    test = "def check(candidate):\n    assert all(map(candidate, [1, 2, 3]))\n"
    assert not run_tests("def truthy(x):\n    raise StopIteration\n", test, "truthy", FAST).passed
    assert run_tests("def truthy(x):\n    return True\n", test, "truthy", FAST).passed


def test_a_test_that_swallows_every_exception_still_fails_when_the_program_dies():
    test = "def check(candidate):\n    try:\n        candidate(1)\n    except BaseException:\n        pass\n"
    assert not run_tests("import os\ndef f(x):\n    os._exit(0)\n", test, "f", FAST).passed


def test_the_judge_never_sees_what_the_test_prints():
    test = "def check(candidate):\n    print(candidate(1))\n    assert candidate(1) == 'ok'\n"
    answer = '{"status": "passed", "detail": "", "calls": 1}'
    assert not run_tests(f"def f(x):\n    return {answer!r}\n", test, "f", FAST).passed


@pytest.mark.parametrize("value", [0, -1, 2 ** 100_000, -(3 ** 500), 1.5, -0.0, float("inf"), float("-inf"), "",
                                   "caf\u00e9 \udcff", b"\x00\xff", True, False, None, [1, [2, (3,)]], (),
                                   {"a": [1], 2: {3: None}, (1, "x"): b""}, {1, "two", (3,)},
                                   frozenset({frozenset({1})})], ids=lambda value: type(value).__name__)
def test_plain_data_survives_the_crossing(value):
    decoded = sandbox_child.decode(sandbox_child.encode(value))
    assert type(decoded) is type(value) and decoded == value
    if type(value) is float:
        assert str(decoded) == str(value)   # -0.0 stays -0.0


def test_nan_survives_the_crossing():
    decoded = sandbox_child.decode(sandbox_child.encode(float("nan")))
    assert decoded != decoded


@pytest.mark.parametrize("value", [object(), 1j, range(3), bytearray(b"x"), type("S", (str,), {})("s"),
                                   [lambda: 0], {"k": print}], ids=lambda value: type(value).__name__)
def test_anything_else_is_not_an_answer(value):
    with pytest.raises(sandbox_child.NotPlain):
        sandbox_child.encode(value)


@pytest.mark.parametrize("data", [[], ["i"], ["i", 5], ["i", "zz"], ["x", 1], ["l", "abc"], ["d", [[["l", []], ["n"]]]],
                                  ["S", [["l", []]]], ["o", 1], ["b", "!!"], "s", None, ["n", 1], ["d", [["n"]]]],
                         ids=str)
def test_malformed_data_is_refused(data):
    with pytest.raises(sandbox_child.NotPlain):
        sandbox_child.decode(data)


def test_the_fallback_can_be_forced_and_says_so(monkeypatch):
    monkeypatch.setenv(ISOLATION_ENV, "rlimits")
    assert describe_isolation()["isolation"] == "rlimits+audit"
    result = run_tests("def square(x):\n    return x * x\n", TEST, "square", FAST)
    assert result.passed and result.isolation == "rlimits+audit"


def test_bubblewrap_is_used_when_it_works():
    available("bwrap")
    assert describe_isolation()["isolation"] == "bwrap"
    assert run_tests("def square(x):\n    return x * x\n", TEST, "square", FAST).isolation == "bwrap"


def test_an_unknown_isolation_is_bad_input(monkeypatch):
    monkeypatch.setenv(ISOLATION_ENV, "chroot")
    with pytest.raises(BadInput, match=ISOLATION_ENV):
        describe_isolation()


def test_concurrent_runs_keep_their_own_pipes():
    from concurrent.futures import ThreadPoolExecutor

    programs = ["def square(x):\n    return x * x\n", "def square(x):\n    return x + x\n"] * 8
    with ThreadPoolExecutor(max_workers=4) as pool:
        results = list(pool.map(lambda p: run_tests(p, TEST, "square", FAST), programs))
    assert [r.passed for r in results] == [True, False] * 8


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                           max_leaves=20)


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.one_of(json_values, st.lists(json_values, max_size=3).map(lambda rest: ["d", rest]),
                 st.tuples(st.sampled_from(list("noifsblStzdx")), json_values).map(list)))
def test_decoding_any_json_gives_plain_data_or_refuses(data):
    """What the program's process sends is arbitrary JSON: the judge gets plain data or NotPlain, nothing else."""
    try:
        value = sandbox_child.decode(data)
    except sandbox_child.NotPlain:
        return
    sandbox_child.encode(value)   # plain data all the way down, or this raises NotPlain


ODD = {
    "program with a syntax error": ("def square(x) return x\n", TEST, "square", ""),
    "program with a NUL byte": ("def square(x):\n    return x * x\x00\n", TEST, "square", ""),
    "program with a lone surrogate": ("def square(x):\n    return '\udcff'\n", TEST, "square", ""),
    "empty program": ("", TEST, "square", ""),
    "entry point that is no identifier": ("def square(x):\n    return x * x\n", TEST, "not a name!", ""),
    "entry point that is a builtin": ("x = 1\n", TEST, "print", ""),
    "test with a syntax error": ("def square(x):\n    return x * x\n", "def check(candidate)\n", "square", ""),
    "test without check": ("def square(x):\n    return x * x\n", "assert True\n", "square", ""),
    "test whose check is not callable": ("def square(x):\n    return x * x\n", "check = 3\n", "square", ""),
    "test that passes an unsendable argument": ("def square(x):\n    return 0\n",
                                                "def check(candidate):\n    candidate(object())\n", "square", ""),
    "prompt that does not parse": ("def square(x):\n    return x * x\n", TEST, "square", "def square(x:\n"),
    "prompt that raises": ("def square(x):\n    return x * x\n", TEST, "square", "raise SystemExit(3)\n"),
}


@pytest.mark.parametrize("name", sorted(ODD))
def test_odd_input_is_a_failure_with_a_reason_never_an_exception(name):
    program, test, entry, prompt = ODD[name]
    result = run_tests(program, test, entry, FAST, prompt=prompt)
    if name.startswith("prompt"):   # the prompt is only context: a correct program still passes
        assert result.passed, result
    else:
        assert not result.passed and result.status in ("failed", "crashed") and result.detail, result


def test_a_program_larger_than_a_pipe_passes():
    program = "# " + "x" * (1 << 20) + "\ndef square(x):\n    return x * x\n"
    assert run_tests(program, TEST, "square", FAST).passed
