"""mint loop on the tiny base: generations with lineage, idempotent reruns, resume after kill -9, the lock,
and a rejected candidate leaving the champion in place."""
import json
import os
import signal
from pathlib import Path

import pytest

from mint.cli import main
from mint.data.datasets import iter_episodes
from mint.errors import Refused
from mint.loop.runner import LoopLock, run_loop
from mint.registry import store
from tests.conftest import run_mint
from tests.mol.test_monitor import _log

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"
LOGS = ROOT / "examples" / "logs" / "server_log.jsonl.gz"   # the GenUI requests

RECIPE = """\
# Run: mint loop r.yaml
recipe: {name}
base: tiny-random
dataset: smoke
loop: {{iterations: {iterations}}}
steps:
  - ingest: {{sources: [{logs}]}}
  - experience: {{specialist: genui, samples: 2, prompts: 2, max_new_tokens: 8, from_iteration: 2,
                 sources: [served, {{jsonl: requests.jsonl}}]}}
  - train: {{specialist: genui, method: sft, plan: experience,
              set: {{max_steps: 1, per_device_train_batch_size: 2, max_length: 96, lora.r: 2}}}}
  - eval: {{specialist: genui, contract: {contract}}}
  - promote: {{specialist: genui, fatal: {fatal}}}
"""


def recipe(tmp_path, name="t", iterations=2, contract=SMOKE_CONTRACT, fatal="false") -> Path:
    path = tmp_path / f"{name}.yaml"
    # a request the logs never answered, for experience (re-sampling logged prompts teaches nothing)
    (tmp_path / "requests.jsonl").write_text(json.dumps({"prompt": "Show a signup form."}) + "\n")
    path.write_text(RECIPE.format(name=name, iterations=iterations, logs=LOGS, contract=contract, fatal=fatal))
    return path


def strict_contract(tmp_path) -> Path:
    """The smoke contract with a gate the tiny random base cannot pass."""
    text = SMOKE_CONTRACT.read_text().replace("contract: genui-smoke", "contract: genui-strict")
    for key in ("catalog: ", "data: "):       # its files by absolute path (and not inside a path already made so)
        text = text.replace(key + "ui4a/", f"{key}{SMOKE_CONTRACT.parent}/ui4a/")
        text = text.replace(key + "../examples", f"{key}{ROOT}/examples")
        text = text.replace(key + "suites/", f"{key}{SMOKE_CONTRACT.parent}/suites/")
    text = text.replace("  - {metric: core.parse_rate, no_regression: 0.05}",
                        "  - {metric: core.parse_rate, min: 0.9}")
    path = tmp_path / "strict-contract.yaml"
    path.write_text(text)
    return path


def champion(ws, specialist="genui"):
    conn = store.open_store(ws)
    try:
        target = store.alias_target(conn, specialist, "champion")
        return store.get_revision(conn, target).ref if target else None
    finally:
        conn.close()


def first_request(episode: dict) -> str:
    return next(m["content"] for m in episode["messages"] if m["role"] == "user")


