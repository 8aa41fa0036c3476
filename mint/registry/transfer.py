"""Adapters in and out: import an external PEFT adapter after checking it fits the base; export a plain one."""
from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mint.errors import BadInput
from mint.registry import store
from mint.registry.artifacts import ADAPTER_CONFIG, ADAPTER_WEIGHTS, MINT_JSON, adapter_files, check_adapter_dir, \
    load_revision, register
from mint.registry.refs import check_name
from mint.text import closest
from mint.workspace import Workspace, publish_dir, staging_dir

EXPORT_MARKER = ".mint-export.json"   # marks a folder `registry export --force` may replace
EXPORT_FILE_MODE = 0o644              # exports are meant to be shared: not the 0600 a temp file gets

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


@dataclass(frozen=True)
class ImportResult:
    revision: store.Revision
    ref: str
    base: str
    base_from: str        # --base | adapter_config.json | mint.yaml
    skipped: list[str]    # what was not imported, each with why


def check_known_specialist(name: str, known: tuple[str, ...], *, new: bool) -> str:
    """``name`` if mint.yaml has it (or ``new`` says it starts a new one); a typo gets a did-you-mean."""
    check_name(name)
    if new or name in known:
        return name
    raise BadInput(f"unknown specialist {name!r}{closest(name, known)}: mint.yaml has {', '.join(known)}; pass --new "
                   "to start a new specialist", field="--specialist")


def adapter_base(source: Path, config: dict) -> str | None:
    """The base the adapter names in ``base_model_name_or_path``, as mint calls it (None when it names none)."""
    from mint.base import BUILTIN, PORTABLE_NAMES, hub_id

    named = config.get("base_model_name_or_path")
    if not isinstance(named, str) or not named.strip():
        return None
    for mint_name, portable in PORTABLE_NAMES.items():
        if named == portable:
            return mint_name
    if named in BUILTIN:
        return named
    if hub_id(named) is not None:   # read from the local Hugging Face cache when it loads
        return named
    path = Path(named).expanduser()
    if path.is_dir():
        return str(path.absolute())
    raise BadInput(f"{named!r} is neither a base mint has ({', '.join(BUILTIN)}), a Hub id (ORG/NAME) nor a local "
                   "model directory; "
                   "pass --base NAME|DIR", file=str(source / ADAPTER_CONFIG), field="base_model_name_or_path")


def import_adapter(ws: Workspace, source: Path, *, specialist: str, base: str | None = None,
                   config: Path | None = None, new: bool = False) -> ImportResult:
    """Register an external PEFT adapter as a candidate of ``specialist`` after checking it fits its base.

    The base is ``base``, else the one the adapter's own config names, else mint.yaml's.
    """
    from mint.base import is_local_path, load_base
    from mint.project import load_project

    project = load_project(config)
    check_known_specialist(specialist, project.names, new=new)
    _files, skipped = adapter_files(source)
    adapter_config = check_adapter_dir(source)
    if base is not None:
        chosen, base_from = base, "--base"
    elif (named := adapter_base(source, adapter_config)) is not None:
        chosen, base_from = named, ADAPTER_CONFIG
    else:
        chosen, base_from = project.base, "mint.yaml"
    if is_local_path(chosen):
        chosen = str(Path(chosen).expanduser().absolute())   # so an export can name it from anywhere
    loaded = load_base(chosen)
    check_fits_base(source, loaded.model)
    revision = register(ws, source, specialist=specialist, base=chosen, base_fingerprint=loaded.fingerprint,
                        method="import")
    return ImportResult(revision, revision.ref, chosen, base_from, skipped)


@dataclass(frozen=True)
class ExportResult:
    revision: str
    id: str
    out: str
    base_model_name_or_path: str
    files: list[str]
    replaced: bool
    warnings: list[str] = field(default_factory=list)


