"""The next generation's training plan, and the placebo twin that tells a verified gain from extra steps."""
import json
from pathlib import Path

import pytest

from mint.loop import experience
from mint.loop.placebo import (EXPERIENCE_EFFECT, NO_EXPERIENCE_EFFECT, compare_with_twin, planned_settings,
                                training_plan, with_steps_control)
from mint.loop.results import EvalOutput
from mint.loop.runner import run_loop
from mint.registry import store
from mint.registry.report import GateResult, PairedDelta, ReportBaseline
from mint.train.config import SettingsOverride

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"
LOGS = ROOT / "examples" / "logs" / "server_log.jsonl.gz"
TREE = '{"type": "Text", "props": {"text": "Done."}}'
# what each request of the twin test asks for, as the GenUI verifier judges it ("Done." builds neither)
ANSWERS = {"Show a signup form.": '{"type": "Form", "props": {"title": "Signup", "submitLabel": "Sign up"}, "children": '
                                  '[{"type": "TextField", "props": {"label": "Email", "name": "email", '
                                  '"inputType": "email", "required": true}}]}',
           "Show a weather card for Oslo.": '{"type": "Card", "props": {"title": "Weather in Oslo"}, "children": '
                                            '[{"type": "Text", "props": {"text": "Sunny, 12 C"}}]}'}


def test_a_continuation_learns_the_new_examples_at_a_lower_rate_than_a_retraining_from_the_base():
    continuation = training_plan(new_examples=10, logged_examples=40, init="champion")
    retraining = training_plan(new_examples=10, logged_examples=40, init="base")
    assert continuation["learning_rate"] < retraining["learning_rate"]
    assert (continuation["examples"], continuation["max_steps"]) == (10, 5)           # 2 epochs of 10 at batch 4
    assert (retraining["examples"], retraining["max_steps"]) == (50, 24)              # 25 steps, capped at 24
    assert training_plan(new_examples=0, logged_examples=40)["max_steps"] == 0        # nothing new: no plan
    # a continuation learns from the verified answers' own dataset; from the base, the logs' dataset
    assert training_plan(new_examples=10, logged_examples=40, data="d-verified-genui@abc")["data"] == \
        "d-verified-genui@abc"
    assert "data" not in training_plan(new_examples=10, logged_examples=40, init="base", data="d-verified-genui@abc")


def test_the_plan_replaces_the_recipes_steps_rate_and_batch_and_keeps_the_rest():
    plan = training_plan(new_examples=3, logged_examples=0, batch_size=2, min_steps=1)
    recipe = SettingsOverride(trl={"max_steps": 36, "learning_rate": 0.001, "max_length": 96}, lora={"r": 4})
    assert planned_settings(plan, recipe) == SettingsOverride(
        trl={"max_steps": 3, "learning_rate": 0.0001, "max_length": 96, "per_device_train_batch_size": 2},
        lora={"r": 4})


def _evaluated(report: str) -> EvalOutput:
    """The eval step's result for ``report``: its gate paired the candidate with its baseline, +0.5 [0.1, 0.8]."""
    return EvalOutput("genui:v2", "r2", report, "pass", {"core.parse_rate": 1.0}, ReportBaseline("r1", {}),
                      (GateResult("core.parse_rate", 1.0, 0.5, "no_regression 0", True,
                                  PairedDelta(4, 0.5, 0.1, 0.8, "paired-bootstrap")),))


def _evaluation(folder: Path, scores: list[float]) -> str:
    folder.mkdir(parents=True)
    (folder / "predictions.jsonl").write_text("".join(
        json.dumps({"suite": "core", "index": i, "key": f"k{i}", "scores": {"parse_rate": s}}) + "\n"
        for i, s in enumerate(scores)))
    (folder / "report.json").write_text("{}")
    return str(folder / "report.json")


