"""Stateful tool environments for agentic GRPO (the "action substrate").

The model calls an environment's tools over several turns; every episode starts from a fresh state
and the reward is computed from the final state and the calls made. Environments plug into TRL's
``GRPOTrainer(environment_factory=...)``: public methods are the tools (type hints and a Google-style
docstring describe them), ``reset(**row)`` starts an episode from a dataset row, ``get_reward()``
scores it. A class with a ``tasks()`` classmethod brings its own training prompts.

``--env orders`` is the built-in world; ``--env mypkg.envs:Warehouse`` plugs in your own class.
Every rollout is written to the run's ``rollouts.jsonl`` as a canonical episode, so ``mint ingest``
can feed it back into the loop.
"""
from __future__ import annotations

import copy
import functools
import inspect
import json
import random
from pathlib import Path
from typing import Any

from mint.data.formats.fields import score_rating
from mint.data.schema import Episode, Feedback, Message
from mint.errors import BadInput
from mint.text import closest
from mint.plugins import load_object

SYSTEM = ("You help customers with their orders and calendar by calling tools. Call one tool at a time as "
          '<tool_call>{"name": ..., "arguments": {...}}</tool_call>; when the task is done, say so briefly.')

_ITEMS = ["desk lamp", "rain jacket", "coffee grinder", "yoga mat", "phone case", "wool scarf", "kettle", "backpack"]
_STREETS = ["5 Elm St", "12 Harbor Rd", "48 Maple Ave", "9 Quay Lane", "77 Birch Way", "3 Mill Court"]


def _world(seed: int) -> dict:
    rng = random.Random(seed)
    orders = {}
    for n in range(4):
        order_id = f"{rng.choice('ABCDEFGH')}{rng.randint(10, 99)}"
        orders[order_id] = {"item": rng.choice(_ITEMS), "status": rng.choice(["placed", "placed", "shipped"]),
                            "address": rng.choice(_STREETS)}
    return {"orders": orders, "events": []}


class OrdersCalendar:
    """A small shop-and-calendar world: four orders (some shipped) and an empty calendar."""

    def __init__(self) -> None:
        self.state: dict = {"orders": {}, "events": []}
        self.initial: dict = {"orders": {}, "events": []}
        self.goal: dict = {}
        self.errors = 0

    @classmethod
    def tasks(cls, count: int = 24, seed: int = 0) -> list[dict]:
        rng = random.Random(seed)
        rows = []
        for i in range(count):
            world = _world(seed * 1000 + i)
            placed = [o for o, v in world["orders"].items() if v["status"] == "placed"]
            kind = rng.choice(["cancel", "address", "event", "cancel_all"]) if placed else "event"
            if kind == "cancel":
                target = rng.choice(placed)
                text, goal = f"Please cancel my order {target}.", {"cancelled": [target]}
            elif kind == "address":
                target, street = rng.choice(placed), rng.choice(_STREETS)
                text, goal = f"Ship order {target} to {street} instead.", {"address": [target, street]}
            elif kind == "cancel_all":
                text, goal = "Cancel every order of mine that has not shipped yet.", {"cancelled": sorted(placed)}
            else:
                day, hour = rng.randint(1, 28), rng.choice(["09:00", "13:30", "16:00"])
                title = rng.choice(["dentist", "team sync", "yoga class", "call with Ana"])
                date = f"2026-12-{day:02d}"
                text, goal = f"Put '{title}' in my calendar on {date} at {hour}.", {"event": [title, date, hour]}
            rows.append({"prompt": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}],
                         "task": json.dumps({"seed": seed * 1000 + i, "goal": goal})})
        return rows

    def reset(self, task: str = "{}", **_) -> str | None:
        spec = json.loads(task) if isinstance(task, str) else dict(task or {})
        self.state = _world(int(spec.get("seed", 0)))
        self.initial = copy.deepcopy(self.state)
        self.goal = spec.get("goal", {})
        self.errors = 0
        return None

    def list_orders(self) -> str:
        """List the customer's orders with their item, status and shipping address.

        Returns:
            The orders as JSON.
        """
        return json.dumps(self.state["orders"])

    def cancel_order(self, order_id: str) -> str:
        """Cancel an order that has not shipped yet.

        Args:
            order_id: The order's id, for example "B42".

        Returns:
            What happened.
        """
        order = self.state["orders"].get(order_id)
        if order is None:
            self.errors += 1
            return f"error: no order {order_id}"
        if order["status"] == "shipped":
            self.errors += 1
            return f"error: order {order_id} has shipped and cannot be cancelled"
        order["status"] = "cancelled"
        return f"order {order_id} cancelled"

    def update_address(self, order_id: str, address: str) -> str:
        """Change where an order that has not shipped yet will be delivered.

        Args:
            order_id: The order's id.
            address: The new street address.

        Returns:
            What happened.
        """
        order = self.state["orders"].get(order_id)
        if order is None or order["status"] != "placed":
            self.errors += 1
            return f"error: order {order_id} cannot be changed"
        order["address"] = address
        return f"order {order_id} will ship to {address}"

    def add_event(self, title: str, date: str, time: str) -> str:
        """Add an event to the calendar.

        Args:
            title: What the event is.
            date: The day, as YYYY-MM-DD.
            time: The start, as HH:MM.

        Returns:
            What happened.
        """
        self.state["events"].append({"title": title, "date": date, "time": time})
        return f"added {title} on {date} at {time}"

    def get_reward(self) -> float:
        """1 when the final state is exactly the goal applied to the starting world (the wanted change and
        nothing else: no other order cancelled or moved, no stray event), less 0.1 per failed call."""
        done = _normalized(self.state) == _normalized(expected_state(self.initial, self.goal))
        return max(0.0, (1.0 if done else 0.0) - 0.1 * self.errors)


