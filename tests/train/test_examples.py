"""SFT rows: every assistant turn not disowned, weight 0 honoured, tool definitions shown as evaluation shows them."""
import json

import pytest

from mint.base import TINY, load_tokenizer, training_chat_template
from mint.harness.agent import AgentHarness
from mint.harness.base import HarnessSettings
from mint.train.examples import build_examples, per_turn_rows, trainable_conversation

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city, e.g. Zürich",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}},
         {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object", "properties": {}}}}]


def episode(messages, rating=None, correction=None, tools=None):
    return {"messages": messages, "feedback": {"rating": rating, "correction": correction}, "tools": tools or [],
            "specialist": "agent"}


def tool_episode(**feedback):
    return episode([
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "name": "get_weather", "content": "18C, sunny"},
        {"role": "assistant", "content": "It is 18C and sunny in Paris."},
    ], tools=TOOLS, **feedback)


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


def trained_text(tokenizer, row) -> str:
    out = tokenizer.apply_chat_template(row["messages"], tools=json.loads(row["tools"]) if row.get("tools") else None,
                                        chat_template=training_chat_template(), tokenize=True, return_dict=True,
                                        return_assistant_tokens_mask=True)
    return tokenizer.decode([t for t, m in zip(out["input_ids"], out["assistant_masks"]) if m])


def test_the_tool_call_and_the_summary_are_both_trained(tokenizer):
    (row,) = build_examples("sft", [tool_episode()], dataset="t")
    assert trained_text(tokenizer, row) == ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
                                            "</tool_call><|im_end|>It is 18C and sunny in Paris.<|im_end|>")


def test_call_arguments_are_written_in_the_order_the_schema_requires_them(tokenizer):
    """Ingest stores arguments with sorted keys; training writes them as the tool's ``required`` lists them,
    then its other parameters, then any it does not name."""
    route = {"type": "function", "function": {"name": "route", "parameters": {
        "type": "object", "required": ["start", "end"],
        "properties": {"avoid": {"type": "string"}, "end": {"type": "string"}, "start": {"type": "string"}}}}}
    call = {"id": "c1", "type": "function",
            "function": {"name": "route", "arguments": {"avoid": "tolls", "end": "Rome", "extra": 1, "start": "Pisa"}}}
    (row,) = build_examples("sft", [episode([{"role": "user", "content": "Pisa to Rome"},
                                             {"role": "assistant", "content": "", "tool_calls": [call]}],
                                            tools=[route])], dataset="t")
    assert trained_text(tokenizer, row) == ('<tool_call>{"name": "route", "arguments": {"start": "Pisa", "end": '
                                            '"Rome", "avoid": "tolls", "extra": 1}}</tool_call><|im_end|>')
    # a call to a tool the episode does not define keeps its arguments as they are
    call["function"]["name"] = "elsewhere"
    (row,) = build_examples("sft", [episode([{"role": "user", "content": "Pisa to Rome"},
                                             {"role": "assistant", "content": "", "tool_calls": [call]}],
                                            tools=[route])], dataset="t")
    assert '"arguments": {"avoid": "tolls", "end": "Rome", "extra": 1, "start": "Pisa"}' in trained_text(tokenizer, row)


def test_a_thumbs_down_disowns_only_the_last_answer(tokenizer):
    (row,) = build_examples("sft", [tool_episode(rating=-1)], dataset="t")
    assert trained_text(tokenizer, row) == ('<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
                                            "</tool_call><|im_end|>")


def test_a_correction_replaces_the_last_answer(tokenizer):
    (row,) = build_examples("sft", [tool_episode(rating=-1, correction="Paris: 18C.")], dataset="t")
    assert trained_text(tokenizer, row).endswith("<|im_end|>Paris: 18C.<|im_end|>")


