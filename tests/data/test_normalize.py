"""Each format's records as canonical episodes (mint.data.formats), compared as they are stored."""
import pytest

from mint.data import formats
from mint.data.formats import RecordError
from mint.data.formats.fields import normalize_feedback as read_feedback
from mint.data.schema import episode_id


def normalize(record, fmt="auto") -> dict:
    """The episode of ``record`` as stored, with the record's own ``label``."""
    episode = formats.normalize(record, fmt)
    return {**episode.record(), "label": episode.specialist}


def normalize_feedback(record) -> dict:
    return read_feedback(record).to_dict()


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
    ({"text": "no shape"}, "text"),
    ({"title": "no shape"}, ""),
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
                                      {"feedback": {"score": 3}}, {"feedback": ["up"]}, {"feedback": {"label": "yes"}}])
def test_impossible_feedback_is_an_error(feedback):
    with pytest.raises(RecordError):
        normalize_feedback(feedback)


def test_episode_id_is_a_content_hash():
    messages = [{"role": "user", "content": "x"}]
    assert episode_id(messages, [], {"rating": 1, "correction": None}) == \
        episode_id([{"content": "x", "role": "user"}], [], {"correction": None, "rating": 1})
    assert episode_id(messages, [], {"rating": 1, "correction": None}) != \
        episode_id(messages, [], {"rating": -1, "correction": None})


# --- timestamps ----------------------------------------------------------------------------

@pytest.mark.parametrize("value", [1795946400, 1795946400.0, 1795946400_000, 1795946400_000_000,
                                   "2026-11-29T10:00:00Z", "2026-11-29T11:00:00+01:00", "2026-11-29 10:00:00",
                                   "2026-11-29T10:00:00.250Z", "Sun, 29 Nov 2026 10:00:00 GMT", "1795946400"])
def test_epoch_seconds_ms_us_and_time_strings_become_iso_utc(value):
    episode = normalize({**_chat(), "ts": value})
    assert episode["ts"] == "2026-11-29T10:00:00Z"


def test_a_string_that_is_not_a_time_is_a_record_error():
    with pytest.raises(RecordError, match="ts: 'yesterday-ish' is not a time"):
        normalize({**_chat(), "ts": "yesterday-ish"})


# --- content parts ------------------------------------------------------------------------------

def _chat(**extra):
    return {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}], **extra}


def test_openai_refusal_audio_and_file_parts_are_kept_as_text():
    episode = normalize({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "listen"},
                                     {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}},
                                     {"type": "file", "file": {"filename": "a.pdf", "file_data": "AAAA"}}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "I can't help with that."}]}]})
    assert episode["messages"][0]["content"] == "listen\n[AUDIO]\n[FILE a.pdf]"
    assert episode["messages"][1]["content"] == "I can't help with that."


