"""Specialist harnesses: each turns a suite record into a prompt and scores the model's output.

``HARNESSES`` maps a harness name (normally the specialist's) to its class.
"""
from __future__ import annotations

from mint.harness.base import Harness, HarnessSettings


def harness_for(name: str, settings: HarnessSettings) -> Harness:
    from mint.harness.agent import AgentHarness
    from mint.harness.chat import ChatHarness
    from mint.harness.coding import CodingHarness
    from mint.harness.genui import GenuiHarness
    from mint.harness.router import RouterHarness

    classes = {"coding": CodingHarness, "agent": AgentHarness, "genui": GenuiHarness, "chat": ChatHarness,
               "router": RouterHarness}
    return classes[name](settings)


def verifier_for(name: str):
    """The harness's ``verify(request, answer) -> (passed, detail)``: an answer judged without a reference,
    by the same metric its contract gates (each module's docstring says what it checks and cannot); None for a
    harness that judges no answers (the router's)."""
    from mint.harness import agent, chat, coding, genui

    return {"coding": coding.verify, "agent": agent.verify, "genui": genui.verify, "chat": chat.verify}.get(name)


def repairer_for(name: str):
    """The harness's ``repair(answer) -> str | None``: a failing answer put into form without adding to what
    it says (GenUI: a tree's closing brackets, a cut-off or repeating answer), which the verifier then judges
    as any other; None for a harness whose answers have no such repair."""
    from mint.harness import genui

    return {"genui": genui.repair}.get(name)


HARNESS_NAMES = ("coding", "agent", "genui", "chat", "router")

__all__ = ["HARNESS_NAMES", "Harness", "HarnessSettings", "harness_for", "repairer_for", "verifier_for"]
