"""Each harness's `verify(request, answer)`: judges an answer without a reference, and a degenerate answer (one
fixed answer, an empty one, the request echoed back) does not verify."""
import json
from pathlib import Path

import pytest

from mint.harness import agent, chat, coding, genui

ROOT = Path(__file__).resolve().parents[2]


def records(path: str) -> list[dict]:
    return [json.loads(line) for line in (ROOT / path).read_text().splitlines() if line.strip()]


def user_text(record: dict) -> str:
    return [m["content"] for m in record["messages"] if m["role"] == "user"][-1]


GENUI = records("examples/heldout/genui.jsonl") + records("contracts/suites/genui_retention.jsonl") \
    + records("contracts/suites/genui_old_families.jsonl")


def test_genui_verifies_every_reference_tree_from_its_request_alone():
    results = [genui.verify(user_text(r), json.dumps(r["reference"])) for r in GENUI]
    assert all(passed for passed, _detail in results), [d for p, d in results if not p]
    # given as an episode, the same: its last user message is the request
    episode = {"messages": [{"role": "user", "content": user_text(GENUI[1])}]}
    assert genui.verify(episode, json.dumps(GENUI[1]["reference"]))[0]
    assert not genui.verify(episode, json.dumps(GENUI[0]["reference"]))[0]     # another request's tree


@pytest.mark.parametrize("answer", ['{"type": "Text", "props": {"text": "Done."}}', "{}", ""])
def test_genui_does_not_verify_a_fixed_or_empty_tree(answer):
    assert not any(genui.verify(user_text(r), answer)[0] for r in GENUI)


def test_genui_does_not_verify_the_request_echoed():
    assert not any(genui.verify(user_text(r), user_text(r))[0] for r in GENUI)
    # echoed into a valid Text tree it shows every label, but not the component the request names
    named = [r for r in GENUI if genui.request_terms(user_text(r)).root]
    echoed = [genui.verify(user_text(r), json.dumps({"type": "Text", "props": {"text": user_text(r)}})) for r in named]
    assert named and not any(passed for passed, _ in echoed)


def test_genui_names_what_the_tree_lacks():
    request = "Show a product card for the Summit jacket priced at $29 with a buy button."
    card = {"type": "Card", "props": {"title": "Summit jacket"},
            "children": [{"type": "Text", "props": {"text": "$29"}}]}
    assert genui.verify(request, json.dumps(card)) == (False, "no Button in the tree")
    card["children"].append({"type": "Button", "props": {"label": "Buy", "action": "buy"}})
    assert genui.verify(request, json.dumps(card))[0]
    card["props"]["title"] = "Jacket"
    assert genui.verify(request, json.dumps(card)) == (False, "the tree does not show 'Summit'")


def test_genui_request_match_is_the_gated_metric_the_verifier_uses():
    from mint.harness.base import HarnessSettings

    harness = genui.GenuiHarness(HarnessSettings())
    done = '{"type": "Text", "props": {"text": "Done."}}'
    scores = [harness.score(r, [done]) for r in GENUI]
    assert all(s["schema_valid_rate"] == 1.0 and s["request_match"] == 0.0 for s in scores)
    assert all(s["off_request_rate"] == 1.0 for s in scores)


CODING = [r for r in records("examples/heldout/coding.jsonl") if coding.prompt_tests(r["prompt"])]


def coding_request(record: dict) -> dict:
    """A served coding turn: the prompt in a user message, no tests beside it."""
    text = f"Complete this Python function:\n\n```python\n{record['prompt']}```"
    return {"messages": [{"role": "user", "content": text}]}


def test_coding_verifies_by_the_examples_the_prompt_carries():
    sample = CODING[:6]
    assert sample and all(coding.verify(coding_request(r), r["canonical_solution"])[0] for r in sample)


@pytest.mark.parametrize("answer", ["    return None\n", "", "echo"])
def test_coding_does_not_verify_a_degenerate_answer(answer):
    sample = CODING[:6]
    results = [coding.verify(coding_request(r), coding_request(r)["messages"][0]["content"] if answer == "echo"
                             else answer) for r in sample]
    assert not any(passed for passed, _ in results)


def test_coding_without_examples_is_not_verified():
    request = {"messages": [{"role": "user", "content": "```python\ndef f(x):\n    \"\"\"Double x.\"\"\"\n```"}]}
    assert coding.verify(request, "    return 2 * x\n") == (False, "the request carries no tests to run")


AGENT = records("examples/heldout/agent.jsonl")


def expected_calls(record: dict) -> str:
    return json.dumps([{"name": name,
                        "arguments": {a: options[0] for a, options in arguments.items() if options[0] != ""}}
                       for call in record["ground_truth"] for name, arguments in call.items()])


def without_truth(record: dict) -> dict:
    return {key: value for key, value in record.items() if key != "ground_truth"}


def test_agent_verifies_by_ground_truth_where_the_record_has_it():
    assert all(agent.verify(r, expected_calls(r))[0] for r in AGENT)


def test_agent_without_ground_truth_verifies_most_expected_calls_by_tools_and_request():
    verified = sum(agent.verify(without_truth(r), expected_calls(r))[0] for r in AGENT)
    assert verified >= 0.75 * len(AGENT)        # the rest name a value the request only implies


@pytest.mark.parametrize("answer", [json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}}), "", "[]",
                                    "echo"])
def test_agent_does_not_verify_a_degenerate_answer(answer):
    for record in (without_truth(r) for r in AGENT):
        assert not agent.verify(record, user_text(record) if answer == "echo" else answer)[0]


def test_agent_does_not_verify_an_argument_the_request_never_named():
    record = without_truth(AGENT[0])
    call = json.loads(expected_calls(AGENT[0]))[0]
    assert agent.verify(record, json.dumps(call))[0]
    text_argument = next(a for a, v in call["arguments"].items() if isinstance(v, str))
    call["arguments"][text_argument] = "Atlantis"
    assert agent.verify(record, json.dumps(call)) == (
        False, f"{call['name']}: {text_argument}='Atlantis' is not in the request")


INSTRUCTIONS = records("contracts/suites/chat_instructions.jsonl")


def test_chat_verifies_the_checks_a_request_carries():
    request = INSTRUCTIONS[0]                   # one line that includes "Rome"
    assert chat.verify(request, "The capital of Italy is Rome.")[0]
    assert chat.verify(request, "The capital of Italy\nis Rome.") == (False, "more than one line")


@pytest.mark.parametrize("answer", ["Done.", "", "echo"])
def test_chat_does_not_verify_a_degenerate_answer_on_most_requests(answer):
    passed = sum(chat.verify(r, user_text(r) if answer == "echo" else answer)[0] for r in INSTRUCTIONS)
    assert passed <= 2


def test_chat_without_checks_is_not_verified():
    assert chat.verify({"messages": [{"role": "user", "content": "hi"}], "reference": "hello"}, "hello") == (
        False, "the request carries no checks to verify against")


def test_each_specialist_names_its_verifier():
    from mint.harness import specialists

    assert {name: spec.verify for name, spec in specialists().items()} == {
        "coding": coding.verify, "agent": agent.verify, "genui": genui.verify, "chat": chat.verify, "router": None}
