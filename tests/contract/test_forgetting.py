"""Backward transfer: a candidate measured again on the retention suite an earlier champion was promoted under,
even after the contract moved on to another one; a significant regression is forgetting."""
import json

from mint.contract.evaluate import evaluate
from mint.contract.forgetting import backward_transfer, forgetting_reason
from mint.contract.schema import load_contract
from mint.registry.promotion import promote

CONTRACT = """\
contract: ui-bt
version: {version}
specialist: genui
harness:
  decoding: {{max_new_tokens: 4, batch_size: 8}}
suites:
  - {{name: core, data: core.jsonl}}
  - {{name: retention, data: {retention}}}
gates:
  - {{metric: retention.parse_rate, no_regression: 0.0}}
"""


def suite(path, words):
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {w}"}],
             "reference": {"type": "Card", "props": {"title": w}}} for w in words]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def moved_on(ws, tmp_path, candidate):
    """Generation 1 promoted with a perfect old retention suite; the contract moved on to another, under which
    generation 2 passed: (the new contract, generation 1, generation 2, its evaluation)."""
    suite(tmp_path / "core.jsonl", ["alpha", "beta"])
    old_rows = suite(tmp_path / "old_retention.jsonl", ["north", "south", "east", "west", "up", "down"])
    suite(tmp_path / "new_retention.jsonl", ["red", "green"])
    old = tmp_path / "v1.yaml"
    old.write_text(CONTRACT.format(version=1, retention="old_retention.jsonl"))
    # generation 1 answered the old retention suite perfectly (outputs made elsewhere, promoted by hand)
    perfect = tmp_path / "perfect.jsonl"
    perfect.write_text("".join(json.dumps({"suite": name, "index": i, "output": json.dumps(r["reference"])}) + "\n"
                               for name, rows in (("core", [0, 1]), ("retention", old_rows))
                               for i, r in enumerate(rows if name == "retention" else [{"reference": {}}] * 2)))
    first = candidate("genui")
    made = evaluate(ws, first.ref, old, predictions=perfect)
    assert made.report.metrics["retention.parse_rate"] == 1.0
    promote(ws, first.ref, report_path=made.report_path, force=True, why="generation 1")

    # the contract moves on to another retention suite; generation 2 passes it (the champion is as bad there)
    new = tmp_path / "v2.yaml"
    new.write_text(CONTRACT.format(version=2, retention="new_retention.jsonl"))
    second = candidate("genui")
    result = evaluate(ws, second.ref, new)
    assert result.passed
    return new, first, second, result


def test_a_candidate_that_forgets_an_earlier_retention_suite_is_rejected(ws, tmp_path, candidate):
    new, first, second, result = moved_on(ws, tmp_path, candidate)
    transfer = backward_transfer(ws, load_contract(new), second.ref, result.report_path)
    [row] = transfer
    assert (row["metric"], row["introduced_by"], row["reused"]) == ("retention.parse_rate", first.ref, False)
    assert row["then"] == 1.0 and row["now"] < 0.5 and row["delta"]["n"] == 6 and row["regressed"]
    reason = forgetting_reason(transfer)
    assert reason.startswith("forgetting: retention.parse_rate fell from 1") and first.ref in reason


def test_the_earlier_suites_decoded_again_are_told_to_the_progress_callback(ws, tmp_path, candidate):
    new, _first, second, result = moved_on(ws, tmp_path, candidate)
    heard = []
    backward_transfer(ws, load_contract(new), second.ref, result.report_path,
                      progress=lambda suite, done, total, share=None: heard.append((suite, done, total)))
    assert heard and {total for _suite, _done, total in heard} == {6} and max(d for _s, d, _t in heard) == 6
