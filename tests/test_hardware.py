"""Training defaults that read the hardware: the precision choice, its reasons, and their record in run.json."""
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


def test_a_cpu_with_amx_trains_in_bf16_autocast_and_says_why():
    plan = hardware.training_plan("sft", hardware.detect(AMX_CPU, cuda=False))
    settings = plan.settings()
    assert settings["bf16"] is True and settings["use_cpu"] is True and settings["fp16"] is False
    assert "amx_bf16" in plan.choices["bf16"].reason and "avx512_bf16" in plan.choices["bf16"].reason
    assert {"amx_bf16", "avx512_bf16", "avx512f"} <= set(plan.hardware.cpu_flags)


def test_a_cpu_without_bf16_instructions_trains_in_fp32():
    plan = hardware.training_plan("dpo", hardware.detect(AVX2_CPU, cuda=False))
    assert plan.settings()["bf16"] is False and plan.settings()["fp16"] is False
    assert "emulated" in plan.choices["bf16"].reason


def test_an_arm_cpu_with_bf16_features_trains_in_bf16():
    assert hardware.training_plan("sft", hardware.detect(ARM_BF16_CPU, cuda=False)).settings()["bf16"] is True


@pytest.mark.parametrize("speedup, expected", [(2.5, True), (0.3, False)])
def test_without_readable_flags_a_timed_probe_decides_once_per_machine(tmp_path, monkeypatch, speedup, expected):
    calls = []
    monkeypatch.setattr(hardware, "_matmul_speedup", lambda: calls.append(1) or speedup)
    first = hardware.detect("", cuda=False, cache=tmp_path)
    again = hardware.detect("processor : 0\n", cuda=False, cache=tmp_path)
    assert first.bf16 is expected and again.bf16 is expected and len(calls) == 1
    assert "probe" in first.bf16_reason


def test_a_corrupt_probe_cache_is_measured_again(tmp_path, monkeypatch):
    monkeypatch.setattr(hardware, "_matmul_speedup", lambda: 3.0)
    hardware.detect("", cuda=False, cache=tmp_path)
    for cached in tmp_path.iterdir():
        cached.write_text("{not json")
    assert hardware.detect("", cuda=False, cache=tmp_path).bf16 is True


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
