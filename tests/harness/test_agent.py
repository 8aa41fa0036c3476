import json
from pathlib import Path

import pytest

from mint.harness.agent import AgentHarness, calls_match, parse_tool_calls, value_matches
from mint.harness.base import HarnessSettings

HELDOUT = [json.loads(l) for l in open(Path(__file__).parents[2] / "examples/heldout/agent.jsonl")]


def truth_calls(record, wrong=False):
    calls = []
    for call in record["ground_truth"]:
        (name, options), = call.items()
        args = {k: v[0] for k, v in options.items() if v and v[0] != ""}
        if wrong:
            key = sorted(args)[0]
            args[key] = "not it" if not isinstance(args[key], str) else args[key] + " not it"
        calls.append({"name": name, "arguments": args})
    return json.dumps(calls)


def test_bfcl_ground_truth_scores_one_and_a_wrong_argument_zero():
    harness = AgentHarness(HarnessSettings())
    good = harness.aggregate([harness.score(r, [truth_calls(r)]) for r in HELDOUT])
    bad = harness.aggregate([harness.score(r, [truth_calls(r, wrong=True)]) for r in HELDOUT])
    assert good == {"call_accuracy": 1.0, "name_accuracy": 1.0, "parse_rate": 1.0}
    assert bad["call_accuracy"] == 0.0 and bad["name_accuracy"] == 1.0


@pytest.mark.parametrize("output", [
    '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
    '{"name": "f", "arguments": "{\\"x\\": 1}"}',
    '```json\n[{"function": {"name": "f", "arguments": {"x": 1}}}]\n```',
    '{"tool_calls": [{"type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]}',
    'f(x=1)',
    '[f(x=1)]',
])
def test_call_formats_parse(output):
    assert parse_tool_calls(output) == [("f", {"x": 1})]


def test_unparseable_output():
    assert parse_tool_calls("I would call f with x") is None


def test_matching_rules():
    assert value_matches(5, [5.0][0]) and value_matches("5", 5) and value_matches(5.0, 5)
    assert value_matches("New York, NY", "new york ny")
    assert not value_matches(True, 1)
    truth = [{"f": {"x": [1], "unit": ["km", ""]}}, {"g": {"y": ["a"]}}]
    assert calls_match([("g", {"y": "A"}), ("f", {"x": 1})], truth)           # order-free, optional left out
    assert not calls_match([("f", {"x": 1, "z": 2}), ("g", {"y": "a"})], truth)  # unexpected argument
    assert not calls_match([("f", {"x": 1})], truth)                           # a call missing


def test_tool_allowlist_hides_tools_and_fails_calls_to_them():
    record = {"messages": [{"role": "user", "content": "hi"}], "ground_truth": [{"secret": {}}],
              "tools": [{"type": "function", "function": {"name": "secret"}},
                        {"type": "function", "function": {"name": "public"}}]}
    harness = AgentHarness(HarnessSettings(tools=("public",)))
    assert "secret" not in harness.messages(record)[0]["content"]
    assert harness.score(record, ['{"name": "secret", "arguments": {}}'])["call_accuracy"] == 0.0
