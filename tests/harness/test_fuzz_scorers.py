"""No output crashes an eval: generated model outputs, however odd, score 0 with a reason, never raise.

Each harness gets at least 5,000 outputs (``SAMPLES`` per generated example, as the samples of one
record). MINT_FUZZ_SCALE=N runs N times as many; the seed is fixed (derandomize) so a failure repeats.
"""
import json
import os

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mint.harness.agent import AgentHarness
from mint.harness.base import HarnessSettings, too_deep
from mint.harness.chat import CHECKS, ChatHarness
from mint.harness.coding import extract_program
from mint.harness.genui import GenuiHarness, find_tree, load_catalog, render_html, tree_problems

SCALE = int(os.environ.get("MINT_FUZZ_SCALE", "1"))
SAMPLES = 10
EXAMPLES = 500 * SCALE
OUTPUTS_PER_HARNESS = 5000 * SCALE
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.filter_too_much])

# --- what a model (or a hostile predictions file) might write -------------------------------------

ODD_CHARACTERS = ["\ud800", "\udfff", "\udc80", "\x00", "\u2028", "\ufeff", "{", "}", "[", "]", '"', "\\", "`",
                  "<", ">", "\n", "\u0301", "\U0001f600"]
characters = st.one_of(st.characters(codec=None, exclude_categories=()), st.sampled_from(ODD_CHARACTERS))
texts = st.text(characters, max_size=40)
names = st.one_of(st.sampled_from(["f", "get_weather", "math.add", "math_add", "Button", "Buton", "Card", "",
                                   "name", "arguments", "type", "children", "props"]), texts)
numbers = st.one_of(st.integers(), st.integers(min_value=10 ** 30, max_value=10 ** 40),
                    st.floats(allow_nan=True, allow_infinity=True))
scalars = st.one_of(st.none(), st.booleans(), numbers, texts)
json_values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                            st.dictionaries(names, inner, max_size=4)),
                           max_leaves=12)


@st.composite
def deep_nesting(draw):
    depth = draw(st.sampled_from([10, 63, 64, 65, 200, 999, 1000, 5000]))
    opener, closer = draw(st.sampled_from([("[", "]"), ('{"a": ', "}"), ('{"children": [', "]}"), ("(", ")"),
                                           ("f(x=", ")"), ('{"type": "Card", "props": {"title": "x"}, "children": [',
                                                           "]}")]))
    closed = draw(st.booleans())
    core = draw(st.sampled_from(["1", '"x"', "", "{}", "[]"]))
    return opener * depth + core + (closer * depth if closed else "")


