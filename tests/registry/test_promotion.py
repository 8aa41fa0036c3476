import hashlib
import json

import pytest

from mint.cli import main
from mint.contract.identity import contract_identity
from mint.errors import BadInput, Refused
from mint.registry import store
from mint.registry.promotion import promote, reject, rollback
from mint.registry.store import StaleBaseline


def test_first_revision_is_promoted_against_an_empty_baseline(ws, candidate, report_for):
    revision = candidate()
    move = promote(ws, revision.ref, report_path=report_for(revision, baseline=None))
    assert (move.old, move.new) == (None, revision.id)
    conn = store.open_store(ws)
    assert store.resolve(conn, "coding:champion").id == revision.id
    assert store.resolve(conn, "coding:v1").status == "champion"
    (event,) = store.history(conn, "coding")
    assert (event.action, event.old, event.new, event.contract_version) == ("promote", None, revision.id, 3)
    assert event.report.endswith(".json") and event.pid > 0 and event.host


def test_promote_refuses_when_champion_moved(ws, candidate, report_for):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    with pytest.raises(StaleBaseline, match=r"champion moved from coding:v1 \(.*\) to coding:v2 .* re-run `mint eval"):
        promote(ws, v3.ref, report_path=report_for(v3, baseline=v1.id))
    conn = store.open_store(ws)
    assert store.resolve(conn, "coding:champion").id == v2.id
    assert store.resolve(conn, "coding:previous").id == v1.id
    assert [e.new for e in store.history(conn, "coding")] == [v1.id, v2.id]


def test_failing_report_is_refused(ws, candidate, report_for):
    revision = candidate()
    with pytest.raises(Refused, match="failed its gates"):
        promote(ws, revision.ref, report_path=report_for(revision, verdict="fail"))


def test_missing_report_is_refused(ws, candidate):
    revision = candidate()
    with pytest.raises(Refused, match="no passing report for coding:v1"):
        promote(ws, revision.ref)


def test_report_of_another_revision_is_bad_input(ws, candidate, report_for):
    v1, v2 = candidate(), candidate()
    with pytest.raises(BadInput, match="the report is for revision"):
        promote(ws, v2.ref, report_path=report_for(v1))


def test_malformed_report_names_the_field(ws, candidate, tmp_path):
    revision = candidate()
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"revision_id": revision.id, "contract": {"name": "coding", "version": "three",
                                                                        "sha256": "x"}, "verdict": "pass"}))
    with pytest.raises(BadInput, match="bad.json: contract.version: expected int"):
        promote(ws, revision.ref, report_path=bad)


def test_changed_contract_file_is_refused(ws, candidate, report_for, tmp_path):
    contract = tmp_path / "coding.yaml"
    contract.write_text("contract: coding\nversion: 3\n")
    revision = candidate()
    report = report_for(revision, contract_path=contract)
    data = json.loads(report.read_text())
    data["contract"]["sha256"] = hashlib.sha256(contract.read_bytes()).hexdigest()
    report.write_text(json.dumps(data))
    contract.write_text("contract: coding\nversion: 3\n# edited\n")
    with pytest.raises(Refused, match="changed since this report"):
        promote(ws, revision.ref, report_path=report, identify_contract=contract_identity)


def test_report_naming_its_contract_needs_the_contract_identity(ws, candidate, report_for, tmp_path):
    # the registry never loads a contract: a caller that cannot say what the contract is now can't vouch for it
    contract = tmp_path / "coding.yaml"
    contract.write_text("contract: coding\nversion: 3\n")
    revision = candidate()
    with pytest.raises(Refused, match="could not be checked"):
        promote(ws, revision.ref, report_path=report_for(revision, contract_path=contract))


def test_report_under_an_older_contract_version_is_refused(ws, candidate, report_for):
    v1, v2 = candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1, version=4))
    with pytest.raises(Refused, match="v4 is current"):
        promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id, version=3))


def test_force_needs_a_reason_and_is_logged(ws, candidate):
    revision = candidate()
    with pytest.raises(BadInput, match="--why"):
        promote(ws, revision.ref, force=True)
    promote(ws, revision.ref, force=True, why="hotfix for incident 42")
    (event,) = store.history(store.open_store(ws), "coding")
    assert (event.action, event.reason) == ("force-promote", "hotfix for incident 42")


def test_registered_report_is_found_without_the_flag(ws, candidate, report_for):
    v1, v2 = candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    from mint.registry.promotion import read_report, record_report
    conn = store.open_store(ws)
    record_report(conn, read_report(report_for(v2, baseline=v1.id)))
    assert promote(ws, v2.ref).new == v2.id


