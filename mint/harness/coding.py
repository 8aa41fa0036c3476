"""Coding: does the generated program pass the record's tests (HumanEval records)?"""
from __future__ import annotations

import ast
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from mint.harness.base import Harness, HarnessSettings, RecordProblem, as_record, pass_at_k
from mint.harness.sandbox import Limits, run_tests
from mint.harness.specialist import Specialist, completion_text, last_user_text

_BLOCK = re.compile(r"```(?:python|py|python3)?[ \t]*\n(.*?)```", re.S)
_IMPORT = re.compile(r"^(?:from\s+\S+\s+import\s+.+|import\s+.+)$", re.M)


def extract_program(output: str, record: dict) -> str:
    """The program to test: the fenced block that defines the entry point (else the longest block, else
    the raw text), as a whole function (with the prompt's imports and helpers) or as its body."""
    blocks = _BLOCK.findall(output)
    entry = record["entry_point"]
    defines_entry = re.compile(rf"^\s*def\s+{re.escape(entry)}\s*\(", re.M)
    answers = [block for block in blocks if defines_entry.search(block)]
    code = answers[0] if answers else max(blocks, key=len) if blocks else output
    if defines_entry.search(code):
        context = prompt_context(record["prompt"], code, entry)
        return (context + "\n\n" if context else "") + code
    return record["prompt"] + code      # a completion of the prompt's function body


def prompt_context(prompt: str, code: str, entry: str) -> str:
    """What a whole-function answer may rely on from the prompt: its imports and the helpers and
    constants it defines (HumanEval/10's is_palindrome, /32's poly), except what the answer redefines."""
    try:
        tree = ast.parse(prompt)
    except (SyntaxError, ValueError):
        return "\n".join(_IMPORT.findall(prompt))
    lines = prompt.splitlines()
    kept = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names = [node.name]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)]
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names = []
        else:
            continue
        if entry in names or any(re.search(rf"^\s*(?:def|class)\s+{re.escape(n)}\b|^{re.escape(n)}\s*=", code, re.M)
                                 for n in names):
            continue
        first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        kept.append("\n".join(lines[first - 1:node.end_lineno]))
    return "\n".join(kept)


@dataclass
class CodingHarness(Harness):
    name: str = "coding"
    metrics: tuple[str, ...] = ("pass_at_1", "pass_at_k")
    runs_untrusted_code = True      # each answer's code runs against the record's tests (mint.harness.sandbox)

    def check_record(self, record: dict) -> None:
        super().check_record(record)
        for key in ("prompt", "entry_point", "test"):
            if not isinstance(record.get(key), str) or not record[key].strip():
                raise RecordProblem(key, "missing (HumanEval records have prompt, entry_point and test)")

    def request(self, record: dict) -> str:
        return f"Complete this Python function:\n\n```python\n{record['prompt']}```"

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        return self.score_many([record], [outputs])[0]

    def score_many(self, records: list[dict], outputs: list[list[str]]) -> list[dict[str, float | None]]:
        limits = Limits(timeout_s=self.settings.timeout_s, cpu_s=max(1, int(math.ceil(self.settings.timeout_s))))
        jobs = [(i, extract_program(out, rec), rec) for i, (rec, outs) in enumerate(zip(records, outputs))
                for out in outs]
        with ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1)) as pool:
            results = list(pool.map(lambda job: run_tests(job[1], job[2]["test"], job[2]["entry_point"], limits,
                                                          prompt=job[2]["prompt"]), jobs))
        passed: list[list[bool]] = [[] for _ in records]
        details: list[list[str]] = [[] for _ in records]
        for (i, _program, _record), result in zip(jobs, results):
            passed[i].append(result.passed)
            details[i].append(result.status)
        scores: list[dict[str, Any]] = []      # each program's pass rates, and its statuses as a string beside them
        for flags, statuses in zip(passed, details):
            n, c = len(flags), sum(flags)
            k = n
            scores.append({"pass_at_1": pass_at_k(n, c, 1), "pass_at_k": pass_at_k(n, c, k) if n > 1 else None,
                           "_status": ",".join(statuses)})
        return scores


# --- verifying an answer without a reference ------------------------------------------------------

