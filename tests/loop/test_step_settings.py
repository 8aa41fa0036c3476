"""What the eval and promote steps decide is the recipe's to say: the promote step's guards and their thresholds,
the eval step's early stop and backward transfer. Each setting changes what the step does; a guard turned off is
said in the plan and the run; a bad value is exit 2 at file:line: field; the defaults are today's thresholds."""
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.loop.guards import LENGTH_GROWTH, ForgettingGuard, PromoteSettings
from mint.loop.recipe import load_recipe, step_settings
from mint.loop.results import EvalOutput, TrainOutput
from mint.loop.steps import STEPS, EvalSettings, content_key
from mint.registry.report import GateResult, ReportBaseline

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"

RECIPE = """\
recipe: t
base: tiny-random
steps:
  - ingest: {{sources: [{logs}]}}
  - train: {{specialist: genui, method: sft, set: {{max_steps: 1}}{train}}}
  - eval: {{specialist: genui, contract: {contract}{eval}}}
  - promote:
      specialist: genui{promote}
"""


def recipe(tmp_path, *, promote="", eval="", train="") -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(RECIPE.format(logs=ROOT / "examples" / "logs", contract=CONTRACT, train=train,
                                  eval=f", {eval}" if eval else "", promote=f"\n      {promote}" if promote else ""))
    return path


def step(tmp_path, kind: str, **options):
    steps = load_recipe(recipe(tmp_path, **options), check_contracts=False).steps
    return next(s for s in steps if s.kind == kind)


# --- promote: its guards and their thresholds ------------------------------------------------------------

def predictions(path: Path, length: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"suite": "core", "outputs": ["x" * length]}) + "\n" for _ in range(4)))
    return path


@pytest.fixture
def promoting(tmp_path, monkeypatch):
    """promote(step, value=..., baseline=..., rewards=..., transfer=..., length=...) -> what the promote step did
    with a candidate that passed its contract, answering ``length`` characters against the baseline's 100 (the
    registry's promote and reject recorded, not run)."""
    from mint.registry import promotion, queries

    done = []
    monkeypatch.setattr(promotion, "promote", lambda ws, ref, **kw: done.append(("promoted", ref)))
    monkeypatch.setattr(promotion, "reject", lambda ws, ref, why: done.append(("rejected", ref, why)))
    baseline = predictions(tmp_path / "baseline" / "predictions.jsonl", 100)
    monkeypatch.setattr(queries, "newest_predictions", lambda ws, revision_id: baseline)

    def run(promote_step, *, value=0.4, baseline_value=0.4, rewards=(), transfer=(), length=100):
        report = tmp_path / "candidate" / "report.json"
        predictions(report.parent / "predictions.jsonl", length)
        runs = tmp_path / "runs"
        (runs / "r1").mkdir(parents=True, exist_ok=True)
        (runs / "r1" / "metrics.jsonl").write_text("".join(json.dumps({"step": i, "reward": r}) + "\n"
                                                           for i, r in enumerate(rewards, 1)))
        gate = GateResult("core.parse_rate", value, baseline_value, "no_regression 0.2", True)
        evaluation = EvalOutput("genui:v2", "id2", str(report), "pass", {"core.parse_rate": value},
                                ReportBaseline("id1", {"core.parse_rate": baseline_value}), (gate,), list(transfer))
        candidate = TrainOutput("genui:v2", "id2", "r1", None, 1, 1, None, "sft", {}, None)
        context = SimpleNamespace(ws=SimpleNamespace(runs=runs), evaluations={"genui": evaluation},
                                  candidates={"genui": candidate}, champion_ref=lambda specialist: None)
        decision = STEPS["promote"].run(context, promote_step)
        assert done[-1][0] == decision.action
        return decision

    return run


GUARDS = "guards: {{reward_hacking: {{reward_rise: true, length_growth: {growth}}}, forgetting: {{tolerance: suite}}}}"


