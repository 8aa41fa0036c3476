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
