"""Training and decoding defaults that read the hardware: the timed probe behind the precision choice, its
cache, the reasons, and their record in run.json."""
import json
from pathlib import Path

import pytest

from mint import hardware
from mint.cli import main
from mint.data.ingest import ingest
from tests.conftest import chat_row, write_jsonl

AMX_CPU = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma avx512f avx512_bf16 amx_bf16 amx_tile amx_int8\n"
AVX2_CPU = "processor\t: 0\nflags\t\t: fpu sse2 avx2 fma\n"
ARM_BF16_CPU = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm\n"


def figures(training: float, decoding: float = 1.0) -> dict:
    """What the timed probe would measure on a machine whose bf16 matmuls are this many times fp32's speed."""
    return {"training": {"fp32_ms": 1.0, "bf16_ms": 1.0 / training, "bf16_speedup": training},
            "decoding": {"fp32_ms": 0.2, "bf16_ms": 0.2 / decoding, "bf16_speedup": decoding},
            "threads_ms": {"1": 0.3, "2": 0.2}, "decoding_rows_ms_per_row": {"1": 0.05, "8": 0.016, "16": 0.015}}


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """The probe's measurement replaced by set figures (its cache in tmp_path); returns the calls made."""
    calls = []

    def measured(speedup: float):
        monkeypatch.setattr(hardware, "_measure_probe", lambda cores: calls.append(cores) or figures(speedup))
        return calls

    return measured


def test_a_cpu_whose_probe_finds_bf16_faster_trains_in_bf16_autocast_and_says_why(probed, tmp_path):
    probed(3.0)
    plan = hardware.training_plan("sft", hardware.detect(AMX_CPU, cuda=False, cache=tmp_path))
    settings = plan.settings()
    assert settings["bf16"] is True and settings["use_cpu"] is True and settings["fp16"] is False
    assert "amx_bf16" in plan.choices["bf16"].reason and "3.00x" in plan.choices["bf16"].reason
    assert {"amx_bf16", "avx512_bf16", "avx512f"} <= set(plan.hardware.cpu_flags)


def test_the_flags_do_not_decide_when_the_probe_finds_bf16_slower(probed, tmp_path):
    probed(0.6)
    plan = hardware.training_plan("dpo", hardware.detect(AMX_CPU, cuda=False, cache=tmp_path))
    assert plan.settings()["bf16"] is False and plan.settings()["fp16"] is False
    assert "0.60x" in plan.choices["bf16"].reason and "amx_bf16" in plan.choices["bf16"].reason


def test_an_arm_cpu_whose_probe_finds_bf16_faster_trains_in_bf16(probed, tmp_path):
    probed(2.0)
    assert hardware.training_plan("sft", hardware.detect(ARM_BF16_CPU, cuda=False, cache=tmp_path)
                                  ).settings()["bf16"] is True


@pytest.mark.parametrize("speedup, expected", [(2.5, True), (0.3, False)])
def test_the_timed_probe_runs_once_per_machine(probed, tmp_path, speedup, expected):
    calls = probed(speedup)
    first = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    again = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    assert first.bf16 is expected and again.bf16 is expected and len(calls) == 1
    assert "probe" in first.bf16_reason and again.probe["training"]["bf16_speedup"] == speedup


def test_another_cpu_is_probed_again(probed, tmp_path):
    calls = probed(2.0)
    hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    hardware.detect(AMX_CPU, cuda=False, cache=tmp_path)
    assert len(calls) == 2 and len(list(tmp_path.iterdir())) == 2


def test_a_corrupt_probe_cache_is_measured_again(probed, tmp_path):
    calls = probed(3.0)
    hardware.detect("", cuda=False, cache=tmp_path)
    for cached in tmp_path.iterdir():
        cached.write_text("{not json")
    assert hardware.detect("", cuda=False, cache=tmp_path).bf16 is True and len(calls) == 2


