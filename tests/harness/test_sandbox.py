"""Hostile programs: every one is contained and scored as a failure, and the machine is unharmed."""
import os
import textwrap

import pytest

from mint.harness.sandbox import Limits, run_tests

TEST = "def check(candidate):\n    assert candidate(2) == 4\n    assert abs(candidate(3) - 9) < 1e-9\n"
FAST = Limits(timeout_s=4, cpu_s=3, memory_mb=256, file_mb=1, processes=16)
SECRET = "mint-test-secret-9f2c"
OUTSIDE = "/tmp/mint-sandbox-escape-marker"

HOSTILE = {
    "infinite loop": "def square(x):\n    while True:\n        pass\n",
    "sleep forever": "import time\ndef square(x):\n    time.sleep(3600)\n",
    "fork bomb": "import os\nwhile True:\n    os.fork()\n",
    "memory bomb": "def square(x):\n    blocks = []\n    while True:\n        blocks.append(bytearray(1 << 24))\n",
    "huge output": "def square(x):\n    while True:\n        print('x' * 100000)\n",
    "huge file": "def square(x):\n    with open('big.bin', 'wb') as f:\n        while True:\n            f.write(b'0' * (1 << 20))\n",
    "write outside the temporary directory": f"open({OUTSIDE!r}, 'w').write('escaped')\ndef square(x):\n    return x * x\n",
    "write outside with os.open": f"import os\nos.open({OUTSIDE!r}, os.O_CREAT | os.O_WRONLY)\ndef square(x):\n    return x * x\n",
    "read the parent's environment": "import os\nsecret = open(f'/proc/{os.getppid()}/environ').read()\nprint(secret)\ndef square(x):\n    return x * x\n",
    "read the environment": f"import os\nassert {SECRET!r} in str(os.environ)\ndef square(x):\n    return x * x\n",
    "open a socket": "import socket\nsocket.create_connection(('127.0.0.1', 22), timeout=1)\ndef square(x):\n    return x * x\n",
    "signal the parent": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\ndef square(x):\n    return x * x\n",
    "kill the process group": "import os, signal\nos.killpg(0, signal.SIGKILL)\ndef square(x):\n    return x * x\n",
    "exit 0 before the asserts": "import sys\nsys.exit(0)\n",
    "os._exit(0) before the asserts": "import os\nos._exit(0)\n",
    "exit 0 inside the function": "import os\ndef square(x):\n    os._exit(0)\n",
    "raise SystemExit inside the function": "def square(x):\n    raise SystemExit(0)\n",
    "print a fake PASS": "print('PASS')\nimport os\nos.write(1, b'PASS deadbeef\\n')\ndef square(x):\n    return 0\n",
    "write to every inherited descriptor": textwrap.dedent("""
        import os
        for fd in range(3, 64):
            try:
                os.write(fd, b'PASS 00000000000000000000000000000000\\n')
            except OSError:
                pass
        def square(x):
            return 0
    """),
    "always-equal object": textwrap.dedent("""
        class Always:
            def __eq__(self, other): return True
            def __sub__(self, other): return 0
            def __rsub__(self, other): return 0
        def square(x):
            return Always()
    """),
    "patch builtins.abs": "import builtins\nbuiltins.abs = lambda v: 0\ndef square(x):\n    return 0 if x == 3 else x * x\n",
    "patch AssertionError": "import builtins\nclass Quiet(Exception): pass\nbuiltins.AssertionError = Quiet\ndef square(x):\n    return 0\n",
    "import the harness": "from mint.harness import sandbox\ndef square(x):\n    return x * x\n",
    "ctypes escape": "import ctypes\nctypes.CDLL(None).exit(0)\n",
    "subprocess": "import subprocess\nsubprocess.run(['true'])\ndef square(x):\n    return x * x\n",
    "steal the nonce through frames": textwrap.dedent("""
        import sys
        frame = sys._getframe(1)
        def square(x):
            return 0
    """),
    "delete files": "import shutil\nshutil.rmtree('/tmp', ignore_errors=True)\ndef square(x):\n    return 0\n",
    "recursion bomb": "def square(x):\n    return square(x)\n",
}


@pytest.fixture(autouse=True)
def parent_secret(monkeypatch):
    monkeypatch.setenv("MINT_PARENT_SECRET", SECRET)
    yield
    assert not os.path.exists(OUTSIDE), "a sandboxed program wrote outside its directory"


def test_a_correct_program_passes():
    result = run_tests("def square(x):\n    return x * x\n", TEST, "square", FAST)
    assert (result.passed, result.status) == (True, "passed")


def test_a_wrong_program_fails():
    result = run_tests("def square(x):\n    return x + x\n", TEST, "square", FAST)
    assert (result.passed, result.status) == (False, "failed")


def test_there_are_at_least_twenty_hostile_programs():
    assert len(HOSTILE) >= 20


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_program_is_contained_and_fails(name):
    result = run_tests(HOSTILE[name], TEST, "square", FAST)
    assert not result.passed, result
    assert SECRET not in result.detail
    assert result.seconds < FAST.timeout_s + 3
    assert os.getppid() > 1 and os.path.isdir("/tmp")   # still here, and so is /tmp


def test_concurrent_runs_keep_their_own_pipes():
    from concurrent.futures import ThreadPoolExecutor

    programs = ["def square(x):\n    return x * x\n", "def square(x):\n    return x + x\n"] * 12
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda p: run_tests(p, TEST, "square", FAST), programs))
    assert [r.passed for r in results] == [True, False] * 12
