"""`mint export vllm OUT`: what serves every current champion on vLLM, for scale-out.

OUT gets ``adapters/<specialist>/`` (each champion's PEFT files, verified on the way out), ``launch.sh``
(``vllm serve BASE --enable-lora --lora-modules NAME=PATH ... --max-lora-rank R --max-loras N``),
``vllm.json`` (the same as data) and ``ROUTER.md``: vLLM picks the adapter named in each request's
``model`` and has no router, so the router stays a sidecar (``mint route`` or ``mint serve``) that names
the specialist per turn. OUT is written in one rename: it must not exist yet.
"""
from __future__ import annotations

import json
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput, Refused
from mint.project import Project
from mint.workspace import Workspace, atomic_dir

# vLLM accepts only these --max-lora-rank values (vllm/config/lora.py, MaxLoRARanks)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


@dataclass(frozen=True)
class VllmExport:
    out: str
    model: str
    adapters: dict[str, str]          # specialist -> revision ref
    max_lora_rank: int
    command: list[str]
    missing: list[str]                # specialists without a champion (answered by the bare base)


def export_vllm(ws: Workspace, project: Project, out: Path) -> VllmExport:
    from mint.base import BUILTIN, portable_name
    from mint.registry import store
    from mint.registry.artifacts import load_revision

    if out.exists():
        raise BadInput("already exists; choose a new folder (nothing is overwritten)", file=str(out))
    conn = store.open_store(ws, create=False)
    try:
        targets = {name: store.alias_target(conn, name, "champion") for name in project.names}
    finally:
        conn.close()
    champions = {name: load_revision(ws, target) for name, target in targets.items() if target}
    if not champions:
        raise Refused(f"no specialist of mint.yaml ({', '.join(project.names)}) has a champion to export")
    bases = {revision.base for revision, _dir in champions.values()}
    if len(bases) > 1:
        raise Refused(f"the champions were trained on different bases ({', '.join(sorted(map(str, bases)))}); "
                      "one vLLM server serves one base")
    base = bases.pop() or project.base
    # a built-in base by its Hub id; a local base directory by its absolute path
    model = portable_name(base) if base in BUILTIN else str(Path(base).expanduser().absolute())
    ranks = {}
    for name, (revision, directory) in champions.items():
        config = json.loads((directory / "adapter_config.json").read_text())
        ranks[name] = max([int(config.get("r", 0)), *map(int, (config.get("rank_pattern") or {}).values())])
    needed = max(ranks.values())
    max_rank = next((r for r in VLLM_LORA_RANKS if r >= needed), None)
    if max_rank is None:
        raise Refused(f"LoRA rank {needed} is above vLLM's largest --max-lora-rank {VLLM_LORA_RANKS[-1]}")
    out = out.absolute()
    command = ["vllm", "serve", model, "--enable-lora", "--max-lora-rank", str(max_rank),
               "--max-loras", str(len(champions)), "--lora-modules",
               *(f"{name}={out / 'adapters' / name}" for name in champions)]
    with atomic_dir(out) as tmp:
        for name, (_revision, directory) in champions.items():
            target = tmp / "adapters" / name
            target.mkdir(parents=True)
            for file in PEFT_FILES:
                shutil.copy2(directory / file, target / file)
        (tmp / "launch.sh").write_text("#!/bin/sh\n# Serves every mint champion on vLLM; the model name of a "
                                       "request picks the specialist.\nexec " + " ".join(map(shlex.quote, command))
                                       + ' "$@"\n')
        (tmp / "launch.sh").chmod(0o755)
        (tmp / "vllm.json").write_text(json.dumps({
            "model": model, "max_lora_rank": max_rank, "max_loras": len(champions),
            "lora_modules": [{"name": name, "path": str(out / "adapters" / name), "revision": rev.ref}
                             for name, (rev, _d) in champions.items()],
            "command": command}, indent=2) + "\n")
        (tmp / "ROUTER.md").write_text(
            "# Routing in front of vLLM\n\nvLLM serves one adapter per request, chosen by the request's `model` "
            f"({', '.join(champions)}), and has no router. Keep mint's router as a sidecar: ask it which "
            "specialist answers each user turn, then call vLLM with that name:\n\n"
            "    mint route \"$TURN\" --json    # {\"specialist\": ..., \"probabilities\": ..., ...}\n\n"
            "or run `mint serve` beside vLLM for the routed `mint` model. After a promotion, export again and "
            "restart vLLM (or load the new adapter with vLLM's runtime LoRA loading).\n"
            + (f"\nNo champion yet (the bare base answers): {', '.join(n for n in project.names if n not in champions)}.\n"
               if len(champions) < len(project.names) else ""))
    return VllmExport(str(out), model, {n: r.ref for n, (r, _d) in champions.items()}, max_rank, command,
                      [n for n in project.names if n not in champions])
