"""What each kind of specialist is: what it trains from, how it is trained and what its artifact is. ``mint.yaml`` gives every specialist a kind (mint.project); training, evaluation, promotion
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
from typing import TYPE_CHECKING, Any, Callable

from mint.project import GENERATOR, ROUTER_KIND, Project

if TYPE_CHECKING:
    from mint.train.run import ExampleYield


@dataclass(frozen=True)
class SpecialistKind:
    name: str
    trains_from: str                    # what ``--data`` is read for
    artifact: str                       # what a revision's directory holds
    train: Callable                     # (ws, project, specialist, **request) -> TrainResult
    plan: Callable                      # (ws, project, specialist, **request) -> TrainPreview (--dry-run)


@dataclass(frozen=True)
class TrainPreview:
    """What ``mint train --dry-run`` shows: the settings a run would use and why, and, with ``--data``,
    what the data yields (generators)."""
    settings: Any                       # a generator's trainer settings (a dict), a router's (a dataclass)
    examples: ExampleYield | None = None


def _train_adapter(ws, project: Project, specialist: str, **request):
    from mint.train.run import train

    return train(ws, specialist=specialist, **request)


def _plan_adapter(ws, project: Project, specialist: str, *, data=None, method=None, from_ref=None, base=None,
                  config=None, sets=None, resume=None, num_processes=1, accelerate_config=None, env=None,
                  override=None, **_request) -> TrainPreview:
    import json

    from mint.train.config import resolve_settings
    from mint.train.run import RUN_FILE, TrainRequest, check_request, check_resume, planned_examples

    request = TrainRequest(specialist, data, method, from_ref, base, config, tuple(sets or ()), env, resume,
                           num_processes, accelerate_config, override)
    # the run's own checks, so a dry run refuses (exit 2, same message) whatever the run would refuse
    if resume:
        return TrainPreview(json.loads((check_resume(ws, request) / RUN_FILE).read_text())["settings"])
    plan = check_request(ws, request, dry_run=True)
    # with --data the dry run also counts what the data yields for the method
    examples = planned_examples(ws, specialist=specialist, data=data, method=method) if data else None
    return TrainPreview(resolve_settings(plan.user), examples)


def _train_probe(ws, project: Project, specialist: str, *, data=None, base=None, sets=None, contract=None,
                 progress=None, **_request):
    from mint.train.router import train_router

    return train_router(ws, data=data, base=base, sets=list(sets or []), project=project, contract_file=contract,
                        progress=progress)


def _plan_probe(ws, project: Project, specialist: str, *, data=None, base=None, sets=None, contract=None,
                **_request) -> TrainPreview:
    from mint.train.router import check_router_request, planned_router_settings

    # the run's own checks, so a dry run refuses (exit 2, same message) whatever the run would refuse
    check_router_request(ws, data=data, base=base, sets=list(sets or []), project=project, contract_file=contract,
                         dry_run=True)
    return TrainPreview({"specialist": specialist, **planned_router_settings(list(sets or []))})


KINDS = {
    GENERATOR: SpecialistKind(GENERATOR, "the specialist's own episodes of a dataset", "LoRA adapter (PEFT)",
                              _train_adapter, _plan_adapter),
    ROUTER_KIND: SpecialistKind(ROUTER_KIND, "every specialist's labelled episodes of a dataset",
                                "probe on the base's hidden states (peft_type MINT_ROUTER_PROBE)",
                                _train_probe, _plan_probe),
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