def test_rollback_to_previous_and_to_an_earlier_champion(ws, candidate, report_for):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    promote(ws, v3.ref, report_path=report_for(v3, baseline=v2.id))
    move = rollback(ws, "coding", why="v3 breaks JSON output")
    assert (move.old, move.new) == (v3.id, v2.id)
    conn = store.open_store(ws)
    assert store.resolve(conn, "coding:champion").id == v2.id
    assert store.resolve(conn, "coding:v3").status == "retired"
    assert store.resolve(conn, "coding:previous").id == v1.id
    promote(ws, v3.ref, force=True, why="fixed serving, v3 was fine")
    rollback(ws, "coding", to=v1.ref, why="both v2 and v3 are suspect")
    assert store.resolve(conn, "coding:champion").id == v1.id
    assert [e.action for e in store.history(conn, "coding")] == ["promote"] * 3 + ["rollback", "force-promote",
                                                                                  "rollback"]


def test_rollback_without_history_is_refused(ws, candidate, report_for):
    v1 = candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    with pytest.raises(Refused, match="no previous champion"):
        rollback(ws, "coding", why="bad")


def test_a_second_rollback_goes_further_back_instead_of_re_promoting_the_bad_one(ws, candidate, report_for):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    promote(ws, v3.ref, report_path=report_for(v3, baseline=v2.id))
    assert rollback(ws, "coding", why="v3 is bad").new == v2.id
    assert rollback(ws, "coding", why="v2 is bad too").new == v1.id
    with pytest.raises(Refused, match="no previous champion"):
        rollback(ws, "coding", why="and v1?")
    assert store.resolve(store.open_store(ws), "coding:champion").id == v1.id


def test_rollback_skips_a_champion_rejected_since(ws, candidate, report_for):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    promote(ws, v3.ref, report_path=report_for(v3, baseline=v2.id))
    reject(ws, v2.ref, why="leaks secrets")
    assert store.resolve(store.open_store(ws), "coding:previous").id == v1.id
    assert rollback(ws, "coding", why="v3 is bad").new == v1.id


def test_rollback_refuses_a_stale_view_of_the_champion(ws, candidate, report_for, capsys):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    promote(ws, v3.ref, report_path=report_for(v3, baseline=v2.id))
    # two operators both saw v3 misbehave; the first rollback lands, the second must not go on to v1
    assert rollback(ws, "coding", expect=v3.ref, why="v3 is bad").new == v2.id
    with pytest.raises(StaleBaseline, match=r"champion of coding is coding:v2 .*not coding:v3"):
        rollback(ws, "coding", expect=v3.ref, why="v3 is bad")
    assert main(["rollback", "coding", "--expect", v3.ref, "--why", "v3 is bad"]) == 1
    assert store.resolve(store.open_store(ws), "coding:champion").id == v2.id
    assert len(store.history(store.open_store(ws), "coding")) == 4


def test_rollback_needs_a_reason(ws, candidate, report_for):
    v1, v2 = candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    with pytest.raises(BadInput, match="--why"):
        rollback(ws, "coding", why=None)
    assert main(["rollback", "coding"]) == 2
    assert main(["rollback", "coding", "--why", "  "]) == 2
    assert store.resolve(store.open_store(ws), "coding:champion").id == v2.id


def test_rollback_to_a_revision_that_never_was_champion_is_refused(ws, candidate, report_for):
    v1, v2, v3 = candidate(), candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    with pytest.raises(Refused, match="coding:v3 is not an earlier champion .*`mint promote coding:v3`"):
        rollback(ws, "coding", to=v3.ref, why="try v3")
    rollback(ws, "coding", why="v2 is bad")
    with pytest.raises(Refused, match="coding:v2 is not an earlier champion"):   # rolled away from: promote it
        rollback(ws, "coding", to=v2.ref, why="back to v2")


def test_reject(ws, candidate, report_for):
    v1, v2 = candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    with pytest.raises(Refused, match="is the champion"):
        reject(ws, v1.ref, why="bad")
    reject(ws, v2.ref, why="leaks secrets")
    conn = store.open_store(ws)
    assert store.resolve(conn, "coding:v2").status == "rejected"
    with pytest.raises(Refused, match="was rejected"):
        promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))


