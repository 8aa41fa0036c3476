"""The experience step: the champion answers logged prompts under the prompt it was trained with."""
import json

import pytest

from mint.harness.agent import AgentHarness
from mint.harness.base import HarnessSettings

TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city.",
                                          "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                                                         "required": ["city"]}}}]
USER = {"role": "user", "content": "Weather in Paris?"}
CORRECTION = '{"name": "get_weather", "arguments": {"city": "Paris"}}'


def renamed_tool_specialist(project, name: str):
    """``project`` with its agent called ``name`` (harness: agent)."""
    from dataclasses import replace

    return replace(project, specialists=tuple(replace(s, name=name, harness="agent") if s.name == "agent" else s
                                              for s in project.specialists))


@pytest.mark.parametrize("name", ["agent", "tools"])
def test_an_agent_answers_its_logged_prompts_seeing_the_tools_it_may_call_and_stops_after_the_call(
        ws, project, tmp_path, monkeypatch, name):
    """Whatever the project calls its specialist with the agent harness (`tools` here), with no contract to name
    the harness, experience verifies, stops and repairs its answers as the agent harness does."""
    from mint.data.ingest import ingest
    from mint.loop.experience import gather_experience
    from mint.generation import engine as generate

    project = renamed_tool_specialist(project, name)

    log = tmp_path / "app.jsonl"
    # thumbs-down answers corrected to the call: requests without an accepted answer, so experience draws them
    log.write_text("".join(json.dumps({"messages": [user, {"role": "assistant", "content": "I cannot say."}],
                                       "tools": TOOLS, "specialist": name,
                                       "feedback": {"rating": -1, "correction": CORRECTION}}) + "\n"
                           for user in (USER, {"role": "user", "content": "And in Rome?"})))
    ingest(ws, [log], dataset="logs", project=project)
    shown, stops = [], []

    def answer_with_the_call(model, tokenizer, conversations, settings, *args, **kwargs):
        shown.extend(conversations)
        stops.append(kwargs.get("answer_end"))
        # the call the request asks for: the verifier wants the city the user named
        return [[json.dumps({"name": "get_weather", "arguments": {"city": "Rome" if "Rome" in c[-1]["content"]
                                                                  else "Paris"}})] for c in conversations], [0.0]

    monkeypatch.setattr(generate, "generate_batches", answer_with_the_call)
    result = gather_experience(ws, dataset="logs", specialist=name, base="tiny-random", project=project,
                               samples=1, prompts=2, max_new_tokens=4, repair=True)
    listing = AgentHarness(HarnessSettings()).system({"messages": [USER], "tools": TOOLS})
    assert [{"role": "system", "content": listing}, USER] in shown and len(shown) == 2
    assert stops == [("json", "fence", "tool_call")]
    assert result.passed == 2   # both corrections are the call it makes
    # the agent's answers have no repair: said, not silently ignored
    assert result.repaired == 0 and result.repair_skipped == "the agent harness has no repair for its answers"


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


# --- where prompts come from ----------------------------------------------------------------------------

from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from mint.errors import BadInput  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"
TREE = '{"type": "Text", "props": {"text": "Done."}}'
# answers the GenUI verifier passes (the tree each request asks for): "Done." for everything is what it refuses
# (the form draws its own submit button: a Button child saying "Submit" again would show it twice)
LOGIN_FORM = ('{"type": "Form", "props": {"title": "Login", "submitLabel": "Submit"}, "children": [{"type": "TextField", '
              '"props": {"label": "Email", "name": "email", "inputType": "email", "required": true}}]}')
PRICE_LIST = '{"type": "List", "props": {"title": "Price list", "items": ["Tea $2", "Cake $4"]}}'
PRICES = '{"type": "List", "props": {"title": "Prices", "items": ["Soup $5"]}}'
CHART = ('{"type": "Chart", "props": {"title": "Sales chart", "kind": "bar", "labels": ["A", "B"], '
         '"series": [{"name": "sales", "values": [1, 2]}]}}')


def _ingest(ws, project, tmp_path, rows, dataset="d"):
    from mint.data.ingest import ingest

    path = tmp_path / f"{dataset}-{len(rows)}.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ingest(ws, [path], dataset=dataset, project=project)


def _genui(user, answer=None, **feedback):
    messages = [{"role": "user", "content": user}] + ([{"role": "assistant", "content": answer}]
                                                      if answer is not None else [])
    return {"messages": messages, "specialist": "genui",
            "feedback": {"rating": feedback.get("rating"), "correction": feedback.get("correction")}}


