"""Reliability suite 3, fast form: fuzz every input mint reads from outside, 0 crashes.

The long form is ``python scripts/reliability_fuzz.py`` (10,000+ cases); this runs its small version on the
tiny base, plus one regression test per defect it found.
"""
from __future__ import annotations

import gzip
import json
import re

import pytest
from tests.reliability.scripts import load_script


def test_fuzzed_inputs_never_crash_mint():
    fuzz = load_script("fuzz")
    result = fuzz.run_suite(100, seed=12, log=lambda _line: None)
    assert result["cases"] >= 95
    assert set(result["by_target"]) == set(fuzz.WEIGHTS)
    assert result["crashes"] == 0, result["examples"][:5]


# --- regressions: one per defect the long form found ------------------------------------------------

def test_a_gzip_log_damaged_mid_stream_is_quarantined_not_a_crash(tmp_path, project):
    from mint.data.ingest import ingest
    from mint.workspace import workspace

    good = gzip.compress(b"".join(json.dumps({"messages": [{"role": "user", "content": f"q{i} " * 50}]}).encode()
                                  + b"\n" for i in range(200)), mtime=0)
    damaged = bytearray(good)
    damaged[len(good) // 2] ^= 1 << 2   # one flipped bit: zlib.error ("invalid distance too far back")
    path = tmp_path / "app.jsonl.gz"
    path.write_bytes(bytes(damaged))
    result = ingest(workspace(tmp_path / "home"), [path], dataset="d", project=project, workers=0)
    stats = result.sources[0]
    assert stats.quarantined >= 1 and stats.read == stats.kept + stats.duplicate + stats.quarantined
    assert "unreadable" in result.reasons


@pytest.mark.parametrize("text", ["[" * 5000 + "]" * 5000, "a:\n" + "  - " * 2000 + "x"])
def test_yaml_nested_too_deeply_is_bad_input_at_its_file(tmp_path, text):
    from mint.errors import BadInput
    from mint.yamlfile import load_yaml

    path = tmp_path / "deep.yaml"
    path.write_text(text)
    with pytest.raises(BadInput, match="deep.yaml"):
        load_yaml(path)


def test_yaml_alias_inside_itself_is_bad_input(tmp_path):
    from mint.errors import BadInput
    from mint.yamlfile import load_yaml

    path = tmp_path / "loop.yaml"
    path.write_text("a: &a [*a]\n")
    with pytest.raises(BadInput, match="loop.yaml: invalid YAML: an alias refers to itself"):
        load_yaml(path)


def test_yaml_nested_aliases_load_in_linear_time(tmp_path):
    """A "billion laughs" file: 12 levels of 8 aliases each used to be walked 8**12 times."""
    import time

    from mint.yamlfile import load_yaml

    levels = ['l0: &l0 ["x"]'] + [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 8)}]" for i in range(1, 12)]
    path = tmp_path / "laughs.yaml"
    path.write_text("\n".join(levels) + "\n")
    started = time.perf_counter()
    doc = load_yaml(path)
    assert time.perf_counter() - started < 5   # about 10 ms; the old walk never finished
    assert doc.line("l11") == 12


def test_serve_answers_a_request_nested_too_deeply_with_400(ws):
    from fastapi.testclient import TestClient

    from mint.mol.mixture import Mixture
    from mint.serve.app import create_app
    from mint.serve.local import LocalBackend
    from mint.project import DEFAULT_PROJECT, Project

    mixture = Mixture.open(ws, Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists))
    body = b'{"messages": [{"role": "user", "content": "hi"}], "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    with TestClient(create_app(LocalBackend(mixture, window_ms=0, poll_s=60)), raise_server_exceptions=False,
                    base_url="http://localhost") as client:
        for endpoint in ("/v1/chat/completions", "/v1/feedback"):
            response = client.post(endpoint, content=body, headers={"content-type": "application/json"})
            assert response.status_code == 400, response.text
            assert "nested" in response.json()["error"]["message"]