@pytest.mark.parametrize("twin_wins_lost, verdict", [(2, "no experience effect"), (12, "experience effect")])
def test_a_gain_over_the_twin_counts_only_when_its_interval_is_above_zero(tmp_path, twin_wins_lost, verdict):
    ours = _evaluation(tmp_path / "candidate", [1.0] * 12)
    twin = _evaluation(tmp_path / "twin", [0.0] * twin_wins_lost + [1.0] * (12 - twin_wins_lost))
    evaluation = _evaluated(ours)
    result = compare_with_twin(evaluation, twin)
    assert result["verdict"] == verdict
    assert result["vs_twin"]["n"] == 12 and result["vs_twin"]["delta"] == pytest.approx(twin_wins_lost / 12, abs=1e-4)
    assert result["vs_previous"] == {"delta": 0.5, "interval": [0.1, 0.8]}
    low, high = result["vs_twin"]["interval"]
    assert low <= result["vs_twin"]["delta"] <= high


@pytest.mark.parametrize("control_wins_lost, verdict", [(2, NO_EXPERIENCE_EFFECT), (12, EXPERIENCE_EFFECT)])
def test_a_gain_over_the_twin_that_the_same_steps_on_the_logs_also_give_is_no_experience_effect(
        tmp_path, control_wins_lost, verdict):
    ours = _evaluation(tmp_path / "candidate", [1.0] * 12)
    twin = _evaluation(tmp_path / "twin", [0.0] * 12)
    control = _evaluation(tmp_path / "control", [0.0] * control_wins_lost + [1.0] * (12 - control_wins_lost))
    evaluation = _evaluated(ours)
    compared = compare_with_twin(evaluation, twin)
    assert compared["verdict"] == EXPERIENCE_EFFECT            # the twin alone would call it an effect
    result = with_steps_control(compared, evaluation, control)
    assert result["verdict"] == verdict and result["vs_twin"] == compared["vs_twin"]
    vs_control = result["steps_control"]["vs_control"]
    assert vs_control["n"] == 12 and vs_control["delta"] == pytest.approx(control_wins_lost / 12, abs=1e-4)
    assert ("training longer" in result.get("why", "")) == (verdict == NO_EXPERIENCE_EFFECT)


RECIPE = """\
# Run: mint loop r.yaml
recipe: twin
base: tiny-random
dataset: smoke
loop: {{iterations: 2}}
steps:
  - ingest: {{sources: [{logs}]}}
  - experience: {{specialist: genui, samples: 2, prompts: 2, max_new_tokens: 8, from_iteration: 2,
                 control: [placebo, steps],
                 sources: [{{jsonl: requests.jsonl}}], batch_size: 2, min_steps: 1, max_steps: 1}}
  - train: {{specialist: genui, method: sft, plan: experience, set: {{max_steps: 1, per_device_train_batch_size: 2,
              max_length: 96, lora.r: 2}}}}
  - eval: {{specialist: genui, contract: {contract}}}
  - controls: {{specialist: genui{controls}}}
  - promote: {{specialist: genui}}
"""


