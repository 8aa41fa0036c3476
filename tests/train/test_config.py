"""Training settings are checked, typed and explained before anything heavy is imported or written."""
import json
import subprocess
import sys

import pytest
from hypothesis import given, settings, strategies as st

from mint.cli import main
from mint.errors import BadInput
from mint.train.config import check_settings, live_trl_fields, trl_fields, typed_value

HEAVY = ("torch", "transformers", "trl", "peft", "datasets")


def test_the_field_snapshot_matches_the_installed_trl():
    # after a TRL upgrade: python -m mint.train.config
    assert trl_fields() == live_trl_fields()


@pytest.mark.parametrize("item, message", [
    ("max_steps=abc", "trl.max_steps: expected an integer, got 'abc'"),
    ("learning_rate=fast", "trl.learning_rate: expected a number, got 'fast'"),
    ("gradient_checkpointing=3", "trl.gradient_checkpointing: expected true or false, got 3"),
    ("max_steps=2.5", "trl.max_steps: expected an integer, got 2.5"),
    ("per_device_train_batch_size=0", "trl.per_device_train_batch_size: must be positive, got 0"),
    ("lora.rank=4", "lora.rank: unknown LoRA key (did you mean r?)"),
    ("lora.lora_alpha=16", "lora.lora_alpha: unknown LoRA key (did you mean alpha?)"),
    ("lora.r=four", "lora.r: expected an integer, got 'four'"),
    ("lora.dropout=1.5", "lora.dropout: must be in [0, 1), got 1.5"),
    ("lora.r=0", "lora.r: must be at least 1, got 0"),
    ("lroa.r=4", "did you mean lora?"),
    ("lora.from_layer=-1", "lora.from_layer: must be 0 or more, got -1"),
    ("lora.from_layer=middle", "lora.from_layer: expected a layer number or 'router', got 'middle'"),
    ("lora.layers_to_transform=3", "lora.layers_to_transform: unknown LoRA key (did you mean from_layer?)"),
])
def test_a_bad_set_says_what_was_expected(item, message):
    with pytest.raises(BadInput) as caught:
        check_settings("sft", None, [item])
    assert message in str(caught.value)


def test_values_are_typed_as_the_trl_field_wants():
    user = check_settings("grpo", None, ["learning_rate=1e-4", "max_steps=3.0", "temperature=1",
                                         "gradient_checkpointing=true", "lora.target_modules=[q_proj, v_proj]"])
    assert user.trl["learning_rate"] == 1e-4 and user.trl["max_steps"] == 3 and isinstance(user.trl["max_steps"], int)
    assert user.trl["temperature"] == 1.0 and isinstance(user.trl["temperature"], float)
    assert user.trl["gradient_checkpointing"] is True and user.lora["target_modules"] == ["q_proj", "v_proj"]
    assert user.lora_asked == ("target_modules",)


def test_a_config_file_value_of_the_wrong_type_names_its_line(tmp_path):
    (tmp_path / "train.yaml").write_text("trl:\n  learning_rate: 2e-4\n  max_steps: many\n")
    with pytest.raises(BadInput, match=r"train.yaml:3: trl.max_steps: expected an integer, got 'many'"):
        check_settings("sft", tmp_path / "train.yaml", [])


@settings(max_examples=300, deadline=None)
@given(key=st.sampled_from(["max_steps", "learning_rate", "bf16", "lr_scheduler_type", "max_length", "lora.r",
                            "lora.alpha", "lora.dropout", "lora.target_modules", "seed", "optim", "beta",
                            "nonsense", "lora.", ".x", ""]),
       value=st.text(max_size=12))
def test_any_set_value_is_typed_or_refused_as_bad_input(key, value):
    try:
        user = check_settings("dpo", None, [f"{key}={value}"])
    except BadInput:
        return
    block, _, name = key.rpartition(".") if key.startswith("lora.") else ("trl", "", key)
    kinds = trl_fields()["dpo"].get(name) if block == "trl" else None
    if kinds and "any" not in kinds:
        checked = user.trl[name]
        assert typed_value(kinds, checked, name) == checked   # what was kept already has a type the field takes


@pytest.mark.parametrize("value", ["NaN", "nan", float("nan")])
def test_a_learning_rate_that_is_not_a_number_is_refused(value):
    with pytest.raises(BadInput, match="trl.learning_rate: expected a number"):
        typed_value(["float"], value, "trl.learning_rate")


