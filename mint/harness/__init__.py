"""The specialists mint knows, and their harnesses.

``SPECIALISTS`` lists them, one module each: the module's ``SPECIALIST`` (mint.harness.specialist.Specialist)
says how the specialist's answers are scored, verified, repaired and rewarded, where an answer ends and what
suite record a logged episode makes. A new specialist is one module (or folder) and one line here; its
routing (keywords and rules) goes in the project's mint.yaml. docs/specialists.md has a worked example.
"""
from __future__ import annotations

import importlib

from mint.errors import BadInput
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


def check_harnesses(project) -> None:
    """Every ``harness:`` a project's mint.yaml names is a registered specialist's: else BadInput at its line, with
    the closest name."""
    from mint.text import closest

    known = specialist_names()
    for entry in project.specialists:
        if entry.harness is not None and entry.harness not in known:
            file, line, field = entry.harness_at
            raise BadInput(f"no harness named {entry.harness!r}" + closest(entry.harness, known, listing="harnesses:"),
                           file=file, line=line, field=field)


def project_harness(project, name: str) -> Specialist | None:
    """The registered specialist whose harness scores, verifies and rewards the project's specialist ``name``
    (mint.yaml's ``harness:``, by default the one of its own name); None where no harness is registered for it."""
    check_harnesses(project)
    return specialist(project.harness_of(name))


def harness_for(name: str, settings: HarnessSettings) -> Harness:
    """The harness of the specialist called ``name`` with a contract's settings (KeyError: none is registered)."""
    return specialists()[name].make_harness(settings)


def answer_ends(name: str, settings: HarnessSettings) -> tuple[str, ...]:
    """Where a decode for the specialist ``name`` under a contract's ``settings`` stops besides EOS
    (``Specialist.answer_end``); none for a name no specialist has."""
    spec = specialist(name)
    return spec.answer_end(settings) if spec is not None else ()


__all__ = ["answer_ends", "check_harnesses", "SPECIALISTS", "Harness", "HarnessSettings", "LoggedAnswer", "Specialist",
           "harness_for", "project_harness", "specialist", "specialist_names", "specialists"]
