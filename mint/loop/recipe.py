"""Recipe files: a chain of lifecycle steps that `mint loop` runs for N iterations.

```yaml
# Run: mint loop recipes/smoke.yaml
recipe: smoke
base: tiny-random
dataset: smoke
loop: {iterations: 2}
steps:
  - ingest: {sources: [examples/logs]}
  - experience: {specialist: genui, samples: 2, prompts: 8, from_iteration: 2}
  - train: {specialist: genui, method: sft, set: {max_steps: 2}}
  - eval: {specialist: genui, contract: contracts/genui.yaml, limit: 4}
  - promote: {specialist: genui}
```

Every step is one mapping with one key, its kind. Paths are relative to the recipe file.
`mint recipe check FILE` validates all of it (and each named contract) without running.
"""
from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mint.errors import BadInput
from mint.loop.steps import STEPS
from mint.text import closest
from mint.yamlfile import YamlDoc, check_keys, check_number, check_settings, check_string, load_yaml, \
    setting_lines, setting_names

TOP_KEYS = ("recipe", "description", "base", "dataset", "loop", "steps", "traffic")
TRAFFIC_KEYS = ("heldout",)
LOOP_KEYS = ("iterations",)
COMMON_KEYS = ("from_iteration", "until_iteration", "fatal")
STEP_KINDS = tuple(STEPS)


@dataclass(frozen=True)
class Step:
    kind: str
    index: int                      # position in `steps`, for messages and the plan
    options: dict[str, Any]
    line: int | None = None
    from_iteration: int = 1         # run only from this iteration on (e.g. experience needs a champion)
    until_iteration: int | None = None   # and up to this one (e.g. a longer first training)
    fatal: bool = False             # a failed contract at this step makes the loop exit 1
    # what the step decides for the loop, as its kind's settings model reads its options (None: it has none)
    settings: Any = None

    @property
    def specialist(self) -> str | None:
        return self.options.get("specialist")

    def runs_in(self, iteration: int) -> bool:
        return self.from_iteration <= iteration and (self.until_iteration is None or iteration <= self.until_iteration)

    @property
    def label(self) -> str:
        return f"{self.kind} {self.specialist}" if self.specialist else self.kind


@dataclass(frozen=True)
class Recipe:
    name: str
    path: Path
    base: str | None
    dataset: str
    iterations: int
    steps: tuple[Step, ...]
    sha256: str
    doc: YamlDoc = field(repr=False, compare=False, default=None)
    description: str = ""           # printed when the loop starts: what it trains and why, in a line or two
    # `traffic: {heldout: S}`: the share of the requests it serves held out for contract suites (mint.data.split),
    # over mint.yaml's; and where it is written (file, line, field)
    traffic_heldout: float | None = None
    traffic_at: tuple = (None, None, "traffic.heldout")

    @property
    def specialists(self) -> tuple[str, ...]:
        seen: list[str] = []
        for step in self.steps:
            if step.specialist and step.specialist not in seen:
                seen.append(step.specialist)
        return tuple(seen)


@dataclass(frozen=True)
class StepSetting:
    """One decision a step makes for the loop, as its recipe sets it or leaves it at its default: what the plan
    shows, so a reader sees every guard and threshold, and every one turned off."""
    step: int                       # the step's position in `steps`
    label: str                      # "promote genui"
    setting: str                    # its dotted path among the step's options: guards.reward_hacking.length_growth
    value: Any                      # as a recipe writes it (None: off)
    what: str                       # what it decides
    off: bool
    line: int | None                # where the recipe sets it (the step's line when it is left at its default)

    @property
    def shown(self) -> str:
        """The value as a recipe writes it."""
        return "off" if self.off else "true" if self.value is True else "false" if self.value is False \
            else f"{self.value:g}" if isinstance(self.value, float) else str(self.value)

    def turned_off(self, recipe_file: str) -> str:
        """What the loop says of a setting the recipe turned off."""
        return f"{self.label}: {self.setting} is off ({recipe_file}:{self.line}); on, it {self.what}"