def test_the_decoding_plan_follows_the_probes_figures(probed, tmp_path):
    probed(3.0)
    plan = hardware.decoding_plan(hardware.detect(AMX_CPU, cuda=False, cache=tmp_path))
    # a decoding step's shape at 1.0x: bf16 is not worth measuring on a model, whatever the training shape says
    assert plan["bf16"].value is False and "1.00x" in plan["bf16"].reason
    assert plan["threads"].value == 2 and plan["rows"].value == 8   # 16 rows cost 0.015 vs 0.016 per row at 8


def test_small_memory_turns_gradient_checkpointing_on():
    small = hardware.Hardware("cpu", "x", None, (), 2, 4.0, False, "no bf16")
    large = hardware.Hardware("cpu", "x", None, (), 2, 64.0, False, "no bf16")
    assert hardware.training_plan("sft", small).settings()["gradient_checkpointing"] is True
    assert hardware.training_plan("sft", large).settings()["gradient_checkpointing"] is False


@pytest.fixture
def amx_machine(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "read_cpuinfo", lambda path=None: AMX_CPU)
    monkeypatch.setattr(hardware, "_measure_probe", lambda cores: figures(3.0))


@pytest.fixture
def logs(ws, project, tmp_path):
    rows = [chat_row(f"question {i}", f"answer {i}", specialist="chat") for i in range(4)]
    ingest(ws, [write_jsonl(tmp_path / "logs.jsonl", rows)], dataset="logs", project=project)
    return "logs"


def test_run_json_records_the_precision_choice_and_its_reason(ws, logs, amx_machine):
    from mint.train.run import train

    result = train(ws, specialist="chat", data=logs, method="sft", base="tiny-random",
                   sets=["max_steps=1", "save_steps=10", "per_device_train_batch_size=2", "max_length=64", "lora.r=4"])
    settings = json.loads((Path(result.run_dir) / "run.json").read_text())["settings"]
    assert settings["trl"]["bf16"] is True
    choice = settings["hardware"]["choices"]["bf16"]
    assert choice["value"] is True and "amx_bf16" in choice["reason"] and "overridden_by_user" not in choice
    assert "amx_bf16" in settings["hardware"]["hardware"]["cpu_flags"]


def test_the_users_set_wins_over_the_hardware_choice_and_is_recorded(amx_machine):
    from mint.train.config import planned_settings

    settings = planned_settings("sft", None, ["bf16=false"])
    assert settings.trl["bf16"] is False
    assert settings.hardware["choices"]["bf16"]["overridden_by_user"] is False


def test_a_users_fp16_replaces_the_bf16_choice_instead_of_clashing(amx_machine):
    from mint.train.config import planned_settings

    settings = planned_settings("sft", None, ["fp16=true"])
    assert settings.trl["fp16"] is True and settings.trl["bf16"] is False


def test_the_hardware_record_does_not_change_the_config_hash(amx_machine, monkeypatch):
    from mint.train.config import planned_settings

    on_amx = planned_settings("sft", None, ["bf16=false"])
    monkeypatch.setattr(hardware, "read_cpuinfo", lambda path=None: AVX2_CPU)
    on_avx2 = planned_settings("sft", None, ["bf16=false"])
    assert on_amx.hardware != on_avx2.hardware and on_amx.digest() == on_avx2.digest()


def test_train_dry_run_prints_the_resolved_settings_and_reasons_without_training(ws, amx_machine, capsys):
    assert main(["train", "--dry-run", "--method", "sft", "--set", "max_steps=3"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["trl"]["max_steps"] == 3 and shown["trl"]["bf16"] is True
    assert "amx_bf16" in shown["hardware"]["choices"]["bf16"]["reason"]
    assert not (ws.home / "runs").exists()


def test_train_dry_run_without_a_method_is_exit_2(ws, capsys):
    assert main(["train", "--dry-run"]) == 2
    assert "--method" in capsys.readouterr().err