def expected_state(initial: dict, goal: dict) -> dict:
    """The world as it should end: ``initial`` with exactly the goal's changes made."""
    state = copy.deepcopy(initial)
    for order_id in goal.get("cancelled", []):
        if order_id in state["orders"]:
            state["orders"][order_id]["status"] = "cancelled"
    if "address" in goal:
        order_id, street = goal["address"]
        if order_id in state["orders"]:
            state["orders"][order_id]["address"] = street
    if "event" in goal:
        title, date, time = goal["event"]
        state["events"].append({"title": title, "date": date, "time": time})
    return state


def _normalized(state: dict) -> dict:
    """A state compared without regard to case and surrounding space in free text."""
    def text(value):
        return value.strip().lower() if isinstance(value, str) else value
    return {"orders": {o: {k: text(v) for k, v in order.items()} for o, order in state["orders"].items()},
            "events": sorted((text(e.get("title")), text(e.get("date")), text(e.get("time"))) for e in state["events"])}


BUILTIN = {"orders": OrdersCalendar}


def load_environment(name: str) -> type[Any]:
    """A built-in environment by name, or your class by ``module:Class``."""
    if name in BUILTIN:
        return BUILTIN[name]
    if ":" not in name:
        raise BadInput(f"unknown environment {name!r}{closest(name, BUILTIN)}: use {', '.join(BUILTIN)} or "
                       "module:Class", field="--env")
    cls = load_object(name, what="Class", field="--env")
    if not inspect.isclass(cls) or not callable(getattr(cls, "reset", None)):
        raise BadInput(f"{name} is not an environment class with a reset method", field="--env")
    return cls


def recorded(cls: type, rollouts: Path, specialist: str) -> type:
    """``cls`` with every tool call logged and each finished rollout written as a canonical episode of
    ``specialist``, the one the run trains (its answers, whatever the project calls it)."""

    def wrap(name, method):
        @functools.wraps(method)
        def tool(self, *args, **kwargs):
            result = method(self, *args, **kwargs)
            self._mint_calls.append((name, dict(zip(list(inspect.signature(method).parameters)[1:], args)) | kwargs,
                                     result))
            return result
        return tool

    members = {}
    for name, method in inspect.getmembers(cls, predicate=inspect.isfunction):
        if name not in ("reset", "get_reward", "tasks") and not name.startswith("_"):
            members[name] = wrap(name, method)

    def reset(self, **row):
        self._mint_calls, self._mint_row = [], copy.deepcopy(row)
        return cls.reset(self, **row)

    def get_reward(self):
        reward = float(cls.get_reward(self)) if hasattr(cls, "get_reward") else 0.0
        messages = [m for m in self._mint_row.get("prompt", []) if isinstance(m, dict)]
        for i, (name, arguments, result) in enumerate(getattr(self, "_mint_calls", [])):
            call_id = f"call_{i}"
            messages.append({"role": "assistant", "content": "", "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}]})
            messages.append({"role": "tool", "tool_call_id": call_id, "name": name, "content": str(result)})
        episode = Episode(tuple(Message.from_dict(m) for m in messages), specialist=specialist, served_by="grpo-rollout",
                          feedback=Feedback(score_rating(max(0.0, min(1.0, reward)))))
        with open(rollouts, "a", encoding="utf-8") as f:
            f.write(episode.line())
        return reward

    members.update(reset=reset, get_reward=get_reward)
    return type(f"Recorded{cls.__name__}", (cls,), members)