def test_answers_past_the_recipes_length_growth_are_rejected_and_within_it_promoted(tmp_path, promoting):
    written_default = promoting(step(tmp_path, "promote", promote=GUARDS.format(growth=1.5)), length=400)
    assert written_default.action == "rejected" and "answers grew from 100 to 400" in written_default.reason
    assert promoting(step(tmp_path, "promote", promote=GUARDS.format(growth=5)), length=400).action == "promoted"
    assert promoting(step(tmp_path, "promote", promote=GUARDS.format(growth=3)), length=400).action == "rejected"
    assert promoting(step(tmp_path, "promote", promote=GUARDS.format(growth=3)), length=250).action == "promoted"


@pytest.mark.parametrize("off", ["guards: {reward_hacking: {length_growth: off}}", "guards: {reward_hacking: off}",
                                 "guards: {reward_hacking: {length_growth: null}}"])
def test_a_length_guard_turned_off_promotes_what_it_would_reject(tmp_path, promoting, off):
    assert promoting(step(tmp_path, "promote"), length=400).action == "rejected"
    assert promoting(step(tmp_path, "promote", promote=off), length=400).action == "promoted"


def test_reward_rise_decides_whether_a_rising_reward_with_a_falling_metric_is_rejected(tmp_path, promoting):
    hacked = dict(value=0.3, baseline_value=0.4, rewards=(0.1, 0.2, 0.5, 0.8, 0.9, 0.95))
    default = promoting(step(tmp_path, "promote"), **hacked)
    assert default.action == "rejected" and "training reward rose" in default.reason
    assert promoting(step(tmp_path, "promote", promote="guards: {reward_hacking: {reward_rise: false}}"),
                     **hacked).action == "promoted"


FORGOT = {"suite": "retention", "sha256": "s", "metric": "retention.parse_rate", "introduced_by": "genui:v1",
          "reused": False, "then": 1.0, "now": 0.2, "tolerance": 0.0, "regressed": True,
          "delta": {"n": 6, "delta": -0.8, "low": -1.0, "high": -0.5, "method": "mcnemar-exact"}}


def test_a_forgetting_guard_turned_off_promotes_a_candidate_that_forgot(tmp_path, promoting):
    default = promoting(step(tmp_path, "promote"), transfer=[FORGOT])
    assert default.action == "rejected" and default.reason.startswith("forgetting: retention.parse_rate")
    off = step(tmp_path, "promote", promote="guards: {forgetting: off}")
    assert promoting(off, transfer=[FORGOT]).action == "promoted"


def test_the_forgetting_tolerance_judges_every_earlier_suite_at_the_recipes_number(ws, tmp_path, candidate):
    """A candidate that lost every example of generation 1's retention suite (1 to 0) forgot it at the suite's own
    no_regression 0 and at a tolerance of 0.9; at a tolerance of 1 (a loss of at most everything) it did not."""
    from mint.contract.forgetting import backward_transfer
    from mint.contract.schema import load_contract
    from tests.contract.test_forgetting import moved_on

    new, _first, second, result = moved_on(ws, tmp_path, candidate)
    transfer = backward_transfer(ws, load_contract(new), second.ref, result.report_path)
    evaluation = EvalOutput(second.ref, second.id, str(result.report_path), "pass", {}, ReportBaseline(None, {}),
                            (), transfer)
    promote = STEPS["promote"]
    assert promote.forgetting(evaluation, ForgettingGuard()).startswith("forgetting: ")
    assert promote.forgetting(evaluation, ForgettingGuard(tolerance=0.0)).startswith("forgetting: ")
    assert promote.forgetting(evaluation, ForgettingGuard(tolerance=0.9)).endswith("beyond no_regression 0.9")
    assert (transfer[0]["then"], transfer[0]["now"]) == (1.0, 0.0)
    assert promote.forgetting(evaluation, ForgettingGuard(tolerance=1.0)) is None


# --- eval: early stop and backward transfer --------------------------------------------------------------

