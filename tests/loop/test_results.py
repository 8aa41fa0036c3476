"""The loop steps' result types: recorded as the JSON a loop's state holds, read back typed, old states too."""
from mint.loop.results import Decision, EvalOutput, TrainOutput
from mint.registry.report import GateResult
from mint.train.config import SettingsOverride

# an eval step's output as the loop recorded it while outputs were dicts
EVAL = {"revision": "genui:v2", "revision_id": "b" * 32, "report": "/h/reports/genui-v2/report.json",
        "verdict": "fail", "metrics": {"core.request_match": 0.5, "latency.p95_ms": 900.0},
        "baseline": {"revision_id": "a" * 32, "label": "genui:v1", "report": "c" * 64,
                     "metrics": {"core.request_match": 0.25}},
        "gates": [{"metric": "latency.p95_ms", "value": 900.0, "baseline": None, "rule": "max 60000", "passed": True,
                   "delta": None},
                  {"metric": "core.request_match", "value": 0.5, "baseline": 0.25,
                   "rule": "improve 0.1 (no significant gain); delta +0.25 [-0.1, +0.6] on 8 paired", "passed": False,
                   "delta": {"n": 8, "delta": 0.25, "low": -0.1, "high": 0.6, "method": "mcnemar-exact"}},
                  {"metric": "core.examples", "value": 8.0, "baseline": None, "rule": "min 1 per suite",
                   "passed": True, "delta": None}],
        "backward_transfer": [{"suite": "retention", "unavailable": "gone"}],
        "twin": {"revision": "genui:v3", "verdict": "no experience effect"}}


def test_an_eval_recorded_as_a_dict_reads_back_typed_and_records_the_same():
    evaluation = EvalOutput.from_dict(EVAL)
    assert all(isinstance(g, GateResult) for g in evaluation.gates)
    assert evaluation.primary_metric == "core.request_match"         # the first gated metric that is not latency
    gate = evaluation.gate("core.request_match")
    assert (gate.passed, gate.paired_delta, gate.interval) == (False, 0.25, [-0.1, 0.6])
    assert evaluation.baseline_value("core.request_match") == 0.25
    assert evaluation.to_dict() == EVAL and list(evaluation.to_dict()) == list(EVAL)


def test_a_train_recorded_with_set_text_reads_back_with_its_settings_as_values():
    old = {"revision": "genui:v2", "revision_id": "b" * 32, "run": "run-1", "parent": "genui:v1", "steps": 3,
           "examples": 12, "train_loss": 1.5, "method": "sft",
           "sets": ["max_length=96", "max_steps=3", "learning_rate=0.0001", "per_device_train_batch_size=2"],
           "plan": {"init": "champion", "max_steps": 3}}
    trained = TrainOutput.from_dict(old)
    assert trained.settings == SettingsOverride(trl={"max_length": 96, "max_steps": 3, "learning_rate": 0.0001,
                                                     "per_device_train_batch_size": 2})
    assert trained.to_dict()["settings"] == {"trl": trained.settings.trl} and "sets" not in trained.to_dict()
    assert TrainOutput.from_dict(trained.to_dict()) == trained


def test_a_decision_records_as_the_loop_always_recorded_it():
    record = {"action": "rejected", "revision": "genui:v2", "verdict": "fail",
              "reason": "failed gates: core.request_match (improve 0.1)", "champion": "genui:v1"}
    assert Decision.from_dict(record).to_dict() == record
