"""Warnings for runs that look broken."""
from mint.train.health import run_warnings


def steps(**series):
    length = len(next(iter(series.values())))
    return [{"step": i + 1, **{k: v[i] for k, v in series.items()}} for i in range(length)]


def test_a_reward_that_never_changes_is_reported():
    (warning,) = run_warnings(steps(reward=[0.0] * 5, loss=[0.1, 0.2, 0.15, 0.3, 0.2]))
    assert warning.startswith("reward is 0 at every one of 5 logged steps")


def test_a_nan_loss_is_reported_with_its_step():
    assert run_warnings(steps(loss=[2.0, 1.5, "nan"]))[0].startswith("loss is nan at step 3")


def test_a_loss_that_does_not_move_is_reported():
    assert "loss has not moved in 4 logged steps" in run_warnings(steps(loss=[1.25, 1.25, 1.25, 1.25]))[0]


def test_a_learning_run_has_no_warnings():
    assert run_warnings(steps(loss=[2.0, 1.7, 1.4, 1.2, 1.1], reward=[0.1, 0.3, 0.2, 0.5, 0.6])) == []
    assert run_warnings(steps(reward=[1.0, 1.0, 1.0])) == []   # too few steps to judge
