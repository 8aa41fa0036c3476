import json
import os
import shutil
import subprocess
import sys

import pytest

from mint.cli import main
from mint.errors import BadInput, Refused
from mint.registry.artifacts import load_revision
from mint.registry.maintenance import gc, verify
from mint.registry.transfer import export_revision, import_adapter


def test_verify_passes_then_names_a_tampered_file(ws, candidate, capsys):
    revision = candidate()
    assert verify(ws).ok
    weights = ws.adapters / revision.id / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF
    weights.write_bytes(bytes(data))
    assert main(["registry", "verify"]) == 1
    assert "adapter_model.safetensors: sha256 differs" in capsys.readouterr().err
    with pytest.raises(Refused, match="failed verification"):
        load_revision(ws, revision.ref)


def test_verify_names_missing_and_added_files(ws, candidate, capsys):
    revision = candidate()
    directory = ws.adapters / revision.id
    (directory / "README.md").unlink()
    (directory / "extra.bin").write_bytes(b"\x80\x04")
    assert main(["registry", "verify", revision.ref, "--json"]) == 1
    problems = [p["problem"] for p in json.loads(capsys.readouterr().out)["problems"]]
    assert any(p.endswith("README.md: missing") for p in problems)
    assert any(p.endswith("extra.bin: not part of the revision") for p in problems)


def test_editing_mint_json_to_hide_a_change_is_caught(ws, candidate):
    revision = candidate()
    directory = ws.adapters / revision.id
    (directory / "README.md").write_text("changed")
    meta = json.loads((directory / "mint.json").read_text())
    from mint.registry.artifacts import sha256_file
    meta["files"]["README.md"] = sha256_file(directory / "README.md")
    (directory / "mint.json").write_text(json.dumps(meta))
    assert any("file list differs" in p["problem"] for p in verify(ws).problems)


def test_load_returns_the_verified_directory(ws, candidate):
    revision = candidate()
    loaded, directory = load_revision(ws, "coding:v1")
    assert loaded == revision and (directory / "adapter_model.safetensors").is_file()


def test_pickle_adapter_is_refused(ws, adapter_dir, tmp_path):
    pickled = tmp_path / "pickled"
    shutil.copytree(adapter_dir, pickled)
    (pickled / "adapter_model.safetensors").rename(pickled / "adapter_model.bin")
    with pytest.raises(BadInput, match="adapter_model.bin is a pickle file"):
        import_adapter(ws, pickled, specialist="coding", base="tiny-random")
    assert not ws.adapters.exists() or not any(p for p in ws.adapters.iterdir() if not p.name.startswith("."))


def test_import_checks_modules_and_shapes_against_the_base(ws, tmp_path):
    import torch
    from safetensors.torch import save_file

    def fake_adapter(name, tensors):
        path = tmp_path / name
        path.mkdir()
        (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA", "r": 4,
                                                              "target_modules": ["q_proj"]}))
        save_file(tensors, str(path / "adapter_model.safetensors"))
        return path

    missing = fake_adapter("missing", {"base_model.model.model.layers.7.self_attn.q_proj.lora_A.weight":
                                       torch.zeros(4, 64)})
    with pytest.raises(BadInput, match="targets module 'model.layers.7.self_attn.q_proj', which the base does not"):
        import_adapter(ws, missing, specialist="coding", base="tiny-random")
    wrong = fake_adapter("wrong", {"base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight":
                                   torch.zeros(4, 576)})
    with pytest.raises(BadInput, match=r"takes 64 inputs"):
        import_adapter(ws, wrong, specialist="coding", base="tiny-random")