def _answer_with(monkeypatch, outputs, seen=None):
    """Stand in for the model: each prompt gets ``outputs`` (a list, or a function of the prompt's text)."""
    from mint.generation import engine as generate

    def fake(model, tokenizer, conversations, settings, *args, **kwargs):
        if seen is not None:
            seen.extend(c[-1]["content"] for c in conversations)
        return [list(outputs(c[-1]["content"]) if callable(outputs) else outputs) for c in conversations], [0.0]

    monkeypatch.setattr(generate, "generate_batches", fake)


def test_served_turns_in_the_logs_become_experience_episodes_of_the_dataset(ws, project, tmp_path, monkeypatch):
    from mint.data.datasets import iter_episodes
    from mint.loop.experience import gather_experience
    from mint.mol.turnlog import TurnLog

    _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)])
    # the turn as the mixture logs it: the client's history at weight 0, the served answer, no feedback yet
    TurnLog(ws).append({"id": "t1", "ts": "2026-12-01T00:00:00Z", "specialist": "genui", "session": None,
                        "messages": [{"role": "user", "content": "Show a login form with a submit button."},
                                     {"role": "assistant", "content": "{"}],
                        "feedback": {"rating": None, "correction": None}, "served_by": "genui:v1",
                        "route": {}, "latency_ms": 5.0})
    _answer_with(monkeypatch, [LOGIN_FORM, TREE])
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               samples=2, sources=["served"])
    assert result.sources["served"]["kept"] == 1 and result.prompts == 1
    assert result.sources["served"]["accepted"] == 1      # where the next generation's examples came from
    learned = [e for e in iter_episodes(ws, "d", result.version) if e["feedback"]["rating"] == 1
               and e["messages"][0]["content"] == "Show a login form with a submit button."]
    assert [e["messages"][-1]["content"] for e in learned] == [LOGIN_FORM]   # not "Done.", which fails it


def test_unaccepted_requests_are_drawn_and_accepted_ones_are_not(ws, project, tmp_path, monkeypatch):
    from mint.loop.experience import gather_experience

    _ingest(ws, project, tmp_path, [_genui("Thumbs down here.", "{}", rating=-1),
                                    _genui("Corrected here.", "{}", rating=-1, correction=TREE),
                                    _genui("Never answered.", ""),
                                    _genui("Already answered.", TREE, rating=1),
                                    _genui("Answered, unrated.", TREE)])
    seen = []
    _answer_with(monkeypatch, [TREE], seen)
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               samples=1, sources=["unaccepted"])
    assert sorted(seen) == ["Corrected here.", "Never answered.", "Thumbs down here."]
    assert result.sources["unaccepted"]["kept"] == 3


def test_a_jsonl_source_gives_prompts_in_either_form_and_a_bad_line_names_its_line_and_field(tmp_path):
    from mint.loop.experience import jsonl_prompts

    good = tmp_path / "requests.jsonl"
    good.write_text(json.dumps({"messages": [{"role": "user", "content": "A"}]}) + "\n\n"
                    + json.dumps({"prompt": "B", "reference": "b"}) + "\n")
    prompts = jsonl_prompts(good)
    assert [p.prompt[-1]["content"] for p in prompts] == ["A", "B"] and prompts[1].reference == "b"
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"prompt": "A"}) + "\n" + json.dumps({"text": "B"}) + "\n")
    with pytest.raises(BadInput) as caught:
        jsonl_prompts(bad)
    assert (caught.value.file, caught.value.line, caught.value.field) == (str(bad), 2, "messages")


def test_a_task_generator_that_is_not_installed_is_skipped_with_its_reason(ws, project, tmp_path, monkeypatch):
    import sys

    from mint.loop.experience import gather_experience

    monkeypatch.setitem(sys.modules, "reasoning_gym", None)    # import fails as when it is not installed
    _ingest(ws, project, tmp_path, [_genui("Already answered.", TREE)])
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               sources=[{"generator": "basic_arithmetic", "count": 2}])
    assert "not installed" in result.skipped_sources["generator:basic_arithmetic"] and result.prompts == 0


def test_an_installed_task_generator_gives_its_questions_with_their_answers_as_references(monkeypatch):
    import sys
    import types

    from mint.loop.experience import generator_prompts

    fake = types.SimpleNamespace(create_dataset=lambda name, size, seed: [
        {"question": f"{name} {seed} #{i}", "answer": str(i)} for i in range(size)])
    monkeypatch.setitem(sys.modules, "reasoning_gym", fake)
    prompts, why = generator_prompts("sums", 2, seed=7)
    assert why is None and [(p.prompt[0]["content"], p.reference, p.source) for p in prompts] == [
        ("sums 7 #0", "0", "generator:sums"), ("sums 7 #1", "1", "generator:sums")]