@st.composite
def huge_strings(draw):
    size = draw(st.sampled_from([2_000, 20_000, 200_000]))
    unit = draw(st.sampled_from(["x", "<tool_call>", "{", "[", '"', "\\", "word ", "\ud800", "{\"a\": ", "```"]))
    text = (unit * (size // len(unit) + 1))[:size]
    return draw(st.sampled_from([text, json.dumps({"name": "f", "arguments": {"x": text}}),
                                 json.dumps({"type": "Text", "props": {"text": text}}), f"```json\n{text}\n```"]))


def dumped(strategy):
    return strategy.map(lambda value: json.dumps(value, ensure_ascii=False, allow_nan=True))


def wrapped(strategy):
    """Text as a model might dress it: fenced, tagged, with prose around, or bare."""
    return st.tuples(strategy, st.sampled_from(["{}", "```json\n{}\n```", "```\n{}", "<tool_call>{}</tool_call>",
                                                "Sure! Here it is:\n{}\nHope that helps {{a}}", "{}{}",
                                                "[{}]", "{} and {}"])).map(lambda pair: pair[1].replace("{}", pair[0]))


PYTHON_LITERALS = ["{[1]: 2}", "{{1}: 2}", "(1, (2, (3,)))", "{1, 2}", "b'x'", "1j", "...", "None", "-0.0",
                   "1e999", "'\\ud800'", "[*x]", "x", "f(y=1)", "lambda: 0", "**{}", "**{1: 2}", "**x",
                   "9" * 5000, "'" + "a" * 1000 + "'"]


@st.composite
def python_calls(draw):
    name = draw(st.sampled_from(["f", "math.add", "a.b.c", "f()", "1", "f.__class__", "(f)"]))
    parts = [draw(st.sampled_from(PYTHON_LITERALS)) if draw(st.booleans()) else
             f"{draw(st.sampled_from(['x', 'n', 'unit', 'class_', 'x']))}={draw(st.sampled_from(PYTHON_LITERALS))}"
             for _ in range(draw(st.integers(0, 3)))]
    call = f"{name}({', '.join(parts)})"
    return draw(st.sampled_from([call, f"[{call}, {call}]", f"({call},)", call[:-1]]))


@st.composite
def tool_call_json(draw):
    call = {draw(st.sampled_from(["name", "function", "tool_calls", "f"])): draw(json_values),
            draw(st.sampled_from(["arguments", "parameters", "args"])): draw(st.one_of(json_values, dumped(json_values)))}
    return json.dumps(draw(st.sampled_from([call, [call, call], {"tool_calls": [call]},
                                            {"function": call}])), ensure_ascii=False, allow_nan=True)


COMPONENTS = ["Card", "Stack", "Text", "Button", "TextField", "Select", "Form", "Table", "List", "Image",
              "Chart", "Buton", "", None, 5, ["Card"]]
PROPS = ["title", "text", "label", "action", "direction", "gap", "options", "columns", "rows", "items",
         "series", "labels", "values", "kind", "src", "alt", "name", "required", "ordered", "variant"]


def ui_trees():
    props = st.dictionaries(st.sampled_from(PROPS), json_values, max_size=5)
    leaf = st.fixed_dictionaries({"type": st.sampled_from(COMPONENTS)}, optional={"props": st.one_of(props, json_values)})
    return st.recursive(leaf, lambda inner: st.fixed_dictionaries(
        {"type": st.sampled_from(COMPONENTS)},
        optional={"props": props, "children": st.one_of(st.lists(inner, max_size=3), json_values)}), max_leaves=10)


generic_outputs = st.one_of(texts, wrapped(texts), dumped(json_values), wrapped(dumped(json_values)),
                            deep_nesting(), huge_strings(), st.just(""), st.sampled_from(["null", "[]", "{}", " "]))
agent_outputs = st.one_of(generic_outputs, python_calls(), wrapped(python_calls()), tool_call_json(),
                          wrapped(tool_call_json()))
genui_outputs = st.one_of(generic_outputs, dumped(ui_trees()), wrapped(dumped(ui_trees())))


def batches(outputs):
    return st.lists(outputs, min_size=SAMPLES, max_size=SAMPLES)


class Fed:
    """Counts the outputs each harness was fed, for the report and the >= 5,000 check."""

    count = 0


def run_fuzz(test, fed):
    test()
    print(f"{fed.count} outputs fed")
    assert fed.count >= OUTPUTS_PER_HARNESS


# --- the harnesses ------------------------------------------------------------------------------

AGENT_RECORD = {
    "messages": [{"role": "user", "content": "weather in Paris"}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "integer"}, "n": {"type": "number"}, "unit": {"type": "string"},
        "tags": {"type": "array", "items": {"type": "object"}}, "opts": {"type": "object"}}, "required": ["x"]}}},
              {"type": "function", "function": {"name": "math.add", "parameters": {"type": "object", "properties": {
                  "a": {"type": "integer"}}}}},
              {"name": "a.b.c", "parameters": {"type": "dict", "properties": {"x": {"type": "tuple"}}}}],
    "ground_truth": [{"f": {"x": [1], "n": [2.0, ""], "unit": ["km", ""], "tags": [[{"k": ["v"]}], ""],
                           "opts": [{"a": [1]}, ""]}}, {"math.add": {"a": [1]}}],
}


def test_agent_scores_any_output_without_raising():
    harness, fed = AgentHarness(HarnessSettings()), Fed()

    @FUZZ
    @given(batches(agent_outputs), st.booleans())
    def score(outputs, single):
        record = {**AGENT_RECORD, "ground_truth": AGENT_RECORD["ground_truth"][:1]} if single else AGENT_RECORD
        fed.count += len(outputs)
        for output in outputs:
            scores = harness.score(record, [output])
            assert 0.0 <= scores["call_accuracy"] <= scores["parse_rate"] <= 1.0
            if scores["call_accuracy"] == 0.0:
                assert scores["_reason"] and not scores["_reason"].startswith("scorer error"), scores["_reason"]

    run_fuzz(score, fed)