@pytest.mark.sqlite_only   # about the files PEFT loads, which the backend does not touch
def test_import_then_export_loads_with_plain_peft(ws, adapter_dir, tmp_path, capsys):
    assert main(["registry", "import", str(adapter_dir), "--specialist", "agent", "--base", "tiny-random",
                 "--json"]) == 0
    imported = json.loads(capsys.readouterr().out)
    assert imported["ref"] == "agent:v1" and imported["revision"]["base_fingerprint"].startswith("sha256:")
    result = export_revision(ws, "agent:v1", tmp_path / "exported")
    assert result.base_model_name_or_path == "tiny-random"
    assert sorted(os.listdir(tmp_path / "exported")) == [".mint-export.json", "README.md", "adapter_config.json",
                                                         "adapter_model.safetensors"]

    # a process that never imports mint: the tiny base saved as a plain HF directory, then PEFT
    from mint.base import TINY, load_base
    base = load_base(TINY)
    base.model.save_pretrained(tmp_path / "base")
    script = f"""
import sys, torch
from transformers import AutoModelForCausalLM
from peft import PeftModel
model = AutoModelForCausalLM.from_pretrained({str(tmp_path / 'base')!r})
peft_model = PeftModel.from_pretrained(model, {str(tmp_path / 'exported')!r})
assert "mint" not in sys.modules
lora = [n for n, _ in peft_model.named_parameters() if "lora_A" in n]
assert len(lora) == 4, lora
print("loaded", len(lora))
"""
    child = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path,
                           env={**os.environ, "PYTHONPATH": ""})
    assert child.returncode == 0, child.stderr
    assert "loaded 4" in child.stdout


def test_gc_keeps_champions_the_newest_and_parents_of_kept_revisions(ws, candidate, report_for):
    from mint.registry.promotion import promote, reject

    v1 = candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    v2, v3, v4 = candidate(), candidate(), candidate()
    v5 = candidate(parent=v2.id)
    reject(ws, v4.ref, why="worse")
    (ws.adapters / "deadbeef").mkdir()   # what a register killed between rename and commit leaves
    dry = gc(ws, keep=2, dry_run=True)
    assert [r["revision"] for r in dry.removed] == ["coding:v3"] and dry.orphans == ["deadbeef"]
    assert (ws.adapters / v3.id).exists()
    done = gc(ws, keep=2)
    assert [r["revision"] for r in done.removed] == ["coding:v3"] and done.kept == 4
    assert not (ws.adapters / v3.id).exists() and not (ws.adapters / "deadbeef").exists()
    assert all((ws.adapters / r.id).exists() for r in (v1, v2, v4, v5))
    assert verify(ws).ok


def test_gc_during_a_register_leaves_its_staging_folder_alone(ws, candidate, adapter_dir, monkeypatch):
    """A gc that runs while train or import is copying files must not delete the revision being written."""
    import threading

    from mint.registry import artifacts

    candidate()   # the registry exists
    (ws.adapters / ".tmp-revision-stale").mkdir()   # what a killed register left: swept once nothing runs
    staged, go, outcome = threading.Event(), threading.Event(), {}

    def pause_after_staging(point):
        if point == "register.staged":
            staged.set()
            go.wait()

    monkeypatch.setattr(artifacts, "checkpoint", pause_after_staging)

    def register_in_flight():
        try:
            outcome["revision"] = artifacts.register(ws, adapter_dir, specialist="coding", base="tiny-random")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            outcome["error"] = exc

    writer = threading.Thread(target=register_in_flight)
    writer.start()
    try:
        assert staged.wait(timeout=60)
        in_flight = [p for p in ws.adapters.iterdir()
                     if p.name.startswith(".tmp-revision-") and p.name != ".tmp-revision-stale"]
        result = gc(ws, keep=0)
        assert in_flight and all(p.is_dir() for p in in_flight)
    finally:
        go.set()
        writer.join(timeout=60)
    assert "error" not in outcome, outcome.get("error")
    assert verify(ws, outcome["revision"].ref).ok
    assert result.staging_busy and (ws.adapters / ".tmp-revision-stale").exists()
    assert not gc(ws, keep=0).staging_busy   # nothing running now: the stale folder goes
    assert not (ws.adapters / ".tmp-revision-stale").exists()


def test_gc_dry_run_outside_a_project_refuses_as_gc_does(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("MINT_HOME", raising=False)
    monkeypatch.delenv("MINT_CONFIG", raising=False)
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".mint").mkdir()
    assert main(["registry", "gc", "--dry-run"]) == 2
    dry = capsys.readouterr().err
    assert main(["registry", "gc"]) == 2
    assert "no mint.yaml here" in dry and dry == capsys.readouterr().err
