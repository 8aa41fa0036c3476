"""Adapters in and out: import an external PEFT adapter after checking it fits the base; export a plain one."""
from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput
from mint.registry import store
from mint.registry.artifacts import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MINT_JSON, check_adapter_dir, load_revision, \
    register
from mint.registry.refs import check_name
from mint.workspace import Workspace, publish_dir, staging_dir

_LORA_PARTS = (".lora_A.", ".lora_B.", ".lora_embedding_A", ".lora_embedding_B", ".lora_magnitude_vector")


def check_fits_base(adapter_dir: Path, model) -> None:
    """Every LoRA tensor targets a module the base has, with matching shapes."""
    from safetensors import safe_open

    modules = dict(model.named_modules())
    path = adapter_dir / ADAPTER_WEIGHTS
    try:
        handle = safe_open(str(path), framework="pt")
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise BadInput(f"not a safetensors file: {exc}", file=str(path)) from None
    with handle:
        keys = list(handle.keys())
        if not keys:
            raise BadInput("holds no tensors", file=str(path))
        for key in keys:
            part = next((p for p in _LORA_PARTS if p in key), None)
            if part is None:
                continue   # modules_to_save and the like: copied whole, nothing to match
            module_path = key.split(part)[0].removeprefix("base_model.model.")
            module = modules.get(module_path)
            if module is None:
                raise BadInput(f"{key} targets module {module_path!r}, which the base does not have",
                               file=str(path))
            shape = tuple(handle.get_slice(key).get_shape())
            in_features = getattr(module, "in_features", None)
            out_features = getattr(module, "out_features", None)
            if part == ".lora_A." and in_features is not None and shape[-1] != in_features:
                raise BadInput(f"{key} has shape {shape}, but {module_path} takes {in_features} inputs",
                               file=str(path))
            if part == ".lora_B." and out_features is not None and shape[0] != out_features:
                raise BadInput(f"{key} has shape {shape}, but {module_path} gives {out_features} outputs",
                               file=str(path))


def import_adapter(ws: Workspace, source: Path, *, specialist: str, base: str) -> store.Revision:
    """Register an external PEFT adapter as a candidate of ``specialist`` after checking it fits ``base``."""
    from mint.base import load_base

    check_name(specialist)
    check_adapter_dir(source)
    loaded = load_base(base)
    check_fits_base(source, loaded.model)
    return register(ws, source, specialist=specialist, base=base, base_fingerprint=loaded.fingerprint,
                    method="import")


@dataclass(frozen=True)
class ExportResult:
    revision: str
    id: str
    out: str
    base_model_name_or_path: str
    files: list[str]


def export_revision(ws: Workspace, ref: str, out: Path, *, force: bool = False) -> ExportResult:
    """A plain PEFT directory that ``PeftModel.from_pretrained`` and vLLM's ``--lora-modules`` load."""
    from mint.base import portable_name

    revision, directory = load_revision(ws, ref)
    if out.exists() and not force:
        raise BadInput("already exists; choose another path or pass --force", file=str(out))
    out = out.absolute()
    files = []
    with staging_dir(out.parent, out.name) as tmp:
        for item in sorted(directory.iterdir()):
            if item.is_file() and item.name != MINT_JSON:
                shutil.copy2(item, tmp / item.name)
                files.append(item.name)
        config = json.loads((tmp / ADAPTER_CONFIG).read_text())
        config["base_model_name_or_path"] = portable_name(revision.base or config.get("base_model_name_or_path"))
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        if out.exists():
            shutil.rmtree(out) if out.is_dir() else out.unlink()
        publish_dir(tmp, out)
    return ExportResult(revision.ref, revision.id, str(out), config["base_model_name_or_path"], files)
