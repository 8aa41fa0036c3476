"""GRPO rewards: the specialist's harness by default, or any ``module:function``.

A reward function takes TRL's arguments (``prompts``, ``completions`` and the dataset's columns,
here ``reference`` and ``tools``) and returns one float per completion.
"""
from __future__ import annotations

from typing import Callable

from mint.errors import BadInput
from mint.plugins import load_object


def _text(completion) -> str:
    if isinstance(completion, list):   # conversational: a list of messages
        return "".join(m.get("content") or "" for m in completion if isinstance(m, dict))
    return str(completion)


def _last_user(prompt) -> str:
    if isinstance(prompt, list):
        return next((m.get("content") or "" for m in reversed(prompt) if m.get("role") == "user"), "")
    return str(prompt)


def coding_reward(prompts, completions, **_) -> list[float]:
    """1 when the answer passes the examples the prompt gives for its function (``>>> f(x)`` doctests
    and HumanEval-style ``f(x) == y`` lines), judged through the sandbox; 0 otherwise. An answer
    with nothing to check it against earns 0: rewarding code for merely parsing is a reward hack.
    The coding harness's verifier decides (mint.harness.coding.verify), as for the loop's experience."""
    from mint.harness.coding import verify

    return [1.0 if verify(_last_user(prompt), _text(completion), timeout_s=5)[0] else 0.0
            for prompt, completion in zip(prompts, completions)]


def agent_reward(prompts, completions, reference=None, **_) -> list[float]:
    """1 for the logged (or corrected) tool calls, name for name and argument for argument; 0.2 for
    calls that at least parse; 0 otherwise."""
    from mint.harness.agent import calls_match, parse_tool_calls

    rewards = []
    for i, completion in enumerate(completions):
        calls = parse_tool_calls(_text(completion))
        expected = parse_tool_calls(reference[i]) if reference and reference[i] else None
        if calls is None:
            rewards.append(0.0)
        elif expected and calls_match(calls, [{name: {k: [v] for k, v in args.items()}} for name, args in expected]):
            rewards.append(1.0)
        else:
            rewards.append(0.2)
    return rewards


def genui_reward(prompts, completions, **_) -> list[float]:
    """1 for the tree the request asks for (mint.harness.genui.verify: valid under the UI4A catalog, with the
    components and labels the request names), 0.6 for a valid tree that is not it (one fixed tree for every
    request earns no more), 0.3 for JSON that parses but does not validate."""
    from mint.harness.genui import find_tree, load_catalog, verify

    _schema, validator, _required = load_catalog()
    rewards = []
    for prompt, completion in zip(prompts, completions):
        text = _text(completion)
        tree = find_tree(text).tree
        if tree is None:
            rewards.append(0.0)
        elif not validator.is_valid(tree):
            rewards.append(0.3)
        else:
            rewards.append(1.0 if verify(_last_user(prompt), text)[0] else 0.6)
    return rewards


def chat_reward(prompts, completions, reference=None, **_) -> list[float]:
    """Token F1 against the logged answer; an empty answer earns nothing."""
    from mint.harness.chat import token_f1

    return [token_f1(_text(c), reference[i]) if reference and reference[i] and _text(c).strip() else 0.0
            for i, c in enumerate(completions)]


DEFAULT_REWARDS: dict[str, Callable] = {"coding": coding_reward, "agent": agent_reward, "genui": genui_reward,
                                        "chat": chat_reward}


def load_reward(spec: str) -> Callable:
    """A reward function named ``module:function``."""
    function = load_object(spec, what="function", field="rewards")
    if not callable(function):
        raise BadInput(f"{spec} is not callable", field="rewards")
    return function


def reward_functions(specialist: str, specs: tuple[str, ...]) -> list[Callable]:
    functions = [load_reward(s) for s in specs]
    if specialist in DEFAULT_REWARDS:
        functions.insert(0, DEFAULT_REWARDS[specialist])
    if not functions:
        raise BadInput(f"no default reward for specialist {specialist!r}: give one with rewards: [module:function]",
                       field="rewards")
    return functions