def test_held_out_prompts_never_enter_experience(ws, project, tmp_path, monkeypatch):
    from mint.data.datasets import is_heldout
    from mint.loop.experience import gather_experience

    suite = [json.loads(line) for line in (ROOT / "examples" / "heldout" / "genui.jsonl").read_text().splitlines()]
    in_suite = next(m["content"] for m in suite[0]["messages"] if m["role"] == "user")
    heldout_side = next(f"Request {i}" for i in range(1000) if is_heldout({"messages": [{"role": "user",
                                                                                        "content": f"Request {i}"}]}))
    requests = tmp_path / "requests.jsonl"
    requests.write_text("".join(json.dumps({"prompt": p}) + "\n"
                                for p in ("  " + in_suite.upper() + " ", heldout_side, "A fresh request.")))
    _ingest(ws, project, tmp_path, [_genui("Already answered.", TREE)])
    seen = []
    _answer_with(monkeypatch, [TREE], seen)
    recipe_dir = tmp_path
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               samples=1, sources=[{"jsonl": "requests.jsonl"}], contracts=[SMOKE_CONTRACT],
                               recipe_dir=recipe_dir)
    assert seen == ["A fresh request."]
    assert result.sources["jsonl:requests.jsonl"]["heldout"] == 2


def test_only_distinct_passing_answers_are_kept_up_to_the_cap_per_prompt():
    from mint.loop.experience import canonical_answer, distinct_answers

    spaced = '{"props": {"text": "Done."},   "type": "Text"}'
    assert canonical_answer(spaced) == canonical_answer(TREE)
    other = '{"type": "Text", "props": {"text": "Hello."}}'
    third = '{"type": "Text", "props": {"text": "Bye."}}'
    assert distinct_answers([TREE, spaced, "a  b", "a b", other, third], cap=3) == [TREE, "a  b", other]
    assert distinct_answers([TREE, spaced, other, third], cap=2) == [TREE, other]


def test_pass_at_k_is_the_unbiased_estimate_and_counts_prompts_strictly_between():
    from mint.harness.base import pass_at_k
    from mint.loop.experience import pool_statistics

    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)       # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 0, 2) == 0.0 and pass_at_k(4, 3, 2) == 1.0
    pool = pool_statistics([(4, 0), (4, 1), (4, 4)], k=4)
    assert pool["pass@1"] == pytest.approx((0 + 0.25 + 1) / 3, abs=1e-4) and pool["pass@4"] == pytest.approx(2 / 3,
                                                                                                           abs=1e-4)
    assert (pool["prompts_between"], pool["prompts_always"], pool["prompts_never"]) == (1, 1, 1)


def test_passing_and_failing_answers_to_one_prompt_become_dpo_pairs(ws, project, tmp_path, monkeypatch):
    from mint.data.datasets import iter_episodes
    from mint.loop.experience import gather_experience
    from mint.train.examples import method_rows

    _ingest(ws, project, tmp_path, [_genui("Show a price list.", "{}", rating=-1),
                                    _genui("Show a chart.", "{}", rating=-1)])
    other = PRICES
    _answer_with(monkeypatch, lambda text: [PRICE_LIST, "nope", other, "nope "] if "price" in text else [CHART, CHART])
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               samples=4, per_prompt=2, sources=["unaccepted"])
    assert result.pool["pass@1"] == pytest.approx((0.5 + 1.0) / 2) and result.pool["prompts_between"] == 1
    assert result.accepted == 3 and result.dpo_pairs == 1       # "nope" and "nope " are one failing answer
    rows = method_rows("dpo", [e for e in iter_episodes(ws, "d", result.version)
                               if e["served_by"] == result.served_by])
    assert {(r["chosen"][0]["content"], r["rejected"][0]["content"]) for r in rows} == {(PRICE_LIST, "nope"),
                                                                                        (other, "nope")}


def test_a_request_the_training_data_already_answers_is_not_drawn_from_any_source(ws, project, tmp_path, monkeypatch):
    from mint.loop.experience import gather_experience

    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n"
                                                     for p in ("already  ANSWERED.", "A new one.")))
    _ingest(ws, project, tmp_path, [_genui("Already answered.", TREE)])
    seen = []
    _answer_with(monkeypatch, [TREE], seen)
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               samples=1, sources=[{"jsonl": "requests.jsonl"}], recipe_dir=tmp_path)
    assert seen == ["A new one."] and result.sources["jsonl:requests.jsonl"]["answered"] == 1


