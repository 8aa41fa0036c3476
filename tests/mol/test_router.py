"""The router: certain rules, the learned probe as a registered revision gated by its contract, `mint route`."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from mint.errors import BadInput
from tests.conftest import chat_row, run_mint, write_jsonl

TINY_SETS = ["layer=1"]


def write_project(directory: Path, extra: str = "") -> Path:
    from mint.project import render_project_yaml

    path = directory / "mint.yaml"
    path.write_text(render_project_yaml().replace("base: smollm2-135m", "base: tiny-random") + extra)
    return path


def test_tools_and_patterns_are_certain_rules(tmp_path):
    from mint.mol.router import Rules
    from mint.project import load_project

    project = load_project(write_project(tmp_path).parent / "mint.yaml")
    rules = Rules(project)
    assert rules.certain("anything at all", has_tools=True).specialist == "agent"
    assert rules.certain("a poem about spring", has_tools=False) is None
    assert rules.keywords("tell me a joke").specialist == "chat"
    default = rules.keywords("zzzz qqqq")
    assert (default.specialist, default.rule) == ("chat", "default")


def test_patterns_in_mint_yaml_route_outright(tmp_path):
    from mint.mol.router import Rules
    from mint.project import load_project

    path = write_project(tmp_path)
    text = path.read_text().replace('  genui:\n', '  genui:\n    patterns: ["\\\\b(mock ?up|wireframe)s?\\\\b"]\n')
    path.write_text(text)
    route = Rules(load_project(path)).certain("Could you sketch a wireframe for my shop?", has_tools=False)
    assert (route.specialist, route.decided_by, route.rule) == ("genui", "rules", "pattern")


def test_a_bad_pattern_names_file_line_and_field(tmp_path):
    from mint.project import load_project

    path = write_project(tmp_path)
    path.write_text(path.read_text().replace('  genui:\n', '  genui:\n    patterns: ["(unclosed"]\n'))
    with pytest.raises(BadInput, match=r"mint.yaml:\d+: specialists.genui.patterns: \[0\] '\(unclosed'"):
        load_project(path)


def _dataset(ws, tmp_path):
    """A small labelled dataset: each specialist's turns share a distinctive vocabulary."""
    from mint.data.ingest import ingest
    from mint.project import DEFAULT_PROJECT

    topics = {"coding": "python function bug traceback compile", "agent": "book flight hotel weather calendar",
              "genui": "form button dashboard layout widget", "chat": "hello feelings story joke friend"}
    rows = [chat_row(f"{words} {i}", specialist=name) for name, words in topics.items() for i in range(12)]
    ingest(ws, [write_jsonl(tmp_path / "logs" / "train.jsonl", rows)], dataset="d", project=DEFAULT_PROJECT,
           workers=0)
    heldout = {}
    for name, words in topics.items():
        heldout[name] = write_jsonl(tmp_path / "heldout" / f"{name}.jsonl",
                                    [{"messages": [{"role": "user", "content": f"{words} x{i}"}]} for i in range(4)])
    return heldout


def _contract(tmp_path, heldout, minimum=0.5) -> Path:
    path = tmp_path / "router.yaml"
    lines = ["contract: router", "version: 1", "specialist: router", "heldout:"]
    lines += [f"  - {{specialist: {name}, data: {file}}}" for name, file in heldout.items()]
    lines += ["gates:", f"  - {{metric: heldout.accuracy, min: {minimum}}}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_train_router_registers_a_probe_with_a_registered_report(ws, tmp_path):
    from mint.mol.router_training import train_router
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote

    contract = _contract(tmp_path, _dataset(ws, tmp_path))
    result = train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"],
                          project=DEFAULT_PROJECT)
    assert result.ref == "router:v1"
    assert result.metrics["verdict"] == "pass", result.metrics
    report = json.loads(Path(result.metrics["report"]).read_text())
    assert set(report["confusion"]) == {"chat", "agent", "coding", "genui"}
    assert report["heldout_share"] == {"chat": 0.25, "agent": 0.25, "coding": 0.25, "genui": 0.25}
    assert promote(ws, "router:v1").new_ref == "router:v1"     # through the registered report, no --force


def test_a_failing_router_report_blocks_promotion(ws, tmp_path):
    from mint.errors import Refused
    from mint.mol.router_training import train_router
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote

    contract = _contract(tmp_path, _dataset(ws, tmp_path), minimum=1.01)
    result = train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"],
                          project=DEFAULT_PROJECT)
    assert result.metrics["verdict"] == "fail"
    with pytest.raises(Refused):
        promote(ws, "router:v1")


def test_route_cli_uses_the_router_champion_probe(ws, tmp_path):
    from mint.mol.router_training import train_router
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote

    contract = _contract(tmp_path, _dataset(ws, tmp_path))
    train_router(ws, data="d", base="tiny-random", sets=[*TINY_SETS, f"contract={contract}"], project=DEFAULT_PROJECT)
    before = run_mint("route", "dashboard widget layout please", "--json")
    assert before.returncode == 0, before.stderr
    assert json.loads(before.stdout)["decided_by"] == "rules"          # no router champion yet
    promote(ws, "router:v1")
    result = run_mint("route", "dashboard widget layout please", "--json")
    assert result.returncode == 0, result.stderr
    routed = json.loads(result.stdout)
    assert set(routed) == {"specialist", "probabilities", "decided_by", "revision"}
    assert (routed["decided_by"], routed["revision"]) == ("probe", "router:v1")
    assert routed["specialist"] == "genui"
    assert sum(routed["probabilities"].values()) == pytest.approx(1.0, abs=1e-4)
    with_tools = json.loads(run_mint("route", "dashboard widget layout please", "--tools", "--json").stdout)
    assert (with_tools["specialist"], with_tools["decided_by"]) == ("agent", "rules")


