"""The held-out split of the served traffic: one share per workspace, fixed with the first turn logged, and one rule
every reader applies, so no request the traffic holds out reaches training, `mint data export` or experience,
and every one of them is what a traffic suite reads."""
import json

import pytest

from mint.data import datasets, split
from mint.data.ingest import ingest
from mint.errors import BadInput
from mint.mol.turnlog import TurnLog, logs_dir
from tests.conftest import write_jsonl

SYSTEM = "Answer with one UI4A JSON component tree and nothing else."


def request(i: int) -> str:
    return f"Show a stat card for Signups week {i} at {100 + i} with a details button."


def turn(i: int, specialist: str = "genui", ts: str = "2026-12-05T10:00:00Z") -> dict:
    return {"id": f"turn-{i}", "ts": ts, "specialist": specialist, "served_by": f"{specialist}:v1",
            "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": request(i)},
                         {"role": "assistant", "content": json.dumps({"type": "Card", "props": {"title": str(i)}})}],
            "feedback": {"rating": None, "correction": None}, "route": {}, "latency_ms": 10.0}


def serve(ws, turns, heldout=None):
    log = TurnLog(ws, heldout=heldout)
    for t in turns:
        log.append(t)


def test_the_first_turn_fixes_the_share_and_a_server_asking_another_is_refused(ws):
    serve(ws, [turn(0)], heldout=0.5)
    fixed = split.traffic_share(ws)
    assert fixed.heldout == 0.5 and fixed.fixed
    assert json.loads((logs_dir(ws) / split.SPLIT_FILE).read_text())["heldout"] == 0.5
    TurnLog(ws)                                  # asking for nothing takes the log's own
    TurnLog(ws, heldout=0.5)
    with pytest.raises(BadInput, match="holds out 0.5 of its requests since .*; 0.3 would move requests") as caught:
        TurnLog(ws, heldout=0.3, heldout_at=("mint.yaml", 7, "traffic.heldout"))
    assert str(caught.value).startswith("mint.yaml:7: traffic.heldout: ")


def test_turns_logged_before_shares_were_fixed_keep_the_dataset_share(ws):
    logs_dir(ws).mkdir(parents=True)
    (logs_dir(ws) / "served.jsonl").write_text(json.dumps(turn(0)) + "\n")     # written before split.json existed
    with pytest.raises(BadInput, match="holds turns logged before a share was fixed"):
        TurnLog(ws, heldout=0.5)
    assert split.fix_share(ws, 0.5).heldout == split.HELDOUT_FRACTION     # what they were read at, whatever asked
    serve(ws, [turn(1)])
    assert split.traffic_share(ws).heldout == split.HELDOUT_FRACTION


def test_no_request_the_traffic_holds_out_reaches_training_export_or_experience_and_a_suite_reads_them_all(
        ws, project, tmp_path):
    """The traffic at half held out, ingested into a dataset as a nightly recipe does, and the same requests also
    offered from a file of prompts and from another log: every reader agrees on each request's side."""
    from mint.contract.live import traffic_slice
    from mint.contract.schema import load_contract
    from mint.loop.experience import eligible_prompts, jsonl_prompts, served_prompts
    from mint.train.examples import build_examples
    from mint.train.run import planned_examples

    served = [turn(i) for i in range(80)]
    serve(ws, served, heldout=0.5)
    held = {request(i) for i in range(80) if split.is_heldout({"messages": [{"role": "user", "content": request(i)}]},
                                                               0.5)}
    beyond_dataset_share = {request(i) for i in range(80) if request(i) in held and not split.is_heldout(
        {"messages": [{"role": "user", "content": request(i)}]})}
    assert 25 < len(held) < 55 and len(beyond_dataset_share) > 15     # most of them the dataset share keeps

    # the served logs ingested (as recipes/nightly.yaml does), and the same requests logged again elsewhere
    assert ingest(ws, [logs_dir(ws)], dataset="prod", project=project).quarantined_new == 0   # the split file is not a log
    other = [{"messages": [{"role": "user", "content": request(i)}, {"role": "assistant", "content": "{}"}],
              "specialist": "genui"} for i in range(80)]
    ingest(ws, [write_jsonl(tmp_path / "elsewhere.jsonl", other)], dataset="prod", project=project)

    def first_user(episode):
        return next(m["content"] for m in episode["messages"] if m["role"] == "user")

    training = list(datasets.iter_episodes(ws, "prod", specialist="genui", split="train"))
    assert training and not held & {first_user(e) for e in training}
    assert {first_user(e) for e in training} == {request(i) for i in range(80)} - held   # the rest is trained on
    rows = build_examples("sft", training, dataset="prod")
    assert not held & {m["content"] for r in rows for m in r["messages"] if m["role"] == "user"}
    planned = planned_examples(ws, specialist="genui", data="prod", method="sft")
    assert planned.left_out["held-out split (contract suites draw it; training never sees it)"] == 2 * len(held)
    out = datasets.export_dataset(ws, "prod", "openai", tmp_path / "export.jsonl")
    exported = {next(m["content"] for m in json.loads(line)["messages"] if m["role"] == "user") for line in open(out.out)}
    assert exported and not held & exported
    heldout_side = {first_user(e) for e in datasets.iter_episodes(ws, "prod", specialist="genui", split="heldout")}
    assert heldout_side == held

    # experience, offered them as served turns and as a file of prompts
    (tmp_path / "prompts.jsonl").write_text("".join(json.dumps({"prompt": request(i)}) + "\n" for i in range(80)))
    offered = served_prompts(ws, "genui") + jsonl_prompts(tmp_path / "prompts.jsonl")
    chosen, counts = eligible_prompts(offered, heldout=set(), answered=set(), limit=1000,
                                      held=datasets.heldout_rule(ws))
    assert not held & {p.prompt[-1]["content"] for p in chosen}
    assert counts["served"]["heldout"] == len(held) and counts["jsonl:prompts.jsonl"]["heldout"] == len(held)
    assert {p.prompt[-1]["content"] for p in chosen} == {request(i) for i in range(80)} - held

    # and a suite drawn from the traffic reads exactly them
    (tmp_path / "traffic.yaml").write_text("contract: t\nversion: 1\nspecialist: genui\nsuites:\n"
                                           "  - {name: core, data: \"traffic:all\"}\n")
    contract = load_contract(tmp_path / "traffic.yaml")
    sliced = traffic_slice(ws, contract, contract.suites[0])
    assert {r["messages"][-1]["content"] for r in sliced.records} == held
    assert all("reference" not in r for r in sliced.records)        # the served answer is never a reference
