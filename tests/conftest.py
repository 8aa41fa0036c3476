"""Shared fixtures: a fresh workspace per test, one model cache per session."""
from __future__ import annotations

import json
import os
import subprocess
import sys
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
