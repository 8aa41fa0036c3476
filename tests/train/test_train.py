"""mint train on the tiny base: every method registers a candidate; resume, --from, two processes."""
import json
import os

import pytest

from mint.cli import main
from mint.data.ingest import ingest
from mint.errors import BadInput
from mint.registry import store
from mint.train.run import RESULT_FILE, train
from tests.conftest import run_mint, write_jsonl

FAST = ["max_steps=2", "save_steps=2", "per_device_train_batch_size=2", "lora.r=4"]


def episodes():
    rows = []
    for i in range(6):
        question = f"Write a python function that returns {i}"
        good = f"def f():\n    return {i}"
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": good}],
                     "feedback": {"thumbs": "up"}, "specialist": "coding"})
        rows.append({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": "no idea"}],
                     "feedback": {"thumbs": "down", "correction": good}, "specialist": "coding"})
    return rows


@pytest.fixture
def dataset(ws, project, tmp_path):
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", episodes())], dataset="logs", project=project)
    return "logs"


@pytest.mark.parametrize("method, extra", [
    ("sft", ["max_length=128"]), ("dpo", ["max_length=128"]), ("kto", ["max_length=128"]),
    ("grpo", ["max_completion_length=8", "num_generations=2", "per_device_train_batch_size=2"]),
])
def test_each_method_trains_the_tiny_base_and_registers_a_candidate(ws, dataset, method, extra):
    result = train(ws, specialist="coding", data=dataset, method=method, base="tiny-random", sets=FAST + extra)
    assert result.ref == "coding:v1" and result.steps == 2
    conn = store.open_store(ws)
    revision = store.resolve(conn, "coding:v1")
    assert revision.status == "candidate" and revision.method == method
    assert revision.dataset.startswith("logs@") and revision.base == "tiny-random"
    assert revision.base_fingerprint.startswith("sha256:") and revision.config_hash
    lines = [json.loads(l) for l in open(os.path.join(result.run_dir, "metrics.jsonl"))]
    assert lines[0]["event"] == "start" and any("loss" in l for l in lines[1:])
    run = json.load(open(os.path.join(result.run_dir, "run.json")))
    assert run["settings"]["trl"]["max_steps"] == 2 and run["settings"]["trl"]["gradient_checkpointing"] is False


def _adapted_layers(adapter_dir) -> set[int]:
    import re

    from safetensors import safe_open

    with safe_open(os.path.join(adapter_dir, "adapter_model.safetensors"), "pt") as f:
        return {int(re.search(r"\.layers\.(\d+)\.", key)[1]) for key in f.keys()}


@pytest.mark.parametrize("sets, layers", [
    ([], {1}),                                        # router: the probe's layer (1 of the tiny base's 2) on
    (["lora.from_layer=0"], {0, 1}),
    (["lora.from_layer=1", "lora.target_modules=.*self_attn\\.(q|v)_proj"], {1}),
])
def test_a_new_adapter_leaves_the_layers_before_from_layer_to_the_base(ws, dataset, sets, layers):
    result = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random",
                   sets=FAST + ["max_length=128"] + sets)
    assert _adapted_layers(ws.adapters / result.revision_id) == layers


def test_from_layer_past_the_last_layer_is_bad_input_and_registers_nothing(ws, dataset):
    with pytest.raises(BadInput, match="lora.from_layer: the base has 2 decoder layers: from_layer 2 leaves none"):
        train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random",
              sets=FAST + ["max_length=128", "lora.from_layer=2"])
    assert store.list_revisions(store.open_store(ws)).total == 0
    assert not [p for p in (ws.home / "runs").glob("*") if p.is_dir()]      # no run left half-written


def test_sft_uses_corrections_and_drops_thumbs_down(ws, dataset):
    from mint.data.datasets import iter_episodes
    from mint.train.examples import build_examples

    rows = build_examples("sft", iter_episodes(ws, dataset, specialist="coding"), dataset=dataset)
    answers = [r["messages"][-1]["content"] for r in rows]
    assert "no idea" not in answers and len(rows) == 12


def test_too_few_examples_is_exit_2_saying_how_many(ws, dataset, capsys):
    assert main(["train", "--specialist", "agent", "--data", dataset, "--method", "dpo", "--base", "tiny-random"]) == 2
    assert "has 0 usable example(s) for dpo; it needs at least 1" in capsys.readouterr().err


def test_unknown_trl_key_names_the_closest(ws, dataset, capsys):
    assert main(["train", "--specialist", "coding", "--data", dataset, "--method", "sft", "--base", "tiny-random",
                 "--set", "learning_rat=1e-4"]) == 2
    assert "trl.learning_rat: not a SFTConfig field (did you mean learning_rate?)" in capsys.readouterr().err