def prompt_tests(prompt: str) -> tuple[str, str] | None:
    """(entry point, test source defining ``check``) from the examples the prompt's last function carries in its
    docstring (``>>> f(1)`` with its expected output below, ``>>> f(1) == 2``, or a stated ``f(1) == 2``), or
    None when it carries none.
    The expected values are the prompt's, never the answer's."""
    import doctest

    try:
        functions = [node for node in ast.parse(prompt).body if isinstance(node, ast.FunctionDef)]
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    if not functions:
        return None
    entry, docstring = functions[-1].name, ast.get_docstring(functions[-1]) or ""
    asserts = []
    for example in doctest.DocTestParser().get_examples(docstring):
        source, want = example.source.strip(), example.want.strip()
        try:
            expression = ast.parse(source, mode="eval").body
        except SyntaxError:
            continue
        if not any(isinstance(n, ast.Name) and n.id == entry for n in ast.walk(expression)):
            continue
        source = ast.unparse(expression)        # without the example's trailing comment
        if want:
            try:
                expected = repr(ast.literal_eval(want))
                asserts.append(f"    assert ({source}) == {expected}")
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                asserts.append(f"    assert repr({source}) == {want!r}")
        elif isinstance(expression, ast.Compare):
            asserts.append(f"    assert {source}")
    # HumanEval-style lines that state a call's value without a prompt: ``f(2, 3) == 5`` (or ``➞`` / ``=>``)
    stated = re.compile(rf"^\s*({re.escape(entry)}\(.*\))\s*(?:==|➞|=>)\s*(.+?)\s*$", re.M)
    for call, expected in stated.findall(docstring):
        try:
            ast.parse(call, mode="eval")
            ast.parse(expected, mode="eval")
        except SyntaxError:
            continue
        asserts.append(f"    assert ({call}) == ({expected})")
    if not asserts:
        return None
    return entry, "def check(candidate):\n" + f"    {entry} = candidate\n" + "\n".join(asserts) + "\n"


def verify(request: dict | str, answer: str, timeout_s: float = 10.0) -> tuple[bool, str]:
    """Whether ``answer`` passes the tests the request carries, without a reference solution: a HumanEval
    record's own ``test`` where it has one, else the doctest examples of the function in its prompt (a
    record's ``prompt``, or the ```python block of its last user message), run in the sandbox like
    ``pass_at_1``.

    What it cannot check: a request whose prompt carries no examples (not verified: False); behaviour the
    examples do not exercise (a few doctests pass many wrong programs); a prompt whose examples are wrong."""
    record = as_record(request)
    prompt = record.get("prompt")
    if not isinstance(prompt, str) or not prompt.strip():
        text = Harness(HarnessSettings()).request(record)     # the last user message
        blocks = _BLOCK.findall(text)
        prompt = blocks[0] if blocks else text
    if isinstance(record.get("test"), str) and isinstance(record.get("entry_point"), str):
        entry, test = record["entry_point"], record["test"]
    else:
        found = prompt_tests(prompt)
        if found is None:
            return False, "the request carries no tests to run"
        entry, test = found
    program = extract_program(answer if isinstance(answer, str) else "", {"prompt": prompt, "entry_point": entry})
    result = run_tests(program, test, entry, Limits(timeout_s=timeout_s, cpu_s=max(1, int(math.ceil(timeout_s)))),
                       prompt=prompt)
    if not result.passed:
        return False, f"{result.status}: {result.detail}" if result.detail else result.status
    return True, "passes the tests the request carries"


def reward(prompts, completions, **_) -> list[float]:
    """GRPO's default coding reward: 1 when the answer passes the examples the prompt gives for its function
    (``>>> f(x)`` doctests and HumanEval-style ``f(x) == y`` lines), judged through the sandbox by ``verify``;
    0 otherwise. An answer with nothing to check it against earns 0: rewarding code for merely parsing is a
    reward hack."""
    return [1.0 if verify(last_user_text(prompt), completion_text(completion), timeout_s=5)[0] else 0.0
            for prompt, completion in zip(prompts, completions)]


SPECIALIST = Specialist("coding", CodingHarness, verify=verify, reward=reward, answer_ends=("fence",))
