import json
import re

import pytest

from mint.cli import main
from mint.contract.schema import load_contract
from mint.errors import BadInput

GOOD = """\
contract: ui
version: 2
specialist: genui
harness:
  system: "Answer with JSON."
  decoding: {max_new_tokens: 8, batch_size: 2}
suites:
  - {name: core, data: core.jsonl}
gates:
  - {metric: core.parse_rate, min: 0.0, no_regression: 0.0}
  - {metric: latency.p95_ms, max: 60000}
promotion: {min_examples: 1}
"""


@pytest.fixture
def contract_dir(tmp_path):
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(3)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "c.yaml").write_text(GOOD)
    return tmp_path


def test_a_good_contract_loads(contract_dir, capsys):
    contract = load_contract(contract_dir / "c.yaml")
    assert (contract.name, contract.version, contract.harness_name) == ("ui", 2, "genui")
    assert contract.settings.max_new_tokens == 8 and len(contract.sha256) == 64
    assert main(["contract", "check", str(contract_dir / "c.yaml"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["suites"][0]["records"] == 3


@pytest.mark.parametrize("old, new, where", [
    ("version: 2", "version: two", "c.yaml:2: version: expected an integer"),
    ("specialist: genui\n", "specialist: genui\nowner: me\n", "c.yaml:4: owner: unknown key"),
    ("{metric: core.parse_rate, min: 0.0, no_regression: 0.0}", "{metric: core.parse_rate, min: 0.0, no_regresion: 0.0}",
     "c.yaml:10: gates[0].no_regresion: unknown key (did you mean no_regression?)"),
    ("metric: core.parse_rate,", "metric: core.pass_at_1,", "c.yaml:10: gates[0].metric: no suite produces 'core.pass_at_1'"),
    ("data: core.jsonl", "data: missing.jsonl", "c.yaml:8: suites[0].data: no such file"),
    ("contract: ui\n", "", "c.yaml:1: missing required field `contract`"),
    ("max_new_tokens: 8", "max_new_tokens: -1", "c.yaml:6: harness.decoding.max_new_tokens: must be at least 1"),
    ("suites:\n  - {name: core, data: core.jsonl}", "suites:\n  - {name: core, data: core.jsonl, metrics: [accuracy]}",
     "c.yaml:8: suites[0].metrics[0]: the genui harness has no metric 'accuracy'"),
    ("{metric: latency.p95_ms, max: 60000}", "{metric: latency.p95_ms}", "c.yaml:11: gates[1]: a gate needs min, max"),
    ("version: 2", "version: 2\n  nested: [", "c.yaml:3: invalid YAML"),
])
def test_malformed_contracts_name_file_line_and_field(contract_dir, old, new, where):
    path = contract_dir / "c.yaml"
    assert old in GOOD
    path.write_text(GOOD.replace(old, new))
    with pytest.raises(BadInput) as info:
        load_contract(path)
    assert str(info.value).startswith(str(contract_dir / where.split(":")[0]) + ":" + where.split(":", 1)[1]), \
        str(info.value)


def test_bad_suite_record_names_the_data_file_line(contract_dir, capsys):
    with open(contract_dir / "core.jsonl", "a") as f:
        f.write('{"messages": [], "reference": "not a tree"}\n')
    assert main(["contract", "check", str(contract_dir / "c.yaml")]) == 2
    assert "core.jsonl:4: messages: no user message" in capsys.readouterr().err


def test_the_shipped_contracts_check(capsys):
    from pathlib import Path
    for name in ("coding", "agent", "genui", "chat"):
        path = Path(__file__).parents[2] / "contracts" / f"{name}.yaml"
        assert main(["contract", "check", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize("old, new, where", [
    ("{metric: latency.p95_ms, max: 60000}", "{metric: latency.p95_ms, no_regression: 100}",
     "c.yaml:11: gates[1].no_regression: latency is not compared example by example"),
    ("no_regression: 0.0}", "improve: -0.1}", "c.yaml:10: gates[0].improve: must be at least 0"),
    ("no_regression: 0.0}", "improve: yes}", "c.yaml:10: gates[0].improve: expected a number"),
])
def test_relative_gates_are_checked(contract_dir, old, new, where):
    (contract_dir / "c.yaml").write_text(GOOD.replace(old, new))
    with pytest.raises(BadInput, match=re.escape(where)):
        load_contract(contract_dir / "c.yaml")


def test_improve_gate_loads(contract_dir):
    (contract_dir / "c.yaml").write_text(GOOD.replace("no_regression: 0.0}", "improve: 0.1}"))
    gate = load_contract(contract_dir / "c.yaml").gates[0]
    assert (gate.improve, gate.no_regression, gate.paired) == (0.1, None, True)


def test_the_contract_hash_covers_its_suites_and_its_catalog(contract_dir):
    before = load_contract(contract_dir / "c.yaml").sha256
    with open(contract_dir / "core.jsonl", "a") as f:
        f.write(json.dumps({"messages": [{"role": "user", "content": "one more"}]}) + "\n")
    after_suite = load_contract(contract_dir / "c.yaml").sha256
    assert after_suite != before
    (contract_dir / "cat.json").write_text('{"type": "object"}')
    (contract_dir / "c.yaml").write_text(GOOD.replace('  system: "Answer with JSON."',
                                                      '  system: "Answer with JSON."\n  catalog: cat.json'))
    with_catalog = load_contract(contract_dir / "c.yaml").sha256
    (contract_dir / "cat.json").write_text('{"type": "object", "required": ["type"]}')
    assert load_contract(contract_dir / "c.yaml").sha256 != with_catalog


def test_contract_check_says_what_each_suite_can_resolve(capsys):
    from pathlib import Path
    path = Path(__file__).parents[2] / "contracts" / "genui-second-drift.yaml"
    assert main(["contract", "check", str(path), "--json"]) == 0
    core = json.loads(capsys.readouterr().out)["suites"][0]
    assert (core["name"], core["records"], core["detectable_examples"]) == ("core", 96, 6)
    assert core["detectable"] == 0.0625
    assert main(["contract", "check", str(path)]) == 0
    assert "resolves pass/fail differences of 6% or more (6 of 96 examples" in " ".join(capsys.readouterr().out.split())


def test_contract_check_says_a_traffic_suite_is_read_when_evaluated_up_to_the_planners_size(capsys):
    from pathlib import Path
    path = Path(__file__).parents[2] / "contracts" / "genui.yaml"
    assert main(["contract", "check", str(path), "--json"]) == 0
    core = json.loads(capsys.readouterr().out)["suites"][0]
    assert (core["data"], core["records"], core["planned"]) == ("traffic:since-promotion", None, 47)
    assert main(["contract", "check", str(path)]) == 0
    assert "core: the held-out requests of the served traffic (traffic:since-promotion), read when evaluated, up to " \
           "47 records" in " ".join(capsys.readouterr().out.split())


def test_the_shipped_core_gates_compare_with_the_baseline():
    from pathlib import Path
    for name in ("coding", "agent", "genui", "chat"):
        contract = load_contract(Path(__file__).parents[2] / "contracts" / f"{name}.yaml")
        core = [g for g in contract.gates if g.metric.startswith("core.")]
        assert core and core[0].paired, name                            # the main metric is relative
        assert not any(g.min == 0.0 for g in contract.gates), name     # a gate nothing can fail
    genui = load_contract(Path(__file__).parents[2] / "contracts" / "genui.yaml")
    assert genui.gates[0].metric == "core.request_match" and genui.gates[0].improve == 0.0   # the answer, not its form


def test_contract_check_takes_several_files(capsys):
    from pathlib import Path
    shipped = [str(Path(__file__).parents[2] / "contracts" / f"{name}.yaml") for name in ("agent", "genui")]
    assert main(["contract", "check", *shipped, "--json"]) == 0
    assert len(json.loads(capsys.readouterr().out)["contracts"]) == len(shipped) > 1


def test_contract_check_says_which_isolation_runs_coding_programs(capsys, monkeypatch):
    from pathlib import Path

    from mint.cli import main

    coding = Path(__file__).resolve().parents[2] / "contracts" / "coding.yaml"
    monkeypatch.setenv("MINT_SANDBOX_ISOLATION", "rlimits")
    assert main(["contract", "check", str(coding), "--json"]) == 0
    import json

    assert json.loads(capsys.readouterr().out)["isolation"]["isolation"] == "rlimits+audit"
    assert main(["contract", "check", str(coding)]) == 0
    assert "programs run under rlimits+audit" in capsys.readouterr().out


def test_the_router_contract_checks_in_the_checkout_and_after_init(tmp_path, capsys):
    from pathlib import Path

    from mint.project import init_project

    shipped = Path(__file__).parents[2] / "contracts" / "router.yaml"
    assert main(["contract", "check", str(shipped)]) == 0, capsys.readouterr().err
    contract = load_contract(shipped)
    assert (contract.harness_name, [s.name for s in contract.suites]) == ("router", ["heldout"])
    assert {g.metric for g in contract.gates} >= {"heldout.accuracy", "heldout.recall.chat"}
    init_project(tmp_path)
    every = sorted(str(p) for p in (tmp_path / "contracts").glob("*.yaml"))
    assert str(tmp_path / "contracts" / "router.yaml") in every
    assert main(["contract", "check", *every]) == 0, capsys.readouterr().err


def test_a_router_suite_line_without_its_label_names_the_line(tmp_path, capsys):
    (tmp_path / "turns.jsonl").write_text('{"specialist": "chat", "prompt": "hi"}\n{"prompt": "a sonnet"}\n')
    (tmp_path / "router.yaml").write_text("contract: router\nversion: 1\nspecialist: router\n"
                                          "harness: {name: router}\nsuites:\n  - {name: heldout, data: turns.jsonl}\n"
                                          "gates:\n  - {metric: heldout.recal.chat, min: 0.9}\n")
    assert main(["contract", "check", str(tmp_path / "router.yaml")]) == 2
    assert "router.yaml:8: gates[0].metric: no suite produces 'heldout.recal.chat'" in capsys.readouterr().err
    (tmp_path / "router.yaml").write_text((tmp_path / "router.yaml").read_text().replace("recal.", "recall."))
    (tmp_path / "router.yaml").write_text((tmp_path / "router.yaml").read_text().replace(
        "data: turns.jsonl}", "data: turns.jsonl, metrics: [accuracy, recall.chat]}"))
    assert main(["contract", "check", str(tmp_path / "router.yaml")]) == 2
    assert "turns.jsonl:2: specialist: expected the name of the specialist" in capsys.readouterr().err


def test_contract_check_asks_the_harness_whether_it_runs_code_not_its_name(tmp_path, monkeypatch):
    """A harness registered under another name that runs the answers' code is said to run them isolated; one that
    runs none (GenUI's) is not."""
    from pathlib import Path

    import mint.harness
    from mint.contract.schema import check_contract

    monkeypatch.setattr(mint.harness, "SPECIALISTS", [*mint.harness.SPECIALISTS, "tests.contract.doctests_harness"])
    monkeypatch.setenv("MINT_SANDBOX_ISOLATION", "rlimits")
    repo = Path(__file__).resolve().parents[2]
    path = tmp_path / "code.yaml"
    path.write_text("contract: code\nversion: 1\nspecialist: code\nharness: {name: doctests}\n"
                    f"suites:\n  - {{name: core, data: {repo / 'examples' / 'heldout' / 'coding.jsonl'}, limit: 4}}\n"
                    "gates:\n  - {metric: core.pass_at_1, min: 0.0}\n")
    assert check_contract(path).isolation["isolation"] == "rlimits+audit"
    assert check_contract(repo / "contracts" / "genui.yaml").isolation is None