def step_settings(recipe: Recipe) -> list[StepSetting]:
    """Every decision of every step, in the recipe's order (steps without a settings model have none)."""
    out = []
    for step in recipe.steps:
        if step.settings is None:
            continue
        for line in setting_lines(step.settings):
            at = f"steps[{step.index}].{step.kind}.{line.path}"
            out.append(StepSetting(step.index, step.label, line.path, line.value, line.what, line.off,
                                   recipe.doc.line(at) if recipe.doc is not None else step.line))
    return out


def _check_specialist(doc: YamlDoc, value, where: str, known: tuple[str, ...] | None) -> str:
    name = check_string(doc, value, where)
    if known is not None and name not in known:
        raise doc.error(where, f"unknown specialist {name!r}" + closest(name, known, listing="expected one of"))
    return name


def load_recipe(path: Path, *, specialists: tuple[str, ...] | None = None, check_contracts: bool = True) -> Recipe:
    """Parse and validate ``path``; every problem is BadInput at ``file:line: field`` with the closest key."""
    doc = load_yaml(path)
    data = check_keys(doc, doc.data if doc.data is not None else {}, "", TOP_KEYS)
    for key in ("recipe", "steps"):
        if key not in data:
            raise doc.error("", f"missing required field `{key}`")
    name = check_string(doc, data["recipe"], "recipe")
    base = check_string(doc, data["base"], "base") if "base" in data else None
    description = check_string(doc, data["description"], "description").strip() if "description" in data else ""
    dataset = check_string(doc, data.get("dataset", name), "dataset")
    loop = check_keys(doc, data.get("loop") or {}, "loop", LOOP_KEYS)
    iterations = check_number(doc, loop.get("iterations", 1), "loop.iterations", minimum=1, integer=True)
    raw_steps = data["steps"]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise doc.error("steps", "expected a non-empty list of steps")
    steps = []
    for i, raw in enumerate(raw_steps):
        where = f"steps[{i}]"
        if not isinstance(raw, dict) or len(raw) != 1:
            raise doc.error(where, f"a step is one mapping with one key, its kind ({', '.join(STEP_KINDS)})")
        (kind, options), = raw.items()
        if kind not in STEPS:
            raise doc.error(f"{where}.{kind}", "unknown step" + closest(kind, STEP_KINDS, listing="expected one of"))
        at = f"{where}.{kind}"
        options = dict(check_keys(doc, options if options is not None else {}, at,
                                  STEPS[kind].options + COMMON_KEYS))
        from_iteration = check_number(doc, options.pop("from_iteration", 1), f"{at}.from_iteration", minimum=1,
                                 integer=True)
        until_iteration = options.pop("until_iteration", None)
        if until_iteration is not None:
            check_number(doc, until_iteration, f"{at}.until_iteration", minimum=from_iteration, integer=True)
        fatal = options.pop("fatal", False)
        if not isinstance(fatal, bool):
            raise doc.error(f"{at}.fatal", "expected true or false")
        _check_step(doc, path, kind, options, at, specialists, check_contracts)
        model = STEPS[kind].settings_model
        settings = check_settings(doc, model, {k: v for k, v in options.items() if k in setting_names(model)}, at) \
            if model is not None else None
        steps.append(Step(kind, i, options, doc.line(at), from_iteration=from_iteration,
                          until_iteration=until_iteration, fatal=fatal, settings=settings))
    _check_order(doc, steps)
    traffic = check_keys(doc, data.get("traffic") or {}, "traffic", TRAFFIC_KEYS)
    heldout = None
    if "heldout" in traffic:
        heldout = check_number(doc, traffic["heldout"], "traffic.heldout", minimum=0, maximum=1)
        if not 0 < heldout < 1:
            raise doc.error("traffic.heldout", "expected the share of served requests held out, between 0 and 1")
    return Recipe(name, path.absolute(), base, dataset, iterations, tuple(steps),
                  hashlib.sha256(path.read_bytes()).hexdigest(), doc, description, heldout,
                  (str(path), doc.line("traffic.heldout"), "traffic.heldout"))