def test_anthropic_tool_use_tool_result_and_thinking_become_canonical_messages():
    episode = normalize({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "weather in Paris?"}]},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "I should call the tool.", "signature": "sig"},
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "18C"}]},
            {"type": "text", "text": "and tomorrow?"}]},
        {"role": "assistant", "content": "Also 18C."}]})
    assert episode["messages"] == [
        {"role": "user", "content": "weather in Paris?"},
        {"role": "assistant", "content": "Let me check.", "reasoning": "I should call the tool.",
         "tool_calls": [{"id": "toolu_1", "type": "function",
                         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
        {"role": "tool", "content": "18C", "tool_call_id": "toolu_1"},
        {"role": "user", "content": "and tomorrow?"},
        {"role": "assistant", "content": "Also 18C."}]


def test_a_tool_message_with_dict_content_is_json_encoded():
    episode = normalize({"messages": [{"role": "user", "content": "stock?"},
                                      {"role": "tool", "content": {"sku": "A1", "count": 3}},
                                      {"role": "assistant", "content": "3 left"}]})
    assert episode["messages"][1]["content"] == '{"sku": "A1", "count": 3}'


def test_an_unknown_content_part_is_still_a_record_error():
    with pytest.raises(RecordError, match=r"messages\[0\].content\[0\]"):
        normalize({"messages": [{"role": "user", "content": [{"type": "hologram"}]}]})


# --- per-message fields ------------------------------------------------------------------------

def test_weight_zero_name_reasoning_and_finish_reason_are_kept():
    episode = normalize({"messages": [
        {"role": "system", "content": "sys", "name": "policy"},
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "assistant", "content": "bad old answer", "weight": 0},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "good", "weight": 1, "reasoning_content": "think", "finish_reason": "stop"}]})
    messages = episode["messages"]
    assert messages[0]["name"] == "policy" and messages[1]["name"] == "alice"
    assert messages[2]["weight"] == 0 and "weight" not in messages[4]
    assert messages[4]["reasoning"] == "think" and messages[4]["finish_reason"] == "stop"


def test_a_weight_other_than_zero_or_one_is_a_record_error():
    with pytest.raises(RecordError, match=r"messages\[1\].weight"):
        normalize({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x", "weight": 0.5}]})


def test_an_answer_cut_off_by_the_length_limit_is_kept_but_not_trainable():
    episode = normalize({"request": {"messages": [{"role": "user", "content": "write an essay"}]},
                         "response": {"id": "chatcmpl-9", "choices": [
                             {"finish_reason": "length", "message": {"role": "assistant", "content": "Once upon"}}]}})
    assert episode["messages"][-1] == {"role": "assistant", "content": "Once upon", "finish_reason": "length",
                                       "weight": 0}
    assert episode["upstream_id"] == "chatcmpl-9"


@pytest.mark.parametrize("record", [
    {"request": {"messages": [{"role": "user", "content": "hi"}]}},
    {"request": {"messages": [{"role": "user", "content": "hi"}]}, "response": None},
    {"request": {"messages": [{"role": "user", "content": "hi"}]}, "response": {"choices": []}},
    {"request": {"messages": [{"role": "user", "content": "hi"}]},
     "response": {"error": {"message": "rate limited", "code": 429}}},
    {"request": {"messages": [{"role": "user", "content": "hi"}]}, "error": "upstream timeout"},
])
def test_a_server_log_without_an_answer_is_a_record_error_not_a_user_only_episode(record):
    with pytest.raises(RecordError, match="response"):
        normalize(record)


# --- feedback fields that belong to other datasets ----------------------------------------------

@pytest.mark.parametrize("extra", [{"label": "positive"}, {"label": 3}, {"score": 87.5}, {"score": "high"}])
def test_an_unrelated_top_level_label_or_score_column_is_not_feedback(extra):
    assert normalize(_chat(**extra))["feedback"] == {"rating": None, "correction": None}


def test_a_top_level_correction_is_read_beside_a_feedback_object():
    record = _chat(feedback={"thumbs": "down"}, correction="the right answer")
    assert normalize(record)["feedback"] == {"rating": -1, "correction": "the right answer"}


def test_llamafactory_v1_reasoning_and_tool_call_parts_are_the_reasoning_and_the_calls():
    episode = normalize({"messages": [
        {"role": "user", "content": [{"type": "text", "value": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "value": "get_weather takes a city"},
                                          {"type": "tool_call", "value": '{"name": "get_weather", "arguments": '
                                                                         '{"city": "Paris"}}'}]},
        {"role": "tool", "content": [{"type": "text", "value": "18C"}]},
        {"role": "assistant", "content": [{"type": "reasoning", "value": "mild"}, {"type": "text", "value": "18C."}]}]})
    assert episode["messages"][1] == {"role": "assistant", "content": "", "reasoning": "get_weather takes a city",
                                      "tool_calls": [{"type": "function", "function": {
                                          "name": "get_weather", "arguments": {"city": "Paris"}}}]}
    assert episode["messages"][3] == {"role": "assistant", "content": "18C.", "reasoning": "mild"}


def test_reasoning_content_and_openai_reasoning_items_are_kept_apart_from_the_answer():
    beside = normalize({"messages": [{"role": "user", "content": "6*7?"},
                                     {"role": "assistant", "content": "42", "reasoning_content": "6*7=42"}]})
    assert beside["messages"][1] == {"role": "assistant", "content": "42", "reasoning": "6*7=42"}
    item = normalize({"messages": [{"role": "user", "content": "a prime?"},
                                   {"type": "reasoning", "id": "rs_1",
                                    "summary": [{"type": "summary_text", "text": "11 is prime"}]},
                                   {"role": "assistant", "content": "11"}]})
    assert item["messages"] == [{"role": "user", "content": "a prime?"},
                                {"role": "assistant", "content": "11", "reasoning": "11 is prime"}]
    part = normalize({"messages": [{"role": "user", "content": "91 prime?"}, {"role": "assistant", "content": [
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "91 = 7*13"}], "summary": []},
        {"type": "reasoning", "encrypted_content": "gAAAA", "summary": []},      # nothing a model can learn
        {"type": "output_text", "text": "No."}]}]})
    assert part["messages"][1] == {"role": "assistant", "content": "No.", "reasoning": "91 = 7*13"}


