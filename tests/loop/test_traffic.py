"""A loop whose contract follows the served traffic, on the tiny base: the requests go through `mint serve`, the
traffic's held-out slice is what the candidate is measured on and what experience never samples; with too little
of it the specialist's generation waits (exit 0, the others go on) and a later run continues; and a user's own
requests (`--requests`) are checked, and routed, before anything runs."""
import json
from pathlib import Path

import pytest

from mint.cli import main
from mint.data import split
from mint.loop import experience
from mint.loop.runner import run_loop
from mint.registry import store
from tests.data.test_split import SYSTEM, request, serve, turn

ROOT = Path(__file__).resolve().parents[2]
LOGS = ROOT / "examples" / "logs"

RECIPE = """\
# Run: mint loop r.yaml
recipe: traffic
base: tiny-random
dataset: traffic
traffic: {{heldout: 0.5}}
steps:
  - ingest: {{sources: [{genui_logs}, {chat_logs}]}}
  - serve: {{requests: requests.jsonl, max_tokens: 4, clients: 4}}
  - experience: {{specialist: genui, sources: [served], samples: 2, prompts: 200, max_new_tokens: 4,
                 batch_size: 2, min_steps: 1, max_steps: 1}}
  - train: {{specialist: genui, method: sft, plan: experience,
              set: {{max_steps: 1, per_device_train_batch_size: 2, max_length: 96, lora.r: 2}}}}
  - eval: {{specialist: genui, contract: contract.yaml}}
  - promote: {{specialist: genui}}
  - train: {{specialist: chat, method: sft, set: {{max_steps: 1, per_device_train_batch_size: 2, max_length: 96,
              lora.r: 2}}}}
"""

CONTRACT = f"""\
contract: traffic
version: 1
specialist: genui
harness:
  system: "{SYSTEM}"
  catalog: {ROOT}/contracts/ui4a/catalog.v1.json
  decoding: {{max_new_tokens: 4, temperature: 0.0, batch_size: 16}}
suites:
  - {{name: core, data: "traffic:since-promotion"}}
gates:
  - {{metric: core.request_match, improve: 0.0, detect: 0.2}}
"""


def requests_file(path: Path, numbers) -> Path:
    path.write_text("".join(json.dumps({"messages": [{"role": "system", "content": SYSTEM},
                                                     {"role": "user", "content": request(i)}]}) + "\n"
                            for i in numbers))
    return path


@pytest.fixture
def project_dir(ws, tmp_path, candidate):
    """A recipe and its contract, and a genui champion (promoted before the traffic came)."""
    from mint.registry.promotion import promote

    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "r.yaml").write_text(RECIPE.format(genui_logs=LOGS / "server_log.jsonl.gz",
                                                  chat_logs=LOGS / "chat_sharegpt.json"))
    requests_file(tmp_path / "requests.jsonl", range(10))
    promote(ws, candidate("genui").ref, force=True, why="generation 1")
    return tmp_path


def sampled_prompts(monkeypatch) -> list[str]:
    """The requests experience samples; the tiny base's answers are never trees, so a junk answer stands in."""
    sampled = []

    def answer(ws, champion, base, specialist, chosen, **kw):
        sampled.extend(p.prompt[-1]["content"] for p in chosen)
        return [["{"] * kw["samples"] for _ in chosen]

    monkeypatch.setattr(experience, "_sample", answer)
    return sampled


def genui_revisions(ws) -> list[str]:
    conn = store.open_store(ws)
    try:
        return sorted(r.ref for r in store.list_revisions(conn, specialist="genui").revisions)
    finally:
        conn.close()


def measured_requests(ws, drawn: dict) -> set[str]:
    """The requests of the turns a traffic suite's report lists."""
    from mint.mol.turnlog import read_turns

    by_id = {t["id"]: t["messages"][1]["content"] for t in read_turns(ws)}
    return {by_id[e] for e in drawn["episodes"]}


def held(numbers) -> list[int]:
    return [i for i in numbers if split.is_heldout({"messages": [{"role": "user", "content": request(i)}]}, 0.5)]


