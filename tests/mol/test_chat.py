"""mint chat: champions answer, each turn is logged with its route and feedback, and the log ingests back."""
from __future__ import annotations

import json
from dataclasses import replace

import pytest

from mint.project import DEFAULT_PROJECT, Project
from tests.conftest import run_mint

# without the default patterns, so that the probe (not a pattern) routes the turns these tests send
TINY_PROJECT = Project(base="tiny-random", specialists=tuple(replace(s, patterns=())
                                                             for s in DEFAULT_PROJECT.specialists))


@pytest.fixture
def mixture(ws):
    from mint.mol.mixture import Mixture
    return Mixture.open(ws, TINY_PROJECT)


def logged(ws) -> list[dict]:
    from mint.mol.turnlog import read_turns
    return read_turns(ws)


def test_chat_cli_answers_with_the_champion_and_logs_the_turn(ws, crown, tiny_loras):
    crown("coding", tiny_loras["coding"])
    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  chat: {keywords: [hi]}\n"
                                              "  coding: {keywords: [python]}\n")
    result = run_mint("chat", "fix my python please", "--max-new-tokens", "4", "--json")
    assert result.returncode == 0, result.stderr
    reply = json.loads(result.stdout)
    assert (reply["specialist"], reply["served_by"], reply["decided_by"]) == ("coding", "coding:v1", "rules")
    [turn] = logged(ws)
    assert turn["served_by"] == "coding:v1"
    assert turn["messages"][-1] == {"role": "assistant", "content": reply["reply"]}
    assert turn["route"]["decided_by"] == "rules" and turn["latency_ms"] > 0


def test_session_feedback_and_correction_are_logged_with_the_turn(ws, mixture):
    from mint.mol.chat import ChatSession
    from mint.mol.turnlog import read_turns

    session = ChatSession(mixture, max_new_tokens=3)
    first = session.handle("tell me a joke")
    assert first.kind == "reply" and first.reply.specialist == "chat"
    assert session.handle("/feedback -1").kind == "feedback"
    assert session.handle("/correct Why did the chicken cross the road?").kind == "feedback"
    [logged_at_once] = read_turns(ws)               # on disk when answered; its feedback follows as its own line
    assert logged_at_once["feedback"] == {"rating": None, "correction": None}
    session.handle("/specialist coding")
    second = session.handle("and another one")
    assert second.reply.specialist == "coding" and second.reply.decided_by == "forced"
    session.close()
    turns = read_turns(ws)
    assert [t["feedback"] for t in turns] == [
        {"rating": -1, "correction": "Why did the chicken cross the road?"}, {"rating": None, "correction": None}]
    assert len(turns[1]["messages"]) == 4           # the conversation carries on


@pytest.mark.parametrize("line", ["/feedback +2", "/specialist poetry", "/correct", "/teleport"])
def test_session_commands_with_bad_arguments_are_errors_not_crashes(mixture, line):
    from mint.mol.chat import ChatSession

    session = ChatSession(mixture, max_new_tokens=2)
    session.handle("hi")
    assert session.handle(line).kind == "error"


def test_served_log_ingests_back_with_feedback_and_served_by(ws, mixture, tmp_path):
    from mint.data.datasets import iter_episodes
    from mint.data.ingest import ingest
    from mint.mol.mixture import Turn
    from mint.mol.runtime import Decoding
    from mint.mol.turnlog import logs_dir

    answers = mixture.answer([Turn([{"role": "user", "content": f"tell me a story {i}"}],
                                   decoding=Decoding(max_new_tokens=3)) for i in range(3)])
    mixture.feedback(answers[0].id, rating=1)
    mixture.close()
    result = ingest(ws, [logs_dir(ws)], dataset="served", project=DEFAULT_PROJECT, workers=0)
    assert result.quarantined_new == 0
    episodes = list(iter_episodes(ws, "served"))
    assert len(episodes) == 3
    assert sorted(e["feedback"]["rating"] is not None for e in episodes) == [False, False, True]
    assert {e["served_by"] for e in episodes} == {"base"}
    assert {e["specialist"] for e in episodes} == {"chat"}


def test_the_log_rotates_by_size_and_every_turn_is_read_back(ws):
    from mint.mol.turnlog import TurnLog, logs_dir, read_turns

    log = TurnLog(ws, max_bytes=300)
    for i in range(10):
        log.append({"id": str(i), "messages": [{"role": "user", "content": "x" * 50}], "feedback": {}})
    assert len(list(logs_dir(ws).glob("served-*.jsonl"))) >= 3
    assert [t["id"] for t in read_turns(ws)] == [str(i) for i in range(10)]


