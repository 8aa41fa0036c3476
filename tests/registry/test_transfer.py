"""Import and export: what crosses the registry's border, and what --force may delete."""
import json
import os
import shutil
import stat

import pytest

from mint.cli import main
from mint.errors import BadInput
from mint.registry import store
from mint.registry.artifacts import register
from mint.registry.transfer import EXPORT_MARKER, adapter_base, export_revision, import_adapter


# --- export --force --------------------------------------------------------------------------------

def test_force_replaces_a_previous_export(ws, candidate, tmp_path):
    v1, v2 = candidate(), candidate()
    export_revision(ws, v1.ref, tmp_path / "out")
    result = export_revision(ws, v2.ref, tmp_path / "out", force=True)
    assert result.replaced
    assert json.loads((tmp_path / "out" / EXPORT_MARKER).read_text())["id"] == v2.id
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


@pytest.mark.parametrize("target", [".", "project", "notes.txt", "link"])
def test_force_never_deletes_what_is_not_a_previous_export(ws, candidate, tmp_path, monkeypatch, capsys, target):
    revision = candidate()
    project = tmp_path / "project"
    project.mkdir()
    (project / "mint.yaml").write_text("base: tiny-random\n")
    (tmp_path / "notes.txt").write_text("keep me")
    (tmp_path / "link").symlink_to(project)
    monkeypatch.chdir(tmp_path)
    assert main(["registry", "export", revision.ref, target, "--force"]) == 2
    assert "not a previous mint export" in capsys.readouterr().err
    assert (project / "mint.yaml").read_text() == "base: tiny-random\n"
    assert (tmp_path / "notes.txt").read_text() == "keep me" and (tmp_path / "link").is_symlink()


def test_export_into_the_workspace_is_refused(ws, candidate):
    revision = candidate()
    with pytest.raises(BadInput, match="inside the workspace"):
        export_revision(ws, revision.ref, ws.adapters / "mine")
    assert not (ws.adapters / "mine").exists()


def test_force_keeps_an_export_someone_added_files_to(ws, candidate, tmp_path):
    revision = candidate()
    export_revision(ws, revision.ref, tmp_path / "out")
    (tmp_path / "out" / "my-notes.md").write_text("mine")
    with pytest.raises(BadInput, match=r"holds files the export did not write \(my-notes.md\)"):
        export_revision(ws, revision.ref, tmp_path / "out", force=True)
    assert (tmp_path / "out" / "my-notes.md").read_text() == "mine"


# --- what an export names and how it is written ---------------------------------------------------