def test_a_turn_logged_with_weight_0_is_shown_but_not_trained(tokenizer):
    messages = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "5", "weight": 0},
                {"role": "user", "content": "really?"}, {"role": "assistant", "content": "4"}]
    (row,) = build_examples("sft", [episode(messages)], dataset="t")
    assert "5<|im_end|>" in tokenizer.apply_chat_template(row["messages"], chat_template=training_chat_template(),
                                                          tokenize=False)
    assert trained_text(tokenizer, row) == "4<|im_end|>"


def test_an_episode_with_nothing_left_to_train_on_is_skipped():
    only_disowned = episode([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "bye"}], rating=-1)
    weightless = episode([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 0}])
    assert trainable_conversation(only_disowned) is None and trainable_conversation(weightless) is None


def test_per_turn_rows_keep_weight_0_turns_out_of_every_completion():
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "no", "weight": 0},
                {"role": "user", "content": "b"}, {"role": "assistant", "content": "yes"},
                {"role": "user", "content": "c"}, {"role": "assistant", "content": "ok"}]
    rows = per_turn_rows([{"messages": messages, "tools": "[]"}])
    assert [r["completion"][0]["content"] for r in rows] == ["yes", "ok"]
    assert rows[0]["prompt"][1] == {"role": "assistant", "content": "no"} and rows[1]["tools"] == "[]"


def test_agent_rows_carry_their_tools_and_the_template_shows_them_as_the_agent_harness_does(tokenizer):
    rows = build_examples("sft", [tool_episode(), episode([{"role": "user", "content": "hi"},
                                                            {"role": "assistant", "content": "hello"}])], dataset="t")
    assert json.loads(rows[0]["tools"]) == TOOLS and rows[1]["tools"] is None
    harness = AgentHarness(HarnessSettings())
    for system in (None, "Be brief."):
        messages = ([{"role": "system", "content": system}] if system else []) + rows[0]["messages"]
        shown = tokenizer.apply_chat_template(messages, tools=TOOLS, chat_template=training_chat_template(),
                                              tokenize=False)
        expected = harness.system({"messages": messages, "tools": TOOLS})
        assert shown.startswith(f"<|im_start|>system\n{expected}<|im_end|>\n<|im_start|>user\nWeather in Paris?")


def test_a_logged_agent_turn_is_trained_under_the_system_prompt_its_eval_shows(ws, project, tokenizer, tmp_path):
    """Ingest stores episodes as canonical (key-sorted) JSON; a suite keeps its file's key order. The
    training text must still show the tools exactly as the agent harness shows them to the model."""
    from mint.data.datasets import iter_episodes
    from mint.data.ingest import ingest

    tools = [{"type": "function", "function": {"name": "draw_rectangle", "description": "Draw a rectangle.",
                                              "parameters": {"type": "object", "properties": {
                                                  "width": {"type": "integer"}, "height": {"type": "integer"},
                                                  "color": {"type": "string"}}, "required": ["width", "height"]}}}]
    user = {"role": "user", "content": "A red rectangle, 20 by 10."}
    call = {"id": "c1", "type": "function",
            "function": {"name": "draw_rectangle", "arguments": '{"width": 20, "height": 10, "color": "red"}'}}
    log = tmp_path / "app.jsonl"
    log.write_text(json.dumps({"messages": [user, {"role": "assistant", "content": None, "tool_calls": [call]}],
                               "tools": tools, "specialist": "agent"}) + "\n")
    ingest(ws, [log], dataset="logs", project=project)
    (row,) = build_examples("sft", iter_episodes(ws, "logs", None, "agent"), dataset="logs")
    trained = tokenizer.apply_chat_template(row["messages"], tools=json.loads(row["tools"]),
                                            chat_template=training_chat_template(), tokenize=False)
    evaluated = AgentHarness(HarnessSettings()).system({"messages": [user], "tools": tools})
    assert trained.startswith(f"<|im_start|>system\n{evaluated}<|im_end|>\n<|im_start|>user\n{user['content']}")