@pytest.fixture
def evaluating(tmp_path, monkeypatch):
    """evaluate(step, verdict) -> (whether decoding stopped once decided, whether backward transfer was measured)."""
    from mint.contract import evaluate, forgetting, schema

    asked = {}

    def evaluate_many(ws, refs, contract, *, stop_when_decided, **kw):
        asked["stop_when_decided"] = stop_when_decided
        report = SimpleNamespace(verdict=asked["verdict"], metrics={}, baseline=ReportBaseline(None, {}), gates=(),
                                 live_suites=None)
        return [SimpleNamespace(report=report, report_path=str(tmp_path / "report.json"))]

    def measured(*args, **kw):
        asked["transfer"] = True
        return []

    monkeypatch.setattr(evaluate, "evaluate_many", evaluate_many)
    monkeypatch.setattr(forgetting, "backward_transfer", measured)
    monkeypatch.setattr(schema, "load_contract", lambda path, **kw: None)

    def run(eval_step, verdict):
        asked.clear()
        asked["verdict"] = verdict
        candidate = TrainOutput("genui:v2", "id2", "r1", None, 1, 1, None, "sft", {}, None)
        context = SimpleNamespace(ws=None, candidates={"genui": candidate}, base="tiny-random",
                                  recipe=SimpleNamespace(path=tmp_path / "r.yaml"), progress=lambda *a, **k: None)
        STEPS["eval"].run(context, eval_step)
        return asked["stop_when_decided"], asked.get("transfer", False)

    return run


def test_early_stop_decides_whether_a_candidate_stops_being_decoded_once_decided(tmp_path, evaluating):
    assert evaluating(step(tmp_path, "eval"), "pass")[0] is True
    assert evaluating(step(tmp_path, "eval", eval="early_stop: false"), "pass")[0] is False


@pytest.mark.parametrize("setting, verdict, measured", [
    ("", "pass", True), ("", "fail", False),
    ("backward_transfer: always", "fail", True),
    ("backward_transfer: off", "pass", False),
])
def test_backward_transfer_decides_which_candidates_are_measured_on_earlier_suites(tmp_path, evaluating, setting,
                                                                                    verdict, measured):
    # measuring none leaves the forgetting guard nothing to judge: the recipe turns it off too
    promote = "guards: {forgetting: off}" if "off" in setting else ""
    assert evaluating(step(tmp_path, "eval", eval=setting, promote=promote), verdict)[1] is measured


# --- the recipe: defaults, keys, the plan, errors --------------------------------------------------------

def test_the_defaults_are_todays_thresholds_and_the_shipped_recipes_write_them_out():
    defaults = PromoteSettings().guards
    assert defaults.reward_hacking.reward_rise and defaults.reward_hacking.length_growth == LENGTH_GROWTH == 1.5
    assert defaults.forgetting.tolerance == "suite"
    assert EvalSettings() == EvalSettings(early_stop=True, backward_transfer="passed")
    for path in sorted((ROOT / "recipes").glob("*.yaml")):
        for s in load_recipe(path, check_contracts=False).steps:
            if s.kind in ("eval", "promote"):
                # every setting is written in the recipe, so a reader sees it, and it is the default
                assert set(STEPS[s.kind].settings_model.__dataclass_fields__) <= set(s.options), (path, s.label)
                assert s.settings == STEPS[s.kind].settings_model(), (path, s.label)
                if s.kind == "promote":
                    assert set(s.options["guards"]) == {"reward_hacking", "forgetting"}
                    assert set(s.options["guards"]["reward_hacking"]) == {"reward_rise", "length_growth"}


def test_default_settings_keep_the_keys_a_loop_recorded_before_they_were_options(tmp_path):
    """A loop state written before the settings were options: its eval and promote steps are still recognized."""
    evaluation = EvalOutput("genui:v2", "id2", "report.json", "pass", {}, ReportBaseline(None, {}), ())
    context = SimpleNamespace(evaluations={"genui": evaluation})
    written = step(tmp_path, "promote", promote=GUARDS.format(growth=1.5))
    assert STEPS["promote"].key(context, written) == content_key("promote", "id2", "report.json")
    assert STEPS["promote"].key(context, step(tmp_path, "promote", promote=GUARDS.format(growth=2))) != \
        content_key("promote", "id2", "report.json")


