"""Recipe files: every mistake is exit 2 at file:line: field, with the closest valid key."""
import json
from pathlib import Path

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.loop.recipe import load_recipe
from mint.loop.steps import STEPS

ROOT = Path(__file__).resolve().parents[2]
CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"


def write(tmp_path, text: str) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(text.replace("CONTRACT", str(CONTRACT)).replace("LOGS", str(ROOT / "examples" / "logs")))
    return path


GOOD = """\
recipe: t
base: tiny-random
loop: {iterations: 2}
steps:
  - ingest: {sources: [LOGS]}
  - train: {specialist: genui, method: sft, set: {max_steps: 1}}
  - eval: {specialist: genui, contract: CONTRACT}
  - promote: {specialist: genui, fatal: true}
"""


def test_every_shipped_recipe_checks(capsys):
    recipes = sorted((ROOT / "recipes").glob("*.yaml"))
    assert recipes
    for path in recipes:
        assert main(["recipe", "check", str(path), "--json"]) == 0, path
        summary = json.loads(capsys.readouterr().out)
        assert summary["ok"] and summary["steps"]
        assert path.read_text().startswith("# Run: mint loop "), f"{path} must open with the command that runs it"


def test_a_good_recipe_loads_with_its_steps(tmp_path):
    recipe = load_recipe(write(tmp_path, GOOD))
    assert recipe.iterations == 2 and recipe.dataset == "t" and recipe.specialists == ("genui",)
    assert [s.kind for s in recipe.steps] == ["ingest", "train", "eval", "promote"]
    assert recipe.steps[3].fatal and recipe.steps[1].line == 6


@pytest.mark.parametrize("edit, where, says", [
    (("  - promote: {specialist: genui, fatal: true}", "  - promte: {specialist: genui}"), ":8: steps[3].promte",
     "did you mean promote?"),
    (("method: sft", "method: spt"), ":6: steps[1].train.method", "did you mean sft?"),
    (("loop: {iterations: 2}", "loop: {iteratons: 2}"), ":3: loop.iteratons", "did you mean iterations?"),
    (("specialist: genui, method", "specialist: gnui, method"), ":6: steps[1].train.specialist",
     "did you mean genui?"),
    (("  - train: {specialist: genui, method: sft, set: {max_steps: 1}}\n", ""), ":6: steps[1].eval",
     "no earlier train step"),
    (("sources: [LOGS]", "sources: [nowhere/]"), ":5: steps[0].ingest.sources[0]", "no such file"),
    (("fatal: true", "fatal: yes please"), ":8: steps[3].promote.fatal", "expected true or false"),
    (("max_steps: 1", "max_steps: lots"), ":6: steps[1].train.set.max_steps", "expected an integer"),
    (("max_steps: 1", "max_stepz: 1"), ":6: steps[1].train.set", "did you mean max_steps?"),
])
def test_mistakes_name_the_line_and_field(tmp_path, capsys, edit, where, says):
    path = write(tmp_path, GOOD.replace(*edit))
    with pytest.raises(BadInput) as caught:
        load_recipe(path, specialists=("chat", "agent", "coding", "genui"))
    assert where in str(caught.value) and says in str(caught.value)
    assert main(["recipe", "check", str(path)]) == 2


def test_a_contract_of_another_specialist_is_refused(tmp_path):
    path = write(tmp_path, GOOD.replace("specialist: genui, contract", "specialist: agent, contract")
                 .replace("train: {specialist: genui", "train: {specialist: agent"))
    with pytest.raises(BadInput, match="is the genui contract, not agent's"):
        load_recipe(path)


def test_the_dry_run_plan_honours_from_and_until_iteration(ws, tmp_path):
    from mint.loop.runner import run_loop

    text = GOOD.replace("set: {max_steps: 1}}", "set: {max_steps: 1}, until_iteration: 1}") \
        .replace("  - eval:", "  - train: {specialist: genui, method: sft, from_iteration: 2}\n  - eval:")
    result = run_loop(ws, write(tmp_path, text), dry_run=True)
    plan = {(p["iteration"], p["step"]): p["will"] for p in result.plan}
    assert plan[(1, 1)] == "run" and plan[(2, 1)] == "wait"
    assert plan[(1, 2)] == "wait" and plan[(2, 2)] == "run"
    assert result.status == "dry run" and not (ws.home / "loop.lock").exists()


@pytest.mark.parametrize("kind", sorted(STEPS))
def test_recipe_check_takes_each_step_kinds_options_from_the_loops_table(tmp_path, kind):
    option = STEPS[kind].options[-1]
    path = tmp_path / "r.yaml"
    path.write_text(f"recipe: r\nsteps:\n  - {kind}: {{{option}x: 1}}\n")
    with pytest.raises(BadInput, match=rf"steps\[0\]\.{kind}\.{option}x: unknown key \(did you mean {option}\?\)"):
        load_recipe(path, check_contracts=False)


def test_a_serve_step_names_its_requests_file_and_a_missing_one_is_refused_at_its_line(tmp_path):
    path = tmp_path / "r.yaml"
    path.write_text("recipe: r\nsteps:\n  - serve: {requests: nowhere.jsonl}\n")
    with pytest.raises(BadInput, match=r"r\.yaml:3: steps\[0\]\.serve\.requests: no such file"):
        load_recipe(path, check_contracts=False)
    (tmp_path / "requests.jsonl").write_text('{"prompt": "Show my todo items as a list."}\n')
    path.write_text("recipe: r\nsteps:\n  - serve: {requests: requests.jsonl, clients: 0}\n")
    with pytest.raises(BadInput, match=r"steps\[0\]\.serve\.clients"):
        load_recipe(path, check_contracts=False)
    path.write_text("recipe: r\nsteps:\n  - serve: {requests: requests.jsonl, clients: 2}\n")
    assert [s.kind for s in load_recipe(path, check_contracts=False).steps] == ["serve"]


def test_a_dry_run_refuses_a_broken_loop_state_as_the_run_does(ws, tmp_path, capsys):
    broken = ws.home / "loops" / "other" / "state.json"
    broken.parent.mkdir(parents=True)
    broken.write_text("[]")
    path = write(tmp_path, GOOD)
    assert main(["loop", str(path), "--dry-run"]) == 2
    dry = capsys.readouterr().err
    assert "not a loop state" in dry
    assert main(["loop", str(path)]) == 2
    assert capsys.readouterr().err == dry