def test_control_trains_a_placebo_twin_on_unverified_answers_and_never_promotes_it(ws, tmp_path, monkeypatch, capsys):
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n"
                                                     for p in ("Show a signup form.", "Show a weather card for Oslo.")))
    path = tmp_path / "twin.yaml"
    path.write_text(RECIPE.format(logs=LOGS, contract=SMOKE_CONTRACT, controls=""))
    # the tiny random base never writes a valid tree: answer one valid and one broken sample per prompt
    monkeypatch.setattr(experience, "_sample", lambda ws, champion, base, specialist, chosen, **kw:
                        [[ANSWERS[p.prompt[-1]["content"]], "{broken"] for p in chosen])
    from mint.generation import engine

    streams, decode = [], engine.generate_each
    monkeypatch.setattr(engine, "generate_each", lambda model, tokenizer, conversations, settings, slots, *args, **kw:
                        streams.append(len(slots)) or decode(model, tokenizer, conversations, settings, slots, *args,
                                                             **kw))
    result = run_loop(ws, path)
    # generation 1 decodes beside its baseline (the bare base), generation 2 alone (its baseline, generation 1, has a
    # report: nothing decodes twice), then, as it passed, its placebo twin and steps control in one stream
    assert streams == [2, 1, 2]
    ran = {(s.iteration, s.label): s.output for s in result.steps if s.status in ("ran", "failed")}
    gathered = ran[(2, "experience genui")]
    assert gathered["accepted"] == 2 and gathered["twin"]["unverified"] == 4        # every sample, the broken too
    trained = ran[(2, "train genui")]
    assert trained["plan"]["learning_rate"] == 1.0e-4 and trained["steps"] == 1 == trained["plan"]["max_steps"]
    assert trained["settings"]["trl"]["learning_rate"] == 0.0001   # the continuation's rate, not the recipe's
    # a continuation learns from the verified answers alone (a dataset of their own), not mixed into the logs
    assert trained["plan"]["data"] == f"smoke-verified-genui@{gathered['verified']['version']}"
    assert gathered["verified"]["episodes"] == gathered["accepted"] == trained["examples"]
    assert "twin" not in ran[(2, "eval genui")]     # the eval step measures the candidate; the controls step the rest
    twin = ran[(2, "controls genui")]["twin"]
    assert twin["steps"] == trained["steps"] and twin["verdict"] == NO_EXPERIENCE_EFFECT   # 4 examples show nothing
    assert len(twin["vs_twin"]["interval"]) == 2 and "vs_previous" in twin
    conn = store.open_store(ws)
    try:
        revision = store.resolve(conn, twin["revision"])
        assert store.alias_target(conn, "genui", "champion") != revision.id and revision.status == "rejected"
        assert revision.parent == store.resolve(conn, trained["parent"]).id
    finally:
        conn.close()
    # each control is decoded on the suite of the contract's first gated metric alone, and says so
    for report_path in (twin["report"], twin["steps_control"]["report"]):
        measured = json.loads(Path(report_path).read_text())
        assert measured["measured_on"]["suites"] == ["core"] and list(measured["examples"]) == ["core"]
        assert "whether the verified experience made the difference" in measured["measured_on"]["why"]
    # the steps control: the same parent and steps on the logs alone (none of the experience), never promoted
    control = twin["steps_control"]
    assert control["steps"] == trained["steps"] and len(control["vs_control"]["interval"]) == 2
    # the continuation's twin learns from every sample alone, as the generation from its verified ones alone
    assert gathered["twin"]["episodes"] == gathered["twin"]["unverified"] == twin["examples"]
    assert control["examples"] == gathered["logged_examples"] > trained["examples"]
    conn = store.open_store(ws)
    try:
        revision = store.resolve(conn, control["revision"])
        assert revision.status == "rejected" and revision.parent == store.resolve(conn, trained["parent"]).id
    finally:
        conn.close()
    assert (2, "promote genui") in ran and ran[(2, "promote genui")]["revision"] not in (twin["revision"],
                                                                                          control["revision"])
    # the loop's generation row carries the pool and the twin, and `mint loop` says the verdict
    row = result.generations[-1]
    assert row.twin["verdict"] == NO_EXPERIENCE_EFFECT and row.experience["pool"]["pass@1"] == 0.5
    assert row.experience["kept_per_source"] == {"jsonl:requests.jsonl": 2}
    from mint.cli.loop import _render_generations

    capsys.readouterr()
    _render_generations(result)
    shown = " ".join(capsys.readouterr().out.split())
    assert f"vs its placebo twin {twin['revision']}" in shown and "no experience effect" in shown
    assert f"vs its steps control {control['revision']} (the same steps on the logs alone)" in shown
    assert "pass@1 0.5, pass@2 1" in shown
    # what was learnable per family of requests (GenUI: the root component each names), and where it is in reach
    assert [(f.family, f.requests, f.raw_pass_at_1, f.sometimes, f.signal, f.accepted)
            for f in row.experience["families"]] == [("Card", 1, 0.5, 1, 0.25, 1), ("Form", 1, 0.5, 1, 0.25, 1)]
    assert "genui (iteration 2) experience: what was learnable per family" in shown
    assert ("genui (iteration 2) experience: within reach: Card (1 of 1 request(s) passed sometimes), Form (1 of 1 "
            "request(s) passed sometimes)") in shown
    # what the loop recorded of each generation, read back as `mint report` reads it, is the summary's table
    from mint.loop.progress import generation_progress

    progress = generation_progress(ws)["genui"]
    assert result.progress["genui"] == progress and [g.generation for g in progress][-2:] == [1, 2]
    assert {twin["revision"], control["revision"]}.isdisjoint(g.revision for g in progress)  # controls aren't
    # generations
    last = progress[-1]
    assert (last.revision, last.recipe, last.iteration) == (row.candidate, "twin", 2)
    assert last.experience.accepted == 2 and last.experience.accepted_per_source == {"jsonl:requests.jsonl": 2}
    assert (last.experience.pass_at_1, last.experience.pass_at_k) == (0.5, 1.0)
    assert last.twin.revision == twin["revision"] and last.twin.reading == NO_EXPERIENCE_EFFECT
    assert last.twin.value is not None and last.twin.interval == twin["vs_twin"]["interval"]
    assert last.twin.steps_control.revision == control["revision"] and last.twin.steps_control.value is not None
    assert last.twin.steps_control.interval == control["vs_control"]["interval"]
    from rich.console import Console

    from mint.cli import loop as loop_cli

    monkeypatch.setattr(loop_cli, "out", Console(width=300))
    loop_cli._render_progress(result)
    table = capsys.readouterr().out
    assert "genui: " in table and " per generation" in table and "0.5 / 1 (k=2)" in table
    assert "2 (2 jsonl:requests.jsonl)" in table and f"{twin['revision']} {last.twin.value:.3g}" in table
    assert control["revision"] in table                   # the steps control's column
    # what it already knew beside what users ask now: the contract's other suites, each against its baseline
    assert [f.metric for f in last.suites] == ["live.parse_rate", "retention.parse_rate"]
    assert f"retention.parse_rate {last.suites[1].value:.3g} (-)" in table     # ungated here: no paired delta


