"""`mint eval` on a served engine (an OpenAI-compatible server that loads LoRA adapters at runtime), against a fake
one in-process that answers each (model, prompt) deterministically and records what it loads and unloads."""
from __future__ import annotations

import hashlib
import json
import socket
import time

import pytest
from fastapi import Request   # at module level: FastAPI resolves the fake's (postponed) annotations here

from mint.cli import main
from mint.contract.evaluate import evaluate
from mint.registry import store
from tests.contract.conftest import card_contract
from tests.contract.test_schema import GOOD


class FakeEngine:
    """vLLM's shapes: /v1/models (the base without a parent, adapters with one), /version, runtime LoRA loading,
    chat completions answered per (model, last user turn)."""

    def __init__(self) -> None:
        from fastapi import FastAPI
        from fastapi.responses import JSONResponse, PlainTextResponse

        from mint.serve.server import start_background

        self.base, self.version, self.refuse_load, self.fail_after = "tiny-random", "0.0.fake", None, None
        self.loaded, self.loads, self.unloads, self.asked = {}, [], [], []
        app = FastAPI()

        @app.get("/v1/models")
        async def models():
            return {"object": "list", "data": [{"id": self.base, "parent": None, "root": self.base},
                                               *({"id": name, "parent": self.base, "root": path}
                                                 for name, path in self.loaded.items())]}

        @app.get("/version")
        async def version():
            return {"version": self.version}

        @app.get("/health")
        async def health():
            return PlainTextResponse("")      # vLLM's: an empty 200, no rank limit said

        @app.post("/v1/load_lora_adapter")
        async def load(request: Request):
            body = await request.json()
            if self.refuse_load:
                return JSONResponse({"error": {"message": self.refuse_load}}, 400)
            self.loads.append(body["lora_name"])
            self.loaded[body["lora_name"]] = body["lora_path"]
            return PlainTextResponse("Success")

        @app.post("/v1/unload_lora_adapter")
        async def unload(request: Request):
            body = await request.json()
            self.unloads.append(body["lora_name"])
            self.loaded.pop(body["lora_name"], None)
            return PlainTextResponse("Success")

        @app.post("/v1/chat/completions")
        async def completions(request: Request):
            body = await request.json()
            if self.fail_after is not None and len(self.asked) >= self.fail_after:
                return JSONResponse({"error": {"message": "CUDA out of memory"}}, 500)
            self.asked.append((body["model"], body["messages"]))
            if body["model"] != self.base and body["model"] not in self.loaded:
                return JSONResponse({"error": {"message": f"model {body['model']} does not exist"}}, 404)
            return {"choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": answer(body["model"], body["messages"])}}],
                    "usage": {"prompt_tokens": 9, "completion_tokens": 4}}

        self.running = start_background(app, start_limit_s=60)
        self.url = f"http://127.0.0.1:{self.running.port}/v1"


def answer(model: str, messages: list[dict]) -> str:
    """The fake's answer: a card whose title says who answered which prompt."""
    said = hashlib.sha256(json.dumps([model, messages]).encode()).hexdigest()[:6]
    return json.dumps({"type": "Card", "props": {"title": f"{model[:5]}-{said}"}})


@pytest.fixture(scope="module")
def server():
    fake = FakeEngine()
    yield fake
    fake.running.stop()


@pytest.fixture
def engine(server):
    server.base, server.version, server.refuse_load, server.fail_after = "tiny-random", "0.0.fake", None, None
    for kept in (server.loaded, server.loads, server.unloads, server.asked):
        kept.clear()
    return server


@pytest.fixture
def ui_contract(tmp_path):
    return card_contract(tmp_path, GOOD)


def registered(ws, revision) -> list:
    return store.reports_for(store.open_store(ws), revision.id)


def test_an_evaluation_on_a_served_engine_registers_a_report_naming_it(ws, candidate, ui_contract, engine, capsys):
    (ws.home.parent / "mint.yaml").write_text(f"base: tiny-random\nspecialists: {{genui: {{}}}}\n"
                                              f"engine: {{url: '{engine.url}'}}\n")
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["generation"]["core"]["engine"] == {"kind": "served", "model": "tiny-random",
                                                      "version": "0.0.fake", "url": engine.url}
    name = f"genui-v1-{revision.id[:12]}"
    outputs = [json.loads(line)["outputs"] for line in open(report["predictions_path"])]
    asked = {json.dumps(messages): answer(name, messages) for model, messages in engine.asked if model == name}
    assert len(asked) == 3 and sorted(o for [o] in outputs) == sorted(asked.values())
    assert [r["verdict"] for r in registered(ws, revision)] == ["pass"]


