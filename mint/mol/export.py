"""`mint export vllm OUT`: what serves every current champion on vLLM, for scale-out.

OUT gets ``adapters/<specialist>/`` (each champion's PEFT files, verified on the way out), ``launch.sh``
(``vllm serve BASE --enable-lora --lora-modules NAME=PATH ... --max-lora-rank R --max-loras N``),
``vllm.json`` (the same as data) and ``ROUTER.md``: vLLM picks the adapter named in each request's
``model`` and has no router, so mint's router runs in front of it (``mint serve --upstream``, or ``mint route``)
and names the specialist per turn. Each adapter is named after its revision (``coding-v3``, ``adapter_name``),
never reused, as the gateway names the champions it publishes. OUT is written in one rename: it must not exist yet.
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
    names = {name: adapter_name(revision.ref) for name, (revision, _dir) in champions.items()}
    command = ["vllm", "serve", model, "--enable-lora", "--max-lora-rank", str(max_rank),
               "--max-loras", str(len(champions)), "--lora-modules",
               *(f"{names[name]}={out / 'adapters' / names[name]}" for name in champions)]
    with atomic_dir(out) as tmp:
        for name, (_revision, directory) in champions.items():
            target = tmp / "adapters" / names[name]
            target.mkdir(parents=True)
            for file in PEFT_FILES:
                shutil.copy2(directory / file, target / file)
        (tmp / "launch.sh").write_text(
            "#!/bin/sh\n# Serves every mint champion on vLLM under its revision's name (coding-v3); the model name "
            "of a request picks the adapter.\n# Runtime LoRA updating lets `mint serve --upstream` publish each new "
            "champion without a restart.\nexport VLLM_ALLOW_RUNTIME_LORA_UPDATING=True\nexec "
            + " ".join(map(shlex.quote, command)) + ' "$@"\n')
        (tmp / "launch.sh").chmod(0o755)
        (tmp / "vllm.json").write_text(json.dumps({
            "model": model, "max_lora_rank": max_rank, "max_loras": len(champions),
            "lora_modules": [{"name": names[name], "path": str(out / "adapters" / names[name]), "revision": rev.ref,
                              "specialist": name} for name, (rev, _d) in champions.items()],
            "command": command}, indent=2) + "\n")
        (tmp / "ROUTER.md").write_text(
            "# Routing in front of vLLM\n\nvLLM serves one adapter per request, chosen by the request's `model` "
            f"({', '.join(names.values())}), and has no router. Put mint's router in front of it as a gateway: it "
            "routes each turn, names the champion's adapter, logs the turn for the loop, and loads each new "
            "champion into vLLM when it is promoted (runtime LoRA updating, on in launch.sh):\n\n"
            "    ./launch.sh --port 8001 &\n"
            "    mint serve --upstream http://127.0.0.1:8001 --port 8000\n\n"
            "Or ask the router which specialist answers a turn and call vLLM with that name yourself:\n\n"
            "    mint route \"$TURN\" --json    # {\"specialist\": ..., \"probabilities\": ..., ...}\n"
            + (f"\nNo champion yet (the bare base answers): {', '.join(n for n in project.names if n not in champions)}.\n"
               if len(champions) < len(project.names) else ""))
    return VllmExport(str(out), model, {n: r.ref for n, (r, _d) in champions.items()}, max_rank, command,
                      [n for n in project.names if n not in champions])


def adapter_name(ref: str) -> str:
    """The name a revision is served under on vLLM (``coding:v3`` -> ``coding-v3``): one name per revision,
    never reused, so a reloaded adapter can never answer under an older one's name."""
    return ref.replace(":", "-")