def test_export_names_the_hub_id_of_the_embedded_base_and_writes_normal_modes(ws, adapter_dir, tmp_path):
    revision = register(ws, adapter_dir, specialist="coding", base="smollm2-135m")
    for path in (ws.adapters / revision.id).iterdir():
        os.chmod(path, 0o600)   # how a revision's files can look after training in a private temp dir
    result = export_revision(ws, revision.ref, tmp_path / "out")
    assert result.base_model_name_or_path == "HuggingFaceTB/SmolLM2-135M-Instruct"
    config = json.loads((tmp_path / "out" / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in (tmp_path / "out").iterdir()}
    assert set(modes.values()) == {0o644}, modes


def test_export_of_an_adapter_trained_on_the_dequantized_gguf_warns_that_the_named_release_differs(
        ws, adapter_dir, tmp_path):
    revision = register(ws, adapter_dir, specialist="coding", base="smollm2-135m")
    result = export_revision(ws, revision.ref, tmp_path / "out")
    (warning,) = result.warnings
    assert "HuggingFaceTB/SmolLM2-135M-Instruct" in warning and "Q4_1" in warning and "differ" in warning


def test_an_export_of_an_adapter_trained_on_the_dequantized_gguf_says_so_in_its_readme_and_marker(
        ws, adapter_dir, tmp_path):
    revision = register(ws, adapter_dir, specialist="coding", base="smollm2-135m")
    export_revision(ws, revision.ref, tmp_path / "out")
    assert "trained on the Q4_1 GGUF" in (tmp_path / "out" / "README.md").read_text()
    assert "Q4_1" in json.loads((tmp_path / "out" / EXPORT_MARKER).read_text())["trained_on"]


def test_registry_export_renders_the_dequantized_warning_and_lists_it_in_json(ws, adapter_dir, tmp_path, capsys):
    revision = register(ws, adapter_dir, specialist="coding", base="smollm2-135m")
    assert main(["registry", "export", revision.ref, str(tmp_path / "shown")]) == 0
    assert "warning: base_model_name_or_path names HuggingFaceTB" in capsys.readouterr().err
    assert main(["registry", "export", revision.ref, str(tmp_path / "listed"), "--json"]) == 0
    assert "Q4_1" in json.loads(capsys.readouterr().out)["warnings"][0]


def test_an_export_of_a_full_precision_base_warns_nothing(ws, candidate, tmp_path):
    result = export_revision(ws, candidate().ref, tmp_path / "out")
    assert result.warnings == [] and "trained_on" not in json.loads((tmp_path / "out" / EXPORT_MARKER).read_text())


def test_export_names_the_directory_of_a_local_base(ws, adapter_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bases" / "my-llama").mkdir(parents=True)   # a folder here: a path, not the Hub id bases/my-llama
    revision = register(ws, adapter_dir, specialist="coding", base="bases/my-llama")
    result = export_revision(ws, revision.ref, tmp_path / "out")
    assert result.base_model_name_or_path == str(tmp_path / "bases" / "my-llama")


# --- import ------------------------------------------------------------------------------------------

def test_import_without_base_reads_the_adapters_own_base(ws, candidate, tmp_path):
    export_revision(ws, candidate().ref, tmp_path / "exported")   # names tiny-random; mint.yaml says smollm2
    result = import_adapter(ws, tmp_path / "exported", specialist="coding")
    assert (result.base, result.base_from) == ("tiny-random", "adapter_config.json")
    assert result.revision.base == "tiny-random"


def test_the_hub_id_of_the_embedded_base_maps_back_to_it(tmp_path):
    assert adapter_base(tmp_path, {"base_model_name_or_path": "HuggingFaceTB/SmolLM2-135M-Instruct"}) \
        == "smollm2-135m"
    assert adapter_base(tmp_path, {"base_model_name_or_path": None}) is None
    with pytest.raises(BadInput, match="adapter_config.json: base_model_name_or_path: 'no such base' is neither"):
        adapter_base(tmp_path, {"base_model_name_or_path": "no such base"})


def test_an_adapter_naming_a_hub_id_imports_onto_that_hub_base(tmp_path):
    assert adapter_base(tmp_path, {"base_model_name_or_path": "meta-llama/x"}) == "meta-llama/x"


def test_unknown_specialist_is_refused_with_a_suggestion_unless_new(ws, adapter_dir, capsys):
    assert main(["registry", "import", str(adapter_dir), "--specialist", "codin", "--base", "tiny-random"]) == 2
    assert "unknown specialist 'codin' (did you mean coding?)" in capsys.readouterr().err
    assert not store.db_path(ws).exists()
    result = import_adapter(ws, adapter_dir, specialist="codin", base="tiny-random", new=True)
    assert result.ref == "codin:v1"


def test_import_refuses_a_symlink_that_leaves_the_directory(ws, adapter_dir, tmp_path):
    source = tmp_path / "lora"
    shutil.copytree(adapter_dir, source)
    secret = tmp_path / "secret.txt"
    secret.write_text("password")
    (source / "README.md").unlink()
    (source / "README.md").symlink_to(secret)
    with pytest.raises(BadInput, match="README.md: is a symlink to .*secret.txt, outside the adapter directory"):
        import_adapter(ws, source, specialist="coding", base="tiny-random")
    assert not store.db_path(ws).exists() or not store.list_revisions(store.open_store(ws)).total


def test_import_lists_what_it_left_out(ws, adapter_dir, tmp_path, capsys):
    source = tmp_path / "lora"
    shutil.copytree(adapter_dir, source)
    (source / "checkpoint-10").mkdir()
    (source / "checkpoint-10" / "optimizer.safetensors").write_bytes(b"x")
    (source / "NOTES.md").symlink_to(source / "README.md")   # inside the directory: followed
    assert main(["registry", "import", str(source), "--specialist", "coding", "--base", "tiny-random",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["skipped"] == ["checkpoint-10/ (a subdirectory: only the adapter's top-level files are kept)"]
    stored = json.loads((ws.adapters / result["revision"]["id"] / "mint.json").read_text())["files"]
    assert "NOTES.md" in stored and not any(name.startswith("checkpoint") for name in stored)


@pytest.mark.parametrize("make", ["missing", "a_file", "unreadable", "config_to_dev_zero"])
def test_odd_sources_are_bad_input_not_a_traceback(ws, adapter_dir, tmp_path, capsys, make):
    source = tmp_path / "lora"
    if make == "a_file":
        source.write_text("not a directory")
    elif make != "missing":
        shutil.copytree(adapter_dir, source)
    if make == "unreadable":
        if os.geteuid() == 0:
            pytest.skip("root reads any file")
        os.chmod(source / "README.md", 0)
    if make == "config_to_dev_zero":
        (source / "adapter_config.json").unlink()
        (source / "adapter_config.json").symlink_to("/dev/zero")
    assert main(["registry", "import", str(source), "--specialist", "coding", "--base", "tiny-random"]) == 2
    assert "error:" in capsys.readouterr().err