def test_a_candidate_is_loaded_under_a_name_carrying_its_revision_id_and_unloaded_after(ws, candidate, ui_contract,
                                                                                         engine):
    revision = candidate("genui")
    evaluate(ws, revision.ref, ui_contract, engine=engine.url)
    name = f"genui-v1-{revision.id[:12]}"
    assert engine.loads == [name] and engine.unloads == [name]
    assert {model for model, _messages in engine.asked} == {name, "tiny-random"}   # the baseline, on the server too


def test_a_candidate_the_server_had_loaded_before_stays_loaded(ws, candidate, ui_contract, engine):
    from mint.registry.artifacts import load_revision

    revision = candidate("genui")
    # as the gateway publishes a champion: under its ref's name, from the registry's files
    engine.loaded["genui-v1"] = str(load_revision(ws, revision.ref)[1])
    evaluate(ws, revision.ref, ui_contract, engine=engine.url)
    assert engine.loads == [] and engine.unloads == [] and "genui-v1" in engine.loaded
    assert "genui-v1" in {model for model, _messages in engine.asked}


def test_mint_report_show_names_the_served_engine(ws, candidate, ui_contract, engine, capsys):
    revision = candidate("genui")
    evaluate(ws, revision.ref, ui_contract, engine=engine.url)
    capsys.readouterr()
    assert main(["report", "show", revision.ref]) == 0
    assert f"engine: served by {engine.url} (base tiny-random, version 0.0.fake)" in capsys.readouterr().out


def test_a_baseline_decoded_by_mints_engine_is_decoded_again_on_the_served_engine(ws, candidate, ui_contract, engine):
    local = evaluate(ws, "base", ui_contract, base="tiny-random")
    revision = candidate("genui")
    served = evaluate(ws, revision.ref, ui_contract, engine=engine.url)
    assert served.baseline_evaluated and served.report.baseline.report != local.report.id
    assert [model for model, _messages in engine.asked].count("tiny-random") == 3
    # and the other way: the served baseline is not the local candidate's
    again = evaluate(ws, candidate("genui").ref, ui_contract, engine="local")
    assert again.report.baseline.report == local.report.id


def test_answers_decoded_by_another_version_of_the_server_are_decoded_again(ws, candidate, ui_contract, engine):
    first = evaluate(ws, candidate("genui").ref, ui_contract, engine=engine.url)
    assert [model for model, _messages in engine.asked].count("tiny-random") == 3
    engine.version = "0.0.next"
    second = evaluate(ws, candidate("genui").ref, ui_contract, engine=engine.url)
    assert second.baseline_evaluated and second.report.baseline.report != first.report.baseline.report
    assert [model for model, _messages in engine.asked].count("tiny-random") == 6


def test_a_server_whose_base_differs_is_refused_before_anything_is_decoded(ws, candidate, ui_contract, engine, capsys):
    engine.base = "meta-llama/Llama-3.1-8B-Instruct"
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--engine", engine.url]) == 2
    err = capsys.readouterr().err
    assert "meta-llama/Llama-3.1-8B-Instruct" in err and "tiny-random" in err and "--engine" in err
    assert engine.asked == [] and engine.loads == [] and registered(ws, revision) == []


def test_an_adapter_the_server_refuses_to_load_is_exit_2_naming_it_and_the_reason(ws, candidate, ui_contract, engine,
                                                                                   capsys):
    engine.refuse_load = "LoRA rank 4 is greater than max_lora_rank 1"
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--engine", engine.url]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "genui:v1 could not be loaded" in err and "LoRA rank 4 is greater than max_lora_rank 1" in err
    assert engine.asked == [] and registered(ws, revision) == []


def test_a_url_with_nothing_listening_exits_2_within_seconds(ws, candidate, ui_contract, capsys):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    revision = candidate("genui")
    started = time.monotonic()
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--engine",
                 f"http://127.0.0.1:{port}/v1"]) == 2
    assert time.monotonic() - started < 10
    assert f"the engine http://127.0.0.1:{port}/v1 does not answer" in " ".join(capsys.readouterr().err.split())


def test_a_server_error_mid_evaluation_registers_nothing_and_names_the_request(ws, candidate, ui_contract, engine,
                                                                               capsys):
    engine.fail_after = 2
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--engine", engine.url]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert engine.url in err and "suite core example" in err and "CUDA out of memory" in err
    assert registered(ws, revision) == [] and not list(ws.reports.rglob("report.json"))
    assert engine.unloads == engine.loads == [f"genui-v1-{revision.id[:12]}"]


def test_an_engine_that_is_neither_local_nor_a_url_is_exit_2_naming_the_option(ws, candidate, ui_contract, capsys):
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(ui_contract), "--engine", "vllm"]) == 2
    assert "--engine: expected `local` or an http(s) URL" in capsys.readouterr().err
    assert registered(ws, revision) == []