def test_padding_free_with_a_max_length_and_no_packing_is_refused_before_a_run(tmp_path):
    with pytest.raises(BadInput, match="trl.padding_free: padding-free batches cut no row, so max_length needs packing"):
        check_settings("sft", None, ["padding_free=true", "max_length=64"])
    config = tmp_path / "train.yaml"
    config.write_text("trl:\n  max_length: 64\n  padding_free: true\n")
    with pytest.raises(BadInput, match=r"train.yaml:3.*trl.padding_free"):
        check_settings("sft", config, [])
    assert check_settings("sft", None, ["padding_free=true", "max_length=64", "packing=true"]).trl["packing"] is True


def test_typed_value_refuses_a_list_for_a_number():
    with pytest.raises(BadInput, match="expected an integer"):
        typed_value(["int"], [1], "trl.max_steps")


@pytest.fixture
def one_dataset(ws, project, tmp_path):
    from mint.data.ingest import ingest
    from tests.conftest import chat_row, write_jsonl

    rows = [{**chat_row(f"write a python function {i}", "def f(): pass"), "specialist": "genui"} for i in range(3)]
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="logs", project=project)
    return ws


class EnvWithoutTasks:
    """An environment whose prompts must come from a dataset: a reset and a reward, no tasks()."""

    def reset(self, **row) -> None:
        self.row = row

    def get_reward(self) -> float:
        return 0.0


@pytest.mark.parametrize("args, message", [
    (["--specialist", "gnui", "--data", "logs", "--method", "sft"], "unknown specialist 'gnui' (did you mean genui?)"),
    (["--specialist", "genui", "--data", "lgos", "--method", "sft"], "no dataset 'lgos' (did you mean logs?)"),
    (["--specialist", "genui", "--data", "logs", "--method", "stf"], "unknown method 'stf' (did you mean sft?)"),
    (["--specialist", "genui", "--data", "logs@v9", "--method", "sft"], "'v9' matches no version"),
    (["--specialist", "genui", "--data", "logs", "--method", "sft", "--base", "tiny-randm"],
     "unknown base 'tiny-randm' (did you mean tiny-random?)"),
    (["--specialist", "genui", "--data", "logs", "--method", "sft", "--set", "max_steps=abc"],
     "trl.max_steps: expected an integer, got 'abc'"),
    (["--specialist", "genui", "--data", "logs", "--method", "sft", "--env", "orders"],
     "--env trains with --method grpo"),
    (["--specialist", "agent", "--data", "logs", "--method", "grpo", "--env", "orders"],
     "--env orders brings its own tasks"),
    (["--specialist", "agent", "--method", "grpo", "--env", "tests.train.test_config:EnvWithoutTasks"],
     "--env tests.train.test_config:EnvWithoutTasks brings no tasks(): which dataset?"),
    (["--specialist", "genui", "--data", "logs", "--method", "sft", "--from", "genui:v3"],
     "genui:v3: no such revision (genui has no revisions)"),
    (["--resume", "genui-sft-1", "--set", "max_steps=3"], "--set: --resume continues run genui-sft-1 with the "
                                                          "settings it recorded"),
])
def test_a_bad_invocation_is_exit_2_with_a_hint_and_leaves_nothing(one_dataset, capsys, args, message):
    assert main(["train", *args]) == 2
    captured = capsys.readouterr()
    assert message in " ".join(captured.err.split()) and "Traceback" not in captured.err
    assert not (one_dataset.home / "runs").exists()


def test_a_bad_invocation_imports_no_heavy_package(one_dataset):
    # the whole CLI, as a user runs it: a mistake answers before torch, transformers or TRL is imported
    probe = ("import sys; from mint.cli import main; "
             "code = main(['train', '--specialist', 'genui', '--data', 'logs', '--method', 'sft', "
             "'--set', 'max_steps=abc']); "
             f"print(code, [m for m in {HEAVY!r} if m in sys.modules])")
    child = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert child.stdout.split("\n")[-2] == "2 []", child.stdout + child.stderr


def test_a_specialist_the_dataset_is_labelled_with_is_known_without_mint_yaml(ws, tmp_path):
    from mint.data.ingest import ingest
    from mint.project import Project, SpecialistEntry
    from mint.train.run import TrainRequest, check_request
    from tests.conftest import chat_row, write_jsonl

    # ingested under a project file kept elsewhere (ingest --config); training runs where there is none
    legal = Project(base="tiny-random", specialists=(SpecialistEntry("legal", "contracts", ("clause",)),))
    rows = [{**chat_row(f"contract clause {i}", "ok"), "specialist": "legal"} for i in range(2)]
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="legal", project=legal)
    plan = check_request(ws, TrainRequest(specialist="legal", data="legal", method="sft", base="tiny-random"))
    assert plan.specialist == "legal"
    with pytest.raises(BadInput, match="unknown specialist 'legl' \\(did you mean legal\\?\\)"):
        check_request(ws, TrainRequest(specialist="legl", data="legal", method="sft", base="tiny-random"))