@pytest.mark.parametrize("reader", ["project", "router"])
def test_a_config_with_number_and_text_keys_is_bad_input_at_its_file(tmp_path, reader):
    from mint.contract.schema import load_contract
    from mint.errors import BadInput
    from mint.project import load_project

    path = tmp_path / "mixed.yaml"
    path.write_text("-817: x\nzeta: 1\n")
    load = load_project if reader == "project" else load_contract
    with pytest.raises(BadInput, match=r"mixed.yaml:1: -817: unknown key"):
        load(path)


def test_a_config_naming_a_file_too_long_for_the_os_is_bad_input(tmp_path):
    import yaml

    from mint.contract.schema import load_contract
    from mint.errors import BadInput
    from mint.loop.recipe import load_recipe
    from mint.project import init_project

    init_project(tmp_path)
    too_long = "../" + "x" * 300   # one name over NAME_MAX: is_file() raises OSError, not False
    cases = [("contracts/coding.yaml", lambda d: d["suites"][0].update(data=too_long), load_contract,
              "suites[0].data"),
             ("contracts/router.yaml", lambda d: d["suites"][0].update(data=too_long), load_contract,
              "suites[0].data"),
             ("recipes/smoke.yaml", lambda d: d["steps"][0]["ingest"].update(sources=[too_long]), load_recipe,
              "steps[0].ingest.sources[0]")]
    for name, damage, load, field in cases:
        path = tmp_path / name
        doc = yaml.safe_load(path.read_text())
        damage(doc)
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        with pytest.raises(BadInput, match=rf"{name}:\d+: {re.escape(field)}: no such"):
            load(path)


def test_yaml_with_thousands_of_nested_brackets_is_refused_before_parsing(tmp_path):
    """PyYAML took seconds per file to fail on these (a hang in the fuzzer's eyes)."""
    from mint.errors import BadInput
    from mint.yamlfile import load_yaml

    path = tmp_path / "brackets.yaml"
    path.write_text("a: &a [x]\nb: " + "[" * 60_000 + "\n")
    with pytest.raises(BadInput, match="brackets.yaml: invalid YAML: brackets nested 60000 deep"):
        load_yaml(path)


def test_a_router_gate_whose_metric_is_a_list_is_bad_input(tmp_path):
    from mint.contract.schema import load_contract
    from mint.errors import BadInput

    (tmp_path / "chat.jsonl").write_text('{"specialist": "chat", "messages": [{"role": "user", "content": "hi"}]}\n')
    path = tmp_path / "router.yaml"
    path.write_text("contract: router\nversion: 1\nspecialist: router\nharness: {name: router}\n"
                    "suites:\n- {name: heldout, data: chat.jsonl}\n"
                    "gates:\n- {metric: [heldout.accuracy], min: 0.9}\n")
    with pytest.raises(BadInput, match=r"router.yaml:8: gates\[0\]: missing required field `metric`"):
        load_contract(path)


def test_a_json_line_python_will_not_read_is_quarantined_with_its_reason(tmp_path, project):
    """Regression (the long form, 10,500 cases): an integer of more than 4,300 digits is valid JSON that
    json.loads refuses with a plain ValueError, which has no line number: ingest crashed."""
    from mint.data.ingest import ingest
    from mint.workspace import workspace

    path = tmp_path / "app.jsonl"
    path.write_text(json.dumps({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]})
                    + "\n"
                    + '{"messages": [], "n": ' + "9" * 5000 + "}\n")
    result = ingest(workspace(tmp_path / "home"), [path], dataset="d", project=project, workers=0)
    assert result.sources[0].quarantined == 1 and result.sources[0].kept == 1
    from mint.data.readers import parse_value
    assert "4300 digits" in parse_value("app.jsonl:2", '{"n": ' + "9" * 5000 + "}").error


@pytest.mark.parametrize("item, shown", [("trl.==1", "expected trl.KEY=VALUE"), ("\x01=1", r"trl.'\x01'")])
def test_a_set_key_that_is_empty_or_unprintable_is_named(item, shown, tmp_path, monkeypatch):
    """Regression (the long form): `--set trl.=X` said "trl.: not a field", and a key of control characters
    was printed as nothing."""
    from mint.project import init_project

    init_project(tmp_path)
    monkeypatch.chdir(tmp_path)
    code, output = load_script("fuzz").run_cli(["train", "--dry-run", "--method", "sft", "--set", item])
    assert code == 2 and shown in " ".join(output.split())
