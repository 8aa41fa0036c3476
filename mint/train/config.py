"""Training settings: mint's hardware-aware defaults, then the config file, then ``--set`` overrides.

A config file has up to four blocks::

    lora: {r: 16, alpha: 32, dropout: 0.0, target_modules: all-linear, from_layer: router}
    trl: {learning_rate: 2.0e-4, max_steps: 40, per_device_train_batch_size: 4}
    rewards: [mypkg.rewards:exact_match]      # grpo: extra reward functions, module:function
    examples: {reasoning: true}               # how episodes become rows (see EXAMPLE_KEYS)

``--set trl.max_steps=20`` or ``--set max_steps=20`` (trl is the default block) overrides one key.

``check_settings`` checks what the user asked for (every key known, every value of the type its TRL or
LoRA field takes, a did-you-mean for near misses) without importing torch or TRL; ``resolve_settings``
then lays it over the defaults for this hardware.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import re
from pathlib import Path
from typing import Any

import yaml

from mint import hardware
from mint.errors import BadInput
from mint.text import closest
from mint.yamlfile import load_yaml

BLOCKS = ("lora", "trl", "rewards", "examples")
# reasoning: train on the assistant's reasoning (kept apart from its answer) where the chat template renders it;
# false leaves it out of every row
EXAMPLE_KEYS = ("reasoning",)
DEFAULT_EXAMPLES = {"reasoning": True}
LORA_KEYS = ("r", "alpha", "dropout", "target_modules", "from_layer")
# from_layer: the first decoder layer the adapter changes (0: every layer). `router`, the default, is the
# router probe's layer (mint.base.probe_layers): the layers the probe reads stay the base's, so the
# mixture routes a turn inside its own prefill instead of a pass of its own (mint.mol.mixture).
ROUTER_LAYER = "router"
# dropout 0, PEFT's own default: on a CPU the dropout masks of every adapted layer's input cost 14% of an SFT step
# (SmolLM2, GenUI logs, batch 4: 2.2 s against 1.9, the loss after 16 steps the same to three places)
DEFAULT_LORA = {"r": 16, "alpha": 32, "dropout": 0.0, "target_modules": "all-linear", "from_layer": ROUTER_LAYER}
# mint manages these: where checkpoints go, what is logged where
MANAGED = ("output_dir", "logging_dir", "report_to")


def trl_config_class(method: str):
    import trl

    return {"sft": trl.SFTConfig, "dpo": trl.DPOConfig, "kto": trl.KTOConfig, "grpo": trl.GRPOConfig}[method]


def hardware_defaults(method: str) -> dict[str, Any]:
    """mint's defaults for ``method``; the hardware-dependent ones come from ``mint.hardware.training_plan``."""
    common = {"per_device_train_batch_size": 4, "gradient_accumulation_steps": 1, "learning_rate": 2e-4,
              "lr_scheduler_type": "linear", "warmup_steps": 0, "logging_steps": 1, "save_steps": 10,
              "save_total_limit": 2, "seed": 0, "max_steps": 20, "report_to": []}
    per_method: dict[str, dict[str, Any]] = {
        # sft's max_length: the longest example's tokens, set once the run's examples are known
        # (mint.train.run.max_length_from_data); null here, where no data is at hand (--dry-run)
        "sft": {"assistant_only_loss": True, "max_length": None},
        "dpo": {"max_length": 1024, "beta": 0.1},
        "kto": {"max_length": 1024, "beta": 0.1},
        "grpo": {"num_generations": 4, "max_completion_length": 128, "per_device_train_batch_size": 4,
                 "temperature": 1.0},
    }
    return {**common, **per_method[method]}


OVERRIDE_BLOCKS = ("lora", "trl", "examples")