WHOLE_CATALOG = load_catalog()[1].whole


def test_genui_scores_and_renders_any_output_without_raising():
    harness, fed = GenuiHarness(HarnessSettings()), Fed()
    record = {"messages": [{"role": "user", "content": "a form"}], "reference": {"type": "Form", "props": {}}}

    @FUZZ
    @given(batches(genui_outputs))
    def score(outputs):
        fed.count += len(outputs)
        scores = harness.score(record, outputs)
        assert all(0.0 <= scores[m] <= 1.0 for m in harness.metrics)
        if scores["schema_valid_rate"] < 1.0:
            assert scores["_reason"]
        for output in outputs:          # what `mint genui render` does with a file holding the output
            tree = find_tree(output).tree
            if tree is not None:
                problems = tree_problems(tree)
                assert render_html(tree).startswith("<!doctype html>")
                if not too_deep(tree, 8):   # the node-by-node verdict is the whole catalog's
                    assert (not problems) == WHOLE_CATALOG.is_valid(tree), problems

    run_fuzz(score, fed)


@st.composite
def chat_records(draw):
    checks = draw(st.one_of(st.none(), st.dictionaries(st.sampled_from([*CHECKS, "max_word"]), json_values,
                                                       max_size=3),
                            st.fixed_dictionaries({}, optional={"max_words": st.integers(0, 50),
                                                                "format": st.sampled_from(["json", "bullets",
                                                                                           "one_line", "lowercase",
                                                                                           "no_commas"])})))
    reference = draw(st.one_of(texts, st.none(), json_values))
    return {"messages": [{"role": "user", "content": "hi"}], "reference": reference, "checks": checks}


def test_chat_scores_any_output_and_any_checks_without_raising():
    harness, fed = ChatHarness(HarnessSettings()), Fed()

    @FUZZ
    @given(chat_records(), batches(generic_outputs))
    def score(record, outputs):
        fed.count += len(outputs)
        scores = harness.score(record, outputs)
        assert all(scores[m] is None or 0.0 <= scores[m] <= 1.0 for m in harness.metrics)
        if scores["instruction_pass_rate"] is not None and scores["instruction_pass_rate"] < 1.0:
            assert scores["_reason"]

    run_fuzz(score, fed)


HUMANEVAL_RECORD = {"prompt": "import math\n\ndef add(a: int, b: int) -> int:\n    \"\"\"Add.\"\"\"\n",
                    "entry_point": "add", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"}
coding_outputs = st.one_of(generic_outputs, wrapped(texts.map(lambda t: f"def add(a, b):\n    {t}")),
                           st.lists(st.sampled_from(["```python\n", "```py\n", "```", "def add(a, b):\n",
                                                     "    return a + b\n", "import os\n", "\ud800"]),
                                    max_size=8).map("".join))


def test_coding_extracts_a_program_from_any_output_without_raising():
    fed = Fed()

    @FUZZ
    @given(batches(coding_outputs))
    def extract(outputs):
        fed.count += len(outputs)
        for output in outputs:      # the programs are not run here: extraction is the untrusted-text step
            assert isinstance(extract_program(output, HUMANEVAL_RECORD), str)

    run_fuzz(extract, fed)


@pytest.mark.parametrize("output", ["[" * 1000 + "]" * 1000, '{"a": ' * 1000 + "1" + "}" * 1000,
                                    json.dumps({"type": "Card", "props": {"title": "x"}, "children": 5}),
                                    "f(x={[1]: 2})", "\ud800" * 1000])
def test_known_crashers_score_zero_with_a_reason_everywhere(output):
    agent = AgentHarness(HarnessSettings()).score(AGENT_RECORD, [output])
    genui = GenuiHarness(HarnessSettings()).score({"messages": [{"role": "user", "content": "x"}]}, [output])
    chat = ChatHarness(HarnessSettings()).score(
        {"messages": [{"role": "user", "content": "x"}], "checks": {"max_words": "ten", "format": "json"}}, [output])
    assert agent["call_accuracy"] == 0.0 and agent["_reason"]
    assert genui["schema_valid_rate"] == 0.0 and genui["_reason"]
    assert chat["instruction_pass_rate"] == 0.0 and chat["_reason"]
