"""Suites drawn from the served traffic (`traffic:WINDOW`): the held-out requests of what `mint serve` logged in a
window, judged from the request alone, recorded in the report, refused for a harness that needs a reference, and
said to be under-powered when the slice is smaller than the planner's size."""
import json

import pytest

from mint.cli import main
from mint.contract.live import traffic_shortfalls
from mint.contract.schema import load_contract
from mint.data import split
from mint.errors import BadInput
from tests.data.test_split import request, serve, turn

CONTRACT = """\
contract: ui-traffic
version: 1
specialist: genui
harness:
  decoding: {{max_new_tokens: 4, batch_size: 8}}
suites:
  - {{name: core, data: "{data}"{extra}}}
gates:
  - {{metric: core.request_match, improve: 0.0{detect}}}
"""


def contract(tmp_path, data="traffic:all", extra="", detect="") -> object:
    path = tmp_path / "traffic.yaml"
    path.write_text(CONTRACT.format(data=data, extra=extra, detect=detect))
    return path


def held_requests(n: int, share: float = 0.5) -> list[int]:
    return [i for i in range(n)
            if split.is_heldout({"messages": [{"role": "user", "content": request(i)}]}, share)]


def test_eval_on_the_traffic_records_the_window_share_and_episodes_and_measures_the_baseline_on_them(
        ws, tmp_path, candidate, capsys):
    held = held_requests(12)
    again = held[0]
    serve(ws, [turn(i) for i in range(12)] + [turn(100, specialist="chat")], heldout=0.5)
    serve(ws, [turn(again, ts="2026-12-05T11:00:00Z") | {"id": "turn-again"}])     # a held-out request served twice
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(contract(tmp_path)), "--json"]) in (0, 1)
    report = json.loads(capsys.readouterr().out)
    drawn = report["live_suites"]["core"]
    assert (drawn["traffic"], drawn["heldout_share"], drawn["served"]) == ("all", 0.5, 13)
    newest_first = ["turn-again"] + [f"turn-{i}" for i in reversed(held) if i != again]
    assert drawn["episodes"] == newest_first and drawn["count"] == len(held)   # once each, the chat turn not
    predictions = [json.loads(line) for line in open(report["predictions_path"])]
    assert [p["key"] for p in predictions] == [f"id:{i}" for i in drawn["episodes"]]
    gate = report["gates"][0]
    assert gate["delta"]["n"] == len(held)          # the bare base, measured on the same requests


def test_since_promotion_counts_only_what_was_served_after_the_champion_moved(ws, tmp_path, candidate):
    from mint.contract.live import traffic_slice
    from mint.registry.promotion import promote

    serve(ws, [turn(i, ts="2020-01-01T00:00:00Z") for i in range(30)], heldout=0.5)
    promote(ws, candidate("genui").ref, force=True, why="generation 1")
    serve(ws, [turn(i, ts="2099-01-01T00:00:00Z") for i in range(30, 60)])
    loaded = load_contract(contract(tmp_path, "traffic:since-promotion"))
    sliced = traffic_slice(ws, loaded, loaded.suites[0])
    assert {int(r["id"].split("-")[1]) for r in sliced.records} == set(held_requests(60)) - set(range(30))
    assert sliced.provenance["since"] and sliced.provenance["champion"] == "genui:v1"
    everything = load_contract(contract(tmp_path, "traffic:all"))
    assert traffic_slice(ws, everything, everything.suites[0]).count == len(held_requests(60))


def test_eval_on_too_small_a_slice_still_evaluates_and_says_the_gate_is_under_powered(ws, tmp_path, candidate,
                                                                                       capsys):
    serve(ws, [turn(i) for i in range(10)], heldout=0.5)
    path = contract(tmp_path, detect=", detect: 0.2")
    revision = candidate("genui")
    assert main(["eval", revision.ref, "--contract", str(path), "--json"]) in (0, 1)
    drawn = json.loads(capsys.readouterr().out)["live_suites"]["core"]
    [plan] = drawn["underpowered"]
    assert (plan["metric"], plan["detect"], plan["needed"], plan["examples"]) == \
        ("core.request_match", 0.2, 47, len(held_requests(10)))
    assert "detect 0.2 needs 47 examples" in plan["reads"]
    assert main(["eval", revision.ref, "--contract", str(path)]) in (0, 1)      # and the table says so
    assert "under-powered" in capsys.readouterr().out
    [short] = traffic_shortfalls(ws, load_contract(path))
    assert (short.count, short.planned) == (len(held_requests(10)), 47)
    assert short.message.startswith(f"not enough traffic yet: {len(held_requests(10))} of 47 held-out requests")
    assert "suite core of contract ui-traffic v1" in short.message and "47 find core.request_match's 0.2" in short.message


def test_an_empty_slice_is_exit_2_at_the_suites_line(ws, tmp_path, capsys):
    serve(ws, [turn(i, specialist="chat") for i in range(5)], heldout=0.5)
    path = contract(tmp_path)
    assert main(["eval", "base", "--contract", str(path), "--base", "tiny-random"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:7: suites[0].data" in err and "no held-out genui request" in err
    assert not (ws.home / "reports").exists()


@pytest.mark.parametrize("replace, where, message", [
    (("specialist: genui", "specialist: chat"), "suites[0].data",
     "the chat harness cannot score a request without a reference answer"),
    (("traffic:all\"", "traffic:all\", metrics: [root_type_match]"), "suites[0].metrics[0]",
     "root_type_match compares with a reference answer"),
    (("traffic:all", "traffic:since-promotoin"), "suites[0].data", "(did you mean since-promotion?)"),
])
def test_a_traffic_suite_is_refused_at_its_line_where_nothing_could_judge_it(tmp_path, replace, where, message):
    path = contract(tmp_path)
    path.write_text(path.read_text().replace(*replace))
    with pytest.raises(BadInput) as caught:
        load_contract(path)
    assert f"{where}: " in str(caught.value) and message in str(caught.value)