@dataclasses.dataclass(frozen=True)
class SettingsOverride:
    """Settings laid over the config file and mint's defaults, block by block (``trl``, ``lora``, ``examples``),
    as values: what ``--set`` says once its text is read, and what a recipe's train step hands on as it is.
    ``check_settings`` checks them like any other setting."""

    trl: dict = dataclasses.field(default_factory=dict)
    lora: dict = dataclasses.field(default_factory=dict)
    examples: dict = dataclasses.field(default_factory=dict)

    @classmethod
    def from_sets(cls, sets: list[str]) -> SettingsOverride:
        """``--set`` text: ``["trl.max_steps=20", "lora.r=8"]``."""
        return cls(**parse_sets(sets))

    @classmethod
    def from_keys(cls, values: dict) -> SettingsOverride:
        """A mapping keyed as ``--set`` is (``max_steps``, ``trl.max_steps``, ``lora.r``), values kept as given:
        a recipe's ``set:`` block."""
        out: dict[str, dict] = {}
        for key, value in values.items():
            block, dot, name = str(key).partition(".")
            if not dot:
                block, name = "trl", block
            if block not in OVERRIDE_BLOCKS:
                raise BadInput(f"{key}: takes lora.KEY, trl.KEY or examples.KEY (or a bare TRL key)"
                               f"{closest(block, OVERRIDE_BLOCKS)}", field=str(key))
            out.setdefault(block, {})[name] = value
        return cls(**out)

    def keys(self) -> list[str]:
        """Every key as ``block.name``."""
        return [f"{block}.{name}" for block in OVERRIDE_BLOCKS for name in getattr(self, block)]

    def over(self, other: SettingsOverride) -> SettingsOverride:
        """``other`` with these settings laid over it (these win)."""
        return SettingsOverride(**{block: {**getattr(other, block), **getattr(self, block)}
                                   for block in OVERRIDE_BLOCKS})

    def without(self, block: str) -> SettingsOverride:
        return dataclasses.replace(self, **{block: {}})

    def to_dict(self) -> dict:
        return {block: dict(getattr(self, block)) for block in OVERRIDE_BLOCKS if getattr(self, block)}

    @classmethod
    def from_dict(cls, data: dict) -> SettingsOverride:
        return cls(**{block: dict(data.get(block) or {}) for block in OVERRIDE_BLOCKS})


def parse_sets(sets: list[str]) -> dict[str, dict[str, Any]]:
    """``["trl.max_steps=20", "lora.r=8"]`` as ``{"trl": {"max_steps": 20}, "lora": {"r": 8}}``."""
    out: dict[str, dict[str, Any]] = {}
    for item in sets:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise BadInput(f"expected KEY=VALUE, got {item!r}", field="--set")
        block, dot, name = key.strip().partition(".")
        if not dot:
            block, name = "trl", block
        if block not in ("lora", "trl", "examples"):
            raise BadInput(f"{key}: --set takes lora.KEY, trl.KEY or examples.KEY (or a bare TRL key)"
                           f"{closest(block, ('lora', 'trl', 'examples'))}", field="--set")
        if not name.strip():
            raise BadInput(f"expected {block}.KEY=VALUE, got {item!r}", field="--set")
        value = _scalar(raw)
        out.setdefault(block, {})[name] = value
    return out


# --- the TRL and LoRA field types, known without importing trl ------------------------------------
# A bad --set must answer in well under a second, before torch or TRL is imported, so the field types
# of each TRL config class are kept in trl_fields.json (tests check it against the installed TRL;
# `python -m mint.train.config` rewrites it after a TRL upgrade).
FIELDS_FILE = Path(__file__).with_name("trl_fields.json")
# the PEFT names and common guesses for mint's LoRA keys
LORA_ALIASES = {"rank": "r", "lora_r": "r", "lora_rank": "r", "lora_alpha": "alpha", "lora_dropout": "dropout",
                "modules": "target_modules", "targets": "target_modules", "target": "target_modules",
                "layers_to_transform": "from_layer", "first_layer": "from_layer", "layers": "from_layer"}


def field_kinds(type_text: str) -> list[str]:
    """The plain-data kinds a field of this annotation accepts: bool, int, float, str, list, dict, null."""
    kinds = []
    for kind, pattern in (("bool", r"\bbool\b|Literal\[False\]"), ("int", r"\bint\b"), ("float", r"\bfloat\b"),
                          ("str", r"\bstr\b|Strategy|Names|Literal\["), ("list", r"\blist\b"),
                          ("dict", r"\bdict\b"), ("null", r"\bNone\b|NoneType")):
        if re.search(pattern, type_text):
            kinds.append(kind)
    return kinds or ["any"]