def test_new_served_turns_or_a_changed_source_file_make_the_loop_gather_experience_again(ws, tmp_path):
    from mint.loop.experience import experience_inputs
    from mint.mol.turnlog import TurnLog

    requests = tmp_path / "requests.jsonl"
    requests.write_text('{"prompt": "A"}\n')
    options = {"sources": ["served", {"jsonl": "requests.jsonl"}]}
    before = experience_inputs(ws, options, tmp_path)
    TurnLog(ws).append({"id": "t1", "specialist": "genui", "messages": [{"role": "user", "content": "B"}]})
    served = experience_inputs(ws, options, tmp_path)
    requests.write_text('{"prompt": "A"}\n{"prompt": "C"}\n')
    assert len({json.dumps(x) for x in (before, served, experience_inputs(ws, options, tmp_path))}) == 3
    assert experience_inputs(ws, {"sources": ["unaccepted"]}, tmp_path) == []


def _decoded_settings(monkeypatch, field: str) -> list:
    """Every sampling call's ``settings.FIELD``, in order; each answers a login form without decoding."""
    from mint.generation import engine as generate

    seen = []

    def fake(model, tokenizer, conversations, settings, *args, **kwargs):
        seen.append(getattr(settings, field))
        return [[LOGIN_FORM] for _ in conversations], [0.0]

    monkeypatch.setattr(generate, "generate_batches", fake)
    return seen


def test_the_pool_decodes_as_many_rows_side_by_side_as_the_hardware_plan_says(ws, project, tmp_path, monkeypatch):
    from mint import hardware
    from mint.loop import experience

    _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)])
    batch_sizes = _decoded_settings(monkeypatch, "batch_size")
    for measured, expected in ((24, 24), (None, experience.SAMPLING_ROWS)):
        rows = tmp_path / f"requests-{measured}.jsonl"    # a new request each time: an answered one is not drawn
        rows.write_text(json.dumps({"prompt": f"Show a login form with a submit button ({measured})."}) + "\n")
        plan = {"rows": hardware.Choice(measured, "test"), "bf16": hardware.Choice(False, "test"),
                "threads": hardware.Choice(2, "test")}
        monkeypatch.setattr(hardware, "decoding_plan", lambda _hardware, plan=plan: plan)
        experience.gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                                     samples=2, sources=[{"jsonl": str(rows)}])
        assert len(batch_sizes) == 1 + (measured is None) and batch_sizes[-1] == expected
    # the step's sample_rows, where it gives them, over the plan's
    rows = tmp_path / "requests-asked.jsonl"
    rows.write_text(json.dumps({"prompt": "Show a login form with a submit button (asked)."}) + "\n")
    experience.gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                                 samples=2, sources=[{"jsonl": str(rows)}], sample_rows=96)
    assert batch_sizes[-1] == 96


def test_the_newest_served_turns_come_first_under_the_prompts_cap(ws, project, tmp_path, monkeypatch):
    from mint.loop.experience import gather_experience
    from mint.mol.turnlog import TurnLog

    _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)])
    for n, request in enumerate(("Show a login form with a submit button.", "Show a signup form with a submit button.")):
        TurnLog(ws).append({"id": f"t{n}", "ts": f"2026-12-01T00:0{n}:00Z", "specialist": "genui", "session": None,
                            "messages": [{"role": "user", "content": request}, {"role": "assistant", "content": "{"}],
                            "feedback": {"rating": None, "correction": None}, "served_by": "genui:v1",
                            "route": {}, "latency_ms": 5.0})
    seen = []
    _answer_with(monkeypatch, [TREE], seen)
    gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project, samples=1,
                      prompts=1, sources=["served"])
    assert seen == ["Show a signup form with a submit button."]   # what users ask now, not the older turn


def test_the_same_served_requests_are_sampled_alike_whatever_order_they_were_logged_in(project, tmp_path,
                                                                                      monkeypatch):
    """A sample's seed follows its request's place among those sampled; a server logs its turns in the order it
    answered its clients, which differs from run to run: the requests are sampled in an order of their own."""
    from mint.loop.experience import gather_experience
    from mint.mol.turnlog import TurnLog
    from mint.workspace import workspace

    requests = ["Show a login form with a submit button.", "Show a signup form with a submit button.",
                "Show a stat card for revenue with a details button."]
    orders = []
    for run, logged in enumerate((requests, requests[::-1])):
        home = tmp_path / f"run{run}"
        monkeypatch.setenv("MINT_HOME", str(home / ".mint"))
        monkeypatch.chdir(tmp_path)
        ws = workspace(home / ".mint")
        _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)], dataset="d")
        for n, request in enumerate(logged):
            TurnLog(ws).append({"id": f"t{n}", "ts": f"2026-12-01T00:0{n}:00Z", "specialist": "genui",
                                "session": None, "messages": [{"role": "user", "content": request},
                                                              {"role": "assistant", "content": "{"}],
                                "feedback": {"rating": None, "correction": None}, "served_by": "genui:v1",
                                "route": {}, "latency_ms": 5.0})
        seen = []
        _answer_with(monkeypatch, [TREE], seen)
        gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project, samples=1,
                          sources=["served"])
        orders.append(seen)
    assert orders[0] == orders[1] and sorted(orders[0]) == sorted(requests)