def test_two_generations_then_an_idempotent_rerun(ws, tmp_path, capsys):
    _log(ws, {"chat": 1, "coding": 17, "genui": 2}, seconds_ago=60)       # served traffic: coding takes 85%
    path = recipe(tmp_path)
    assert main(["loop", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["status"] == "ran" and result["exit_code"] == 0
    assert any("coding takes 85%" in a for a in result["alerts"])       # mint monitor's alert: a warning only
    rows = result["generations"]
    assert [(r["iteration"], r["candidate"]) for r in rows] == [(1, "genui:v1"), (2, "genui:v2")]
    kinds = [(s["iteration"], s["label"], s["status"]) for s in result["steps"]]
    assert (1, "experience genui", "waiting") in kinds and (2, "experience genui", "ran") in kinds
    assert (2, "ingest", "skipped") in kinds
    experience = next(s for s in result["steps"] if s["label"] == "experience genui" and s["status"] == "ran")
    assert experience["output"]["answers"] == 4 and experience["output"]["served_by"] == "genui:v1"
    # the lineage shows the generations: v2 continued from the champion v1
    conn = store.open_store(ws)
    v2 = store.resolve(conn, "genui:v2")
    assert v2.parent == store.resolve(conn, "genui:v1").id
    conn.close()
    assert champion(ws) == "genui:v2"
    # the live suite: each generation measured on the held-out split of the version it ran on
    ingested = next(s for s in result["steps"] if s["label"] == "ingest")["output"]["version"]
    evals = [s["output"] for s in result["steps"] if s["label"] == "eval genui"]
    live = [e["live_suites"]["live"] for e in evals]
    assert live[0]["version"] == ingested and live[1]["version"] == experience["output"]["version"]
    assert all(x["dataset"] == "smoke" and x["count"] == len(x["episodes"]) == 4 for x in live)
    # ... which no training run ever read, in either generation (the second also trains on experience)
    heldout = {first_request(e) for e in iter_episodes(ws, "smoke", split="heldout")}
    assert {first_request(e) for e in iter_episodes(ws, "smoke") if e["id"] in live[1]["episodes"]} <= heldout
    for train in (s["output"] for s in result["steps"] if s["label"] == "train genui"):
        rows = [json.loads(line) for line in open(ws.home / "runs" / train["run"] / "examples.jsonl")]
        assert rows and not heldout & {m["content"] for r in rows for m in r.get("messages") or r.get("prompt")}
    # backward transfer: generation 2 against generation 1 on its retention suite, reused from the same eval
    assert evals[0]["backward_transfer"] == []
    (transfer,) = evals[1]["backward_transfer"]
    assert transfer["introduced_by"] == "genui:v1" and transfer["reused"] and not transfer["regressed"]
    # nothing changed since: a cron run costs a state check and does nothing
    assert main(["loop", str(path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["status"] == "nothing new" and again["steps"] == []
    assert any("coding takes 85%" in a for a in again["alerts"])
    assert main(["loop", str(path)]) == 0
    assert "warning (mint monitor): coding takes 85%" in capsys.readouterr().out
    assert main(["loop", str(path), "--dry-run"]) == 0
    assert "nothing new" in capsys.readouterr().out


def test_a_failing_candidate_is_rejected_and_the_champion_stays(ws, tmp_path, capsys):
    assert main(["loop", str(recipe(tmp_path, iterations=1)), "--json"]) == 0
    capsys.readouterr()
    assert champion(ws) == "genui:v1"
    strict = recipe(tmp_path, name="strict", iterations=1, contract=strict_contract(tmp_path))
    assert main(["loop", str(strict), "--json"]) == 0          # not fatal: the loop ran, exit 0
    (row,) = json.loads(capsys.readouterr().out)["generations"]
    assert row["candidate"] == "genui:v2" and row["verdict"] == "fail" and "core.parse_rate" in row["reason"]
    assert champion(ws) == "genui:v1"
    conn = store.open_store(ws)
    assert store.resolve(conn, "genui:v2").status == "rejected"
    conn.close()


def test_a_fatal_step_that_fails_its_contract_exits_1(ws, tmp_path, capsys):
    strict = recipe(tmp_path, name="strict", iterations=1, contract=strict_contract(tmp_path), fatal="true")
    assert main(["loop", str(strict)]) == 1
    assert "failed gates" in capsys.readouterr().out


def test_a_second_loop_on_the_workspace_exits_1_naming_the_holder(ws, tmp_path, capsys):
    with LoopLock(ws):
        assert main(["loop", str(recipe(tmp_path))]) == 1
    message = capsys.readouterr().err
    assert f"pid {os.getpid()}" in message and "since" in message
    with LoopLock(ws), pytest.raises(Refused):
        run_loop(ws, recipe(tmp_path))


def test_a_loop_refused_before_the_holder_wrote_its_name_still_names_it(ws):
    """The holder takes the lock, then writes its name: a loop refused in that window waits for the name."""
    import fcntl
    import threading

    path = ws.home / "loop.lock"
    path.parent.mkdir(parents=True, exist_ok=True)
    holder = open(path, "a+", encoding="utf-8")
    fcntl.flock(holder.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)

    def write_name_late():
        holder.write(json.dumps({"host": "h1", "pid": 4242, "since": "2026-11-30T00:00:00Z"}))
        holder.flush()

    late = threading.Timer(0.3, write_name_late)
    late.start()
    try:
        with pytest.raises(Refused, match="host h1, pid 4242, since 2026-11-30"):
            LoopLock(ws).__enter__()
    finally:
        late.join()
        holder.close()


def test_killed_after_training_then_resumed_reuses_the_trained_candidate(ws, tmp_path):
    path = recipe(tmp_path, iterations=1)
    killed = run_mint("loop", str(path), env={"MINT_FAULT": "loop.1.2"})      # SIGKILL right after train
    assert killed.returncode == -signal.SIGKILL
    assert champion(ws) is None
    resumed = run_mint("loop", str(path), "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)
    train = next(s for s in result["steps"] if s["label"] == "train genui")
    assert train["status"] == "skipped" and train["output"]["revision"] == "genui:v1"
    conn = store.open_store(ws)
    assert store.list_revisions(conn, specialist="genui").total == 1       # trained once, not twice
    conn.close()
    assert champion(ws) == "genui:v1"


def test_killed_after_its_promotion_then_resumed_the_iteration_trains_nothing_again(ws, tmp_path):
    """Regression (found by the full-disk suite): a loop killed once its iteration had promoted, resumed, keyed its
    train step on the new champion (the registry's), so it trained the iteration's candidate again, from the
    candidate, and promoted that: another generation than an uninterrupted loop makes."""
    path = recipe(tmp_path, iterations=1)
    killed = run_mint("loop", str(path), env={"MINT_FAULT": "loop.1.4"})      # SIGKILL right after promote
    assert killed.returncode == -signal.SIGKILL
    assert champion(ws) == "genui:v1"
    resumed = run_mint("loop", str(path), "--resume", "--json")
    assert resumed.returncode == 0, resumed.stderr
    steps = {s["label"]: s for s in json.loads(resumed.stdout)["steps"]}
    assert [steps[label]["status"] for label in ("train genui", "eval genui", "promote genui")] == ["skipped"] * 3
    conn = store.open_store(ws)
    assert store.list_revisions(conn, specialist="genui").total == 1
    assert len(store.history(conn, "genui")) == 1       # one promotion
    conn.close()
    assert champion(ws) == "genui:v1"


def test_the_route_step_trains_the_router_once_per_set_of_labels(ws, tmp_path, capsys):
    path = tmp_path / "route.yaml"
    path.write_text(f"recipe: route\nbase: tiny-random\ndataset: routed\nloop: {{iterations: 2}}\nsteps:\n"
                    f"  - ingest: {{sources: [{ROOT / 'examples' / 'logs'}]}}\n  - route: {{contract: {ROOT / 'contracts' / 'router.yaml'}}}\n")
    assert main(["loop", str(path), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    routes = [s for s in result["steps"] if s["label"] == "route"]
    assert [s["status"] for s in routes] == ["ran", "skipped"]        # the labels did not change in iteration 2
    output = routes[0]["output"]
    assert output["revision"] == "router:v1" and output["verdict"] in ("pass", "fail")
    assert output["action"] in ("promoted", "rejected", "refused")


def test_the_route_step_tells_each_phase_of_its_work_through_the_progress_channel(ws, tmp_path):
    path = tmp_path / "route.yaml"
    path.write_text(f"recipe: route\nbase: tiny-random\ndataset: routed\nsteps:\n"
                    f"  - ingest: {{sources: [{ROOT / 'examples' / 'logs'}]}}\n"
                    f"  - route: {{contract: {ROOT / 'contracts' / 'router.yaml'}}}\n")
    events: list[dict] = []
    result = run_loop(ws, path, events=events.append)
    [route] = [s for s in result.steps if s.label == "route"]
    told = [e for e in events if e["event"] == "progress" and e["step"] == "route"]
    assert [e["what"] for e in told] == ["loading base tiny-random", f"encoding {route.output['examples']:,} requests",
                                         "fitting the probe", "evaluating router:v1 under router.yaml"]
    assert all(e["iteration"] == 1 and e["seconds"] >= 0 and e["left_s"] >= 0 for e in told)


def test_another_recipes_malformed_state_stops_the_loop_before_it_trains(ws, tmp_path, capsys):
    other = ws.home / "loops" / "nightly" / "state.json"       # the summary reads every recipe's generations
    other.parent.mkdir(parents=True)
    other.write_text('{"generations": [{"specialist": "genui", "iteration": "two"}]}')
    assert main(["loop", str(recipe(tmp_path, iterations=1))]) == 2
    message = capsys.readouterr().err
    assert str(other) in message and "generations[0].iteration" in message
    assert not (ws.home / "loops" / "t" / "state.json").exists() and not (ws.home / "adapters").exists()


def test_the_summary_says_how_long_each_step_that_ran_took(ws, tmp_path, capsys):
    assert main(["loop", str(recipe(tmp_path, iterations=1))]) == 0
    out = capsys.readouterr().out
    assert "time: " in out and "step(s) that ran" in out
    for label in ("ingest", "train genui", "eval genui", "promote genui"):
        assert label in out.split("time: ", 1)[1]


def test_a_project_that_names_a_served_engine_still_loops_on_mints_engine_and_says_so(ws, tmp_path, capsys):
    """mint.yaml's served `engine` is `mint eval`'s: the loop decodes every answer of a generation on mint's own
    engine (nothing listens at the URL here, so an evaluation sent there would be refused, exit 2)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (tmp_path / "mint.yaml").write_text(f"base: tiny-random\nspecialists: {{genui: {{keywords: [card]}}}}\n"
                                        f"engine: {{url: 'http://127.0.0.1:{port}/v1'}}\n")
    assert main(["loop", str(recipe(tmp_path, iterations=1))]) == 0
    said = capsys.readouterr().err
    assert f"mint.yaml names the engine at http://127.0.0.1:{port}/v1" in said and "mint's own engine" in said
    assert champion(ws) == "genui:v1"