def test_feedback_for_an_unknown_answer_is_bad_input(mixture):
    from mint.errors import BadInput

    with pytest.raises(BadInput, match="no answered turn"):
        mixture.feedback("chatcmpl-nope", rating=1)
    with pytest.raises(BadInput, match="rating"):
        mixture.feedback("chatcmpl-nope", rating=5)


def test_chat_repl_shows_specialist_and_revision_and_survives_bad_commands(ws, crown, tiny_loras):
    import os
    import subprocess
    import sys

    crown("chat", tiny_loras["chat"])
    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  chat: {keywords: [hi]}\n"
                                              "  coding: {keywords: [python]}\n")
    script = "/specialist poetry\nhi there\n/feedback +1\n/specialist coding\npython?\n/quit\n"
    result = subprocess.run([sys.executable, "-m", "mint", "chat", "--max-new-tokens", "2"], input=script,
                            capture_output=True, text=True, env=dict(os.environ), cwd=ws.home.parent, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "chat (chat:v1, rules)" in result.stdout
    assert "coding (base, forced)" in result.stdout
    assert "unknown specialist 'poetry'" in result.stderr
    ratings = [t["feedback"]["rating"] for t in logged(ws)]
    assert ratings == [1, None]


def test_a_promoted_router_is_picked_up_by_sync(ws, mixture, tmp_path):
    from mint.contract.identity import contract_identity
    from mint.train.router import train_router
    from mint.registry.promotion import promote
    from tests.routing.test_router import TINY_SETS, _contract, _dataset

    assert mixture.revisions()["router"] == "starter"      # no champion yet: the probe fitted on plain turns
    contract = _contract(tmp_path, _dataset(ws, tmp_path))
    train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"], project=TINY_PROJECT)
    promote(ws, "router:v1", identify_contract=contract_identity)
    moves = mixture.sync()
    assert [(m.specialist, m.old, m.new) for m in moves] == [("router", "starter", "router:v1")]
    assert mixture.revisions()["router"] == "router:v1"
    from mint.mol.mixture import Turn
    from mint.mol.runtime import Decoding

    [answer] = mixture.answer([Turn([{"role": "user", "content": "form button dashboard layout"}],
                                    decoding=Decoding(2))])
    assert (answer.route.decided_by, answer.route.revision, answer.specialist) == ("probe", "router:v1", "genui")
    train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"], project=TINY_PROJECT)
    promote(ws, "router:v2", identify_contract=contract_identity)
    assert [(m.specialist, m.old, m.new) for m in mixture.sync()] == [("router", "router:v1", "router:v2")]


def test_a_session_streams_the_reply_while_it_is_decoded(ws, crown, tiny_loras):
    from mint.mol.chat import ChatSession
    from mint.mol.mixture import Mixture

    crown("chat", tiny_loras["chat"])
    session = ChatSession(Mixture.open(ws, TINY_PROJECT), max_new_tokens=12)
    model = session.mixture.runtime.model
    original, forwards, pieces = model.forward, [0], []

    def counted(*args, **kwargs):
        forwards[0] += 1
        return original(*args, **kwargs)

    model.forward = counted
    event = session.handle("hi, tell me about rainy Sundays",
                           on_text=lambda piece: pieces.append((piece, forwards[0])))
    assert event.kind == "reply" and event.reply.new_tokens == 12
    assert "".join(piece for piece, _ in pieces) == event.reply.reply
    assert pieces[0][1] < forwards[0], "the first piece came only after the last forward"
    session.close()
    assert [t["messages"][-1]["content"] for t in logged(ws)] == [event.reply.reply]


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The forecast for a city (e.g. Zürich) on a day: 'today' or a date",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}, "date": {"type": "string"}},
                   "required": ["city", "date"]}}}]


