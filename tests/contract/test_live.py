"""Live suites (`dataset:NAME@VERSION`): a stable held-out split that training never sees, resolved and
recorded by `mint eval`, and refused at the contract's line when it cannot be read."""
import json

import pytest

from mint.cli import main
from mint.data import datasets
from mint.data.ingest import ingest
from tests.conftest import write_jsonl

LIVE = """\
contract: ui-live
version: 1
specialist: genui
harness:
  decoding: {{max_new_tokens: 4, batch_size: 4}}
suites:
  - {{name: live, data: "{data}", limit: 3}}
gates:
  - {{metric: live.parse_rate, no_regression: 0.0}}
"""


def genui_row(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"Show a card titled item {i}"},
                         {"role": "assistant", "content": json.dumps({"type": "Card", "props": {"title": str(i)}})}],
            "specialist": "genui"}


def ingest_rows(ws, project, tmp_path, rows, name="batch"):
    return ingest(ws, [write_jsonl(tmp_path / f"{name}.jsonl", rows)], dataset="prod", project=project)


def contract(tmp_path, data="dataset:prod@latest"):
    path = tmp_path / "live.yaml"
    path.write_text(LIVE.format(data=data))
    return path


def test_the_split_is_stable_as_the_dataset_grows_and_training_never_reads_it(ws, project, tmp_path):
    from mint.train.examples import build_examples

    ingest_rows(ws, project, tmp_path, [genui_row(i) for i in range(100)], "first")
    first = {e["id"] for e in datasets.iter_episodes(ws, "prod", split="heldout")}
    ingest_rows(ws, project, tmp_path, [genui_row(i) for i in range(100, 200)], "second")
    second = {e["id"] for e in datasets.iter_episodes(ws, "prod", split="heldout")}
    assert first and first < second       # nothing moved out of the split; new episodes joined it
    everything = list(datasets.iter_episodes(ws, "prod"))
    assert 0.03 < len(second) / len(everything) < 0.25
    # every reader of training data: the train/experience episodes, their examples, and `mint data export`
    training = list(datasets.iter_episodes(ws, "prod", specialist="genui", split="train"))
    assert not {e["id"] for e in training} & second and len(training) + len(second) == len(everything)
    heldout_requests = {e["messages"][0]["content"] for e in everything if e["id"] in second}
    rows = build_examples("sft", training, dataset="prod")
    assert not heldout_requests & {m["content"] for r in rows for m in r["messages"] if m["role"] == "user"}
    out = datasets.export_dataset(ws, "prod", "openai", tmp_path / "export.jsonl")
    exported = [json.loads(line)["messages"][0]["content"] for line in open(out.out)]
    assert len(exported) == len(training) and not heldout_requests & set(exported)


def test_the_same_request_logged_again_stays_on_its_side(ws, project, tmp_path):
    ingest_rows(ws, project, tmp_path, [genui_row(i) for i in range(100)], "first")
    heldout = next(datasets.iter_episodes(ws, "prod", split="heldout"))
    again = {**genui_row(0), "messages": [heldout["messages"][0], {"role": "assistant", "content": "{}"}]}
    ingest_rows(ws, project, tmp_path, [again], "again")
    assert all(datasets.is_heldout(e) for e in datasets.iter_episodes(ws, "prod")
               if e["messages"][0]["content"] == heldout["messages"][0]["content"])


def test_eval_records_the_resolved_version_and_episodes_and_pairs_the_baseline_on_them(ws, project, tmp_path,
                                                                                          candidate, capsys):
    ingest_rows(ws, project, tmp_path, [genui_row(i) for i in range(100)], "first")
    version = datasets.resolve_version(ws, "prod")[1]["version"]
    heldout = [e["id"] for e in datasets.iter_episodes(ws, "prod", specialist="genui", split="heldout")]
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(contract(tmp_path)), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    live = report["live_suites"]["live"]
    assert (live["dataset"], live["requested"], live["version"], live["count"]) == ("prod", "latest", version, 3)
    assert live["episodes"] == heldout[::-1][:3]          # newest first, capped by the suite's limit
    predictions = [json.loads(line) for line in open(report["predictions_path"])]
    assert [p["key"] for p in predictions] == [f"id:{i}" for i in live["episodes"]]
    gate = report["gates"][0]
    assert gate["metric"] == "live.parse_rate" and gate["delta"]["n"] == 3   # the base, on the same episodes
    # a new version adds episodes: `@latest` resolves to it, and the report says so
    ingest_rows(ws, project, tmp_path, [genui_row(i) for i in range(100, 200)], "second")
    assert main(["eval", revision.ref, "--contract", str(contract(tmp_path)), "--json"]) == 0
    later = json.loads(capsys.readouterr().out)["live_suites"]["live"]
    assert later["version"] != version and later["number"] == 2


@pytest.mark.parametrize("data, message", [
    ("dataset:nope@latest", "no dataset 'nope'"),
    ("dataset:prod@v9", "matches no version"),
    ("dataset:prod", "expected dataset:NAME@VERSION"),
])
def test_a_bad_live_reference_is_exit_2_at_its_line(ws, project, tmp_path, capsys, data, message):
    ingest_rows(ws, project, tmp_path, [genui_row(i) for i in range(5)])
    path = contract(tmp_path, data)
    assert main(["eval", "base", "--contract", str(path), "--base", "tiny-random"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: suites[0].data" in err and message in err and "Traceback" not in err
    assert not (ws.home / "reports").exists()


def test_an_empty_heldout_split_is_exit_2(ws, project, tmp_path, capsys):
    chat = [{"messages": [{"role": "user", "content": f"hello {i}"}, {"role": "assistant", "content": "hi"}]}
            for i in range(5)]
    ingest_rows(ws, project, tmp_path, chat)
    assert main(["eval", "base", "--contract", str(contract(tmp_path)), "--base", "tiny-random"]) == 2
    err = capsys.readouterr().err
    assert "suites[0].data" in err and "has no genui episodes" in err


def test_a_coding_contract_cannot_draw_a_live_suite(tmp_path):
    from mint.contract.schema import load_contract
    from mint.errors import BadInput

    path = tmp_path / "c.yaml"
    path.write_text(LIVE.format(data="dataset:prod@latest").replace("genui", "coding")
                    .replace("parse_rate", "pass_at_1"))
    with pytest.raises(BadInput, match="suites\\[0\\].data: the coding harness cannot score logged episodes"):
        load_contract(path)