def live_trl_fields() -> dict[str, dict[str, list[str]]]:
    """Each method's TRL config fields and their kinds, read from the installed TRL (imports it)."""
    return {method: {f.name: field_kinds(str(f.type)) for f in dataclasses.fields(trl_config_class(method))}
            for method in ("sft", "dpo", "kto", "grpo")}


def render_fields(fields: dict[str, dict[str, list[str]]]) -> str:
    """trl_fields.json with one field a line, so a TRL upgrade reads as a short diff."""
    methods = []
    for method in sorted(fields):
        lines = ",\n".join(f"  {json.dumps(name)}: {json.dumps(kinds)}" for name, kinds in sorted(fields[method].items()))
        methods.append(f" {json.dumps(method)}: {{\n{lines}\n }}")
    return "{\n" + ",\n".join(methods) + "\n}\n"


@functools.lru_cache(maxsize=1)
def trl_fields() -> dict[str, dict[str, list[str]]]:
    return json.loads(FIELDS_FILE.read_text(encoding="utf-8"))


def config_class_name(method: str) -> str:
    return {"sft": "SFTConfig", "dpo": "DPOConfig", "kto": "KTOConfig", "grpo": "GRPOConfig"}[method]


def typed_value(kinds: list[str], value: Any, where: str) -> Any:
    """``value`` as the field wants it, or BadInput saying what was expected."""
    if "any" in kinds:
        return value
    if isinstance(value, float) and math.isnan(value) or isinstance(value, str) and value.strip().lower() == "nan":
        raise BadInput(f"expected a number, got {value!r} (not a number)", field=where)
    if value is None:
        if "null" in kinds:
            return None
    elif isinstance(value, bool):
        if "bool" in kinds:
            return value
    elif isinstance(value, int):
        if "int" in kinds:
            return value
        if "float" in kinds:
            return float(value)
    elif isinstance(value, float):
        if "float" in kinds:
            return value
        if "int" in kinds and value.is_integer():
            return int(value)
    elif isinstance(value, str):
        for kind, convert in (("int", int), ("float", float)):   # `learning_rate: 1e-4` stays a string in YAML
            if kind in kinds:
                try:
                    return convert(value)
                except ValueError:
                    pass
        if "str" in kinds:
            return value
        if "bool" in kinds and value.lower() in ("true", "false"):
            return value.lower() == "true"
    elif isinstance(value, list):
        if "list" in kinds:
            return value
    elif isinstance(value, dict):
        if "dict" in kinds:
            return value
    names = {"bool": "true or false", "int": "an integer", "float": "a number", "str": "a string",
             "list": "a list", "dict": "a mapping", "null": "null"}
    expected = " or ".join(names[k] for k in kinds if k in names)
    raise BadInput(f"expected {expected}, got {value!r}", field=where)


