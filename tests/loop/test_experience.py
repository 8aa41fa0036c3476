"""The experience step: the champion answers logged prompts under the prompt it was trained with."""
import json

from mint.harness.agent import AgentHarness
from mint.harness.base import HarnessSettings

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}]
USER = {"role": "user", "content": "Weather in Paris?"}
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}


def test_an_agent_answers_its_logged_prompts_seeing_the_tools_it_may_call_and_stops_after_the_call(ws, project, tmp_path, monkeypatch):
    from mint.data.ingest import ingest
    from mint.loop.experience import gather_experience
    from mint.mol import generate

    log = tmp_path / "app.jsonl"
    log.write_text("".join(json.dumps({"messages": [user, {"role": "assistant", "content": None, "tool_calls": [CALL]}],
                                       "tools": TOOLS, "specialist": "agent"}) + "\n"
                           for user in (USER, {"role": "user", "content": "And in Rome?"})))
    ingest(ws, [log], dataset="logs", project=project)
    shown, stops = [], []

    def answer_with_the_call(model, tokenizer, conversations, settings, *args, **kwargs):
        shown.extend(conversations)
        stops.append(kwargs.get("answer_end"))
        return [['{"name": "get_weather", "arguments": {"city": "Paris"}}'] for _ in conversations], [0.0]

    monkeypatch.setattr(generate, "generate_batches", answer_with_the_call)
    result = gather_experience(ws, dataset="logs", specialist="agent", base="tiny-random", project=project,
                               samples=1, prompts=2, max_new_tokens=4)
    listing = AgentHarness(HarnessSettings()).system({"messages": [USER], "tools": TOOLS})
    assert [{"role": "system", "content": listing}, USER] in shown and len(shown) == 2
    assert stops == [("json", "fence", "tool_call")]
    assert result["passed"] == 2   # both logged answers are the call it makes


def test_experience_refuses_a_champion_whose_files_changed(ws, project, candidate):
    import pytest

    from mint.errors import Refused
    from mint.loop.experience import gather_experience
    from mint.registry.promotion import promote

    revision = candidate("agent")
    promote(ws, revision.ref, force=True, why="test")
    weights = ws.adapters / revision.id / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1] + b"\x00")
    with pytest.raises(Refused, match="failed verification"):
        gather_experience(ws, dataset="logs", specialist="agent", base="tiny-random", project=project)