def test_too_little_traffic_waits_without_failing_the_others_go_on_and_a_later_run_continues(
        ws, project_dir, monkeypatch):
    sampled = sampled_prompts(monkeypatch)
    result = run_loop(ws, project_dir / "r.yaml")
    assert result.exit_code == 0 and result.status == "ran"
    status = {s.label: s.status for s in result.steps}
    assert status["serve"] == "ran" and status["train chat"] == "ran"                  # the others go on
    assert all(status[f"{k} genui"] == "waiting" for k in ("experience", "train", "eval", "promote"))
    [wait] = result.waiting
    assert wait["specialist"] == "genui" and wait["message"].startswith(
        f"genui: not enough traffic yet: {len(held(range(10)))} of 47 held-out requests served since the champion's "
        "promotion")
    assert "for suite core of contract traffic v1" in wait["message"] and "47 find core.request_match's 0.2" \
        in wait["message"]
    assert genui_revisions(ws) == ["genui:v1"] and not sampled                         # nothing trained or sampled

    # a day of traffic later (as `mint serve` logs it), the next run continues where the slice is large enough
    serve(ws, [turn(i, ts="2099-01-01T00:00:00Z") for i in range(10, 140)])
    again = run_loop(ws, project_dir / "r.yaml")
    assert again.exit_code == 0 and again.waiting == []
    status = {s.label: s.status for s in again.steps}
    assert status["serve"] == "skipped"                           # the same file: served already
    assert all(status[f"{k} genui"] in ("ran", "failed") for k in ("experience", "train", "eval", "promote"))
    report = next(s.output for s in again.steps if s.label == "eval genui")
    drawn = report["live_suites"]["core"]
    assert drawn["count"] == 47 and drawn["heldout_share"] == 0.5               # the planner's size, newest first
    assert measured_requests(ws, drawn) <= {request(i) for i in held(range(140))}
    # experience sampled the other side of the same traffic, and nothing it holds out
    assert sampled and not {request(i) for i in held(range(140))} & set(sampled)
    gathered = next(s.output for s in again.steps if s.label == "experience genui")
    assert gathered["sources"]["served"]["heldout"] == len(held(range(140)))
    assert len(genui_revisions(ws)) == 2


def test_requests_replace_the_recipes_and_the_slice_is_drawn_from_them(ws, project_dir, monkeypatch):
    sampled = sampled_prompts(monkeypatch)
    mine = requests_file(project_dir / "mine.jsonl", range(500, 620))
    result = run_loop(ws, project_dir / "r.yaml", requests=mine)
    served = next(s.output for s in result.steps if s.label == "serve")
    assert (served["requests"], served["served"]) == (120, 120)
    from mint.mol.turnlog import read_turns

    logged = {t["messages"][1]["content"] for t in read_turns(ws)}
    assert logged == {request(i) for i in range(500, 620)}                  # the user's, not the recipe's
    assert not result.waiting
    drawn = next(s.output for s in result.steps if s.label == "eval genui")["live_suites"]["core"]
    assert measured_requests(ws, drawn) <= {request(i) for i in held(range(500, 620))}
    assert set(sampled) == {request(i) for i in range(500, 620)} - {request(i) for i in held(range(500, 620))}


@pytest.mark.parametrize("lines, message", [
    (['{"messages": [{"role": "user", "content": "Show a stat card."}]}', "not json"], ":2: not a JSON line"),
    ([], "no requests in the file"),
    (['{"prompt": "Fix this Python function: def f(x): return x +"}',
      '{"prompt": "What\'s the weather in Paris tomorrow?"}'],
     "no request here is one genui answers, routed as the mixture routes it (agent: line 2; coding: line 1)"),
])
def test_a_bad_requests_file_is_exit_2_before_anything_runs(ws, tmp_path, capsys, lines, message):
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "r.yaml").write_text(RECIPE.format(genui_logs=LOGS / "server_log.jsonl.gz",
                                                  chat_logs=LOGS / "chat_sharegpt.json"))
    requests_file(tmp_path / "requests.jsonl", range(3))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("".join(line + "\n" for line in lines))
    assert main(["loop", str(tmp_path / "r.yaml"), "--requests", str(bad)]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and message in err and "Traceback" not in err
    assert not (ws.home / "registry.sqlite").exists() and not (ws.home / "loops").exists()
    assert not (ws.home / "datasets").exists() and not (ws.home / "logs").exists()


def test_requests_for_a_recipe_without_a_serve_step_are_exit_2(ws, tmp_path, capsys):
    text = RECIPE.format(genui_logs=LOGS / "server_log.jsonl.gz", chat_logs=LOGS / "chat_sharegpt.json")
    (tmp_path / "contract.yaml").write_text(CONTRACT)
    (tmp_path / "r.yaml").write_text(text.replace("  - serve: {requests: requests.jsonl, max_tokens: 4, clients: 4}\n",
                                                  ""))
    assert main(["loop", str(tmp_path / "r.yaml"), "--requests", str(requests_file(tmp_path / "m.jsonl", [1]))]) == 2
    assert "--requests: r.yaml has no serve step" in capsys.readouterr().err


def test_a_recipe_asking_another_share_than_its_traffic_has_is_exit_2_at_its_line(ws, project_dir, capsys):
    serve(ws, [turn(0)])                                 # the traffic's first turn fixed the dataset share
    assert main(["loop", str(project_dir / "r.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{project_dir / 'r.yaml'}:5: traffic.heldout: the served traffic of this workspace holds out 0.1" in err
    assert not (ws.home / "loops").exists()