def test_bad_config_file_names_its_line(ws, dataset, tmp_path):
    (tmp_path / "train.yaml").write_text("lora:\n  r: 8\ntrl:\n  max_step: 3\n")
    with pytest.raises(BadInput, match=r"train.yaml:4: trl.max_step: not a SFTConfig field \(did you mean max_steps"):
        train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", config=tmp_path / "train.yaml")


def test_from_champion_starts_from_its_weights_and_records_the_parent(ws, dataset):
    first = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST)
    second = train(ws, specialist="coding", data=dataset, method="sft", from_ref="coding:v1",
                   sets=[s for s in FAST if not s.startswith("lora.")])   # the parent's LoRA config is kept
    conn = store.open_store(ws)
    assert store.resolve(conn, second.ref).parent == first.revision_id
    start = json.loads(open(os.path.join(second.run_dir, "metrics.jsonl")).readline())
    finished = json.load(open(ws.runs / first.run / RESULT_FILE))
    assert start["adapter_sha256"] == finished["adapter_sha256"]   # not a fresh adapter


def test_two_runs_of_one_process_in_the_same_second_get_a_directory_each(ws, dataset, monkeypatch):
    import mint.train.run as run

    strftime = run.time.strftime
    monkeypatch.setattr(run.time, "strftime", lambda format, *when: "20261130-120000"
                        if format == "%Y%m%d-%H%M%S" else strftime(format, *when))
    first = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST)
    second = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST)
    assert second.run == first.run + "-2" and (second.ref, first.ref) == ("coding:v2", "coding:v1")
    assert json.load(open(os.path.join(second.run_dir, "run.json")))["run"] == second.run


def test_a_killed_run_resumes_from_its_checkpoint_with_the_same_weights(ws, dataset):
    from peft import PeftModel

    from mint.base import load_base
    from mint.train.trainer import adapter_digest as _adapter_digest

    sets = ["max_steps=4", "save_steps=2", "per_device_train_batch_size=2", "max_length=128", "lora.r=4"]
    killed = run_mint("train", "--specialist", "coding", "--data", dataset, "--method", "sft", "--base",
                      "tiny-random", *[x for s in sets for x in ("--set", s)], env={"MINT_FAULT": "train.step_3"})
    assert killed.returncode == -9, killed.stderr[-2000:]
    (run_dir,) = (ws.home / "runs").iterdir()
    saved = run_dir / "checkpoints" / "checkpoint-2"
    assert (saved / "optimizer.pt").is_file() and (saved / "adapter_model.safetensors").is_file()
    assert not store.db_path(ws).exists() or not store.list_revisions(store.open_store(ws)).revisions

    resumed = train(ws, resume=run_dir.name)
    assert resumed.resumed_from_step == 2 and resumed.steps == 4 and resumed.ref == "coding:v1"
    starts = [r for r in map(json.loads, open(run_dir / "metrics.jsonl")) if r.get("event") == "start"]
    assert [s["step"] for s in starts] == [0, 2]
    checkpoint_model = PeftModel.from_pretrained(load_base("tiny-random").model, str(saved))
    assert starts[1]["adapter_sha256"] == _adapter_digest(checkpoint_model)
    assert starts[1]["adapter_sha256"] != starts[0]["adapter_sha256"]


def test_two_processes_end_with_identical_adapters_and_one_revision(ws, dataset):
    result = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST,
                   num_processes=2)
    ranks = [json.load(open(os.path.join(result.run_dir, f"rank{r}.json"))) for r in (0, 1)]
    assert ranks[0]["adapter_sha256"] == ranks[1]["adapter_sha256"] and ranks[0]["steps"] == 2
    # each rank saw a process group of two: DDP all-reduced the gradients (alone, each would report 1)
    assert [r["world_size"] for r in ranks] == [2, 2]
    assert json.load(open(os.path.join(result.run_dir, "run.json")))["effective"]["backend"]["world_size"] == 2
    assert [r.ref for r in store.list_revisions(store.open_store(ws)).revisions] == ["coding:v1"]


def test_an_accelerate_config_that_would_start_one_cpu_process_is_refused_before_anything_runs(ws, dataset, tmp_path):
    # accelerate launches several CPU processes only through mpirun; without one it silently starts one
    config = tmp_path / "cpu.yaml"
    config.write_text("compute_environment: LOCAL_MACHINE\nnum_machines: 1\ndistributed_type: MULTI_CPU\n"
                      "use_cpu: true\n")
    with pytest.raises(BadInput, match="only through mpirun") as refused:
        train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST, num_processes=2,
              accelerate_config=config)
    assert (refused.value.file, refused.value.line, refused.value.field) == (str(config), 3, "distributed_type")
    assert not ws.runs.exists() or not any(ws.runs.iterdir())          # nothing prepared, nothing trained
    config.write_text("distributed_type: [MULTI_GPU\n")
    with pytest.raises(BadInput, match="invalid YAML"):
        train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST, num_processes=2,
              accelerate_config=config)


