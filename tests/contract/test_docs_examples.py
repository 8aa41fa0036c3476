"""The contract examples the docs show validate with `mint contract check`, and none gates the latency of an
offline evaluation."""
import re
from pathlib import Path

import pytest
import yaml

from mint.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted((ROOT / "docs").glob("*.md")) + [ROOT / "README.md"]
LATENCY = re.compile(r"metric:\s*latency\.")


def contract_blocks() -> list[tuple[str, str]]:
    """Each ```yaml block of the docs that is one contract (a block that also shows a mint.yaml is left out)."""
    blocks = []
    for page in DOCS:
        for i, block in enumerate(re.findall(r"```yaml\n(.*?)```", page.read_text(encoding="utf-8"), re.S)):
            if not re.search(r"^contract:", block, re.M):
                continue
            data = yaml.safe_load(block)
            if "specialists" not in data:
                blocks.append((f"{page.name}[{i}]", block))
    return blocks


def test_the_docs_show_a_chat_contract():
    assert any(yaml.safe_load(block)["specialist"] == "chat" and "instruction_pass_rate" in block
               for _name, block in contract_blocks())


@pytest.mark.parametrize("name, block", contract_blocks())
def test_each_contract_example_in_the_docs_passes_contract_check(name, block, tmp_path, capsys):
    # data paths are relative to the contract file: lay it out as in a project's contracts/ folder
    (tmp_path / "examples").symlink_to(ROOT / "examples")
    (tmp_path / "contracts").mkdir()
    (tmp_path / "contracts" / "suites").symlink_to(ROOT / "contracts" / "suites")
    (tmp_path / "contracts" / "judges").symlink_to(ROOT / "contracts" / "judges")
    path = tmp_path / "contracts" / "example.yaml"
    path.write_text(block, encoding="utf-8")
    assert main(["contract", "check", str(path)]) == 0, f"{name}: {capsys.readouterr().err}"


def test_no_example_contract_gates_an_offline_evaluations_latency():
    shipped = [*(ROOT / "contracts").glob("*.yaml"), *(ROOT / "mint" / "scaffold" / "contracts").glob("*.yaml"),
               *(ROOT / "recipes").glob("*.yaml"), *(ROOT / "mint" / "scaffold" / "recipes").glob("*.yaml")]
    gated = [name for name, block in contract_blocks() if LATENCY.search(block)]
    gated += [str(path.relative_to(ROOT)) for path in shipped if LATENCY.search(path.read_text(encoding="utf-8"))]
    assert not gated, gated
