"""A contract fixes the decoding precision: a candidate and its baseline decode at one precision on any host,
``auto`` is measured once per (contract, base, host) and then fixed, and a baseline made at another
precision is not reused."""
import json
from pathlib import Path

import pytest

from mint import hardware
from mint.contract.evaluate import check_not_stale, evaluate
from mint.contract.schema import load_contract
from mint.errors import BadInput
from mint.generation import engine as gen
from tests.contract.conftest import card_contract
from tests.contract.test_schema import GOOD

AUTO = GOOD.replace("batch_size: 2}", "batch_size: 2, precision: auto}")


@pytest.fixture
def contract(tmp_path):
    return card_contract(tmp_path, AUTO)


@pytest.fixture
def host(monkeypatch):
    """host(flags, bf16_speedup, agreement) makes this machine one with those CPU flags, on which the bare
    base decodes ``bf16_speedup`` times faster in bf16 with that share of identical greedy outputs; returns
    the measurements made."""
    measured = []

    def make(flags=("avx512_bf16", "amx_bf16"), bf16_speedup=2.0, agreement=1.0, probe_speedup=1.5):
        found = hardware.Hardware("cpu", "test cpu", None, tuple(flags), 2, 64.0, True, "probe",
                                  probe={"decoding": {"bf16_speedup": probe_speedup}})
        monkeypatch.setattr(hardware, "detect", lambda *a, **k: found)

        def compare(model, tokenizer, conversations, settings, answer_end=(), precision="bf16"):
            measured.append(len(conversations))
            return {"parity": {"examples": 4, "identical": int(4 * agreement), "agreement": agreement},
                    "speed": {"fp32": {"tokens_per_s": 100.0}, "bf16": {"tokens_per_s": 100.0 * bf16_speedup}},
                    "speedup": bf16_speedup}

        monkeypatch.setattr(gen, "compare_precisions", compare)
        return measured

    return make


def generated_at(report: dict) -> set[str]:
    return {suite["precision"] for suite in report["generation"].values()}


def baseline_report(ws, result) -> dict:
    """The registered report the gates compared ``result`` with."""
    from mint.registry import store

    conn = store.open_store(ws)
    try:
        row = conn.execute("SELECT path FROM reports WHERE id = ?", (result.report.baseline.report,)).fetchone()
    finally:
        conn.close()
    return json.loads(Path(row[0]).read_text())


@pytest.mark.parametrize("speedup, agreement, expected", [(2.0, 1.0, "bf16"), (0.7, 1.0, "fp32"),
                                                          (2.0, 0.5, "fp32")])
def test_a_candidate_and_its_baseline_decode_at_the_precision_auto_resolved_to(ws, candidate, contract, host,
                                                                               speedup, agreement, expected):
    measured = host(bf16_speedup=speedup, agreement=agreement)
    result = evaluate(ws, candidate("genui").ref, contract)
    assert result.baseline_evaluated and len(measured) == 1
    assert result.report.precision["used"] == expected
    assert generated_at(result.report.to_dict()) == {expected} == generated_at(baseline_report(ws, result))
    assert result.report.precision["resolution"]["figures"]["model"]["speedup"] == speedup


def test_auto_is_fixed_after_its_first_resolution(ws, candidate, contract, host):
    measured = host(bf16_speedup=2.0)
    first = evaluate(ws, candidate("genui").ref, contract)
    host(bf16_speedup=0.5)   # the same host measuring otherwise later changes nothing: it is not measured again
    again = evaluate(ws, candidate("genui").ref, contract)
    assert len(measured) == 1 and again.report.precision == first.report.precision
    assert generated_at(again.report.to_dict()) == {"bf16"} and not again.baseline_evaluated


def test_a_cached_baseline_at_another_precision_is_not_reused(ws, candidate, contract, host):
    revision = candidate("genui")
    host(flags=("avx2",), bf16_speedup=0.5)
    at_fp32 = evaluate(ws, revision.ref, contract)
    host(flags=("avx512_bf16", "amx_bf16"), bf16_speedup=2.0)   # another host: auto resolves again, to bf16
    at_bf16 = evaluate(ws, revision.ref, contract)
    assert at_fp32.report.precision["used"] == "fp32" and at_bf16.report.precision["used"] == "bf16"
    assert at_bf16.baseline_evaluated and generated_at(baseline_report(ws, at_bf16)) == {"bf16"}
    assert at_bf16.report.baseline.report != at_fp32.report.baseline.report


def test_auto_stays_fp32_without_measuring_the_model_where_the_probe_finds_bf16_slower(ws, candidate, contract,
                                                                                       host):
    measured = host(probe_speedup=0.4, bf16_speedup=3.0)
    result = evaluate(ws, candidate("genui").ref, contract)
    assert result.report.precision["used"] == "fp32" and measured == []
    assert "0.40x" in result.report.precision["reason"]


def test_a_contract_that_asks_for_fp32_decodes_both_in_fp32_on_a_host_where_bf16_wins(ws, candidate, contract,
                                                                                       host):
    contract.write_text(GOOD)   # no precision: fp32
    measured = host(bf16_speedup=3.0)
    result = evaluate(ws, candidate("genui").ref, contract)
    assert generated_at(result.report.to_dict()) == {"fp32"} == generated_at(baseline_report(ws, result)) and measured == []


def test_a_contracts_precision_is_in_its_hash(ws, candidate, contract, host):
    host(bf16_speedup=0.5)
    auto = load_contract(contract)
    evaluate(ws, candidate("genui").ref, contract)
    contract.write_text(AUTO.replace("precision: auto", "precision: bf16"))
    bf16 = load_contract(contract)
    assert load_contract(contract).settings.precision == "bf16" and bf16.sha256 != auto.sha256
    with pytest.raises(BadInput, match="bump `version`"):
        check_not_stale(ws, bf16)


def test_eval_says_which_precision_candidate_and_baseline_decoded_at(ws, candidate, contract, host, capsys):
    from mint.cli import main

    host(bf16_speedup=0.5)
    assert main(["eval", candidate("genui").ref, "--contract", str(contract)]) in (0, 1)
    shown = " ".join(capsys.readouterr().out.split())   # rich wraps long lines
    assert "precision: fp32, candidate and baseline alike (auto: on the bare base, bf16 decoded" in shown


def test_a_contract_that_names_its_precision_loads_and_measures_nothing(ws, contract):
    from mint.contract.precision import decoding_precision

    contract.write_text(AUTO.replace("precision: auto", "precision: bf16"))

    def never():
        raise AssertionError("a named precision needs no base, no fingerprint and no measurement")

    chosen = decoding_precision(ws, load_contract(contract), never, never, never)
    assert chosen.used == "bf16" and chosen.resolution is None and not (ws.home / "precision").exists()


def test_a_champions_report_at_another_precision_is_not_its_baseline(ws, candidate, contract, host):
    from mint.registry.promotion import promote

    champion = candidate("genui")
    host(flags=("avx2",), bf16_speedup=0.5)
    evaluate(ws, champion.ref, contract)
    promote(ws, champion.ref, force=True, why="the first champion")
    host(flags=("avx512_bf16", "amx_bf16"), bf16_speedup=2.0)   # another host, where auto resolves to bf16
    result = evaluate(ws, candidate("genui").ref, contract)
    assert result.report.baseline.revision_id == champion.id and result.baseline_evaluated
    assert generated_at(baseline_report(ws, result)) == {"bf16"} == generated_at(result.report.to_dict())