def test_a_launch_whose_ranks_were_not_one_process_group_registers_nothing(ws, dataset, monkeypatch):
    from mint.errors import MintError
    from mint.train import run as run_module
    from mint.workspace import atomic_write_json

    def alone(run_dir, num_processes, accelerate_config, resume):     # what accelerate's simple launcher does
        atomic_write_json(run_dir / "rank0.json", {"adapter_sha256": "x", "steps": 2, "world_size": 1})
        atomic_write_json(run_dir / RESULT_FILE, {"steps": 2, "train_loss": 1.0, "registered": False})

    monkeypatch.setattr(run_module, "_launch", alone)
    with pytest.raises(MintError, match="rank 0: world size 1, rank 1: no record"):
        train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random", sets=FAST, num_processes=2)
    assert not store.list_revisions(store.open_store(ws)).revisions


@pytest.mark.slow
def test_sft_on_the_embedded_base_lowers_the_training_loss(ws, project):
    from pathlib import Path

    logs = Path(__file__).parents[2] / "examples" / "logs" / "server_log.jsonl.gz"
    ingest(ws, [logs], dataset="ui", project=project)
    result = train(ws, specialist="genui", data="ui", method="sft", base="smollm2-135m",
                   sets=["max_steps=8", "save_steps=100", "per_device_train_batch_size=2", "learning_rate=1e-3",
                         "max_length=384", "lora.r=8"])
    losses = [json.loads(l)["loss"] for l in open(os.path.join(result.run_dir, "metrics.jsonl")) if '"loss"' in l]
    assert len(losses) == 8
    assert sum(losses[-3:]) / 3 < 0.7 * sum(losses[:2]) / 2, losses


PREFERENCE_FILES = ["trl_preference_standard.jsonl", "trl_preference_conversational.jsonl", "hh_rlhf.jsonl",
                    "chosen_rejected_messages.jsonl", "openai_preference.jsonl", "llamafactory"]


@pytest.mark.parametrize("name", PREFERENCE_FILES)
def test_dpo_trains_the_tiny_base_from_each_preference_format(ws, project, name):
    from pathlib import Path

    formats = Path(__file__).parent.parent / "data" / "formats"
    ingest(ws, [formats / name], dataset="prefs", project=project, specialist="chat")
    result = train(ws, specialist="chat", data="prefs", method="dpo", base="tiny-random",
                   sets=["max_steps=1", "save_steps=1", "per_device_train_batch_size=1", "lora.r=4", "max_length=128"])
    rows = [json.loads(l) for l in open(os.path.join(result.run_dir, "examples.jsonl"))]
    assert result.steps == 1 and rows and all(r["chosen"] != r["rejected"] for r in rows)


def refusal(args: list[str], capsys) -> tuple[int, str]:
    code = main(args)
    return code, capsys.readouterr().err


@pytest.mark.parametrize("args, says", [
    (["--specialist", "chta", "--data", "logs", "--method", "sft"], "did you mean chat?"),
    (["--specialist", "coding", "--data", "lgs", "--method", "sft"], "did you mean logs?"),
    (["--specialist", "coding", "--data", "logs", "--method", "sfft"], "did you mean sft?"),
    (["--specialist", "coding", "--data", "logs", "--method", "sft", "--set", "trl.max_stepz=3"],
     "did you mean max_steps?"),
    (["--specialist", "coding", "--data", "logs", "--method", "sft", "--base", "no-such-base"], "unknown base"),
    (["--specialist", "coding", "--data", "logs", "--method", "sft", "--from", "coding:v9"], "no such revision"),
    (["--resume", "no-such-run"], "no run 'no-such-run'"),
    (["--specialist", "coding", "--method", "grpo", "--env", "ordrs"], "did you mean orders?"),
    (["--specialist", "router", "--data", "lgs"], "did you mean logs?"),
])
def test_dry_run_refuses_what_the_run_refuses_with_the_same_message(ws, dataset, capsys, args, says):
    run = refusal(["train", *args], capsys)
    dry = refusal(["train", *args, "--dry-run"], capsys)
    assert run[0] == 2 and says in run[1]
    assert dry == run


def test_dry_run_counts_the_pairs_the_data_yields_and_why_the_rest_gave_none(ws, dataset, capsys):
    assert main(["train", "--dry-run", "--specialist", "coding", "--data", dataset, "--method", "dpo", "--json"]) == 0
    examples = json.loads(capsys.readouterr().out)["examples"]
    # each prompt: a correction pair and a +1/-1 pair; held-out prompts are counted as left out
    heldout = examples["left_out"].get("held-out split (contract suites draw it; training never sees it)", 0)
    assert examples["examples"] == 2 * (6 - heldout // 2) and set(examples["left_out"]) <= {
        "held-out split (contract suites draw it; training never sees it)"}
    assert main(["train", "--dry-run", "--specialist", "coding", "--data", dataset, "--method", "kto", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["examples"]["examples"] == 3 * (6 - heldout // 2)
