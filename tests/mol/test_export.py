"""mint export vllm: the launch command has the shape vLLM documents for `vllm serve`."""
from __future__ import annotations

import json

from tests.conftest import run_mint

# vLLM's documented LoRA flags (docs.vllm.ai, "LoRA Adapters" and `vllm serve --help`): --lora-modules takes
# name=path items (or JSON), --max-lora-rank one of its supported ranks, --max-loras an integer.
VLLM_LORA_FLAGS = {"--enable-lora", "--lora-modules", "--max-lora-rank", "--max-loras"}


def test_export_vllm_writes_adapters_and_a_documented_launch_command(ws, crown, tiny_loras, tmp_path):
    crown("coding", tiny_loras["coding"])          # rank 4
    crown("genui", tiny_loras["genui"])            # rank 16
    out = tmp_path / "vllm-out"
    result = run_mint("export", "vllm", str(out), "--json")
    assert result.returncode == 0, result.stderr
    exported = json.loads(result.stdout)
    command = exported["command"]
    assert command[:3] == ["vllm", "serve", "tiny-random"]
    flags = {a for a in command if a.startswith("--")}
    assert flags == VLLM_LORA_FLAGS
    assert command[command.index("--max-lora-rank") + 1] == "16"
    assert command[command.index("--max-loras") + 1] == "2"
    modules = command[command.index("--lora-modules") + 1:]
    assert [m.split("=", 1)[0] for m in modules] == ["coding-v1", "genui-v1"]
    for module in modules:
        name, path = module.split("=", 1)
        assert sorted(p.name for p in (out / "adapters" / name).iterdir()) == ["adapter_config.json",
                                                                               "adapter_model.safetensors"]
        assert path == str(out / "adapters" / name)
    assert exported["missing"] == ["chat", "agent"]
    assert "vllm serve tiny-random --enable-lora" in (out / "launch.sh").read_text()
    assert "export VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in (out / "launch.sh").read_text()
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
