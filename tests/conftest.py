"""Shared fixtures: a fresh workspace per test, one model cache per session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory) -> Path:
    """Converted bases live here for the whole session (set MINT_CACHE to reuse one across runs)."""
    if not os.environ.get("MINT_CACHE"):
        os.environ["MINT_CACHE"] = str(tmp_path_factory.mktemp("mint-cache"))
    return Path(os.environ["MINT_CACHE"])


@pytest.fixture
def ws(tmp_path, monkeypatch):
    from mint.workspace import workspace

    home = tmp_path / "home"
    monkeypatch.setenv("MINT_HOME", str(home))
    monkeypatch.chdir(tmp_path)
    return workspace(home)


@pytest.fixture
def project():
    from mint.project import DEFAULT_PROJECT
    return DEFAULT_PROJECT


# --- registry fixtures: a real LoRA adapter of the tiny base, candidates, eval reports ---------------

@pytest.fixture(scope="session")
def adapter_dir(tmp_path_factory):
    """A real LoRA adapter of the tiny base, saved by PEFT as safetensors."""
    from peft import LoraConfig, get_peft_model

    from mint.base import TINY, load_base

    loaded = load_base(TINY)
    model = get_peft_model(loaded.model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                                    init_lora_weights=False))
    path = tmp_path_factory.mktemp("adapter") / "lora"
    model.save_pretrained(path)
    return path


@pytest.fixture
def candidate(ws, adapter_dir):
    """register(specialist) -> a new candidate revision of the tiny LoRA."""
    def make(specialist="coding", **meta):
        from mint.registry.artifacts import register
        return register(ws, adapter_dir, specialist=specialist, base="tiny-random", method="sft", **meta)
    return make


@pytest.fixture
def report_for(ws, tmp_path):
    """report_for(revision, baseline_id, verdict=...) -> path of an eval report in the shape of docs/contracts.md."""
    from mint.registry.store import now

    def make(revision, baseline=None, verdict="pass", version=3, contract_path=None):
        path = tmp_path / f"report-{uuid.uuid4().hex[:8]}.json"
        path.write_text(json.dumps({
            "revision": revision.ref, "revision_id": revision.id,
            "contract": {"name": "coding", "version": version, "sha256": "ab" * 32,
                         **({"path": str(contract_path)} if contract_path else {})},
            "baseline": {"revision_id": baseline, "metrics": {}},
            "metrics": {"core.pass_at_1": 0.4}, "gates": [], "verdict": verdict,
            "examples_sha256": "cd" * 32, "source": "generated", "created_at": now()}))
        # registered under its content hash, as `mint eval` does: promotion trusts only registered reports
        from mint.registry import store
        from mint.registry.promotion import read_report, record_report
        conn = store.open_store(ws)
        try:
            record_report(conn, read_report(path))
        finally:
            conn.close()
        return path
    return make


def write_jsonl(path: Path, rows) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(row if isinstance(row, str) else json.dumps(row))
            f.write("\n")
    return path


def chat_row(user: str, answer: str = "ok", **extra) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": answer}], **extra}


def run_mint(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real console entry point in a child process, as a user runs it."""
    return subprocess.run([sys.executable, "-m", "mint", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=300)


# --- the mixture runtime and the engine: random non-zero LoRA adapters of the tiny base, of different shapes ---

CONVERSATIONS = [
    [{"role": "user", "content": "Write a Python function that reverses a list."}],
    [{"role": "user", "content": "Book me a table for two tomorrow at eight."}],
    [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
    [{"role": "user", "content": "Make a signup form with email and password fields, and a submit button."}],
    [{"role": "user", "content": "What do you think about rainy Sundays?"}],
]


def make_lora(path, base_name, *, seed, r, alpha, targets, rslora=False, layers=None):
    """A PEFT LoRA with random (non-zero) A and B, saved as safetensors at ``path`` (on the decoder
    ``layers`` only, when given)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import load_base

    loaded = load_base(base_name)
    torch.manual_seed(seed)
    model = get_peft_model(loaded.model, LoraConfig(r=r, lora_alpha=alpha, target_modules=targets,
                                                    use_rslora=rslora, init_lora_weights=False,
                                                    layers_to_transform=layers))
    with torch.no_grad():   # large enough that each adapter changes the greedy tokens
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0, 0.3)
    model.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def tiny_loras(tmp_path_factory):
    """Four adapters of the tiny base: different ranks, target modules and scalings."""
    from mint.base import TINY

    root = tmp_path_factory.mktemp("loras")
    return {
        "chat": make_lora(root / "chat", TINY, seed=1, r=2, alpha=4, targets=["q_proj", "v_proj"]),
        "agent": make_lora(root / "agent", TINY, seed=2, r=8, alpha=8, targets=["o_proj", "down_proj", "up_proj"]),
        "coding": make_lora(root / "coding", TINY, seed=3, r=4, alpha=16,
                            targets=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]),
        "genui": make_lora(root / "genui", TINY, seed=4, r=16, alpha=8, targets=["v_proj", "gate_proj"], rslora=True),
        "wide": make_lora(root / "wide", TINY, seed=5, r=32, alpha=32, targets=["q_proj"]),
    }


@pytest.fixture
def tiny_runtime():
    """A fresh runtime on the tiny base with the four default specialists and empty slots."""
    from mint.base import TINY, load_base
    from mint.mol.runtime import MixtureRuntime

    return MixtureRuntime(load_base(TINY), ["chat", "agent", "coding", "genui"], max_rank=16)


def peft_alone(base_name, adapter, conversation, max_new_tokens):
    """What PEFT generates greedily for one conversation with one adapter (None: the bare base)."""
    import torch
    from peft import PeftModel

    from mint.base import load_base

    loaded = load_base(base_name)
    model = PeftModel.from_pretrained(loaded.model, str(adapter)) if adapter else loaded.model
    model.eval()
    tokenizer = loaded.tokenizer
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")
    with torch.inference_mode():
        out = model.generate(**ids, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=tokenizer.pad_token_id)
    new = out[0, ids["input_ids"].shape[1]:].tolist()
    eos = tokenizer.eos_token_id
    return new[:new.index(eos)] if eos in new else new


@pytest.fixture
def crown(ws):
    """crown(specialist, lora_dir) -> the registered revision, made champion (forced: no eval in these tests)."""
    def make(specialist, lora_dir, base="tiny-random"):
        from mint.registry.artifacts import register
        from mint.registry.promotion import promote

        revision = register(ws, lora_dir, specialist=specialist, base=base, method="sft")
        promote(ws, revision.ref, force=True, why="test")
        return revision
    return make
