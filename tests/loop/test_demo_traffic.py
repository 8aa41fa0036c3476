"""The demo's traffic (examples/requests/genui.jsonl): what scripts/make_demo_requests.py writes, in the mixture it
states, every request routed to GenUI, and split so that contract genui v15's held-out slice and the demo's
experience step both get what they need."""
import importlib.util
import json
import random
from pathlib import Path

import pytest

from mint.contract.planner import planned_size
from mint.contract.schema import load_contract
from mint.data.split import is_heldout
from mint.harness.genui import verify
from mint.loop.recipe import load_recipe

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("make_demo_requests", ROOT / "scripts" / "make_demo_requests.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def requests(path: Path) -> list[str]:
    return [json.loads(line)["messages"][-1]["content"] for line in path.read_text().splitlines()]


def test_the_shipped_traffic_is_what_the_script_writes_in_the_mixture_it_states(script):
    files, _retention, kinds = script.build()
    for path, rows in files.items():
        assert requests(path) == rows, f"{path} is not what scripts/make_demo_requests.py writes"
    traffic = files[script.OUT]
    assert {kind: sum(1 for r in traffic if kinds[r] == kind) for kind, _n in script.TRAFFIC_MIX} == \
        dict(script.TRAFFIC_MIX)
    assert not script.routed_elsewhere(traffic)        # mint.yaml's rules send every one to GenUI


@pytest.mark.parametrize("family", ["dashboard", "checkout_form", "pricing_section", "settings_card"])
def test_every_family_far_beyond_generation_1_has_a_tree_the_verifier_passes(script, family):
    rng = random.Random(7)
    for _ in range(40):
        request, tree = script.FAR[family](rng)
        passed, why = verify(request, json.dumps(tree))
        assert passed, f"{request}: {why}"


def test_the_demo_holds_out_what_genui_v15_needs_and_leaves_experience_its_prompts():
    recipe = load_recipe(ROOT / "recipes" / "demo.yaml", check_contracts=False)
    serve = next(s for s in recipe.steps if s.kind == "serve")
    experience = next(s for s in recipe.steps if s.kind == "experience")
    traffic = requests(ROOT / "recipes" / serve.options["requests"])
    held = [r for r in traffic if is_heldout({"messages": [{"role": "user", "content": r}]}, recipe.traffic_heldout)]
    contract = load_contract(ROOT / "contracts" / "genui.yaml")
    assert contract.suites[0].traffic == "since-promotion"
    assert len(held) >= planned_size(contract, "core") == 47
    assert len(traffic) - len(held) >= experience.options["prompts"] >= 43     # what experience sampled before