def _check_lora(lora: dict, where_of) -> dict:
    """The LoRA block with its values checked: r a positive integer, alpha a positive number, dropout in
    [0, 1), target_modules a module name pattern or a list of names, from_layer a layer number (0 or more)
    or `router`."""
    checked = dict(lora)
    for key, value in lora.items():
        if key not in LORA_KEYS:
            hint = LORA_ALIASES.get(key)
            raise where_of(key, f"unknown LoRA key (did you mean {hint}?)" if hint else
                           f"unknown LoRA key{closest(key, LORA_KEYS)} (keys: {', '.join(LORA_KEYS)})")
    try:
        checked["r"] = typed_value(["int"], lora["r"], "lora.r")
        checked["alpha"] = typed_value(["int", "float"], lora["alpha"], "lora.alpha")
        checked["dropout"] = typed_value(["float"], lora["dropout"], "lora.dropout")
        checked["target_modules"] = typed_value(["str", "list"], lora["target_modules"], "lora.target_modules")
        checked["from_layer"] = typed_value(["int", "str"], lora["from_layer"], "lora.from_layer")
    except BadInput as exc:
        raise where_of(exc.field.split(".", 1)[1], str(exc).split(": ", 1)[1]) from None
    if checked["r"] < 1:
        raise where_of("r", f"must be at least 1, got {checked['r']}")
    if checked["alpha"] <= 0:
        raise where_of("alpha", f"must be positive, got {checked['alpha']}")
    if not 0 <= checked["dropout"] < 1:
        raise where_of("dropout", f"must be in [0, 1), got {checked['dropout']}")
    if isinstance(checked["target_modules"], list) and not all(isinstance(m, str) for m in checked["target_modules"]):
        raise where_of("target_modules", "expected module names")
    if isinstance(checked["from_layer"], str) and checked["from_layer"] != ROUTER_LAYER:
        raise where_of("from_layer", f"expected a layer number or {ROUTER_LAYER!r}, got {checked['from_layer']!r}")
    if isinstance(checked["from_layer"], int) and checked["from_layer"] < 0:
        raise where_of("from_layer", f"must be 0 or more, got {checked['from_layer']}")
    return checked


@dataclasses.dataclass(frozen=True)
class UserSettings:
    """What the config file and ``--set`` asked for, checked against the TRL and LoRA field types."""
    method: str
    lora: dict
    trl: dict
    rewards: tuple[str, ...]
    lora_asked: tuple[str, ...] = ()    # the LoRA keys the user set (the rest are mint's defaults)
    examples: dict = dataclasses.field(default_factory=lambda: dict(DEFAULT_EXAMPLES))


