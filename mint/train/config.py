"""Training settings: mint's hardware-aware defaults, then the config file, then ``--set`` overrides.

A config file has up to three blocks::

    lora: {r: 16, alpha: 32, dropout: 0.05, target_modules: all-linear}
    trl: {learning_rate: 2.0e-4, max_steps: 40, per_device_train_batch_size: 4}
    rewards: [mypkg.rewards:exact_match]      # grpo: extra reward functions, module:function

``--set trl.max_steps=20`` or ``--set max_steps=20`` (trl is the default block) overrides one key.
An unknown TRL key is refused, naming the closest valid one.
"""
from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
from pathlib import Path
from typing import Any

import yaml

from mint import hardware
from mint.errors import BadInput
from mint.yamlfile import load_yaml

BLOCKS = ("lora", "trl", "rewards")
LORA_KEYS = ("r", "alpha", "dropout", "target_modules")
DEFAULT_LORA = {"r": 16, "alpha": 32, "dropout": 0.05, "target_modules": "all-linear"}
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
    per_method = {
        "sft": {"assistant_only_loss": True, "max_length": 1024},
        "dpo": {"max_length": 1024, "beta": 0.1},
        "kto": {"max_length": 1024, "beta": 0.1},
        "grpo": {"num_generations": 4, "max_completion_length": 128, "per_device_train_batch_size": 4,
                 "temperature": 1.0},
    }[method]
    return {**common, **per_method}


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
        if block not in ("lora", "trl"):
            raise BadInput(f"{key}: --set takes lora.KEY or trl.KEY (or a bare TRL key)", field="--set")
        value = _scalar(raw)
        out.setdefault(block, {})[name] = value
    return out


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    method: str
    lora: dict
    trl: dict
    rewards: tuple[str, ...]
    hardware: dict = dataclasses.field(default_factory=dict)   # what mint.hardware chose and why (not hashed)

    def digest(self) -> str:
        record = {k: v for k, v in dataclasses.asdict(self).items() if k != "hardware"}
        return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def resolve_settings(method: str, config: Path | None, sets: list[str]) -> TrainSettings:
    file_blocks: dict = {}
    doc = None
    if config is not None:
        doc = load_yaml(config)
        file_blocks = doc.data or {}
        if not isinstance(file_blocks, dict):
            raise doc.error("", "expected a mapping with lora, trl, rewards")
        for key in file_blocks:
            if key not in BLOCKS:
                raise doc.error(str(key), f"unknown block{_closest(str(key), BLOCKS)}")
    overrides = parse_sets(sets)
    lora = {**DEFAULT_LORA, **(file_blocks.get("lora") or {}), **overrides.get("lora", {})}
    for key in lora:
        if key not in LORA_KEYS:
            raise _unknown(doc, file_blocks, "lora", key, f"unknown LoRA key{_closest(key, LORA_KEYS)}")
    plan = hardware.training_plan(method, hardware.detect())
    threads = hardware.torch_threads(plan.hardware)
    hardware.apply_threads(threads)
    user_trl = {**(file_blocks.get("trl") or {}), **overrides.get("trl", {})}
    # the user's values always win
    trl_values = hardware.reconcile({**hardware_defaults(method), **plan.settings(), **user_trl}, user_trl)
    fields = {f.name: f.type for f in dataclasses.fields(trl_config_class(method))}
    valid = set(fields)
    for key in trl_values:
        if key not in valid:
            raise _unknown(doc, file_blocks, "trl", key,
                           f"not a {trl_config_class(method).__name__} field{_closest(key, sorted(valid))}")
        if key in MANAGED and key in {**(file_blocks.get("trl") or {}), **overrides.get("trl", {})}:
            raise BadInput("mint manages this (runs live under $MINT_HOME/runs)", field=f"trl.{key}")
    trl_values = {key: _coerce(fields[key], value) for key, value in trl_values.items()}
    rewards = file_blocks.get("rewards") or []
    if not isinstance(rewards, list) or not all(isinstance(r, str) and ":" in r for r in rewards):
        raise (doc.error("rewards", "expected a list of module:function") if doc else
               BadInput("expected a list of module:function", field="rewards"))
    record = {**plan.record(user_trl), "torch_threads": dataclasses.asdict(threads)}
    return TrainSettings(method, lora, trl_values, tuple(rewards), record)


def planned_settings(method: str | None, config: Path | None, sets: list[str]) -> TrainSettings:
    """What ``mint train --dry-run`` shows: the settings a run would use and why, without a model or a trainer."""
    from mint.train.examples import METHODS

    if method not in METHODS:
        raise BadInput(f"expected one of {', '.join(METHODS)}", field="--method")
    return resolve_settings(method, config, sets)


def _unknown(doc, file_blocks: dict, block: str, key: str, message: str) -> BadInput:
    """The error for a bad key: at its line when it came from the config file, else naming the --set key."""
    where = f"{block}.{key}"
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


def _coerce(field_type: Any, value: Any) -> Any:
    """A string where the TRL field wants a number (``learning_rate: 1e-4`` in YAML) becomes one."""
    if isinstance(value, str):
        text = str(field_type)
        for kind in (("int", int), ("float", float)):
            if kind[0] in text:
                try:
                    return kind[1](value)
                except ValueError:
                    pass
    return value


def _closest(key: str, allowed) -> str:
    match = difflib.get_close_matches(key, list(allowed), n=1, cutoff=0.6)
    return f" (did you mean {match[0]}?)" if match else ""