def test_a_repaired_answer_is_accepted_only_when_the_verifier_passes_it_and_pairs_with_its_broken_answer(
        ws, project, tmp_path, monkeypatch):
    from mint.data.datasets import iter_episodes
    from mint.loop.experience import canonical_answer, gather_experience
    from mint.train.examples import method_rows

    _ingest(ws, project, tmp_path, [_genui("Show a price list.", "{}", rating=-1),
                                    _genui("Show a chart.", "{}", rating=-1)])
    broken_list = PRICE_LIST[:-2] + "]"                    # the answer the champion wrote: its closers swapped
    wrong_chart = CHART.replace('"Chart"', '"Chrt"')[:-1]  # repairs into a tree, but not a valid one
    _answer_with(monkeypatch, lambda text: [broken_list, broken_list] if "price" in text else [wrong_chart])
    plain = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                              samples=2, sources=["unaccepted"])
    assert plain.accepted == 0 and plain.repaired == 0 and plain.pool["pass@1"] == 0.0
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                               samples=2, sources=["unaccepted"], repair=True)
    # the pool is the samples as drawn; the repair is one more answer, which passes for the list alone
    assert result.pool["pass@1"] == 0.0 and result.accepted == 1 and result.repaired == 1
    assert result.sources["unaccepted"]["accepted"] == 1 and result.dpo_pairs == 1
    rows = method_rows("dpo", [e for e in iter_episodes(ws, "d", result.version)
                               if e["served_by"] == result.served_by])
    assert [(canonical_answer(r["chosen"][0]["content"]), r["rejected"][0]["content"]) for r in rows] == [
        (canonical_answer(PRICE_LIST), broken_list)]


def test_experience_episodes_are_canonical_episodes_with_their_verdicts_as_ratings():
    from mint.data.schema import Episode
    from mint.loop.experience import ExperiencePrompt, experience_episodes

    prompt = ExperiencePrompt("served", [{"role": "user", "content": "2+2?"}], [{"type": "function", "function": {
        "name": "add", "parameters": {}}}])
    episodes, pairs = experience_episodes("agent", prompt, ["4", "5", "4 "], [True, False, True], 2, "agent:v1")
    assert pairs == 1 and [e["feedback"]["rating"] for e in episodes] == [1, -1]
    for episode in episodes:
        assert episode["id"] == Episode.from_dict(episode).id and episode["specialist"] == "agent"
        assert episode["tools"] == prompt.tools and episode["served_by"] == "agent:v1"


def test_an_experience_as_a_loop_recorded_it_reads_back_typed_and_records_the_same():
    from mint.loop.results import ControlData, ExperienceResult

    # the keys, in their order, the experience step records (those it recorded before its result was a type, then
    # how its samples were decoded)
    record = {"prompts": 2, "answers": 8, "passed": 3, "accepted": 2, "dpo_pairs": 1, "mean_reward": 0.375,
              "served_by": "genui:v1", "sources": {"served": {"offered": 2, "kept": 2, "heldout": 0, "answered": 0,
                                                               "repeated": 0, "over_limit": 0, "accepted": 2}},
              "skipped_sources": {}, "pool": {"pass@1": 0.375, "pass@4": 1.0, "k": 4, "prompts_between": 2,
                                              "prompts_always": 0, "prompts_never": 0},
              "repaired": 0, "file": "/h/experience/d/genui-0123.jsonl", "version": "v2", "episodes_added": 3,
              "new_examples": 2, "logged_examples": 5, "constrained": False, "precision": "fp32",
              "precision_reason": "",
              "twin": {"dataset": "d-twin-genui", "version": "t1", "episodes": 13, "unverified": 8,
                       "steps_control": {"dataset": "d-steps-genui", "version": "s1", "episodes": 5}},
              "plan": {"init": "champion", "max_steps": 2, "learning_rate": 1e-4, "per_device_train_batch_size": 2}}
    gathered = ExperienceResult.from_dict(record)
    assert gathered.twin == ControlData("d-twin-genui", "t1", 13, 8, ControlData("d-steps-genui", "s1", 5))
    assert (gathered.accepted, gathered.pool["pass@4"], gathered.plan["max_steps"]) == (2, 1.0, 2)
    assert gathered.to_dict() == record and list(gathered.to_dict()) == list(record)
    bare = {k: v for k, v in record.items() if k not in ("twin", "plan")}
    assert ExperienceResult.from_dict(bare).to_dict() == bare and ExperienceResult.from_dict(bare).twin is None