def test_train_router_without_data_or_with_one_specialist_is_bad_input(ws, tmp_path):
    from mint.data.ingest import ingest
    from mint.mol.router_training import train_router
    from mint.project import DEFAULT_PROJECT

    with pytest.raises(BadInput, match="--data"):
        train_router(ws, data=None, base="tiny-random", project=DEFAULT_PROJECT)
    ingest(ws, [write_jsonl(tmp_path / "one.jsonl", [chat_row(f"python {i}", specialist="coding")
                                                     for i in range(3)])],
           dataset="one", project=DEFAULT_PROJECT, workers=0)
    with pytest.raises(BadInput, match="at least two specialists"):
        train_router(ws, data="one", base="tiny-random", sets=TINY_SETS, project=DEFAULT_PROJECT)


def test_router_contract_errors_name_the_line(ws, tmp_path):
    from mint.mol.router_training import load_router_contract

    path = tmp_path / "router.yaml"
    path.write_text("contract: router\nversion: 1\nheldout:\n  - {specialist: poetry, data: x.jsonl}\n")
    with pytest.raises(BadInput, match=r"router.yaml:4: heldout\[0\].specialist: 'poetry'"):
        load_router_contract(path, ("chat", "coding"))


def test_route_cli_empty_text_is_exit_2(ws):
    result = run_mint("route", "   ")
    assert result.returncode == 2
    assert "TEXT: the turn is empty" in result.stderr


def test_turn_features_do_not_depend_on_the_batch_they_are_computed_in():
    import torch

    from mint.base import TINY, load_base
    from mint.mol.router import turn_features

    loaded = load_base(TINY)
    short, long = "hi there", "please write a long python function that parses dates in many formats " * 3
    alone = turn_features(loaded.model, loaded.tokenizer, [short], 2)
    batched = turn_features(loaded.model, loaded.tokenizer, [long, short], 2)
    assert torch.allclose(alone[0], batched[1], atol=1e-5)


def test_turn_features_come_back_in_the_order_of_the_texts_and_batch_turns_of_similar_length():
    import torch

    from mint.base import TINY, load_base
    from mint.mol.router import turn_features

    loaded = load_base(TINY)
    long = "please write a long python function that parses dates in many formats " * 3
    texts = [long, "hi", long + "and times", "yo"]
    widths = []
    hook = loaded.model.get_decoder().embed_tokens.register_forward_hook(
        lambda _module, inputs, _output: widths.append(inputs[0].shape[1]))
    try:
        batched = turn_features(loaded.model, loaded.tokenizer, texts, 2, batch_size=2)
    finally:
        hook.remove()
    one_by_one = torch.cat([turn_features(loaded.model, loaded.tokenizer, [t], 2) for t in texts])
    assert torch.allclose(batched, one_by_one, atol=1e-5)
    assert min(widths[:2]) <= 2      # the two short turns share a batch instead of padding to the long ones


EVERYDAY = [
    ("ugh my script keeps crashing with an index out of range error, can you look at it?", "coding"),
    ("how do I flip a string backwards in python", "coding"),
    ("my for loop never stops, what am I doing wrong", "coding"),
    ("what's the weather going to be like in Lisbon this weekend?", "agent"),
    ("find me the cheapest flight from Boston to Denver next Friday", "agent"),
    ("how many euros is 250 dollars right now", "agent"),
    ("I need a page where people can sign up with their email", "genui"),
    ("put together a settings screen with a dark mode toggle and a save button", "genui"),
    ("show our monthly sales as a bar chart", "genui"),
    ("I'm feeling a bit lonely tonight", "chat"),
    ("do you ever dream?", "chat"),
    ("who painted the mona lisa", "chat"),
]


@pytest.mark.slow
@pytest.mark.xfail(strict=True, reason="issue 10 goal not met yet: measured 2026-11-30, rules + probe at layer 15 "
                   "reach 0.976 held-out accuracy (probe alone 0.95); everyday coding/agent turns go to chat")
def test_router_on_smollm2_meets_the_contract_and_routes_everyday_turns(ws, tmp_path):
    """Trained on the example logs, judged on examples/heldout (true labels from each file), then turns
    written for this test in everyday words, not the phrasing of the training data."""
    from mint.base import SMOLLM2
    from mint.data.ingest import ingest
    from mint.mol.router import route_text
    from mint.mol.router_training import train_router
    from mint.project import DEFAULT_PROJECT
    from mint.registry.promotion import promote

    repo = Path(__file__).resolve().parents[2]
    ingest(ws, [repo / "examples" / "logs"], dataset="prod", project=DEFAULT_PROJECT, workers=0)
    result = train_router(ws, data="prod", base=SMOLLM2, sets=[f"contract={repo / 'contracts' / 'router.yaml'}"],
                          project=DEFAULT_PROJECT)
    assert result.metrics["heldout.accuracy"] >= 0.99, result.metrics
    assert result.metrics["verdict"] == "pass", result.metrics
    promote(ws, result.ref)
    wrong = [(text, want, got.specialist) for text, want in EVERYDAY
             if (got := route_text(ws, text, project=DEFAULT_PROJECT)).specialist != want]
    assert wrong == []
