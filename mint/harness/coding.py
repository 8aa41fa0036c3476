"""Coding: does the generated program pass the record's tests (HumanEval records)?"""
from __future__ import annotations

import ast
import math
import os
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mint.harness.base import Harness, RecordProblem
from mint.harness.sandbox import Limits, run_tests

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


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased estimator of Chen et al. (2021): 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


@dataclass
class CodingHarness(Harness):
    name: str = "coding"
    metrics: tuple[str, ...] = ("pass_at_1", "pass_at_k")

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
        passed = [[] for _ in records]
        details = [[] for _ in records]
        for (i, _program, _record), result in zip(jobs, results):
            passed[i].append(result.passed)
            details[i].append(result.status)
        scores = []
        for flags, statuses in zip(passed, details):
            n, c = len(flags), sum(flags)
            k = n
            scores.append({"pass_at_1": pass_at_k(n, c, 1), "pass_at_k": pass_at_k(n, c, k) if n > 1 else None,
                           "_status": ",".join(statuses)})
        return scores
