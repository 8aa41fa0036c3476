"""What each kind of specialist is: what it trains from, how it is trained, which harness scores it and what
its artifact is. ``mint.yaml`` gives every specialist a kind (mint.project); training, evaluation, promotion
and the loop ask this table instead of asking for a name.

- ``generator``: a LoRA adapter on the base that answers turns; trained from its own episodes of a dataset
  with SFT, DPO, KTO or GRPO (mint.train.run); scored by the harness its contract names (by default the
  one named after the specialist) on generated text.
- ``router``: a probe on the base that picks the generator of each turn; trained from every specialist's
  labelled episodes (mint.train.router); scored by the router harness on where it sends labelled turns.

Both are registry revisions, so the registry's hashes, reports, gates and promotion cover them alike.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from mint.project import GENERATOR, ROUTER_KIND, Project


@dataclass(frozen=True)
class SpecialistKind:
    name: str
    trains_from: str                    # what ``--data`` is read for
    artifact: str                       # what a revision's directory holds
    harness: Callable[[str], str]       # the harness that scores a specialist of this name, by default
    train: Callable                     # (ws, project, specialist, **request) -> TrainResult
    plan: Callable                      # (ws, project, specialist, **request) -> TrainPreview (--dry-run)


@dataclass(frozen=True)
class TrainPreview:
    """What ``mint train --dry-run`` shows: the settings a run would use and why, and, with ``--data``,
    what the data yields (generators)."""
    settings: object
    examples: object | None = None


def _train_adapter(ws, project: Project, specialist: str, **request):
    from mint.train.run import train

    return train(ws, specialist=specialist, **request)


def _plan_adapter(ws, project: Project, specialist: str, *, data=None, method=None, config=None, sets=None,
                  override=None, **_request) -> TrainPreview:
    from mint.train.config import planned_settings
    from mint.train.run import planned_examples

    settings = planned_settings(method, config, sets or [], override)
    # with --data the dry run also counts what the data yields for the method
    examples = planned_examples(ws, specialist=specialist, data=data, method=method) if data else None
    return TrainPreview(settings, examples)


def _train_probe(ws, project: Project, specialist: str, *, data=None, base=None, sets=None, contract=None,
                 **_request):
    from mint.train.router import train_router

    return train_router(ws, data=data, base=base, sets=list(sets or []), project=project, contract_file=contract)


def _plan_probe(ws, project: Project, specialist: str, *, sets=None, **_request) -> TrainPreview:
    from mint.train.router import planned_router_settings

    return TrainPreview({"specialist": specialist, **planned_router_settings(list(sets or []))})


KINDS = {
    GENERATOR: SpecialistKind(GENERATOR, "the specialist's own episodes of a dataset", "LoRA adapter (PEFT)",
                              lambda name: name, _train_adapter, _plan_adapter),
    ROUTER_KIND: SpecialistKind(ROUTER_KIND, "every specialist's labelled episodes of a dataset",
                                "probe on the base's hidden states (peft_type MINT_ROUTER_PROBE)",
                                lambda _name: "router", _train_probe, _plan_probe),
}


def kind_of(project: Project, specialist: str | None) -> SpecialistKind:
    """The kind of ``specialist`` in ``project`` (a name the project does not define trains as a generator,
    whose checks then name it)."""
    return KINDS[project.kind_of(specialist) if specialist else GENERATOR]


def train_specialist(ws, project: Project, specialist: str | None, **request):
    """Train ``specialist`` the way its kind trains, and register the revision."""
    return kind_of(project, specialist).train(ws, project, specialist, **request)


def preview_training(ws, project: Project, specialist: str | None, **request) -> TrainPreview:
    return kind_of(project, specialist).plan(ws, project, specialist, **request)


def default_contract(specialist: str, folder: Path) -> Path:
    """The contract a specialist is judged by in a project laid out by ``mint init``."""
    return folder / "contracts" / f"{specialist}.yaml"