@pytest.mark.parametrize("part, field", [
    ({"type": "tool_call", "value": "get_weather(Paris)"}, r"messages\[1\].content\[0\].value"),
    ({"type": "tool_call", "value": '{"arguments": {}}'}, r"messages\[1\].content\[0\].function.name"),
    ({"type": "reasoning", "value": 3}, r"messages\[1\].content\[0\].value"),
    ({"type": "reasoning", "summary": "not a list"}, r"messages\[1\].content\[0\].summary"),
])
def test_a_bad_reasoning_or_tool_call_part_names_its_field(part, field):
    with pytest.raises(RecordError, match=field):
        normalize({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": [part]}]})


# --- feedback mint does not read ------------------------------------------------------------------

@pytest.mark.parametrize("extra, field", [
    ({"user_feedback": {"thumbs_up": False}}, "user_feedback"),
    ({"feedback": {"thumbs_up": False}}, "feedback.thumbs_up"),
    ({"upvotes": 3}, "upvotes"),
    ({"liked": False}, "liked"),
    ({"metadata": {"userRating": 2}}, "metadata.userRating"),
])
def test_feedback_in_a_shape_mint_does_not_read_is_a_record_error_naming_the_field(extra, field):
    with pytest.raises(RecordError, match="looks like feedback in a shape mint does not read") as info:
        normalize(_chat(**extra))
    assert info.value.field == field
    assert "thumbs" in info.value.reason and "stars" in info.value.reason   # it says which shapes it reads


def test_feedback_on_a_message_is_a_record_error_naming_the_message():
    record = {"messages": [{"role": "user", "content": "hi"},
                           {"role": "assistant", "content": "hello", "rating": "bad"}]}
    with pytest.raises(RecordError) as info:
        normalize(record)
    assert info.value.field == "messages[1].rating"


def test_feedback_in_a_server_log_response_is_a_record_error():
    record = {"request": {"messages": [{"role": "user", "content": "hi"}]},
              "response": {"choices": [{"message": {"role": "assistant", "content": "yo"}, "dislike": True}]}}
    with pytest.raises(RecordError) as info:
        normalize(record)
    assert info.value.field == "response.choices[0].dislike"


@pytest.mark.parametrize("key", ["likelihood", "operating_system", "generating_model", "session"])
def test_keys_that_only_contain_a_feedback_word_are_not_feedback(key):
    assert normalize(_chat(**{key: "x"}))["feedback"]["rating"] is None


@pytest.mark.parametrize("feedback, rating", [
    ({"feedback": {"thumbs": "up"}}, 1), ({"feedback": "down"}, -1), ({"feedback": 4}, 1), ({"feedback": True}, 1),
    ({"feedback": {"rating": -1, "correction": "better"}}, -1), ({"feedback": {"stars": 2}}, -1),
    ({"feedback": {"score": 0.9}}, 1), ({"feedback": {"label": False}}, -1), ({"feedback": {"kto_tag": True}}, 1),
    ({"thumbs": "\U0001f44e"}, -1), ({"rating": 5}, 1), ({"stars": 3}, 0), ({"score": 0.2}, -1), ({"label": True}, 1),
    ({"kto_tag": False}, -1), ({"score": 7}, None), ({"label": "sports"}, None),
    ({"feedback": {"rating": None, "correction": None}}, None),
])
def test_every_feedback_shape_read_still_ingests(feedback, rating):
    assert normalize(_chat(**feedback))["feedback"]["rating"] == rating


# --- times out of range and the response's time -----------------------------------------------------

@pytest.mark.parametrize("value, shown", [(17_000_000_000, "17000000000 reads as 2508-"),
                                          ("1999-12-31T23:59:59Z", "1999-12-31T23:59:59Z reads as 1999-"),
                                          (0, "0 reads as 1970-")])
def test_a_time_outside_the_plausible_range_is_a_record_error_naming_the_field_and_value(value, shown):
    with pytest.raises(RecordError, match="outside the plausible range") as info:
        normalize({**_chat(), "ts": value})
    assert info.value.field == "ts" and info.value.reason.startswith(shown)


def test_a_time_more_than_a_day_ahead_is_a_record_error_and_an_hour_ahead_is_not():
    import datetime as dt

    now = dt.datetime.now(dt.timezone.utc)
    assert normalize({**_chat(), "created_at": (now + dt.timedelta(hours=1)).isoformat()})["ts"]
    with pytest.raises(RecordError, match="created_at: .* outside the plausible range"):
        normalize({**_chat(), "created_at": (now + dt.timedelta(days=2)).isoformat()})


def _server_log(**extra):
    return {"request": {"messages": [{"role": "user", "content": "hi"}]},
            "response": {"id": "chatcmpl-abc123", "created": 1764400000,
                         "choices": [{"message": {"role": "assistant", "content": "yo"}}]}, **extra}


def test_a_server_log_without_a_time_takes_its_response_created():
    assert normalize(_server_log())["ts"] == "2025-11-29T07:06:40Z"


def test_a_server_logs_own_time_wins_over_its_response_created():
    assert normalize(_server_log(timestamp="2026-11-29T10:00:00Z"))["ts"] == "2026-11-29T10:00:00Z"


def test_an_implausible_response_created_names_its_field():
    record = _server_log()
    record["response"]["created"] = 17_000_000_000
    with pytest.raises(RecordError) as info:
        normalize(record)
    assert info.value.field == "response.created"