def test_a_continuation_replays_logged_answers_beside_its_verified_ones_and_its_twin_the_same(ws, project, tmp_path,
                                                                                              monkeypatch):
    from mint.data.datasets import iter_episodes
    from mint.loop.experience import gather_experience

    logged = [_genui(f"Show a list of prices number {i}.", PRICES, rating=1) for i in range(5)]
    _ingest(ws, project, tmp_path, logged + [_genui("Show a login form with a submit button.", "{}", rating=-1)])
    _answer_with(monkeypatch, [LOGIN_FORM, TREE])
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project, samples=2,
                               sources=["unaccepted"], control=["placebo", "steps"], continuation=True, replay=2)
    assert result.accepted == 1
    trained = [e["messages"][-1]["content"] for e in iter_episodes(ws, result.verified.dataset, None)]
    # the verified answer and two logged answers (2 per verified answer), nothing else
    assert sorted(trained) == sorted([LOGIN_FORM, PRICES, PRICES]) and result.verified.episodes == 3
    twin = [e["messages"] for e in iter_episodes(ws, result.twin.dataset, None)]
    replayed = [e["messages"] for e in iter_episodes(ws, result.verified.dataset, None)
                if e["messages"][-1]["content"] == PRICES]
    # the twin: every sample unverified beside the very logged episodes the generation replays
    assert all(m in twin for m in replayed) and len(twin) == 2 + len(replayed)


def test_a_second_round_samples_from_a_model_trained_on_the_first_and_the_plan_learns_from_both(
        ws, project, tmp_path, monkeypatch, candidate):
    """ReST-EM's rounds inside a generation: round 2 is sampled by a model trained on round 1's verified answers,
    only on the requests round 1 left unanswered, and the generation's plan covers both rounds' answers."""
    from mint.data.datasets import iter_episodes, resolve_version
    from mint.loop.experience import experience_step
    from mint.registry.promotion import promote

    champion = candidate("genui")
    promote(ws, champion.ref, force=True, why="generation 1")
    logged = [_genui(f"Show a list of prices number {i}.", PRICES, rating=1) for i in range(4)]
    _ingest(ws, project, tmp_path, logged + [_genui("Show a login form.", "{}", rating=-1),
                                             _genui("Show a chart.", "{}", rating=-1)])
    rounds, seen = iter([[LOGIN_FORM, TREE], [CHART, TREE]]), []
    calls = []                  # each call's prompts: the first round's model passes the form, the second's the chart

    def answers(text):
        if not calls or text in calls[-1]:
            calls.append(set())
            answers.current = next(rounds)
        calls[-1].add(text)
        return answers.current

    _answer_with(monkeypatch, answers, seen)
    options = {"samples": 2, "sources": ["unaccepted"], "replay": 1, "control": ["placebo", "steps"],
               "min_steps": 1, "max_steps": 2, "rounds": 2}
    before = resolve_version(ws, "d")[1]["version"]          # as the loop gives it: the version the step began at
    result = experience_step(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                             options=options, contracts=[], recipe_dir=tmp_path, version=before)
    first, second = result.rounds
    assert (first["round"], first["sampled_by"], first["accepted"]) == (1, champion.ref, 1)
    assert second["round"] == 2 and second["sampled_by"] not in (champion.ref, None) and second["accepted"] == 1
    assert calls == [{"Show a login form.", "Show a chart."}, {"Show a chart."}]   # the answered form is not redrawn
    verified = list(iter_episodes(ws, result.verified.dataset, result.verified.version))
    answered = {e["messages"][0]["content"]: (e["messages"][-1]["content"], e["served_by"]) for e in verified
                if e["feedback"]["rating"] == 1 and "prices" not in e["messages"][0]["content"]}
    assert answered == {"Show a login form.": (LOGIN_FORM, champion.ref), "Show a chart.": (CHART, second["sampled_by"])}
    assert result.accepted == result.new_examples == 2 and result.verified.episodes == len(verified)
    assert result.plan["data"] == f"{result.verified.dataset}@{result.verified.version}"
    assert result.plan["examples"] == len(verified) and result.twin.unverified == 4 + 2   # every sample of both rounds
    from mint.registry import queries
    assert queries.champion(ws, "genui") == champion.id              # the round's model is a candidate, no more


