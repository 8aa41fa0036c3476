"""Inspect AI evaluates a champion through `mint serve` with its OpenAI-compatible provider, offline, on the task
the project ships (examples/evals/genui_inspect.py)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from mint.project import DEFAULT_PROJECT, Project

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)
TASK = Path(__file__).resolve().parents[2] / "examples" / "evals" / "genui_inspect.py"


def test_inspect_scores_the_genui_champion_through_mint_serve(ws, crown, tiny_loras, tmp_path, monkeypatch):
    pytest.importorskip("inspect_ai", reason="the evals extra (pip install 'mint[evals]') is not installed")
    from inspect_ai import eval as inspect_eval

    from mint.mol.mixture import Mixture
    from mint.mol.turnlog import read_turns
    from mint.serve.admission import Access
    from mint.serve.app import create_app
    from mint.serve.local import LocalBackend
    from mint.serve.server import start_background

    crown("genui", tiny_loras["genui"])
    app = create_app(LocalBackend(Mixture.open(ws, TINY_PROJECT), window_ms=5, poll_s=60),
                     access=Access(("inspect-key-0001",)))
    server = start_background(app, start_limit_s=120)
    # the provider `openai-api/mint/...` reads MINT_BASE_URL and MINT_API_KEY
    monkeypatch.setenv("MINT_BASE_URL", f"http://127.0.0.1:{server.port}/v1")
    monkeypatch.setenv("MINT_API_KEY", "inspect-key-0001")
    spec = importlib.util.spec_from_file_location("genui_inspect", TASK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        [log] = inspect_eval(module.genui_json(max_tokens=24), model="openai-api/mint/mint/genui", limit=3,
                             display="none", log_dir=str(tmp_path / "inspect-logs"))
    finally:
        server.stop()
    assert log.status == "success", log.error
    [score] = log.results.scores
    accuracy = score.metrics["accuracy"].value
    assert 0.0 <= accuracy <= 1.0 and log.results.completed_samples == 3
    answered = [turn for turn in read_turns(ws) if turn["served_by"] == "genui:v1"]
    assert len(answered) == 3                    # every sample was answered by the champion, through the server
    served = {turn["messages"][-1]["content"] for turn in answered}
    assert {sample.output.completion for sample in log.samples} == served
