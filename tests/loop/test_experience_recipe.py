"""The experience step's recipe keys: every mistake is exit 2 at file:line: field."""
from pathlib import Path

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.loop.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"

GOOD = """\
recipe: t
base: tiny-random
loop: {iterations: 2}
steps:
  - ingest: {sources: [LOGS]}
  - experience: {specialist: genui, from_iteration: 2, sources: [served, unaccepted, {jsonl: requests.jsonl}],
                 samples: 4, per_prompt: 2, prompts: 8, temperature: 0.8, init: champion, control: true}
  - train: {specialist: genui, method: sft, plan: experience, set: {max_steps: 1}}
  - eval: {specialist: genui, contract: CONTRACT}
  - controls: {specialist: genui, from_iteration: 2}
  - promote: {specialist: genui}
"""


def write(tmp_path, text: str) -> Path:
    (tmp_path / "requests.jsonl").write_text('{"prompt": "Show a signup form."}\n')
    path = tmp_path / "r.yaml"
    path.write_text(text.replace("CONTRACT", str(CONTRACT)).replace("LOGS", str(ROOT / "examples" / "logs")))
    return path


def test_an_experience_step_with_its_sources_caps_and_plan_loads(tmp_path):
    step = load_recipe(write(tmp_path, GOOD)).steps[1]
    assert step.options["sources"][2] == {"jsonl": "requests.jsonl"} and step.options["control"] is True


def test_a_train_plan_needs_an_experience_step_before_it(tmp_path):
    moved = GOOD.replace("  - train: {specialist: genui, method: sft, plan: experience, set: {max_steps: 1}}\n", "")
    path = write(tmp_path, moved.replace("  - ingest: {sources: [LOGS]}", "  - ingest: {sources: [LOGS]}\n"
                                         "  - train: {specialist: genui, method: sft, plan: experience}"))
    with pytest.raises(BadInput, match=r"steps\[1\]\.train\.plan: no earlier experience step for genui"):
        load_recipe(path, specialists=("chat", "agent", "coding", "genui"))


@pytest.mark.parametrize("edit, where, says", [
    (("served, unaccepted", "servd, unaccepted"), ":6: steps[1].experience.sources[0]", "did you mean served?"),
    (("{jsonl: requests.jsonl}", "{jsonl: missing.jsonl}"), ":6: steps[1].experience.sources[2].jsonl",
     "no such file"),
    (("{jsonl: requests.jsonl}", "{generator: sums, count: 0}"), ":6: steps[1].experience.sources[2].count",
     "at least 1"),
    (("{jsonl: requests.jsonl}", "{jsonl: requests.jsonl, limit: 2}"), ":6: steps[1].experience.sources[2].limit",
     "unknown key"),
    (("{jsonl: requests.jsonl}", "7"), ":6: steps[1].experience.sources[2]", "expected served, unaccepted"),
    (("init: champion", "init: scratch"), ":7: steps[1].experience.init", "expected champion"),
    (("control: true", "control: maybe"), ":7: steps[1].experience.control", "expected true (a placebo twin)"),
    (("control: true", "control: [steps]"), ":7: steps[1].experience.control", "runs beside the placebo twin"),
    (("control: true", "control: [placebo, step]"), ":7: steps[1].experience.control", "placebo and steps"),
    (("per_prompt: 2", "per_prompt: 0"), ":7: steps[1].experience.per_prompt", "at least 1"),
    (("control: true", "control: true, repair: 'yes'"), ":7: steps[1].experience.repair", "expected true"),
    (("control: true", "control: true, constrained: 1"), ":7: steps[1].experience.constrained", "expected true"),
    (("control: true", "control: true, precision: bf15"), ":7: steps[1].experience.precision",
     "did you mean bf16?"),
    (("control: true", "control: true, sample_rows: 0"), ":7: steps[1].experience.sample_rows", "at least 1"),
    (("control: true", "control: true, rounds: 0"), ":7: steps[1].experience.rounds", "at least 1"),
    (("control: true", "control: true, rounds: 1.5"), ":7: steps[1].experience.rounds", "integer"),
    (("temperature: 0.8", "temperature: 0"), ":7: steps[1].experience.temperature", "greater than 0"),
    (("samples: 4", "samples: 4, min_steps: 9, max_steps: 3"), ":7: steps[1].experience.min_steps",
     "at most max_steps"),
    (("samples: 4", "samples: 4, learning_rate: -1"), ":7: steps[1].experience.learning_rate", "greater than 0"),
    (("per_prompt: 2", "per_promt: 2"), ":7: steps[1].experience.per_promt", "did you mean per_prompt?"),
    # what the loop does is what the recipe shows: a plan and controls are steps' own keys, each where it belongs
    (("plan: experience", "plan: always"), ":8: steps[2].train.plan", "expected experience"),
    (("  - controls: {specialist: genui, from_iteration: 2}\n", ""), ":7: steps[1].experience.control",
     "add `- controls: {specialist: genui}`"),
    (("init: champion, control: true", "init: champion"), ":10: steps[4].controls",
     "no earlier experience step with `control:`"),
    (("plan: experience, ", ""), ":10: steps[4].controls", "no earlier train step with `plan: experience`"),
    (("  - controls: {specialist: genui, from_iteration: 2}", "  - controls: {specialist: genui, limit: 0}"),
     ":10: steps[4].controls.limit", "at least 1"),
])
def test_experience_mistakes_name_the_line_and_field(tmp_path, edit, where, says):
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(BadInput) as caught:
        load_recipe(path, specialists=("chat", "agent", "coding", "genui"))
    assert where in str(caught.value) and says in str(caught.value)
    assert main(["recipe", "check", str(path)]) == 2
