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

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mint.contract.schema import _closest, _keys, _number, _string
from mint.errors import BadInput
from mint.train.examples import METHODS
from mint.yamlfile import YamlDoc, exists, is_file, load_yaml

TOP_KEYS = ("recipe", "description", "base", "dataset", "loop", "steps")
LOOP_KEYS = ("iterations",)
COMMON_KEYS = ("from_iteration", "until_iteration", "fatal")
STEP_KEYS: dict[str, tuple[str, ...]] = {
    "ingest": ("sources", "format"),
    "experience": ("specialist", "samples", "prompts", "temperature", "max_new_tokens", "threshold", "sources",
                   "per_prompt", "seed", "init", "control", "epochs", "batch_size", "min_steps", "max_steps",
                   "learning_rate", "continuation_learning_rate"),
    "train": ("specialist", "method", "from", "set", "data"),
    "eval": ("specialist", "contract", "limit"),
    "promote": ("specialist",),
    "route": ("contract",),
}
STEP_KINDS = tuple(STEP_KEYS)


@dataclass(frozen=True)
class Step:
    kind: str
    index: int                      # position in `steps`, for messages and the plan
    options: dict[str, Any]
    line: int | None = None
    from_iteration: int = 1         # run only from this iteration on (e.g. experience needs a champion)
    until_iteration: int | None = None   # and up to this one (e.g. a longer first training)
    fatal: bool = False             # a failed contract at this step makes the loop exit 1

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

    @property
    def specialists(self) -> tuple[str, ...]:
        seen: list[str] = []
        for step in self.steps:
            if step.specialist and step.specialist not in seen:
                seen.append(step.specialist)
        return tuple(seen)


def _check_specialist(doc: YamlDoc, value, where: str, known: tuple[str, ...] | None) -> str:
    name = _string(doc, value, where)
    if known is not None and name not in known:
        raise doc.error(where, f"unknown specialist {name!r}" + _closest(name, known))
    return name


def load_recipe(path: Path, *, specialists: tuple[str, ...] | None = None, check_contracts: bool = True) -> Recipe:
    """Parse and validate ``path``; every problem is BadInput at ``file:line: field`` with the closest key."""
    doc = load_yaml(path)
    data = _keys(doc, doc.data if doc.data is not None else {}, "", TOP_KEYS)
    for key in ("recipe", "steps"):
        if key not in data:
            raise doc.error("", f"missing required field `{key}`")
    name = _string(doc, data["recipe"], "recipe")
    base = _string(doc, data["base"], "base") if "base" in data else None
    description = _string(doc, data["description"], "description").strip() if "description" in data else ""
    dataset = _string(doc, data.get("dataset", name), "dataset")
    loop = _keys(doc, data.get("loop") or {}, "loop", LOOP_KEYS)
    iterations = _number(doc, loop.get("iterations", 1), "loop.iterations", minimum=1, integer=True)
    raw_steps = data["steps"]
    if not isinstance(raw_steps, list) or not raw_steps:
        raise doc.error("steps", "expected a non-empty list of steps")
    steps = []
    for i, raw in enumerate(raw_steps):
        where = f"steps[{i}]"
        if not isinstance(raw, dict) or len(raw) != 1:
            raise doc.error(where, f"a step is one mapping with one key, its kind ({', '.join(STEP_KINDS)})")
        (kind, options), = raw.items()
        if kind not in STEP_KEYS:
            raise doc.error(f"{where}.{kind}", "unknown step" + _closest(str(kind), STEP_KINDS))
        at = f"{where}.{kind}"
        options = dict(_keys(doc, options if options is not None else {}, at, STEP_KEYS[kind] + COMMON_KEYS))
        from_iteration = _number(doc, options.pop("from_iteration", 1), f"{at}.from_iteration", minimum=1,
                                 integer=True)
        until_iteration = options.pop("until_iteration", None)
        if until_iteration is not None:
            _number(doc, until_iteration, f"{at}.until_iteration", minimum=from_iteration, integer=True)
        fatal = options.pop("fatal", False)
        if not isinstance(fatal, bool):
            raise doc.error(f"{at}.fatal", "expected true or false")
        _check_step(doc, path, kind, options, at, specialists, check_contracts)
        steps.append(Step(kind, i, options, doc.line(at), from_iteration=from_iteration,
                          until_iteration=until_iteration, fatal=fatal))
    _check_order(doc, steps)
    return Recipe(name, path.absolute(), base, dataset, iterations, tuple(steps),
                  hashlib.sha256(path.read_bytes()).hexdigest(), doc, description)