def test_a_guard_turned_off_is_said_in_the_dry_run_plan(ws, tmp_path, capsys):
    from mint.loop.runner import run_loop

    path = recipe(tmp_path, promote="guards: {reward_hacking: {length_growth: off}}")
    result = run_loop(ws, path, dry_run=True)
    off = [s for s in result.settings if s.off]
    assert [(s.label, s.setting, s.line) for s in off] == [("promote genui", "guards.reward_hacking.length_growth", 9)]
    assert result.turned_off == ["promote genui: guards.reward_hacking.length_growth is off (r.yaml:9); on, it "
                                 + off[0].what]
    assert main(["loop", str(path), "--dry-run"]) == 0
    shown = " ".join(capsys.readouterr().out.split())
    assert "guards.reward_hacking.length_growth is off (r.yaml:9)" in shown
    assert "guards.forgetting.tolerance" in shown and "early_stop" in shown    # and every decision left on
    # a recipe that turns nothing off says nothing is off
    assert run_loop(ws, recipe(tmp_path), dry_run=True).turned_off == []


def test_a_guard_turned_off_is_said_in_the_runs_output(ws, tmp_path, capsys):
    from mint.loop.runner import run_loop

    # the candidate's steps wait for an iteration this run does not reach: nothing is trained
    path = recipe(tmp_path, train=", from_iteration: 2", promote="guards: {forgetting: off}")
    events = []
    result = run_loop(ws, path, events=events.append)
    said = "promote genui: guards.forgetting is off (r.yaml:9)"
    assert any(e["event"] == "note" and e["message"].startswith(said) for e in events)
    assert result.turned_off and result.turned_off[0].startswith(said)


@pytest.mark.parametrize("options, where, says", [
    (dict(promote="guards: {reward_hacking: {length_growth: 0.5}}"),
     ":9: steps[3].promote.guards.reward_hacking.length_growth", "must be at least 1"),
    (dict(promote="guards: {reward_hacking: {lenght_growth: 2}}"),
     ":9: steps[3].promote.guards.reward_hacking.lenght_growth", "did you mean length_growth?"),
    (dict(promote="guards: {forgetting: {tolerance: suit}}"), ":9: steps[3].promote.guards.forgetting.tolerance",
     "did you mean suite?"),
    (dict(promote="guards: {forgetting: {tolerance: -1}}"), ":9: steps[3].promote.guards.forgetting.tolerance",
     "must be at least 0"),
    (dict(promote="guards: {reward_hacking: maybe}"), ":9: steps[3].promote.guards.reward_hacking",
     "expected a mapping of reward_rise, length_growth, or on, or off"),
    (dict(promote="guards: {reward_hacking: {reward_rise: off}, forgeting: off}"),
     ":9: steps[3].promote.guards.forgeting", "did you mean forgetting?"),
    (dict(eval="early_stop: 3"), ":6: steps[2].eval.early_stop", "expected true or false"),
    (dict(eval="backward_transfer: sometimes"), ":6: steps[2].eval.backward_transfer",
     "expected passed, always, or off"),
    (dict(eval="backward_transfer: off"), ":6: steps[2].eval.backward_transfer",
     "steps[3]'s forgetting guard judges the backward transfer this step measures"),
])
def test_a_bad_setting_is_exit_2_at_its_file_line_and_field(tmp_path, capsys, options, where, says):
    path = recipe(tmp_path, **options)
    with pytest.raises(BadInput) as caught:
        load_recipe(path, check_contracts=False)
    assert f"r.yaml{where}: " in str(caught.value) and says in str(caught.value)
    assert main(["recipe", "check", str(path)]) == 2
    assert says in capsys.readouterr().err


def test_recipe_check_lists_every_setting_with_its_line(tmp_path, capsys):
    path = recipe(tmp_path, promote="guards: {reward_hacking: off}")
    assert main(["recipe", "check", str(path), "--json"]) == 0
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert {s["setting"] for s in settings} == {"early_stop", "backward_transfer", "guards.reward_hacking",
                                                "guards.forgetting.tolerance"}
    assert [s["line"] for s in settings if s["off"]] == [9]
    assert [s.setting for s in step_settings(load_recipe(path, check_contracts=False)) if s.off] == \
        ["guards.reward_hacking"]
