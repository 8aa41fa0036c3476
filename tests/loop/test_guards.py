"""The reward-hacking guard: reward up while the metric falls, or answers much longer with no gain."""
import json

from mint.loop.guards import reward_hacking


def run_with_rewards(tmp_path, rewards):
    run = tmp_path / "run"
    run.mkdir(exist_ok=True)
    (run / "metrics.jsonl").write_text('{"event": "start"}\n' + "".join(
        json.dumps({"step": i, "reward": r}) + "\n" for i, r in enumerate(rewards, 1)))
    return run


def predictions(tmp_path, name, length):
    path = tmp_path / f"{name}.jsonl"
    path.write_text("".join(json.dumps({"suite": "core", "outputs": ["x" * length]}) + "\n" for _ in range(5)))
    return path


def test_reward_rising_while_the_metric_falls_is_rejected(tmp_path):
    reason = reward_hacking(metric="core.pass_at_1", value=0.30, baseline=0.40,
                            run_dir=run_with_rewards(tmp_path, [0.1, 0.2, 0.5, 0.8, 0.9, 0.95]),
                            predictions=None, baseline_predictions=None)
    assert reason.startswith("reward hacking: the training reward rose") and "0.4 to 0.3" in reason


def test_reward_rising_with_the_metric_is_fine(tmp_path):
    assert reward_hacking(metric="m", value=0.5, baseline=0.4, run_dir=run_with_rewards(tmp_path, [0.1, 0.9]),
                          predictions=None, baseline_predictions=None) is None
    assert reward_hacking(metric="m", value=0.3, baseline=0.4, run_dir=run_with_rewards(tmp_path, [0.9, 0.1]),
                          predictions=None, baseline_predictions=None) is None


def test_much_longer_answers_with_no_gain_are_rejected_but_not_with_a_gain(tmp_path):
    long, short = predictions(tmp_path, "long", 400), predictions(tmp_path, "short", 100)
    reason = reward_hacking(metric="m", value=0.4, baseline=0.4, run_dir=None, predictions=long,
                            baseline_predictions=short)
    assert "answers grew from 100 to 400 characters" in reason
    assert reward_hacking(metric="m", value=0.6, baseline=0.4, run_dir=None, predictions=long,
                          baseline_predictions=short) is None
    assert reward_hacking(metric="m", value=0.4, baseline=0.4, run_dir=None, predictions=short,
                          baseline_predictions=long) is None