def _check_step(doc, path: Path, kind: str, options: dict, at: str, specialists, check_contracts: bool) -> None:
    if kind != "ingest" and kind != "route":
        if "specialist" not in options:
            raise doc.error(at, "missing required field `specialist`")
        _check_specialist(doc, options["specialist"], f"{at}.specialist", specialists)
    if kind == "ingest":
        sources = options.get("sources")
        if not isinstance(sources, list) or not sources or not all(isinstance(s, str) and s for s in sources):
            raise doc.error(f"{at}.sources", "expected a non-empty list of files or folders")
        for j, source in enumerate(sources):
            if "$" not in source and not exists(path.parent / source):
                raise doc.error(f"{at}.sources[{j}]", f"no such file or folder: {(path.parent / source)}")
    elif kind == "train":
        method = options.get("method")
        if method not in METHODS:
            raise doc.error(f"{at}.method", f"expected one of {', '.join(METHODS)}"
                            + (_closest(str(method), METHODS) if isinstance(method, str) else ""))
        sets = options.get("set", {})
        if not isinstance(sets, dict):
            raise doc.error(f"{at}.set", "expected a mapping of TRL/LoRA settings (KEY: VALUE)")
        from mint.train.config import check_settings

        try:    # the same typed check `mint train --set` makes, before anything runs
            check_settings(method, None, [f"{key}={value}" for key, value in sets.items()])
        except BadInput as exc:
            field = (exc.field or "").partition(".")[2] or exc.field
            raise doc.error(f"{at}.set.{field}" if field and field in sets else f"{at}.set",
                            getattr(exc, "message", str(exc))) from None
        origin = options.get("from", "champion")
        if origin not in ("champion", "scratch"):
            raise doc.error(f"{at}.from", "expected champion (continue from it, the default) or scratch")
    elif kind == "route" and "contract" in options:
        contract_path = path.parent / _string(doc, options["contract"], f"{at}.contract")
        if not is_file(contract_path):
            raise doc.error(f"{at}.contract", f"no such contract: {contract_path}")
    elif kind == "eval":
        contract = options.get("contract")
        where = f"{at}.contract"
        contract_path = path.parent / _string(doc, contract, where)
        if not is_file(contract_path):
            raise doc.error(where, f"no such contract: {contract_path}")
        if check_contracts:
            from mint.contract.schema import load_contract

            loaded = load_contract(contract_path)
            if loaded.specialist != options["specialist"]:
                raise doc.error(where, f"{contract_path.name} is the {loaded.specialist} contract, "
                                       f"not {options['specialist']}'s")
        if "limit" in options:
            _number(doc, options["limit"], f"{at}.limit", minimum=1, integer=True)
    elif kind == "experience":
        for key, minimum in (("samples", 1), ("prompts", 1), ("max_new_tokens", 1)):
            if key in options:
                _number(doc, options[key], f"{at}.{key}", minimum=minimum, integer=True)
        if "temperature" in options:
            _number(doc, options["temperature"], f"{at}.temperature", minimum=0, exclusive=True)
        if "threshold" in options:
            _number(doc, options["threshold"], f"{at}.threshold", minimum=0)
        _check_experience(doc, path, options, at)


