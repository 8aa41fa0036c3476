"""How long a loop will take (mint.loop.estimate), and what a long step tells while it runs: the estimate follows
the recipe's sizes and the machine's probe, is refined by what the finished steps measured, and a run records it
beside what happened."""
import json
from pathlib import Path

import pytest

from mint.hardware import Hardware
from mint.loop.estimate import (PRIOR_S, Done, Estimate, base_parameters, estimate_run, machine_rates, pace_left,
                                refine, step_left)
from mint.loop.recipe import load_recipe
from mint.loop.runner import run_loop

ROOT = Path(__file__).resolve().parents[2]
SMOKE_CONTRACT = ROOT / "contracts" / "genui-smoke.yaml"
LOGS = ROOT / "examples" / "logs" / "server_log.jsonl.gz"
SPECIALISTS = ["chat", "agent", "coding", "genui"]

RECIPE = """\
# Run: mint loop {name}.yaml
recipe: {name}
base: tiny-random
dataset: smoke
loop: {{iterations: 2}}
steps:
  - ingest: {{sources: [{logs}]}}
  - experience: {{specialist: genui, samples: {samples}, prompts: 2, max_new_tokens: 8, from_iteration: 2,
                 sources: [{{jsonl: requests.jsonl}}]}}
  - train: {{specialist: genui, method: sft,
              set: {{max_steps: {steps}, per_device_train_batch_size: 2, max_length: 96, lora.r: 2}}}}
  - eval: {{specialist: genui, contract: {contract}}}
  - promote: {{specialist: genui}}
"""


def write_recipe(folder: Path, name: str = "eta", *, steps: int = 2, samples: int = 2) -> Path:
    (folder / "requests.jsonl").write_text(json.dumps({"prompt": "Show a signup form."}) + "\n")
    path = folder / f"{name}.yaml"
    path.write_text(RECIPE.format(name=name, logs=LOGS, contract=SMOKE_CONTRACT, samples=samples, steps=steps))
    return path


def probed(training_ms: float = 3.0, row_ms: float = 0.03) -> Hardware:
    """A CPU whose probe timed these figures (no probe runs)."""
    return Hardware("cpu", "test cpu", None, (), 2, 8.0, False, "", probe={
        "training": {"fp32_ms": training_ms, "bf16_speedup": 1.0}, "decoding": {"bf16_speedup": 1.0},
        "decoding_rows_ms_per_row": {"8": row_ms}})


def total(path: Path, hardware: Hardware | None = None) -> float:
    recipe = load_recipe(path, specialists=SPECIALISTS)
    planned = estimate_run(recipe, range(1, 3), machine_rates(hardware or probed()), base_parameters("tiny-random"))
    return sum(e.seconds for e in planned)


def seconds_of(path: Path, label: str) -> float:
    recipe = load_recipe(path, specialists=SPECIALISTS)
    planned = estimate_run(recipe, range(1, 3), machine_rates(probed()), base_parameters("tiny-random"))
    return sum(e.seconds for e in planned if e.label == label)


def test_more_training_steps_make_a_longer_estimate(tmp_path):
    assert seconds_of(write_recipe(tmp_path, "long", steps=400), "train genui") > \
        seconds_of(write_recipe(tmp_path, "short", steps=2), "train genui")


def test_more_samples_make_a_longer_estimate(tmp_path):
    assert seconds_of(write_recipe(tmp_path, "many", samples=64), "experience genui") > \
        seconds_of(write_recipe(tmp_path, "few", samples=2), "experience genui")


def test_a_slower_probe_makes_a_longer_estimate(tmp_path):
    path = write_recipe(tmp_path, steps=400, samples=64)
    assert total(path, probed(training_ms=30.0, row_ms=0.3)) > total(path, probed())


def test_a_step_estimated_only_in_the_iterations_it_runs_in(tmp_path):
    recipe = load_recipe(write_recipe(tmp_path), specialists=SPECIALISTS)
    planned = estimate_run(recipe, range(1, 3), machine_rates(probed()), base_parameters("tiny-random"))
    assert [(e.iteration, e.label) for e in planned if e.kind == "experience"] == [(2, "experience genui")]


def ahead(seconds: float, training_s: float = 0.0) -> list[Estimate]:
    return [Estimate(2, 0, "eval genui", "eval", seconds, "", training_s)]


def decoded(estimated: float, measured: float) -> Done:
    return Done(estimated, 0.0, measured)


def trained(estimated: float, measured: float) -> Done:
    return Done(estimated, estimated, measured)


def test_steps_that_ran_slower_than_estimated_raise_the_remaining_estimate_by_their_ratio():
    eta = refine([decoded(600.0, 1200.0)], ahead(1000.0))
    assert eta.ratio == pytest.approx((1200 + PRIOR_S) / (600 + PRIOR_S), abs=1e-3)
    assert eta.left_s == pytest.approx(1000.0 * (1200 + PRIOR_S) / (600 + PRIOR_S), abs=0.1)


def test_steps_that_ran_faster_than_estimated_lower_the_remaining_estimate():
    assert refine([decoded(600.0, 300.0), decoded(400.0, 200.0)], ahead(1000.0)).left_s < 1000.0 * 0.6