def _check_step(doc, path: Path, kind: str, options: dict, at: str, specialists, check_contracts: bool) -> None:
    if STEPS[kind].needs_specialist:
        if "specialist" not in options:
            raise doc.error(at, "missing required field `specialist`")
        _check_specialist(doc, options["specialist"], f"{at}.specialist", specialists)
    STEPS[kind].check(doc, path, options, at, check_contracts)


def _check_order(doc: YamlDoc, steps: list[Step]) -> None:
    """A step that reads an earlier one's output (eval a train's candidate, promote an eval's report) needs
    that step of its specialist before it: say so before anything runs."""
    done = set()
    for step in steps:
        needed = STEPS[step.kind].after
        at = f"steps[{step.index}].{step.kind}"
        if needed is not None and (needed[0], step.specialist) not in done:
            raise doc.error(at, f"no earlier {needed[0]} step for {step.specialist}: {needed[1]}")
        if step.kind == "train" and "plan" in step.options and ("experience", step.specialist) not in done:
            raise doc.error(f"{at}.plan", f"no earlier experience step for {step.specialist}: its plan is what "
                                          "this step trains by")
        if step.kind == "controls" and ("experience control", step.specialist) not in done:
            raise doc.error(at, f"no earlier experience step with `control:` for {step.specialist}: the controls "
                                "are the twin and steps control it makes")
        if step.kind == "controls" and ("train plan", step.specialist) not in done:
            raise doc.error(at, f"no earlier train step with `plan: experience` for {step.specialist}: the controls "
                                "are trained as its candidate was")
        done.add((step.kind, step.specialist))
        if step.kind == "experience" and step.options.get("control"):
            done.add(("experience control", step.specialist))
        if step.kind == "train" and step.options.get("plan"):
            done.add(("train plan", step.specialist))
    for step in steps:     # the forgetting guard judges what an eval step of its specialist measures
        guard = step.settings.guards.forgetting if step.kind == "promote" else None
        unmeasured = next((s for s in steps if s.kind == "eval" and s.specialist == step.specialist
                           and s.settings.backward_transfer is None), None)
        if guard is not None and unmeasured is not None:
            raise doc.error(f"steps[{unmeasured.index}].eval.backward_transfer",
                            f"steps[{step.index}]'s forgetting guard judges the backward transfer this step measures: "
                            "measure it (passed or always), or turn the guard off there "
                            "(`guards: {forgetting: off}`)")
    for step in steps:     # an experience step's controls are trained and measured by a controls step
        if step.kind == "experience" and step.options.get("control") and not any(
                later.kind == "controls" and later.specialist == step.specialist and later.index > step.index
                for later in steps):
            raise doc.error(f"steps[{step.index}].experience.control",
                            f"a controls step trains and measures them: add `- controls: {{specialist: "
                            f"{step.specialist}}}` after {step.specialist}'s eval step")


def check_recipe(path: Path) -> dict:
    """What `mint recipe check` prints: the recipe's plan, validated, without running anything."""
    from mint.harness import check_harnesses
    from mint.project import load_project

    project = load_project(_project_file(path))
    check_harnesses(project)
    recipe = load_recipe(path, specialists=project.names)
    return {"recipe": recipe.name, "description": recipe.description, "path": str(recipe.path), "sha256": recipe.sha256, "base": recipe.base,
            "dataset": recipe.dataset, "iterations": recipe.iterations, "specialists": list(recipe.specialists),
            "traffic": {"heldout": recipe.traffic_heldout} if recipe.traffic_heldout is not None else None,
            "steps": [{"index": s.index, "kind": s.kind, "line": s.line, "from_iteration": s.from_iteration,
                       "until_iteration": s.until_iteration, "fatal": s.fatal, **s.options} for s in recipe.steps],
            "settings": [dataclasses.asdict(s) for s in step_settings(recipe)], "ok": True}


def _project_file(recipe_path: Path) -> Path | None:
    """The mint.yaml beside the recipe's project (the recipe's folder or its parent), else ./mint.yaml."""
    for folder in (recipe_path.parent, recipe_path.parent.parent):
        if (folder / "mint.yaml").is_file():
            return folder / "mint.yaml"
    return None


__all__ = ["Recipe", "Step", "StepSetting", "load_recipe", "check_recipe", "step_settings", "STEP_KINDS", "BadInput"]
