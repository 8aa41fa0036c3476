"""Coding: does the generated program pass the record's tests (HumanEval records)?"""
from __future__ import annotations

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
    """The program to test: a fenced block or the raw text, as a whole function or as its body."""
    blocks = _BLOCK.findall(output)
    code = max(blocks, key=len) if blocks else output
    entry = record["entry_point"]
    if re.search(rf"^\s*def\s+{re.escape(entry)}\s*\(", code, re.M):
        imports = "\n".join(_IMPORT.findall(record["prompt"]))
        return (imports + "\n\n" if imports else "") + code
    return record["prompt"] + code      # a completion of the prompt's function body


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
            results = list(pool.map(lambda job: run_tests(job[1], job[2]["test"], job[2]["entry_point"], limits),
                                    jobs))
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