def test_cli_exit_codes_and_json(ws, candidate, report_for, capsys):
    v1, v2 = candidate(), candidate()
    assert main(["promote", v1.ref, "--report", str(report_for(v1)), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new"] == v1.id
    assert main(["promote", v2.ref, "--report", str(report_for(v2, baseline=None))]) == 1
    assert "champion moved from none to coding:v1" in capsys.readouterr().err
    assert main(["promote", v2.ref, "--report", str(report_for(v2, verdict="fail"))]) == 1
    assert main(["promote", "coding:v9"]) == 2
    assert main(["reject", v2.ref, "--why", "worse", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["action"] == "reject"
    assert main(["registry", "history", "coding", "--json"]) == 0
    assert [e["action"] for e in json.loads(capsys.readouterr().out)["events"]] == ["promote", "reject"]


def _failed_report(ws, tmp_path, revision):
    """A registered report of ``revision`` that failed two of its three gates, as `mint eval` writes one."""
    from mint.registry.promotion import read_report, record_report
    from mint.registry.store import now

    path = tmp_path / "failed.json"
    path.write_text(json.dumps({
        "revision": revision.ref, "revision_id": revision.id,
        "contract": {"name": "coding", "version": 3, "sha256": "ab" * 32},
        "baseline": {"revision_id": None, "metrics": {}, "label": "base"},
        "metrics": {"core.pass_at_1": 0.1, "latency.p95_ms": 38460.0},
        "gates": [{"metric": "core.pass_at_1", "value": 0.1, "baseline": 0.0, "rule": "min 0.2", "passed": False},
                  {"metric": "retention.pass_at_1", "value": None, "baseline": None,
                   "rule": "no_regression 0; not measured", "passed": False},
                  {"metric": "latency.p95_ms", "value": 38460.0, "baseline": None, "rule": "max 120000",
                   "passed": True}],
        "verdict": "fail", "examples_sha256": "cd" * 32, "source": "generated", "created_at": now()}))
    conn = store.open_store(ws)
    try:
        record_report(conn, read_report(path))
    finally:
        conn.close()
    return path


def test_promote_after_a_failed_eval_names_the_failing_gates_and_force(ws, candidate, tmp_path, capsys):
    revision = candidate()
    report = _failed_report(ws, tmp_path, revision)
    assert main(["promote", revision.ref]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert "coding:v1 failed its gates under coding v3: core.pass_at_1 0.1 (min 0.2); retention.pass_at_1 not " \
           "measured (no_regression 0; not measured)" in said
    assert "latency" not in said and str(report) in said
    assert f"mint promote {revision.ref} --force --why TEXT" in said
    assert "no passing report" not in said                 # it has a report: it failed


def test_a_near_miss_of_a_specialist_gets_a_did_you_mean(ws, candidate, capsys):
    candidate("genui")
    assert main(["promote", "gnui:v1"]) == 2
    assert "gnui:v1: no such revision (gnui has no revisions) (did you mean genui?)" in capsys.readouterr().err
    assert main(["promote", "gnui:champion"]) == 2
    assert "(did you mean genui?)" in capsys.readouterr().err
    assert main(["promote", "genui:v7"]) == 2                # the specialist exists: only its versions are listed
    assert "did you mean" not in capsys.readouterr().err


def test_rollback_with_only_one_champion_says_there_is_none_before_it(ws, candidate, report_for, capsys):
    v1 = candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    assert main(["rollback", "coding", "--why", "bad"]) == 1
    said = " ".join(capsys.readouterr().err.split())
    assert f"coding:v1 ({v1.id[:12]}) is the first champion of coding" in said and "mint promote coding:vN" in said
    assert "rolled away from or rejected" not in said


def test_registry_history_shows_refs(ws, candidate, report_for, capsys):
    v1, v2 = candidate(), candidate()
    promote(ws, v1.ref, report_path=report_for(v1))
    promote(ws, v2.ref, report_path=report_for(v2, baseline=v1.id))
    assert main(["registry", "history", "coding"]) == 0
    rows = [line for line in capsys.readouterr().out.splitlines() if "promote" in line]
    assert "coding:v1" in rows[0] and "coding:v1" in rows[1] and "coding:v2" in rows[1]
    assert v2.id[:12] not in rows[1]
    assert main(["registry", "history", "coding", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["refs"] == {v1.id: "coding:v1", v2.id: "coding:v2"}


def test_piped_registry_ls_keeps_refs_and_ids_whole(ws, candidate):
    from tests.conftest import run_mint

    revisions = [candidate("coding", dataset="prod@03353adc6834f00d") for _ in range(3)]
    done = run_mint("registry", "ls", env={"COLUMNS": ""})
    assert done.returncode == 0, done.stderr
    for revision in revisions:
        (line,) = [line for line in done.stdout.splitlines() if f" {revision.ref} " in line]
        assert revision.id[:12] in line and "prod@03353adc6834f00d" in line
