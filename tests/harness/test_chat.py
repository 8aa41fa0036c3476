import pytest

from mint.harness.base import HarnessSettings
from mint.harness.chat import ChatHarness, follows, rouge_l, token_f1


def test_similarity_metrics():
    assert rouge_l("the cat sat on the mat", "the cat sat on the mat") == 1.0
    assert rouge_l("mat the on", "the cat sat on the mat") < 0.5
    assert abs(token_f1("a b c", "a b d") - 2 / 3) < 1e-9
    assert token_f1("", "x") == 0.0


@pytest.mark.parametrize("output, checks, ok", [
    ("Rome.", {"format": "one_line", "must_include": ["rome"]}, True),
    ("Rome\nItaly", {"format": "one_line"}, False),
    ("- red\n- blue\n- yellow", {"format": "bullets"}, True),
    ('{"name": "Ana"}', {"format": "json"}, True),
    ("hello there friend", {"max_words": 2}, False),
    ("blue", {"format": "lowercase"}, True),
])
def test_instruction_checks(output, checks, ok):
    assert follows(output, checks) is ok


def test_empty_and_refusal_rates():
    harness = ChatHarness(HarnessSettings())
    record = {"messages": [{"role": "user", "content": "hi"}], "reference": "hello"}
    scores = harness.score(record, ["", "I'm sorry, I can't help with that.", "hello"])
    assert scores["empty_rate"] == pytest.approx(1 / 3) and scores["refusal_rate"] == pytest.approx(1 / 3)


@pytest.mark.parametrize("checks, field", [
    ({"max_words": "ten"}, "checks.max_words"), ({"min_words": True}, "checks.min_words"),
    ({"max_words": -1}, "checks.max_words"), ({"must_include": "rome"}, "checks.must_include"),
    ({"must_not_include": [1]}, "checks.must_not_include"), ({"format": ["json"]}, "checks.format"),
    ({"format": "yaml"}, "checks.format"), ({"max_word": 3}, "checks.max_word"), ([1], "checks"),
])
def test_malformed_checks_are_a_record_problem_naming_the_field(checks, field):
    from mint.harness.base import RecordProblem

    record = {"messages": [{"role": "user", "content": "hi"}], "checks": checks}
    with pytest.raises(RecordProblem) as problem:
        ChatHarness(HarnessSettings()).check_record(record)
    assert problem.value.field == field


@pytest.mark.parametrize("checks", [{"max_words": "ten"}, {"min_words": None}, {"must_include": 5},
                                    {"format": {"a": 1}}, {"max_words": 2.5}])
def test_scoring_with_malformed_checks_fails_the_check_with_a_reason(checks):
    record = {"messages": [{"role": "user", "content": "hi"}], "reference": "hello", "checks": checks}
    scores = ChatHarness(HarnessSettings()).score(record, ["hello there"])
    assert scores["instruction_pass_rate"] == 0.0 and "checks." in scores["_reason"]


def test_a_deeply_nested_json_answer_is_not_json_for_the_format_check():
    assert follows("[" * 100000 + "]" * 100000, {"format": "json"}) is False