def check_settings(method: str, config: Path | None, sets: list[str],
                   override: SettingsOverride | None = None) -> UserSettings:
    """The user's settings, every key and type checked; imports neither torch nor TRL. ``override`` is laid over
    ``sets``, which is laid over the config file."""
    file_blocks: dict = {}
    doc = None
    if config is not None:
        doc = load_yaml(config)
        file_blocks = doc.data if doc.data is not None else {}
        if not isinstance(file_blocks, dict):
            raise doc.error("", "expected a mapping with lora, trl, rewards")
        for key in file_blocks:
            if key not in BLOCKS:
                raise doc.error(str(key), f"unknown block{closest(str(key), BLOCKS)}")
        for block in ("lora", "trl", "examples"):
            if not isinstance(file_blocks.get(block) or {}, dict):
                raise doc.error(block, "expected a mapping of KEY: VALUE")
    overrides = (override or SettingsOverride()).over(SettingsOverride.from_sets(sets))

    def where_of(block):
        return lambda key, message: _unknown(doc, file_blocks, block, key, message)

    lora = _check_lora({**DEFAULT_LORA, **(file_blocks.get("lora") or {}), **overrides.lora},
                       where_of("lora"))
    fields = trl_fields()[method]
    asked = {**(file_blocks.get("trl") or {}), **overrides.trl}
    trl_values = {}
    for key, value in asked.items():
        key = str(key)
        if key not in fields:
            raise where_of("trl")(key, f"not a {config_class_name(method)} field{closest(key, sorted(fields))}")
        if key in MANAGED:
            raise BadInput("mint manages this (runs live under $MINT_HOME/runs)", field=f"trl.{key}")
        try:
            trl_values[key] = typed_value(fields[key], value, f"trl.{key}")
        except BadInput as exc:
            raise where_of("trl")(key, str(exc).split(": ", 1)[1]) from None
    for key in ("max_steps", "per_device_train_batch_size", "gradient_accumulation_steps", "num_generations"):
        if isinstance(trl_values.get(key), int) and trl_values[key] < (0 if key == "max_steps" else 1) \
                and not (key == "max_steps" and trl_values[key] == -1):
            raise where_of("trl")(key, f"must be positive, got {trl_values[key]}")
    if hardware.joins_rows_uncut(trl_values) and trl_values.get("max_length") is not None:
        # TRL refuses it when the trainer is built: padding-free batches cut no row, only packing enforces a length
        raise where_of("trl")("padding_free", "padding-free batches cut no row, so max_length needs packing: true "
                                              "as well (or leave max_length out, or padding_free)")
    rewards = file_blocks.get("rewards") or []
    if not isinstance(rewards, list) or not all(isinstance(r, str) and ":" in r for r in rewards):
        raise (doc.error("rewards", "expected a list of module:function") if doc else
               BadInput("expected a list of module:function", field="rewards"))
    lora_asked = tuple(sorted({*map(str, file_blocks.get("lora") or {}), *overrides.lora}))
    examples = dict(DEFAULT_EXAMPLES)
    for key, value in {**(file_blocks.get("examples") or {}), **overrides.examples}.items():
        key = str(key)
        if key not in EXAMPLE_KEYS:
            raise where_of("examples")(key, f"unknown key{closest(key, EXAMPLE_KEYS, listing='expected one of')}")
        try:
            examples[key] = typed_value(["bool"], value, f"examples.{key}")
        except BadInput as exc:
            raise where_of("examples")(key, str(exc).split(": ", 1)[1]) from None
    return UserSettings(method, lora, trl_values, tuple(rewards), lora_asked, examples)


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    method: str
    lora: dict
    trl: dict
    rewards: tuple[str, ...]
    hardware: dict = dataclasses.field(default_factory=dict)   # what mint.hardware chose and why (not hashed)
    examples: dict = dataclasses.field(default_factory=lambda: dict(DEFAULT_EXAMPLES))

    def digest(self) -> str:
        # the example options count only when they differ from the defaults (runs from before they existed)
        record = {k: v for k, v in dataclasses.asdict(self).items()
                  if k != "hardware" and not (k == "examples" and v == DEFAULT_EXAMPLES)}
        return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def resolve_settings(user: UserSettings) -> TrainSettings:
    """The settings a run trains with: mint's defaults for this hardware (each choice recorded with its
    reason), then what the user asked for, which always wins."""
    plan = hardware.training_plan(user.method, hardware.detect())
    threads = hardware.torch_threads(plan.hardware)
    hardware.apply_threads(threads)
    trl_values = hardware.reconcile({**hardware_defaults(user.method), **plan.settings(), **user.trl}, user.trl)
    record = {**plan.record(user.trl), "torch_threads": dataclasses.asdict(threads)}
    for key, entry in record["choices"].items():
        # a choice another of the user's settings turned (their fp16 turns bf16 off, their max_length padding-free)
        if key not in user.trl and key in trl_values and trl_values[key] != entry["value"]:
            entry["turned_by_user_settings"] = trl_values[key]
    return TrainSettings(user.method, dict(user.lora), trl_values, user.rewards, record, dict(user.examples))


def planned_settings(method: str | None, config: Path | None, sets: list[str],
                     override: SettingsOverride | None = None) -> TrainSettings:
    """What ``mint train --dry-run`` shows: the settings a run would use and why, without a model or a trainer."""
    from mint.train.examples import METHODS

    if method not in METHODS:
        raise BadInput(f"unknown method {method!r}{closest(method, METHODS)} (methods: {', '.join(METHODS)})",
                       field="--method")
    return resolve_settings(check_settings(method, config, sets, override))


def _unknown(doc, file_blocks: dict, block: str, key: str, message: str) -> BadInput:
    """The error for a bad key: at its line when it came from the config file, else naming the --set key."""
    # a key with characters a terminal would not show (control or unassigned ones) is shown escaped
    where = f"{block}.{key if key.isprintable() else ascii(key)}"
    if doc is not None and key in (file_blocks.get(block) or {}):
        return doc.error(where, message)
    return BadInput(message, field=where)


def _scalar(raw: str) -> Any:
    """``--set`` values: numbers as numbers (YAML would keep ``1e-4`` a string), else YAML."""
    for kind in (int, float):
        try:
            return kind(raw)
        except ValueError:
            pass
    try:
        return yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        return raw


if __name__ == "__main__":   # after a TRL upgrade: rewrite trl_fields.json from the installed TRL
    FIELDS_FILE.write_text(render_fields(live_trl_fields()), encoding="utf-8")
