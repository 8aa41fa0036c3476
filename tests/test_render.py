"""One renderer: training, evaluation, experience, chat and serve show the model the same bytes for one episode."""
import json

import pytest

from mint.base import TINY, load_tokenizer
from mint.contract.evaluate import evaluation_conversations
from mint.contract.live import episode_record
from mint.harness import harness_for
from mint.harness.base import HarnessSettings
from mint.loop.experience import ExperiencePrompt, prompt_as_trained
from mint.mol.chat import chat_turn
from mint.mol.mixture import prompt_of
from mint.serve.protocol import parse_chat_request
from mint.render import Renderer, conversation, render_message, tool_listing
from mint.train.examples import build_examples, method_rows

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The forecast for a city (e.g. Zürich)",
                                          "parameters": {"type": "object", "required": ["city", "date"], "properties": {
                                              "date": {"type": "string"}, "city": {"type": "string"}}}}}]
REQUEST = "Weather in Paris tomorrow?"
CALL = {"id": "c1", "type": "function", "function": {"name": "get_weather",
                                                     "arguments": {"date": "tomorrow", "city": "Paris"}}}


def episode(system: str | None, tools: bool) -> dict:
    answer = {"role": "assistant", "content": None, "tool_calls": [CALL]} if tools else \
        {"role": "assistant", "content": "Rain, I am afraid."}
    return {"id": "e1", "messages": ([{"role": "system", "content": system}] if system else []) +
            [{"role": "user", "content": REQUEST}, answer],
            **({"tools": TOOLS} if tools else {}), "feedback": {"rating": 1, "correction": None},
            "specialist": "agent" if tools else "chat"}


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(TINY)


def each_path(tokenizer, ep: dict) -> dict:
    """The prompt each path renders for the episode's request, as (text, ids)."""
    system, tools = next((m["content"] for m in ep["messages"] if m["role"] == "system"), None), ep.get("tools")
    sampling = Renderer(tokenizer)
    record = episode_record("agent" if tools else "chat", ep)
    harness = harness_for("agent" if tools else "chat", HarnessSettings())
    (evaluated,) = evaluation_conversations(harness, [("suite", [record])])
    (grpo_row,) = method_rows("grpo", [ep])
    body = {"messages": ([{"role": "system", "content": system}] if system else []) +
            [{"role": "user", "content": REQUEST}], **({"tools": tools} if tools else {})}
    served = parse_chat_request(body, ("chat", "agent")).turn
    conversations = {"evaluation": evaluated, "experience": prompt_as_trained(ExperiencePrompt(
                         "unaccepted", grpo_row["prompt"], json.loads(grpo_row.get("tools") or "[]"))),
                     "chat": prompt_of(chat_turn(REQUEST, system=system, tools=tools)), "serve": prompt_of(served)}
    return {path: sampling.prompts([c])[0] for path, c in conversations.items()}


@pytest.mark.parametrize("system", [None, "Be brief."])
@pytest.mark.parametrize("tools", [True, False], ids=["tools", "no-tools"])
def test_every_path_renders_the_episode_as_training_shows_it(tokenizer, system, tools):
    ep = episode(system, tools)
    (row,) = build_examples("sft", [ep], dataset="t")
    trained = Renderer.for_training(tokenizer).training(row["messages"], json.loads(row["tools"]) if tools else None)
    prompts = each_path(tokenizer, ep)
    reference = prompts["evaluation"]
    for path, prompt in prompts.items():
        assert (prompt.text, prompt.ids) == (reference.text, reference.ids), path
    # training shows the same bytes up to the answer, and the loss starts exactly where the model answers
    assert trained.text.startswith(reference.text)
    assert trained.ids[:len(reference.ids)] == reference.ids
    assert not any(trained.trainable[:len(reference.ids)]) and trained.trainable[len(reference.ids)] == 1
    assert ("You can call these functions" in reference.text) is tools
    assert (f"<|im_start|>system\n{system}" in reference.text) is bool(system)


def test_training_marks_only_the_assistant_turns_not_weighted_0(tokenizer):
    messages = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "no", "weight": 0},
                {"role": "user", "content": "b"}, {"role": "assistant", "content": "yes"}]
    trained = Renderer.for_training(tokenizer).training(messages)
    marked = tokenizer.decode([t for t, m in zip(trained.ids, trained.trainable) if m])
    assert marked == "yes<|im_end|>" and trained.text == tokenizer.decode(trained.ids)


def test_a_harness_system_text_replaces_the_conversations_own_and_tools_follow_it():
    messages = [{"role": "system", "content": "own"}, {"role": "user", "content": "hi"}]
    shown = conversation(messages, TOOLS, system="contract")
    assert shown[0] == {"role": "system", "content": "contract\n\n" + tool_listing(TOOLS)} and shown[1:] == messages[1:]
    assert conversation(messages[1:], TOOLS)[0] == {"role": "system", "content": tool_listing(TOOLS)}
    assert conversation(messages, []) == messages and conversation(messages, None, system="") == messages


def test_tool_calls_are_written_in_the_order_the_schema_requires_them(tokenizer):
    rendered = render_message({"role": "assistant", "content": "", "tool_calls": [CALL]}, TOOLS)
    assert rendered["content"] == '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris", ' \
                                  '"date": "tomorrow"}}</tool_call>'