@pytest.mark.parametrize("complete", [False, True])
def test_a_generation_that_fails_its_contract_gets_no_controls_unless_the_steps_ask_for_everything(
        ws, tmp_path, monkeypatch, complete):
    """The controls tell only whether a gain came from the verified experience: a generation that showed none
    (here: a gain the tiny base cannot make, on core) is rejected without training or decoding them, and without
    its retention suite; ``early_stop: false, backward_transfer: always`` on the eval step and ``complete: true`` on
    the controls step measure everything anyway, to the same verdict."""
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n"
                                                     for p in ("Show a signup form.", "Show a weather card for Oslo.")))
    text = SMOKE_CONTRACT.read_text().replace("contract: genui-smoke", "contract: genui-gain")
    for key in ("catalog: ", "data: "):
        text = text.replace(key + "ui4a/", f"{key}{SMOKE_CONTRACT.parent}/ui4a/")
        text = text.replace(key + "../examples", f"{key}{SMOKE_CONTRACT.parent.parent}/examples")
        text = text.replace(key + "suites/", f"{key}{SMOKE_CONTRACT.parent}/suites/")
    gained = text.replace("  - {metric: core.request_match, no_regression: 0.0}",
                          "  - {metric: core.request_match, improve: 0.0}")
    assert gained != text
    (tmp_path / "gain.yaml").write_text(gained)
    # generation 1 under the smoke contract (promoted), generation 2 under the one that asks for a gain
    second = f"specialist: genui, contract: {tmp_path / 'gain.yaml'}, from_iteration: 2" + \
        (", early_stop: false, backward_transfer: always" if complete else "")
    (tmp_path / "twin.yaml").write_text(RECIPE.format(
        logs=LOGS, contract=f"{SMOKE_CONTRACT}, until_iteration: 1}}\n  - eval: {{{second}",
        controls=", complete: true" if complete else ""))
    monkeypatch.setattr(experience, "_sample", lambda ws, champion, base, specialist, chosen, **kw:
                        [[ANSWERS[p.prompt[-1]["content"]], "{broken"] for p in chosen])
    events = []
    result = run_loop(ws, tmp_path / "twin.yaml", events=events.append)
    ran = {(s.iteration, s.label): s.output for s in result.steps if s.status in ("ran", "failed")}
    evaluation = ran[(2, "eval genui")]
    assert evaluation["verdict"] == "fail" and ran[(2, "promote genui")]["action"] == "rejected"
    assert ran[(2, "experience genui")]["accepted"] == 2            # there was experience to learn from
    report = json.loads(Path(evaluation["report"]).read_text())
    conn = store.open_store(ws)
    try:
        made = store.list_revisions(conn, specialist="genui").total
    finally:
        conn.close()
    notes = [e["message"] for e in events if e.get("event") == "note"]
    controlled = ran[(2, "controls genui")]
    if complete:
        assert made == 4 and controlled["twin"]["steps_control"]     # generations 1 and 2, the twin, the control
        assert "measured_on" not in report and set(report["examples"]) == {"core", "retention", "live"}
    else:
        assert made == 2 and "twin" not in controlled                 # generations 1 and 2, nothing else trained
        assert report["measured_on"]["suites"] == ["core"] and list(report["examples"]) == ["core"]
        assert report["measured_on"]["why"].startswith("core.request_match failed (improve 0")
        assert any("twin and steps control were not trained" in note for note in notes)


