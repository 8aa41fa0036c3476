"""The specialists mint knows, and their harnesses.

``SPECIALISTS`` lists them, one module each: the module's ``SPECIALIST`` (mint.harness.specialist.Specialist)
says how the specialist's answers are scored, verified, repaired and rewarded, where an answer ends and what
suite record a logged episode makes. A new specialist is one module (or folder) and one line here; its
routing (keywords and rules) goes in the project's mint.yaml. docs/specialists.md has a worked example.
"""
from __future__ import annotations

import importlib

from mint.harness.base import Harness, HarnessSettings
from mint.harness.specialist import LoggedAnswer, Specialist

SPECIALISTS = [
    "mint.harness.chat",
    "mint.harness.agent",
    "mint.harness.coding",
    "mint.harness.genui",
    "mint.harness.router",
]


def specialists() -> dict[str, Specialist]:
    """Every registered specialist by name, in the order ``SPECIALISTS`` lists them (read on each call, so a
    line added at run time counts; a module is imported once)."""
    found: dict[str, Specialist] = {}
    for module in SPECIALISTS:
        spec = getattr(importlib.import_module(module), "SPECIALIST", None)
        if not isinstance(spec, Specialist):
            raise TypeError(f"{module} defines no SPECIALIST (a mint.harness.specialist.Specialist)")
        if spec.name in found:
            raise TypeError(f"{module}: a specialist named {spec.name!r} is already registered")
        found[spec.name] = spec
    return found


def specialist(name: str) -> Specialist | None:
    """The registered specialist called ``name``; None when there is none."""
    return specialists().get(name)


def specialist_names() -> tuple[str, ...]:
    return tuple(specialists())


def harness_for(name: str, settings: HarnessSettings) -> Harness:
    """The harness of the specialist called ``name`` with a contract's settings (KeyError: none is registered)."""
    return specialists()[name].make_harness(settings)


def answer_ends(name: str, settings: HarnessSettings) -> tuple[str, ...]:
    """Where a decode for the specialist ``name`` under a contract's ``settings`` stops besides EOS
    (``Specialist.answer_end``); none for a name no specialist has."""
    spec = specialist(name)
    return spec.answer_end(settings) if spec is not None else ()


__all__ = ["answer_ends", "SPECIALISTS", "Harness", "HarnessSettings", "LoggedAnswer", "Specialist", "harness_for", "specialist",
           "specialist_names", "specialists"]