def test_one_round_is_the_experience_as_before(ws, project, tmp_path, monkeypatch, candidate):
    from mint.loop.experience import experience_step

    _ingest(ws, project, tmp_path, [_genui("Show a login form.", "{}", rating=-1)])
    _answer_with(monkeypatch, [LOGIN_FORM, TREE])
    result = experience_step(ws, dataset="d", specialist="genui", base="tiny-random", project=project,
                             options={"samples": 2, "sources": ["unaccepted"]}, contracts=[], recipe_dir=tmp_path)
    assert result.rounds == () and result.accepted == 1 and result.plan["new_examples"] == 1


# --- what was learnable, per family of requests -------------------------------------------------------------

def test_family_statistics_weigh_each_request_by_the_variance_of_its_outcome_after_repair():
    from mint.loop.experience import RequestOutcome, family_statistics
    from mint.loop.results import FamilyStats

    outcomes = [RequestOutcome("Card", 8, 0, 4, 2),     # within reach only through verified repair
                RequestOutcome("Card", 8, 0, 0, 0),     # never: counted, no answer forced
                RequestOutcome("Card", 8, 8, 8, 2),     # always: teaches little
                RequestOutcome("Table", 8, 2, 2, 1),
                RequestOutcome("Chart", 0, 0, 0, 0)]    # nothing sampled: no family row
    card, table = family_statistics(outcomes, k=4)
    # pass@4 of 4 passes in 8 is 1 - C(4,4)/C(8,4) = 69/70; of 2 passes, 1 - C(6,4)/C(8,4) = 55/70
    assert card == FamilyStats("Card", requests=3, samples=24, k=4, raw_pass_at_1=round(1 / 3, 4),
                               raw_pass_at_k=round(1 / 3, 4), repaired_pass_at_1=0.5,
                               repaired_pass_at_k=round((69 / 70 + 0 + 1) / 3, 4), always=1, sometimes=1, never=1,
                               signal=0.25, accepted=4)
    assert table == FamilyStats("Table", 1, 8, 4, 0.25, round(55 / 70, 4), 0.25, round(55 / 70, 4), 0, 1, 0,
                                0.1875, 1)
    assert (card.reading, table.reading) == ("within reach", "within reach")
    assert FamilyStats("Form", 2, 16, 8, 0.0, 0.0, 0.0, 0.0, 0, 0, 2, 0.0, 0).reading == "beyond reach"
    assert FamilyStats("List", 2, 16, 8, 1.0, 1.0, 1.0, 1.0, 2, 0, 0, 0.0, 4).reading == "solved"


def test_each_request_counts_its_samples_as_drawn_and_after_verified_repair_per_family(ws, project, tmp_path,
                                                                                      monkeypatch):
    from mint.loop.experience import gather_experience

    _ingest(ws, project, tmp_path, [_genui(text, "{}", rating=-1) for text in
                                    ("Show a price list.", "Show a chart.", "Show a login form.", "Say hello to the team.")])
    broken_list = PRICE_LIST[:-2] + "]"     # its repair is PRICE_LIST itself: one passing answer, twice over
    broken_chart = CHART.replace("[1, 2]", "[3, 4]")[:-2]    # cut off: its repair is a new passing answer
    answers = {"Show a price list.": [PRICE_LIST, broken_list, "nope", "nope"],
               "Show a chart.": [CHART, broken_chart, CHART, CHART],
               "Show a login form.": ["nope"] * 4, "Say hello to the team.": ["{}"] * 4}
    _answer_with(monkeypatch, lambda text: answers[text])
    result = gather_experience(ws, dataset="d", specialist="genui", base="tiny-random", project=project, samples=4,
                               per_prompt=2, sources=["unaccepted"], repair=True)
    families = {f.family: f for f in result.families}
    assert sorted(families) == ["Chart", "Form", "List", "genui"]    # "Say hello to the team." names no component
    chart, form, listed, other = (families[name] for name in ("Chart", "Form", "List", "genui"))
    assert (listed.raw_pass_at_1, listed.repaired_pass_at_1, listed.sometimes, listed.signal, listed.accepted) == (
        0.25, 0.5, 1, 0.25, 1)
    assert (chart.raw_pass_at_1, chart.repaired_pass_at_1, chart.always, chart.signal, chart.accepted) == (
        0.75, 1.0, 1, 0.0, 2)
    assert (form.never, form.repaired_pass_at_k, form.accepted, other.never) == (1, 0.0, 0, 1)
    assert sum(f.accepted for f in result.families) == result.accepted == 3
    assert sum(f.samples for f in result.families) == result.answers == 16


