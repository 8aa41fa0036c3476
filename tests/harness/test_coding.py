import json
from pathlib import Path

from mint.harness.base import HarnessSettings
from mint.harness.coding import CodingHarness, extract_program, pass_at_k

HELDOUT = [json.loads(l) for l in open(Path(__file__).parents[2] / "examples/heldout/coding.jsonl")]
SAMPLE = HELDOUT[:12]


def test_canonical_solutions_pass_and_pass_bodies_fail():
    harness = CodingHarness(HarnessSettings(timeout_s=10))
    good = harness.aggregate(harness.score_many(SAMPLE, [[r["canonical_solution"]] for r in SAMPLE]))
    bad = harness.aggregate(harness.score_many(SAMPLE, [["    pass\n"] for r in SAMPLE]))
    assert good["pass_at_1"] == 1.0
    assert bad["pass_at_1"] == 0.0


def test_a_fenced_whole_function_is_tested_with_the_prompts_imports():
    record = next(r for r in HELDOUT if "from typing import" in r["prompt"])
    body = record["prompt"].split('"""')[0].replace("from typing import List", "").strip()
    answer = f"Here you go:\n```python\n{body}\n{record['canonical_solution']}```\nDone."
    program = extract_program(answer, record)
    assert program.startswith("from typing import") and f"def {record['entry_point']}" in program


def test_pass_at_k_estimator():
    assert pass_at_k(10, 0, 1) == 0.0
    assert pass_at_k(10, 10, 1) == 1.0
    assert abs(pass_at_k(10, 3, 1) - 0.3) < 1e-12
    assert abs(pass_at_k(4, 1, 2) - 0.5) < 1e-12


def test_several_samples_give_pass_at_k():
    harness = CodingHarness(HarnessSettings(samples=2, temperature=0.7))
    record = SAMPLE[0]
    (score,) = harness.score_many([record], [[record["canonical_solution"], "    pass\n"]])
    assert score["pass_at_1"] == 0.5 and score["pass_at_k"] == 1.0
