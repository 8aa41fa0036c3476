"""Training and decoding defaults that read the hardware: the timed probe behind the precision choice, its
cache, the reasons, and their record in run.json."""
import json
import os
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
            "decoding_rows_ms_per_row": {"1": 0.05, "8": 0.016, "16": 0.015}}


QUIET_THREADS = {"1": [0.3, 0.31, 0.3], "2": [0.2, 0.21, 0.2]}          # interleaved rounds, ms per step


@pytest.fixture
def probed(monkeypatch, tmp_path):
    """The probe's measurement replaced by set figures (its cache in tmp_path); returns the calls made."""
    calls = []

    def measured(speedup: float):
        monkeypatch.setattr(hardware, "_measure_probe", lambda cores: calls.append(cores) or figures(speedup))
        monkeypatch.setattr(hardware, "_measure_threads", lambda cores: QUIET_THREADS)
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


def test_the_thread_probe_times_the_counts_in_interleaved_rounds(monkeypatch):
    import torch

    seen = []
    monkeypatch.setattr(hardware, "_best_ms", lambda *shape, **budget: seen.append(torch.get_num_threads()) or 0.1)
    before = torch.get_num_threads()
    rounds = hardware._measure_threads(4, rounds=3)
    assert seen == [1, 2, 4] * 3 and rounds == {"1": [0.1] * 3, "2": [0.1] * 3, "4": [0.1] * 3}
    assert torch.get_num_threads() == before


def test_the_plans_threads_are_each_counts_best_round(probed, monkeypatch, tmp_path):
    probed(1.0)
    # a burst of other work slowed one round of each count: the best rounds decide, 2 threads at 0.160 ms
    monkeypatch.setattr(hardware, "_measure_threads",
                        lambda cores: {"1": [0.30, 0.29, 0.31, 0.9], "2": [0.2, 0.16, 0.17, 0.18]})
    found = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    threads = hardware.decoding_plan(found)["threads"]
    assert found.probe["threads_ms"] == {"1": 0.29, "2": 0.16} and found.probe["threads_settled"] is True
    assert threads.value == 2 and "1: 0.290 ms, 2: 0.160 ms" in threads.reason and "4 interleaved" in threads.reason
    monkeypatch.setattr(hardware, "_measure_threads",
                        lambda cores: {"1": [0.15, 0.16, 0.15, 0.15], "2": [0.2, 0.21, 0.2, 0.2]})
    faster_alone = hardware.decoding_plan(hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path / "other"))
    assert faster_alone["threads"].value == 1


@pytest.mark.parametrize("disturbed, why", [
    ({"1": [0.27, 0.266, 0.27], "2": [7.99, 8.1, 8.0]}, "2 threads: 30.0x slower than 1"),    # a shared CPU
    ({"1": [0.3, 0.3, 0.31], "2": [0.15, 0.6, 0.7]}, "2 threads: median round 4.00x the best"),
])
def test_disturbed_thread_timings_decide_nothing_and_the_next_process_measures_them_again(
        probed, monkeypatch, tmp_path, disturbed, why):
    kernels = probed(1.0)
    threads_measured = []

    def measure(timings):
        monkeypatch.setattr(hardware, "_measure_threads", lambda cores: threads_measured.append(cores) or timings)

    measure(disturbed)
    found = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    threads = hardware.decoding_plan(found)["threads"]
    assert found.probe["threads_settled"] is False and why in found.probe["threads_disturbed"]
    assert threads.value == found.cores and "disturbed" in threads.reason and why in threads.reason
    hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    assert len(threads_measured) == 1                      # once a process is enough
    monkeypatch.setattr(hardware, "_threads_measured_here", set())       # the next process
    measure({"1": [0.3, 0.3, 0.3], "2": [0.6, 0.6, 0.61]})
    again = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    assert len(threads_measured) == 2 and len(kernels) == 1            # only the threads were measured again
    assert again.probe["threads_settled"] is True and hardware.decoding_plan(again)["threads"].value == 1
    monkeypatch.setattr(hardware, "_threads_measured_here", set())
    assert hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path).probe["threads_ms"] == {"1": 0.3, "2": 0.6}
    assert len(threads_measured) == 2                      # settled: cached for good


def test_settled_thread_timings_are_cached_for_the_next_process(probed, monkeypatch, tmp_path):
    probed(1.0)
    hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    monkeypatch.setattr(hardware, "_threads_measured_here", set())
    monkeypatch.setattr(hardware, "_measure_threads", lambda cores: pytest.fail("measured again"))
    assert hardware.decoding_plan(hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path))["threads"].value == 2


def test_the_mixture_runtime_decodes_with_the_plans_threads(probed, monkeypatch, tmp_path):
    import torch

    from mint.base import TINY, load_base
    from mint.mol.runtime import Decoding, MixtureRuntime

    probed(1.0)
    monkeypatch.setattr(hardware, "_measure_threads", lambda cores: {"1": [0.1] * 3, "2": [0.15] * 3})
    found = hardware.detect(AVX2_CPU, cuda=False, cache=tmp_path)
    monkeypatch.setattr(hardware, "detect", lambda *args, **kwargs: found)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        runtime = MixtureRuntime(load_base(TINY), ["chat"])
        decoding = []
        runtime.model.register_forward_pre_hook(lambda *_: decoding.append(torch.get_num_threads()))
        runtime.generate([[{"role": "user", "content": "hi"}]], [None], Decoding(max_new_tokens=2))
    finally:
        torch.set_num_threads(before)
    assert decoding and set(decoding) == {1}
    assert runtime.threads.value == 1 and "1: 0.100 ms, 2: 0.150 ms" in runtime.threads.reason