def test_a_slow_training_stretches_the_training_ahead_and_not_the_decoding():
    done = [trained(120.0, 360.0)]
    assert refine(done, ahead(1000.0)).left_s == 1000.0
    assert refine(done, ahead(1000.0, training_s=1000.0)).left_s == pytest.approx(
        1000.0 * (360 + PRIOR_S) / (120 + PRIOR_S), abs=0.1)


def test_a_step_that_both_trains_and_decodes_corrects_each_part_by_its_own_kind():
    done = [trained(100.0, 300.0), decoded(100.0, 50.0)]
    eta = refine(done, ahead(1000.0, training_s=400.0))
    assert eta.left_s == pytest.approx(400 * (300 + PRIOR_S) / (100 + PRIOR_S) + 600 * (50 + PRIOR_S) / (100 + PRIOR_S), abs=0.1)
    assert eta.training_ratio > 1 > eta.decoding_ratio


def test_a_part_of_a_step_says_its_time_left_at_its_own_pace_once_a_tenth_is_done():
    assert pace_left((10.0, 0.0), (20.0, 0.05)) is None
    assert pace_left((10.0, 0.0), (40.0, 0.25)) == pytest.approx(90.0)


def test_a_step_slower_than_its_estimate_still_has_what_its_running_part_has_left():
    step = ahead(100.0)[0]
    eta = refine([], [step])
    assert step_left(eta, step, 30.0, None) == pytest.approx(70.0)
    assert step_left(eta, step, 300.0, None) == 0.0
    assert step_left(eta, step, 300.0, pace_left((0.0, 0.0), (300.0, 0.5))) == pytest.approx(300.0)


def test_before_any_step_the_remaining_estimate_is_the_estimate():
    assert refine([], ahead(1000.0)).left_s == 1000.0


# --- one run of the loop on the tiny base, read by the tests below ------------------------------------------

@pytest.fixture(scope="module")
def ran(tmp_path_factory):
    folder = tmp_path_factory.mktemp("eta")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINT_HOME", str(folder / "home"))
        patch.chdir(folder)
        from mint.workspace import workspace

        events = []
        result = run_loop(workspace(folder / "home"), write_recipe(folder), events=events.append)
    return result, events


@pytest.mark.parametrize("step, what", [("train genui", "training"), ("eval genui", "decoding "),
                                        ("experience genui", "round 1: prompts sampled"),
                                        ("experience genui", "round 1: answers accepted")])
def test_a_long_step_tells_what_it_is_doing_through_the_callback(ran, step, what):
    _result, events = ran
    heard = [e for e in events if e["event"] == "progress" and e["step"] == step and e["what"].startswith(what)]
    assert heard and all(e["done"] <= e["total"] for e in heard if e["total"])
    assert all(e["left_s"] >= 0 and e["seconds"] >= 0 for e in heard)


def test_training_progress_says_the_step_of_how_many_and_the_loss(ran):
    _result, events = ran
    steps = [e for e in events if e["event"] == "progress" and e["step"] == "train genui" and e["what"] == "training"]
    assert {e["total"] for e in steps} == {2} and max(e["done"] for e in steps) == 2
    assert any(e["detail"].startswith("loss ") for e in steps)


def test_the_run_is_estimated_before_its_first_step(ran):
    result, events = ran
    first = next(i for i, e in enumerate(events) if e["event"] == "start")
    estimate = [e for e in events[:first] if e["event"] == "estimate"]
    assert estimate and estimate[0]["seconds"] == result.estimated_s > 0
    assert {s["label"] for s in estimate[0]["steps"]} >= {"train genui", "eval genui", "experience genui"}


def test_each_step_that_ran_records_its_estimate_its_time_and_the_eta_after_it(ran):
    result, _events = ran
    done = [s for s in result.steps if s.status in ("ran", "failed")]
    assert done and all(s.estimated_s is not None and s.elapsed_s is not None and s.left_s is not None for s in done)
    assert done[-1].left_s == 0.0
    assert [s.elapsed_s for s in done] == sorted(s.elapsed_s for s in done)


def test_the_result_reads_back_the_eta_against_what_happened(ran):
    result, _events = ran
    record = result.eta
    assert record[0]["after"] == "start" and record[0]["left_s"] == result.estimated_s
    done = [s for s in result.steps if s.status in ("ran", "failed")]
    assert record[0]["actual_left_s"] == done[-1].elapsed_s
    assert [r["left_s"] for r in record[1:]] == [s.left_s for s in done]
    assert record[-1]["share_done"] == 1.0 and record[-1]["actual_left_s"] == 0.0


def test_with_stderr_in_a_file_the_loop_writes_its_estimate_each_step_s_eta_and_a_long_step_s_progress(ws, tmp_path):
    import os
    import subprocess
    import sys

    log = tmp_path / "loop.log"
    with open(log, "w") as stderr:
        subprocess.run([sys.executable, "-m", "mint", "loop", str(write_recipe(tmp_path)), "--iterations", "1"],
                       stdout=subprocess.DEVNULL, stderr=stderr, cwd=tmp_path, timeout=300, check=True,
                       env={**os.environ, "MINT_HOME": str(ws.home), "PYTHONPATH": str(ROOT)})
    lines = log.read_text().splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith(("estimate: ", "iteration ")))  # after the device
    assert lines[first].startswith("estimate: about ") and "probe" in lines[first]
    assert any(line.startswith("iteration 1 train genui: done in ") and " left" in line for line in lines)
    assert any(line.startswith("iteration 1 train genui: training") and "left in the run" in line for line in lines)
