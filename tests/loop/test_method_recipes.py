"""Each shipped method recipe runs end to end on the tiny base (its contract cut to a few short answers)."""
import json
from pathlib import Path

import pytest
import yaml

from mint.cli import main
from mint.registry import store

ROOT = Path(__file__).resolve().parents[2]
TINY_SETTINGS = {"max_steps": 1, "per_device_train_batch_size": 2, "lora.r": 2}
GRPO_SETTINGS = {"num_generations": 2, "max_completion_length": 8}


def tiny_contract(path: Path, tmp_path: Path) -> Path:
    """The contract with short answers and two records per suite, its files named by absolute path."""
    data = yaml.safe_load(path.read_text())
    harness = data.setdefault("harness", {})
    harness.setdefault("decoding", {})["max_new_tokens"] = 8
    if "catalog" in harness:
        harness["catalog"] = str((path.parent / harness["catalog"]).resolve())
    for suite in data["suites"]:
        if not suite["data"].startswith(("dataset:", "traffic:")):   # a live suite names a dataset or the traffic
            suite["data"] = str((path.parent / suite["data"]).resolve())
        suite["limit"] = 2
    data["promotion"] = {**(data.get("promotion") or {}), "min_examples": 1}
    target = tmp_path / path.name
    target.write_text(yaml.safe_dump(data))
    return target


def tiny_recipe(name: str, tmp_path: Path) -> Path:
    path = ROOT / "recipes" / name
    data = yaml.safe_load(path.read_text())
    data["base"] = "tiny-random"
    for step in data["steps"]:
        (kind, options), = step.items()
        if kind == "ingest":
            options["sources"] = [str((path.parent / s).resolve()) for s in options["sources"]]
        elif kind == "train":
            options["set"] = {**TINY_SETTINGS, "max_length": 96} if options["method"] != "grpo" else \
                {**TINY_SETTINGS, **GRPO_SETTINGS}
        elif kind == "eval":
            options["contract"] = str(tiny_contract((path.parent / options["contract"]).resolve(), tmp_path))
    target = tmp_path / name
    target.write_text(yaml.safe_dump(data))
    return target


@pytest.mark.parametrize("name, specialist, method", [
    ("sft-corrections.yaml", "genui", "sft"), ("kto-thumbs.yaml", "agent", "kto"),
    ("grpo-verifier.yaml", "coding", "grpo"),
])
def test_method_recipe_trains_evaluates_and_decides(ws, tmp_path, capsys, name, specialist, method):
    assert main(["loop", str(tiny_recipe(name, tmp_path)), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (row,) = result["generations"]
    assert row["specialist"] == specialist and row["candidate"] == f"{specialist}:v1"
    assert row["verdict"] in ("pass", "fail")
    conn = store.open_store(ws)
    revision = store.resolve(conn, f"{specialist}:v1")
    conn.close()
    assert revision.method == method
    assert revision.status == ("champion" if row["verdict"] == "pass" else "rejected")
