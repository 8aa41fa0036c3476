"""GRPO rewards: the specialist's own by default (mint.harness.Specialist.reward), or any ``module:function``.

A reward function takes TRL's arguments (``prompts``, ``completions`` and the dataset's columns,
here ``reference`` and ``tools``) and returns one float per completion.
"""
from __future__ import annotations

from typing import Callable

from mint.errors import BadInput
from mint.harness import specialist as registered
from mint.plugins import load_object


def load_reward(spec: str) -> Callable:
    """A reward function named ``module:function``."""
    function = load_object(spec, what="function", field="rewards")
    if not callable(function):
        raise BadInput(f"{spec} is not callable", field="rewards")
    return function


def reward_functions(specialist: str, specs: tuple[str, ...], harness: str | None = None) -> list[Callable]:
    """The reward of the specialist's harness (mint.harness.Specialist.reward; ``harness``: the one mint.yaml names
    for it, by default the one of its own name), where it has one, then those ``specs`` name."""
    functions = [load_reward(s) for s in specs]
    own = registered(harness or specialist)
    if own is not None and own.reward is not None:
        functions.insert(0, own.reward)
    if not functions:
        raise BadInput(f"no default reward for specialist {specialist!r} (harness {harness or specialist}): give one "
                       "with rewards: [module:function]", field="rewards")
    return functions