def _check_experience(doc: YamlDoc, path: Path, options: dict, at: str) -> None:
    """The experience step's sources, caps and the next generation's training plan."""
    from mint.loop.experience import SOURCE_KINDS
    from mint.loop.placebo import INITS

    for key, minimum in (("per_prompt", 1), ("seed", 0), ("batch_size", 1), ("min_steps", 1), ("max_steps", 1)):
        if key in options:
            _number(doc, options[key], f"{at}.{key}", minimum=minimum, integer=True)
    for key in ("epochs", "learning_rate", "continuation_learning_rate"):
        if key in options:
            _number(doc, options[key], f"{at}.{key}", minimum=0, exclusive=True)
    if options.get("min_steps", 1) > options.get("max_steps", options.get("min_steps", 1)):
        raise doc.error(f"{at}.min_steps", f"must be at most max_steps ({options['max_steps']})")
    if "init" in options and options["init"] not in INITS:
        raise doc.error(f"{at}.init", "expected champion (continue from it, the default) or base (retrain from "
                                      "the base on the logs and all verified experience)")
    if "control" in options and not isinstance(options["control"], bool):
        raise doc.error(f"{at}.control", "expected true or false")
    sources = options.get("sources", ["served", "unaccepted"])
    if not isinstance(sources, list) or not sources:
        raise doc.error(f"{at}.sources", "expected a non-empty list of prompt sources: served, unaccepted, "
                                         "{jsonl: FILE}, {generator: NAME, count: N}")
    for j, source in enumerate(sources):
        where = f"{at}.sources[{j}]"
        if isinstance(source, str):
            if source not in ("served", "unaccepted"):
                raise doc.error(where, f"unknown source {source!r}" + _closest(source, SOURCE_KINDS))
        elif isinstance(source, dict) and "jsonl" in source:
            _keys(doc, source, where, ("jsonl",))
            if not is_file(path.parent / _string(doc, source["jsonl"], f"{where}.jsonl")):
                raise doc.error(f"{where}.jsonl", f"no such file: {path.parent / source['jsonl']}")
        elif isinstance(source, dict) and "generator" in source:
            _keys(doc, source, where, ("generator", "count"))
            _string(doc, source["generator"], f"{where}.generator")
            if "count" in source:
                _number(doc, source["count"], f"{where}.count", minimum=1, integer=True)
        else:
            raise doc.error(where, "expected served, unaccepted, {jsonl: FILE} or {generator: NAME, count: N}")


def _check_order(doc: YamlDoc, steps: list[Step]) -> None:
    """eval needs an earlier train of its specialist, promote an earlier eval: say so before anything runs."""
    trained, evaluated = set(), set()
    for step in steps:
        at = f"steps[{step.index}].{step.kind}"
        if step.kind == "train":
            trained.add(step.specialist)
        elif step.kind == "eval":
            if step.specialist not in trained:
                raise doc.error(at, f"no earlier train step for {step.specialist}: eval evaluates its candidate")
            evaluated.add(step.specialist)
        elif step.kind == "promote" and step.specialist not in evaluated:
            raise doc.error(at, f"no earlier eval step for {step.specialist}: promote needs its report")


def check_recipe(path: Path) -> dict:
    """What `mint recipe check` prints: the recipe's plan, validated, without running anything."""
    from mint.project import load_project

    recipe = load_recipe(path, specialists=load_project(_project_file(path)).names)
    return {"recipe": recipe.name, "description": recipe.description, "path": str(recipe.path), "sha256": recipe.sha256, "base": recipe.base,
            "dataset": recipe.dataset, "iterations": recipe.iterations, "specialists": list(recipe.specialists),
            "steps": [{"index": s.index, "kind": s.kind, "line": s.line, "from_iteration": s.from_iteration,
                       "until_iteration": s.until_iteration, "fatal": s.fatal, **s.options} for s in recipe.steps],
            "ok": True}


def _project_file(recipe_path: Path) -> Path | None:
    """The mint.yaml beside the recipe's project (the recipe's folder or its parent), else ./mint.yaml."""
    for folder in (recipe_path.parent, recipe_path.parent.parent):
        if (folder / "mint.yaml").is_file():
            return folder / "mint.yaml"
    return None


__all__ = ["Recipe", "Step", "load_recipe", "check_recipe", "STEP_KINDS", "BadInput"]
