import pytest

from mint.data.episode import RecordError, episode_id, normalize, normalize_feedback


def test_openai_record_keeps_tool_calls_and_tool_definitions():
    record = {
        "messages": [
            {"role": "developer", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
            {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "18C"},
            {"role": "assistant", "content": "18C and sunny."},
        ],
        "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}],
    }
    episode = normalize(record)
    assert [m["role"] for m in episode["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert episode["messages"][1]["content"] == "weather in Paris?"
    assert episode["messages"][2]["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]
    assert episode["messages"][3] == {"role": "tool", "content": "18C", "name": "get_weather", "tool_call_id": "c1"}
    assert episode["tools"][0]["function"]["name"] == "get_weather"


def test_sharegpt_roles_are_mapped():
    episode = normalize({"system": "sys", "conversations": [
        {"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"},
        {"from": "function_call", "value": "{\"name\": \"f\", \"arguments\": {\"x\": 1}}"},
        {"from": "observation", "value": "42"}]})
    assert [m["role"] for m in episode["messages"]] == ["system", "user", "assistant", "assistant", "tool"]
    assert episode["messages"][3]["tool_calls"][0]["function"] == {"name": "f", "arguments": {"x": 1}}


def test_server_log_request_and_response_become_one_conversation():
    episode = normalize({"request": {"messages": [{"role": "user", "content": "hi"}]},
                         "response": {"choices": [{"message": {"role": "assistant", "content": "hey"}}]},
                         "ts": 1764400000, "served_by": "chat:v2"})
    assert episode["messages"][-1] == {"role": "assistant", "content": "hey"}
    assert episode["ts"] == "2025-11-29T07:06:40Z"
    assert episode["served_by"] == "chat:v2"


def test_prompt_completion_and_alpaca_records():
    assert normalize({"prompt": "2+2?", "completion": "4"})["messages"][1]["content"] == "4"
    alpaca = normalize({"instruction": "Translate", "input": "chat", "output": "cat"})
    assert alpaca["messages"][0]["content"] == "Translate\n\nchat"


@pytest.mark.parametrize("record, field", [
    ({"messages": []}, "messages"),
    ({"messages": "hi"}, "messages"),
    ({"conversations": {"from": "human"}}, "conversations"),
    ({"messages": [{"role": "narrator", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ({"messages": [{"role": "assistant", "content": "only me"}]}, "messages"),
    ({"messages": [{"role": "user", "content": "  "}]}, "messages"),
    ({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "tool_calls": [
        {"function": {"name": "f", "arguments": "{not json"}}]}]}, "messages[1].tool_calls[0].function.arguments"),
    ({"text": "no shape"}, ""),
])
def test_bad_records_name_the_field(record, field):
    with pytest.raises(RecordError) as info:
        normalize(record)
    assert info.value.field == field


def test_format_override_refuses_the_other_shape():
    with pytest.raises(RecordError, match="conversations: missing"):
        normalize({"messages": [{"role": "user", "content": "x"}]}, "sharegpt")


@pytest.mark.parametrize("feedback, rating", [
    ({"feedback": {"thumbs": "up"}}, 1), ({"feedback": {"thumbs": "down"}}, -1),
    ({"feedback": "\U0001f44d"}, 1), ({"thumbs": False}, -1),
    ({"feedback": {"stars": 5}}, 1), ({"feedback": {"stars": 3}}, 0), ({"feedback": {"stars": 1}}, -1),
    ({"rating": 4}, 1), ({"rating": 2}, -1), ({"rating": -1}, -1), ({"rating": 0}, 0),
    ({"score": 0.9}, 1), ({"score": 0.5}, 0), ({"score": 0.1}, -1),
    ({"label": True}, 1), ({}, None),
])
def test_feedback_is_normalized_to_a_rating(feedback, rating):
    assert normalize_feedback(feedback)["rating"] == rating


def test_corrections_are_kept():
    assert normalize_feedback({"feedback": {"thumbs": "down", "correction": "fixed"}}) == \
        {"rating": -1, "correction": "fixed"}
    assert normalize_feedback({"correction": {"role": "assistant", "content": "fixed"}})["correction"] == "fixed"


@pytest.mark.parametrize("feedback", [{"feedback": {"stars": 9}}, {"feedback": {"thumbs": "sideways"}},
                                      {"score": 3}, {"feedback": ["up"]}, {"label": "yes"}])
def test_impossible_feedback_is_an_error(feedback):
    with pytest.raises(RecordError):
        normalize_feedback(feedback)


def test_episode_id_is_a_content_hash():
    messages = [{"role": "user", "content": "x"}]
    assert episode_id(messages, [], {"rating": 1, "correction": None}) == \
        episode_id([{"content": "x", "role": "user"}], [], {"correction": None, "rating": 1})
    assert episode_id(messages, [], {"rating": 1, "correction": None}) != \
        episode_id(messages, [], {"rating": -1, "correction": None})
