"""scripts/gpu_check.sh, the GPU day's checks: without CUDA it says so and exits 0; its engine-parity check, run here
on the CPU, passes where `mint eval` and `mint serve` give the same answers and fails where they do not."""
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))


def cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.skipif(cuda(), reason="a CUDA machine runs the checks themselves")
def test_without_cuda_the_gpu_check_says_so_and_exits_0(tmp_path):
    done = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh")], capture_output=True, text=True,
                          env={**os.environ, "PYTHON": sys.executable, "GPU_CHECK_KEEP": str(tmp_path / "kept")},
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no CUDA here" in done.stdout and "nothing was run" in done.stdout
    assert not (tmp_path / "kept").exists()         # nothing was made either


@pytest.fixture
def parity_project(ws, tmp_path, tiny_loras, crown):
    """A project on the tiny base (its mint.yaml in the current folder) with a genui champion and a card contract."""
    from tests.contract.conftest import card_contract
    from tests.contract.test_schema import GOOD

    (tmp_path / "mint.yaml").write_text("base: tiny-random\nspecialists:\n  genui: {}\n  coding: {}\n")
    revision = crown("genui", tiny_loras["genui"])
    return card_contract(tmp_path, GOOD), revision


def test_the_parity_check_passes_when_eval_and_serve_answer_alike(parity_project, capsys):
    import gpu_check

    contract, revision = parity_project
    assert gpu_check.main(["parity", "--contract", str(contract), "--ref", revision.ref, "--device", "cpu"]) == 0
    said = capsys.readouterr().out
    assert "PASS parity: `mint eval` and `mint serve` both on cpu: 3 of 3 greedy answers identical" in said
    # said either way (a shared CPU may keep the second server from starting in time): never a failure of its own
    assert "INFO parity: `mint serve` as shipped" in said


def test_the_parity_check_fails_when_serve_answers_otherwise(parity_project, capsys, monkeypatch):
    import gpu_check

    contract, revision = parity_project
    monkeypatch.setattr(gpu_check, "_ask", lambda *args: "another answer")
    monkeypatch.setattr(gpu_check, "_shipped_serve_answers", lambda *args: None)
    assert gpu_check.main(["parity", "--contract", str(contract), "--ref", revision.ref, "--device", "cpu"]) == 1
    assert "FAIL parity: `mint eval` and `mint serve` both on cpu: 0 of 3" in capsys.readouterr().out


def test_the_vllm_check_refuses_the_cpu_build_and_no_vllm(parity_project, capsys, monkeypatch, tmp_path):
    import gpu_check

    from mint.mol import export

    _contract, revision = parity_project
    for runner, says in ((export.VllmRunner(("python", "-m", export.VLLM_MODULE), True, True), "the CPU build"),
                         (export.VllmRunner(("python3", "-m", export.VLLM_MODULE), False, False), "no vLLM")):
        monkeypatch.setattr(export, "find_vllm", lambda runner=runner: runner)
        assert gpu_check.main(["vllm", "--ref", revision.ref, "--out", str(tmp_path / "out")]) == 1
        assert says in capsys.readouterr().out