def _check_replaceable(out: Path) -> None:
    """``out`` is a previous export and nothing else: --force never deletes a folder mint did not write."""
    if out.is_symlink() or not out.is_dir():
        raise BadInput("exists and is not a previous mint export; --force replaces only those. Remove it yourself "
                       "or choose another path", file=str(out))
    try:
        marker = json.loads((out / EXPORT_MARKER).read_text())
        listed = set(marker["files"])
    except (OSError, ValueError, KeyError, TypeError):
        raise BadInput(f"is not a previous mint export (no readable {EXPORT_MARKER}); --force replaces only those. "
                       "Remove it yourself or choose another path", file=str(out)) from None
    here = {p.name for p in out.iterdir()} - {EXPORT_MARKER}
    if here - listed:
        raise BadInput(f"holds files the export did not write ({', '.join(sorted(here - listed))}); refusing to "
                       "delete them. Move them or choose another path", file=str(out))
    cwd = Path.cwd().resolve()
    if cwd.is_relative_to(out.resolve()):
        raise BadInput("contains the current directory; refusing to replace it", file=str(out))


def export_revision(ws: Workspace, ref: str, out: Path, *, force: bool = False) -> ExportResult:
    """A plain PEFT directory that ``PeftModel.from_pretrained`` and vLLM's ``--lora-modules`` load.

    ``base_model_name_or_path`` names a base they can find (the Hub id of the embedded base, the path of a local
    one); files are 0644. ``force`` replaces a previous export (marked by ``.mint-export.json``) and nothing else.
    """
    from mint.base import dequantized_from, hub_id, portable_name

    revision, directory = load_revision(ws, ref)
    out = Path(os.path.abspath(out))
    if out.resolve().is_relative_to(ws.home.resolve()):
        raise BadInput(f"is inside the workspace {ws.home}, which mint manages (gc would remove it); export "
                       "somewhere else", file=str(out))
    replaced = out.exists() or out.is_symlink()
    if replaced:
        if not force:
            raise BadInput("already exists; choose another path or pass --force to replace a previous export",
                           file=str(out))
        _check_replaceable(out)
    files = []
    with staging_dir(out.parent, out.name) as tmp:
        for item in sorted(directory.iterdir()):
            if item.is_file() and item.name != MINT_JSON:
                shutil.copyfile(item, tmp / item.name)
                files.append(item.name)
        config = json.loads((tmp / ADAPTER_CONFIG).read_text())
        named = config["base_model_name_or_path"] = portable_name(revision.base
                                                                  or config.get("base_model_name_or_path"))
        (tmp / ADAPTER_CONFIG).write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        warnings = []
        trained_on = dequantized_from(revision.base)
        if trained_on is not None:
            if named is not None and hub_id(named) is not None:   # it names the original release, not its weights
                warnings.append(dequantized_warning(named, trained_on))
            readme = tmp / "README.md"
            readme.write_text((readme.read_text() if readme.exists() else "")
                              + f"\n## Base weights\n\nThis adapter was trained on {trained_on}, not on the weights "
                                f"of `{named}` that `base_model_name_or_path` names: loaded onto those, its outputs "
                                "differ slightly from what mint measured.\n")
            if "README.md" not in files:
                files.append("README.md")
        marker = {"revision": revision.ref, "id": revision.id, "files": files,
                  **({"trained_on": trained_on} if trained_on else {})}
        (tmp / EXPORT_MARKER).write_text(json.dumps(marker, indent=2) + "\n")
        for name in [*files, EXPORT_MARKER]:
            os.chmod(tmp / name, EXPORT_FILE_MODE)
        if replaced:   # move the old export aside first, so a failure leaves one of the two whole
            with staging_dir(out.parent, f"{out.name}-old") as old:
                os.rename(out, old / "export")
                try:
                    publish_dir(tmp, out)
                except BaseException:
                    os.rename(old / "export", out)
                    raise
                shutil.rmtree(old)
        else:
            publish_dir(tmp, out)
    return ExportResult(revision.ref, revision.id, str(out), config["base_model_name_or_path"], files, replaced,
                        warnings)


def dequantized_warning(named: str, trained_on: str) -> str:
    """What an export of an adapter trained on dequantized GGUF weights warns about the base it names."""
    return (f"base_model_name_or_path names {named}, but this adapter was trained on {trained_on}: loaded onto "
            f"{named}, its outputs differ slightly from what mint measured")
