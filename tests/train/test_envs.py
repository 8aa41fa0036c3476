"""The built-in tool environment, user environments, and GRPO inside one."""
import json
import os

import pytest

from mint.errors import BadInput
from mint.train.envs import OrdersCalendar, _world, load_environment, recorded
from mint.train.run import train


def start(kind: str) -> tuple[OrdersCalendar, dict]:
    row = next(t for t in OrdersCalendar.tasks(48) if kind in json.loads(t["task"])["goal"])
    env = OrdersCalendar()
    env.reset(**row)
    return env, json.loads(row["task"])["goal"]


def test_cancel_task_is_rewarded_only_when_the_end_state_is_right():
    env, goal = start("cancelled")
    assert env.get_reward() == 0.0
    for order_id in goal["cancelled"]:
        assert "cancelled" in env.cancel_order(order_id)
    assert env.get_reward() == 1.0


def test_failed_calls_cost_reward_and_episodes_start_fresh():
    env, goal = start("event")
    assert env.cancel_order("ZZ99").startswith("error")
    title, date, time = goal["event"]
    env.add_event(title, date, time)
    assert env.get_reward() == pytest.approx(0.9)
    env.reset(task=json.dumps({"seed": 1, "goal": goal}))
    assert env.state["events"] == [] and env.errors == 0


def test_address_task():
    env, goal = start("address")
    order_id, street = goal["address"]
    env.update_address(order_id, street)
    assert env.get_reward() == 1.0


def test_a_goal_is_not_met_when_anything_else_changed_too():
    row = next(t for t in OrdersCalendar.tasks(48) if "address" in json.loads(t["task"])["goal"] and sum(
        v["status"] == "placed" for v in _world(json.loads(t["task"])["seed"])["orders"].values()) >= 2)
    env = OrdersCalendar()
    env.reset(**row)
    order_id, street = json.loads(row["task"])["goal"]["address"]
    env.update_address(order_id, street)
    other = next(o for o, v in env.state["orders"].items() if o != order_id and v["status"] == "placed")
    assert "cancelled" in env.cancel_order(other)
    assert env.get_reward() == 0.0

    env, goal = start("event")
    env.add_event(*goal["event"])
    env.add_event("stray", "2026-12-01", "09:00")
    assert env.get_reward() == 0.0

    env, goal = start("cancelled")
    for order_id in goal["cancelled"]:
        env.cancel_order(order_id)
    env.add_event("party", "2026-12-24", "20:00")
    assert env.get_reward() == 0.0


def test_an_empty_goal_is_not_met_by_doing_something():
    env = OrdersCalendar()
    env.reset()
    assert env.get_reward() == 1.0
    env.add_event("anything", "2026-12-01", "09:00")
    assert env.get_reward() == 0.0


def test_recorded_environment_writes_each_rollout_as_an_episode(tmp_path):
    env_class = recorded(OrdersCalendar, tmp_path / "rollouts.jsonl", "agent")
    row = OrdersCalendar.tasks(1)[0]
    env = env_class()
    env.reset(**row)
    env.list_orders()
    env.get_reward()
    (episode,) = [json.loads(l) for l in open(tmp_path / "rollouts.jsonl")]
    assert episode["messages"][-2]["tool_calls"][0]["function"]["name"] == "list_orders"
    assert episode["messages"][-1]["role"] == "tool" and "feedback" in episode


def test_a_rollout_is_an_episode_of_the_specialist_the_run_trains_whatever_it_is_called(tmp_path):
    env_class = recorded(OrdersCalendar, tmp_path / "rollouts.jsonl", "tools")
    env = env_class()
    env.reset(**OrdersCalendar.tasks(1)[0])
    env.list_orders()
    env.get_reward()
    (episode,) = [json.loads(line) for line in open(tmp_path / "rollouts.jsonl")]
    assert episode["specialist"] == "tools"


def test_unknown_environment_is_bad_input():
    with pytest.raises(BadInput, match="unknown environment"):
        load_environment("warehouse")
    with pytest.raises(BadInput, match="cannot load no_such_module:Env"):
        load_environment("no_such_module:Env")


def test_grpo_in_the_builtin_environment_trains_and_saves_rollouts(ws):
    result = train(ws, specialist="agent", method="grpo", env="orders", base="tiny-random",
                   sets=["max_steps=2", "max_completion_length=8", "num_generations=2",
                         "per_device_train_batch_size=2", "lora.r=4"])
    assert result.ref == "agent:v1" and result.steps == 2
    rollouts = [json.loads(l) for l in open(os.path.join(result.run_dir, "rollouts.jsonl"))]
    assert len(rollouts) == 4 and all(r["messages"][1]["role"] == "user" for r in rollouts)


def test_a_user_environment_plugs_in_by_module_and_class(ws, tmp_path, monkeypatch):
    (tmp_path / "my_env.py").write_text('''
import json


class Counter:
    """Count to three."""

    @classmethod
    def tasks(cls):
        return [{"prompt": [{"role": "user", "content": "Increment the counter to 3."}], "task": "3"}] * 4

    def reset(self, task="3", **_):
        self.value, self.target = 0, int(task)

    def increment(self) -> str:
        """Add one to the counter.

        Returns:
            The new value.
        """
        self.value += 1
        return str(self.value)

    def get_reward(self) -> float:
        return float(self.value == self.target)
''')
    monkeypatch.chdir(tmp_path)
    result = train(ws, specialist="agent", method="grpo", env="my_env:Counter", base="tiny-random",
                   sets=["max_steps=1", "max_completion_length=8", "num_generations=2",
                         "per_device_train_batch_size=2", "lora.r=4"])
    assert result.steps == 1
    assert len(open(os.path.join(result.run_dir, "rollouts.jsonl")).readlines()) == 2


def test_a_rollout_is_a_canonical_episode_rated_by_its_reward(tmp_path):
    from mint.data.schema import Episode

    env_class = recorded(OrdersCalendar, tmp_path / "rollouts.jsonl", "agent")
    env = env_class()
    env.reset(**OrdersCalendar.tasks(1)[0])
    env.list_orders()
    reward = env.get_reward()
    (episode,) = [json.loads(line) for line in open(tmp_path / "rollouts.jsonl")]
    assert episode["id"] == Episode.from_dict(episode).id
    assert episode["feedback"] == {"rating": 1 if reward >= 0.6 else -1 if reward <= 0.4 else 0, "correction": None}
    assert (episode["specialist"], episode["served_by"]) == ("agent", "grpo-rollout")