def test_a_second_rounds_sampler_is_shown_with_its_round_and_is_no_generation(ws, tmp_path, monkeypatch):
    """With ``rounds: 2`` the model trained on round 1's answers samples round 2; the generation learns from both
    rounds, and the sampler is a candidate of the registry, not a generation of the progress table."""
    (tmp_path / "requests.jsonl").write_text("".join(json.dumps({"prompt": p}) + "\n"
                                                     for p in ("Show a signup form.", "Show a weather card for Oslo.")))
    path = tmp_path / "rounds.yaml"
    path.write_text(RECIPE.format(logs=LOGS, contract=SMOKE_CONTRACT, controls="").replace(
        "min_steps: 1, max_steps: 1}", "min_steps: 1, max_steps: 1, rounds: 2}"))
    samplers = []

    def sample(ws, champion, base, specialist, chosen, **kw):     # round 1 builds the form, round 2 the card
        samplers.append(champion[0].ref)
        wanted = "Show a signup form." if len(samplers) == 1 else "Show a weather card for Oslo."
        return [[ANSWERS[p.prompt[-1]["content"]] if p.prompt[-1]["content"] == wanted else TREE, "{broken"]
                for p in chosen]

    monkeypatch.setattr(experience, "_sample", sample)
    result = run_loop(ws, path)
    gathered = result.generations[-1].experience
    first, second = gathered["rounds"]
    assert (first["accepted"], second["accepted"], gathered["accepted"]) == (1, 1, 2)
    assert samplers == [first["sampled_by"], second["sampled_by"]] and second["prompts"] == 1
    from mint.loop.progress import generation_progress

    shown = [g.revision for g in generation_progress(ws)["genui"] if g.generation]
    assert second["sampled_by"] not in shown and len(shown) == 2           # generations 1 and 2, nothing else
    assert shown[-1] == result.generations[-1].candidate


def test_the_controls_trainings_tell_their_steps_and_loss_to_the_progress_callback(monkeypatch):
    from mint.loop import placebo
    from mint.loop.results import ControlData, TrainOutput
    from mint.train import run

    def trained(ws, *, progress=None, data=None, **_request):     # two steps of a run, then its result
        for step in (1, 2):
            progress(step, 2, {"loss": 0.5})
        return data
    monkeypatch.setattr(run, "registered_run", lambda *a, **k: None)
    monkeypatch.setattr(run, "train", trained)
    heard = []
    twin = ControlData("d-twin", "v1", 4, unverified=4, steps_control=ControlData("d-steps", "v1", 4))
    candidate = TrainOutput("genui:v2", "id", None, "genui:v1", 2, 4, None, "sft")
    placebo.train_controls(None, specialist="genui", twin=twin, candidate=candidate, base="tiny-random",
                           progress=lambda what, done, total, detail="": heard.append((what, done, total, detail)))
    assert heard == [("placebo twin training", 1, 2, "loss 0.500"), ("placebo twin training", 2, 2, "loss 0.500"),
                     ("steps control training", 1, 2, "loss 0.500"), ("steps control training", 2, 2, "loss 0.500")]
