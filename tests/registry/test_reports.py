"""Reports that cannot be forged: promotion trusts only what `mint eval` registered, unchanged, for the revision it
names, measured on the same examples as the champion's report."""
import hashlib
import json
from pathlib import Path

import pytest

from mint.cli import main
from mint.contract.evaluate import evaluate
from mint.contract.identity import contract_identity
from mint.errors import BadInput, Refused
from mint.registry import promotion, store
from mint.registry.promotion import promote, read_report, record_report, reject
from tests.contract.test_schema import GOOD


@pytest.fixture
def ui_contract(tmp_path):
    rows = [{"id": f"card-{i}", "messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(4)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "ui.yaml"
    path.write_text(GOOD)
    return path


def _rewrite(path, tmp_path, name, **changes):
    """A copy of the report at ``path`` with top-level or baseline fields changed."""
    data = json.loads(open(path).read())
    for key, value in changes.items():
        if key.startswith("baseline_"):
            data["baseline"][key.removeprefix("baseline_")] = value
        else:
            data[key] = value
    out = tmp_path / name
    out.write_text(json.dumps(data))
    return out


def test_the_registered_id_is_the_sha256_of_the_report_file(ws, candidate, ui_contract):
    v1 = candidate("genui")
    result = evaluate(ws, v1.ref, ui_contract)
    digest = hashlib.sha256(open(result.report_path, "rb").read()).hexdigest()
    assert [r["id"] for r in store.reports_for(store.open_store(ws), v1.id)] == [digest]


def test_eval_registers_the_bytes_it_wrote_without_reading_them_back(ws, candidate, ui_contract, monkeypatch):
    from mint.registry.report import Report

    def no_read_back(*_args, **_kwargs):
        raise AssertionError("eval read a report back instead of registering the one it built")

    monkeypatch.setattr(Report, "from_json", no_read_back)   # a fresh workspace: no earlier report to read
    v1 = candidate("genui")
    result = evaluate(ws, v1.ref, ui_contract)
    written = open(result.report_path, "rb").read()
    assert result.report.id == hashlib.sha256(written).hexdigest() == store.reports_for(store.open_store(ws),
                                                                                         v1.id)[0]["id"]
    assert result.report.encode() == written


def test_mint_promote_hands_promotion_the_contract_identity(ws, candidate, ui_contract, capsys):
    # the report names its contract file: promotion refuses it unless the command says what that file is now
    v1 = candidate("genui")
    evaluate(ws, v1.ref, ui_contract)
    assert main(["promote", v1.ref]) == 0
    assert store.alias_target(store.open_store(ws), "genui", "champion") == v1.id


def test_a_hand_written_passing_report_is_refused(ws, candidate, tmp_path):
    v1 = candidate("genui")
    forged = tmp_path / "forged.json"
    forged.write_text(json.dumps({"revision": v1.ref, "revision_id": v1.id, "verdict": "pass",
                                  "contract": {"name": "ui", "version": 2, "sha256": "0" * 64},
                                  "baseline": {"revision_id": None, "metrics": {}}, "metrics": {}, "gates": [],
                                  "examples_sha256": "0" * 64, "source": "generated"}))
    with pytest.raises(Refused, match="is not a report registered by `mint eval`"):
        promote(ws, v1.ref, report_path=forged)
    assert store.alias_target(store.open_store(ws), "genui", "champion") is None


def test_an_edited_registered_report_is_refused(ws, candidate, ui_contract, tmp_path):
    ui_contract.write_text(GOOD.replace("{metric: core.parse_rate, min: 0.0, no_regression: 0.0}",
                                        "{metric: core.schema_valid_rate, min: 0.9}"))
    v1 = candidate("genui")
    result = evaluate(ws, v1.ref, ui_contract)
    assert result.report.verdict == "fail"
    path = result.report_path
    data = json.loads(open(path).read())
    data["verdict"] = "pass"
    open(path, "w").write(json.dumps(data, indent=2))
    with pytest.raises(Refused, match="was edited after `mint eval` registered it"):
        promote(ws, v1.ref, report_path=path, identify_contract=contract_identity)


def test_a_report_for_another_revision_is_refused(ws, candidate, ui_contract):
    v1, v2 = candidate("genui"), candidate("genui")
    result = evaluate(ws, v1.ref, ui_contract)
    with pytest.raises(BadInput, match="the report is for revision"):
        promote(ws, v2.ref, report_path=result.report_path)


def test_a_limit_2_champion_report_is_never_the_baseline_of_a_full_run(ws, candidate, ui_contract, tmp_path):
    v1, v2, v3 = candidate("genui"), candidate("genui"), candidate("genui")
    short = evaluate(ws, v1.ref, ui_contract, limit=2)
    promote(ws, v1.ref, report_path=short.report_path, identify_contract=contract_identity)
    full = evaluate(ws, v2.ref, ui_contract)
    # eval measured the champion again on the full suite instead of pairing with its 2-example report
    assert full.baseline_evaluated and full.report.baseline.report != read_report(
        Path(short.report_path)).id
    # a report that was compared with the 2-example champion report (as an older mint did) is refused
    mismatched = _rewrite(full.report_path, tmp_path, "mismatched.json",
                          baseline_report=read_report(Path(short.report_path)).id)
    conn = store.open_store(ws)
    record_report(conn, read_report(mismatched))
    with pytest.raises(Refused, match="measured on different examples"):
        promote(ws, v2.ref, report_path=mismatched, identify_contract=contract_identity)
    # and the reverse: a 2-example candidate report against the champion's full report
    small = evaluate(ws, v3.ref, ui_contract, limit=2)
    reverse = _rewrite(small.report_path, tmp_path, "reverse.json", baseline_report=full.report.baseline.report)
    record_report(conn, read_report(reverse))
    with pytest.raises(Refused, match="measured on different examples"):
        promote(ws, v3.ref, report_path=reverse, identify_contract=contract_identity)
    # the honest full report promotes
    assert promote(ws, v2.ref, report_path=full.report_path, identify_contract=contract_identity).new == v2.id


def test_a_predictions_report_promotes_only_with_force_and_why(ws, candidate, ui_contract, tmp_path):
    v1 = candidate("genui")
    rows = [{"suite": "core", "id": f"card-{i}", "output": json.dumps({"type": "Card", "props": {"title": str(i)}}),
             "latency_ms": 50.0}
            for i in range(4)]
    (tmp_path / "p.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "b.jsonl").write_text("".join(json.dumps({**r, "output": "no"}) + "\n" for r in rows))
    result = evaluate(ws, v1.ref, ui_contract, predictions=tmp_path / "p.jsonl",
                      baseline_predictions=tmp_path / "b.jsonl")
    assert result.report.source == "predictions" and result.report.verdict == "pass"
    with pytest.raises(Refused, match="--predictions.*--force --why"):
        promote(ws, v1.ref, report_path=result.report_path, identify_contract=contract_identity)
    assert main(["promote", v1.ref, "--report", result.report_path, "--force"]) == 2
    move = promote(ws, v1.ref, report_path=result.report_path, force=True, why="outputs from the vLLM canary")
    assert move.action == "force-promote"


def test_a_reject_committed_while_promote_runs_is_not_promoted(ws, candidate, report_for, monkeypatch):
    v1 = candidate()
    report = report_for(v1)
    fired = []

    def reject_from_another_connection(point):
        if not fired:       # the first pause point of promote, wherever it is
            fired.append(point)
            reject(ws, v1.ref, why="found a leak")

    monkeypatch.setattr(promotion, "checkpoint", reject_from_another_connection)
    with pytest.raises(Refused, match="was rejected"):
        promote(ws, v1.ref, report_path=report)
    conn = store.open_store(ws)
    assert store.alias_target(conn, "coding", "champion") is None
    assert store.resolve(conn, v1.ref).status == "rejected"


def test_a_base_report_cannot_be_promoted(ws, candidate, ui_contract, capsys):
    v1 = candidate("genui")
    base = evaluate(ws, "base", ui_contract, base="tiny-random")
    assert main(["promote", v1.ref, "--report", base.report_path]) == 2
    err = capsys.readouterr().err
    assert "report of the bare base" in err and "base reports can't be promoted" in err
