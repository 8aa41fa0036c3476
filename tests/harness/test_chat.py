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
