"""The episode types and their one serializer: the line is the record, the id its content hash."""
import dataclasses
import json

import pytest

from mint.data.schema import Episode, Feedback, Message, Preference, ServedRoute, episode_id

CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Zürich", "days": 2.5}}}


def full_episode(**changes) -> Episode:
    episode = Episode(
        messages=(Message("system", "Be brief."), Message("user", "Wetter in Zürich? \u2603"),
                  Message("assistant", "", tool_calls=(CALL,), reasoning="needs the tool", weight=0),
                  Message("tool", '{"temp": 18}', name="get_weather", tool_call_id="c1"),
                  Message("assistant", "18 °C.", finish_reason="stop")),
        tools=({"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}},),
        feedback=Feedback(1, "18 °C and sunny."), specialist="agent", session="s-1", ts="2026-12-01T10:00:00Z",
        served_by="agent:v3", upstream_id="chatcmpl-9",
        preference=Preference(2, (Message("assistant", "No idea."),)), media={"images": ["a.png"]},
        parallel_tool_calls=False, source="logs/a.jsonl:3", labeled_by="tools")
    return dataclasses.replace(episode, **changes)


def test_a_line_is_the_json_of_its_record_with_sorted_keys_inside_each_value():
    episode = full_episode()
    line = episode.line()
    assert line.endswith("\n") and "\n" not in line[:-1]
    record = json.loads(line)
    assert record == episode.record()
    assert list(record)[:4] == ["id", "session", "ts", "specialist"] and list(record)[-1] == "source"
    for message, stored in zip(episode.messages, record["messages"]):
        assert message.json() == json.dumps(message.to_dict(), ensure_ascii=False, sort_keys=True,
                                            separators=(",", ":"))
        assert stored == message.to_dict()


def test_the_id_is_the_hash_of_messages_tools_feedback_and_preference():
    episode = full_episode()
    record = episode.record()
    assert episode.id == record["id"] == episode_id(record["messages"], record["tools"], record["feedback"],
                                                    record["preference"])
    assert full_episode(source="elsewhere:1", specialist="chat", session="s-2", labeled_by="fallback").id == episode.id
    assert full_episode(feedback=Feedback(-1)).id != episode.id
    assert full_episode(preference=Preference(2, (Message("assistant", "Maybe."),))).id != episode.id
    without = full_episode(preference=None)
    assert "preference" not in without.record()
    assert without.id == episode_id(record["messages"], record["tools"], record["feedback"])


def test_a_stored_episode_reads_back_as_the_same_episode():
    for episode in (full_episode(), full_episode(preference=None, media=None, parallel_tool_calls=None),
                    full_episode(served=ServedRoute({"agent": 0.9, "chat": 0.1}, "probe", "router:v2", 812.5, 3.25))):
        assert Episode.from_dict(episode.record()) == episode
        assert Episode.from_dict(json.loads(episode.line())).line() == episode.line()


def test_episodes_and_messages_are_frozen():
    episode = full_episode()
    with pytest.raises(dataclasses.FrozenInstanceError):
        episode.specialist = "chat"
    with pytest.raises(dataclasses.FrozenInstanceError):
        episode.messages[0].content = "changed"


def test_a_served_turn_writes_its_route_and_latency():
    route = ServedRoute({"agent": 0.9, "chat": 0.1}, "probe", "router:v2", 812.5, 3.25)
    record = full_episode(served=route).record()
    assert record["route"] == {"probabilities": {"agent": 0.9, "chat": 0.1}, "decided_by": "probe",
                               "revision": "router:v2"}
    assert (record["latency_ms"], record["route_ms"]) == (812.5, 3.25)
    assert "route" not in full_episode().record()