def test_an_experience_with_families_records_them_and_its_summary_carries_them():
    from mint.loop.experience import experience_summary
    from mint.loop.results import ExperienceResult, FamilyStats

    card = FamilyStats("Card", 3, 24, 8, 0.0, 0.0, 0.125, 0.5, 0, 2, 1, 0.4375, 3)
    gathered = ExperienceResult(prompts=3, served_by="genui:v1", pool={"pass@1": 0.0}, logged_examples=5,
                                families=(card,))
    recorded = gathered.to_dict()
    assert recorded["families"] == [{"family": "Card", "requests": 3, "samples": 24, "k": 8, "raw_pass_at_1": 0.0,
                                     "raw_pass_at_k": 0.0, "repaired_pass_at_1": 0.125, "repaired_pass_at_k": 0.5,
                                     "always": 0, "sometimes": 2, "never": 1, "signal": 0.4375, "accepted": 3}]
    assert ExperienceResult.from_dict(json.loads(json.dumps(recorded))) == gathered
    assert experience_summary(gathered)["families"] == [card]        # typed until the loop's state writes it


def test_constrained_samples_decode_inside_the_catalog_and_the_unconstrained_do_not(ws, project, tmp_path):
    """On the random tiny base the free samples are noise; constrained, every sample is the start of a catalog
    tree as the logs write them (compact JSON), and one that ended before its token limit is a whole valid one."""
    from mint.harness.genui import load_catalog
    from mint.loop import experience

    _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)])
    chosen = [experience.ExperiencePrompt("jsonl:r", [{"role": "user", "content": "Show a login form."}])]
    kwargs = dict(samples=3, temperature=1.0, max_new_tokens=48, seed=0)
    free = experience._sample(ws, None, "tiny-random", "genui", chosen, **kwargs)[0]
    shapes = experience._answer_shapes([SMOKE_CONTRACT], chosen)
    constrained = experience._sample(ws, None, "tiny-random", "genui", chosen, shapes=shapes, **kwargs)[0]
    assert not any(text.startswith('{"type":"') for text in free)
    assert all(text.startswith('{"type":"') for text in constrained), constrained
    _schema, validator, _required = load_catalog()
    for text in constrained:
        try:
            tree = json.loads(text)
        except ValueError:
            continue          # cut at the token limit
        assert validator.is_valid(tree)


def test_a_constrained_step_whose_harness_gives_answers_no_shape_is_refused(ws, project, tmp_path, monkeypatch):
    from mint.loop.experience import gather_experience

    _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)])
    rows = tmp_path / "agent.jsonl"
    rows.write_text(json.dumps({"prompt": "Weather in Oslo?"}) + "\n")
    _answer_with(monkeypatch, [CORRECTION])
    with pytest.raises(BadInput) as caught:
        gather_experience(ws, dataset="d", specialist="agent", base="tiny-random", project=project, samples=2,
                          sources=[{"jsonl": str(rows)}], constrained=True,
                          contracts=[ROOT / "contracts" / "agent.yaml"])
    assert caught.value.field == "constrained"


def test_auto_precision_samples_in_bf16_where_the_hardware_plan_finds_it_faster(ws, project, tmp_path, monkeypatch):
    from mint import hardware
    from mint.loop import experience

    _ingest(ws, project, tmp_path, [_genui("Show a greeting card.", TREE)])
    precisions = _decoded_settings(monkeypatch, "precision")
    for faster in (True, False):
        rows = tmp_path / f"requests-{faster}.jsonl"     # a new request each time: an answered one is not drawn
        rows.write_text(json.dumps({"prompt": f"Show a login form with a submit button ({faster})."}) + "\n")
        plan = {"rows": hardware.Choice(8, "test"), "bf16": hardware.Choice(faster, "test"),
                "threads": hardware.Choice(2, "test")}
        monkeypatch.setattr(hardware, "decoding_plan", lambda _hardware, plan=plan: plan)
        result = experience.gather_experience(ws, dataset="d", specialist="genui", base="tiny-random",
                                              project=project, samples=2, sources=[{"jsonl": str(rows)}],
                                              precision="auto")
        assert result.precision == ("bf16" if faster else "fp32") == precisions[-1]