def test_train_reads_its_settings_file_from_train_config(ws, tmp_path, capsys):
    # elsewhere --config names the project file (mint.yaml); train's settings file has a name of its own
    settings_file = tmp_path / "fast.yaml"
    settings_file.write_text("trl: {max_steps: 7}\nlora: {r: 4}\n")
    assert main(["train", "--dry-run", "--method", "sft", "--train-config", str(settings_file), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["trl"]["max_steps"] == 7 and shown["lora"]["r"] == 4
    assert main(["train", "--dry-run", "--method", "sft", "--config", str(settings_file), "--json"]) == 2
    assert "--train-config" in json.loads(capsys.readouterr().out)["error"]   # the old spelling points to the new


def test_a_version_that_does_not_exist_is_named_as_given_to_data(one_dataset, capsys):
    assert main(["train", "--specialist", "genui", "--data", "logs@v7", "--method", "sft"]) == 2
    said = " ".join(capsys.readouterr().err.split())
    assert "--data: logs@v7: 'v7' matches no version of dataset 'logs' (it has v1=" in said
    assert "--version" not in said


def test_dry_run_prints_tables_not_raw_json(one_dataset, capsys):
    assert main(["train", "--dry-run", "--specialist", "genui", "--data", "logs", "--method", "sft"]) == 0
    shown = capsys.readouterr().out
    assert not any(line.lstrip().startswith(("{", "}", '"')) for line in shown.splitlines())
    rows = {cells[0]: cells[1] for cells in (
        [cell.strip() for cell in line.strip("│ ").split("│")] for line in shown.splitlines() if "│" in line)
        if len(cells) >= 2}
    assert rows["lora.r"] == "16" and rows["trl.max_steps"] == "20" and "bf16" in rows
    assert "sft examples from logs@" in shown and len(shown.splitlines()) < 80
    assert main(["train", "--dry-run", "--specialist", "genui", "--data", "logs", "--method", "sft", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["lora"]["r"] == 16       # the whole plan, for programs


def test_the_examples_block_says_whether_to_train_on_reasoning(tmp_path):
    from mint.train.config import TrainSettings

    assert check_settings("sft", None, []).examples == {"reasoning": True}
    assert check_settings("dpo", None, ["examples.reasoning=false"]).examples == {"reasoning": False}
    (tmp_path / "train.yaml").write_text("examples:\n  reasoning: maybe\n")
    with pytest.raises(BadInput, match=r"train.yaml:2: examples.reasoning: expected true or false, got 'maybe'"):
        check_settings("sft", tmp_path / "train.yaml", [])
    with pytest.raises(BadInput, match=r"examples.reasonning: unknown key \(did you mean reasoning\?\)"):
        check_settings("sft", None, ["examples.reasonning=true"])
    # settings as runs recorded them before the block existed keep their hash; turning reasoning off changes it
    import hashlib

    plain = TrainSettings("sft", {"r": 4}, {"max_steps": 2}, ())
    before = {"method": "sft", "lora": {"r": 4}, "trl": {"max_steps": 2}, "rewards": ()}
    assert plain.digest() == hashlib.sha256(json.dumps(before, sort_keys=True, default=str).encode()).hexdigest()
    assert plain.digest() != TrainSettings("sft", {"r": 4}, {"max_steps": 2}, (), examples={"reasoning": False}).digest()


def test_settings_handed_on_as_values_are_checked_as_set_is_and_win_over_it():
    """A recipe's train step hands its settings on as values (SettingsOverride), not as KEY=VALUE text."""
    from mint.train.config import SettingsOverride

    override = SettingsOverride.from_keys({"max_steps": 3, "trl.learning_rate": "1e-4", "lora.r": 8,
                                           "lora.target_modules": ["q_proj", "v_proj"], "examples.reasoning": False})
    assert override.trl == {"max_steps": 3, "learning_rate": "1e-4"} and override.examples == {"reasoning": False}
    user = check_settings("sft", None, ["max_steps=5", "seed=7"], override)
    assert (user.trl["max_steps"], user.trl["seed"], user.trl["learning_rate"]) == (3, 7, 1e-4)
    assert user.lora["r"] == 8 and user.lora["target_modules"] == ["q_proj", "v_proj"]
    assert user.lora_asked == ("r", "target_modules") and user.examples == {"reasoning": False}
    assert SettingsOverride.from_dict(override.to_dict()) == override
    with pytest.raises(BadInput, match=r"did you mean max_steps\?") as caught:
        check_settings("sft", None, [], SettingsOverride(trl={"max_stepz": 1}))
    assert caught.value.field == "trl.max_stepz"
    with pytest.raises(BadInput, match="takes lora.KEY, trl.KEY or examples.KEY"):
        SettingsOverride.from_keys({"lroa.r": 8})