@pytest.mark.parametrize("system", [None, "Be brief."])
def test_a_turn_with_tools_is_prompted_as_the_agent_was_trained(ws, mixture, system):
    """The runtime gets the tools listed in the system turn, and the prompt it encodes is the very text mint's
    training template renders for the same conversation and tools."""
    from mint.base import training_chat_template
    from mint.mol.mixture import Turn

    messages = ([{"role": "system", "content": system}] if system else []) + \
        [{"role": "user", "content": "weather in Paris tomorrow?"}]
    seen = []
    generate = mixture.runtime.generate

    def spy(conversations, *args, **kwargs):
        seen.extend(conversations)
        return generate(conversations, *args, **kwargs)

    mixture.runtime.generate = spy
    [answer] = mixture.answer([Turn(messages, WEATHER)], keep_for_feedback=False)
    assert answer.specialist == "agent" and answer.route.decided_by == "rules"
    tokenizer = mixture.runtime.tokenizer
    served = tokenizer.apply_chat_template(seen[0], add_generation_prompt=True, tokenize=False)
    trained = tokenizer.apply_chat_template(messages, tools=WEATHER, chat_template=training_chat_template(),
                                            add_generation_prompt=True, tokenize=False)
    assert served == trained and '"name": "get_weather"' in served
    assert logged(ws)[0]["tools"] == WEATHER and logged(ws)[0]["messages"][0] == messages[0]


def test_chat_tools_file_sends_the_turn_to_the_agent_and_bad_files_exit_2(ws, tmp_path):
    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  chat: {}\n"
                                              "  agent: {tool_use: true}\n")
    tools = tmp_path / "tools.json"
    tools.write_text(json.dumps(WEATHER))
    result = run_mint("chat", "is it going to rain", "--tools", str(tools), "--max-new-tokens", "2", "--json")
    assert result.returncode == 0, result.stderr
    assert (json.loads(result.stdout)["specialist"], json.loads(result.stdout)["decided_by"]) == ("agent", "rules")
    assert logged(ws)[0]["tools"] == WEATHER
    for text, where in [('[{"type": "function",\n "function": {"name": }}]', f"{tools}:2: "),
                        ('[{"type": "function", "function": {"description": "no name"}}]',
                         f"{tools}: [0].function.name: "),
                        ("[]", f"{tools}: expected a JSON list"),
                        ("[" * 100000, f"{tools}: not JSON this program can read")]:
        tools.write_text(text)
        result = run_mint("chat", "is it going to rain", "--tools", str(tools))
        assert result.returncode == 2 and where in result.stderr and "Traceback" not in result.stderr, result.stderr
    result = run_mint("chat", "hi", "--tools", str(tmp_path / "missing.json"))
    assert result.returncode == 2 and "missing.json" in result.stderr and "Traceback" not in result.stderr


def test_text_that_is_not_unicode_exits_2_naming_its_field_and_the_repl_carries_on(ws, tmp_path):
    import os
    import subprocess
    import sys

    (ws.home.parent / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  chat: {}\n"
                                              "  agent: {tool_use: true}\n")
    # "\udcff" reaches the child as the byte 0xff, which is not UTF-8; "\\ud83d" in JSON is half an emoji
    tools = tmp_path / "tools.json"
    tools.write_text('[{"type": "function", "function": {"name": "sun\\ud83d", "parameters": {}}}]')
    for args, field in [(["hi \udcff"], "PROMPT: "), (["hi", "--system", "\udcff"], "--system: "),
                        (["hi", "--tools", str(tools)], f"{tools}: [0].function.name: ")]:
        result = run_mint("chat", *args, "--max-new-tokens", "2")
        assert result.returncode == 2, result.stderr
        assert field + "a lone surrogate" in result.stderr and "Traceback" not in result.stderr, result.stderr
    script = b"hello\nhalf \xff an emoji\n/correct \xfe\n/feedback +1\nagain\n/quit\n"
    result = subprocess.run([sys.executable, "-m", "mint", "chat", "--max-new-tokens", "2"], input=script,
                            capture_output=True, env=dict(os.environ), cwd=ws.home.parent, timeout=300)
    stderr = result.stderr.decode("utf-8", "replace")
    assert result.returncode == 0, stderr
    assert "message: a lone surrogate" in stderr and "/correct: a lone surrogate" in stderr
    turns = logged(ws)
    assert [t["messages"][-2]["content"] for t in turns] == ["hello", "again"]
    assert [t["feedback"] for t in turns] == [{"rating": 1, "correction": None}, {"rating": None, "correction": None}]


def test_a_mistyped_specialist_command_gets_a_did_you_mean():
    from types import SimpleNamespace

    from mint.mol.chat import ChatSession

    event = ChatSession(SimpleNamespace(project=DEFAULT_PROJECT)).handle("/specialist codng")
    assert event.kind == "error" and "did you mean coding?" in event.message