def test_small_memory_turns_gradient_checkpointing_on():
    small = hardware.Hardware("cpu", "x", None, (), 2, 4.0, False, "no bf16")
    large = hardware.Hardware("cpu", "x", None, (), 2, 64.0, False, "no bf16")
    assert hardware.training_plan("sft", small).settings()["gradient_checkpointing"] is True
    assert hardware.training_plan("sft", large).settings()["gradient_checkpointing"] is False


@pytest.mark.parametrize("device, method, max_length, expected", [
    ("cpu", "sft", 185, "eager"), ("cpu", "sft", hardware.EAGER_ATTENTION_MAX_TOKENS, "eager"),
    ("cpu", "sft", hardware.EAGER_ATTENTION_MAX_TOKENS + 1, None), ("cpu", "sft", None, None),
    ("cuda", "sft", 185, None), ("cpu", "dpo", 185, None), ("cpu", "grpo", 185, None)])
def test_short_sft_rows_on_a_cpu_train_with_plain_attention_products(device, method, max_length, expected):
    choice = hardware.training_attention(device, method, max_length)
    assert choice.value == expected and choice.reason


@pytest.fixture
def amx_machine(monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "read_cpuinfo", lambda path=None: AMX_CPU)
    monkeypatch.setattr(hardware, "_measure_probe", lambda cores: figures(3.0))
    monkeypatch.setattr(hardware, "_measure_threads", lambda cores: QUIET_THREADS)


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
    assert main(["train", "--dry-run", "--method", "sft", "--set", "max_steps=3", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["trl"]["max_steps"] == 3 and shown["trl"]["bf16"] is True
    assert "amx_bf16" in shown["hardware"]["choices"]["bf16"]["reason"]
    assert not (ws.home / "runs").exists()


def test_train_dry_run_without_a_method_is_exit_2(ws, capsys):
    assert main(["train", "--dry-run"]) == 2
    assert "--method" in capsys.readouterr().err


# --- the device: CUDA when torch sees it, else the CPU; --device (MINT_DEVICE) overrides ---------------------------

CUDA_MACHINE = hardware.Hardware("cuda", "NVIDIA H100", (9, 0), (), 16, 80.0, True,
                                 "CUDA compute capability 9.0 supports bf16")


@pytest.fixture
def device_env(monkeypatch):
    """MINT_DEVICE and CUDA_VISIBLE_DEVICES restored after the test (choosing a device sets them for the process)."""
    monkeypatch.setenv(hardware.DEVICE_ENV, "auto")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return monkeypatch


def test_training_runs_on_cuda_where_torch_sees_it_and_on_the_cpu_where_not(device_env):
    assert hardware.training_device(cuda=True) == "cuda"
    assert hardware.training_device(cuda=False) == "cpu"


def test_device_cpu_trains_on_the_cpu_where_cuda_is_present(device_env, probed, tmp_path):
    probed(1.0)
    hardware.select_device("cpu")
    machine = hardware.detect(AVX2_CPU, cuda=True, cache=tmp_path)
    assert machine.device == "cpu"
    assert hardware.training_plan("sft", machine).settings()["use_cpu"] is True   # what TRL reads


def test_device_cuda_where_there_is_none_is_bad_input_naming_device(device_env):
    from mint.errors import BadInput

    hardware.select_device("cuda")
    with pytest.raises(BadInput, match="sees no CUDA device") as refused:
        hardware.training_device(cuda=False)
    assert refused.value.field.startswith("--device")


def test_train_with_device_cuda_where_there_is_none_is_exit_2_before_anything_runs(ws, device_env, capsys):
    import torch

    device_env.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["train", "--dry-run", "--method", "sft", "--device", "cuda"]) == 2
    assert "--device" in capsys.readouterr().err
    assert not (ws.home / "runs").exists()


def test_device_cuda_n_narrows_the_visible_gpus_to_the_nth(device_env):
    device_env.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert hardware.select_device("cuda:1") == "cuda:1"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "3" and os.environ[hardware.DEVICE_ENV] == "cuda"


@pytest.mark.parametrize("asked", ["tpu", "cuda:x", "cpu:1"])
def test_an_unknown_device_is_bad_input(device_env, asked):
    from mint.errors import BadInput

    with pytest.raises(BadInput, match="use auto, cpu, cuda or cuda:N"):
        hardware.select_device(asked)


def test_the_device_line_names_a_gpus_training_precision_and_where_decoding_runs():
    line = hardware.device_line("both", CUDA_MACHINE)
    assert "training on cuda (NVIDIA H100), bf16 autocast" in line and "decoding on cpu" in line


def test_train_says_its_device_and_precision_on_stderr_at_its_start(ws, amx_machine, device_env, capsys):
    assert main(["train", "--dry-run", "--method", "sft", "--device", "cpu"]) == 0
    assert "training on cpu" in capsys.readouterr().err.splitlines()[0]


def test_json_output_has_no_device_line(ws, amx_machine, device_env, capsys):
    assert main(["train", "--dry-run", "--method", "sft", "--json"]) == 0
    assert "training on" not in capsys.readouterr().err


@pytest.mark.parametrize("command", [["train"], ["eval"], ["serve"], ["chat"], ["loop"]])
def test_every_command_that_loads_a_model_takes_device(command, capsys):
    main([*command, "--help"])
    assert "--device" in capsys.readouterr().out
