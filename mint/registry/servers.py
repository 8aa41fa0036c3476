"""Running servers tell the workspace what they can hold, so `mint promote` can refuse what they cannot load.
These are plain files in the workspace: the registry reads them and imports nothing of the runtime.

``mint serve`` writes ``$MINT_HOME/serving/<host>-<pid>.json`` (its slot rank and address) while it runs and
removes it when it stops; ``running_servers`` keeps the files of processes still alive on this host (a killed
server's file is ignored, then cleaned up).
"""
from __future__ import annotations

import json
import os
import socket
from pathlib import Path

from mint.workspace import Workspace, atomic_write_json


def serving_dir(ws: Workspace) -> Path:
    return ws.home / "serving"


def announce(ws: Workspace, *, max_rank: int, url: str) -> Path:
    """Say that this process serves ``url`` with slots of ``max_rank``; the path to ``withdraw`` later."""
    directory = serving_dir(ws)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{socket.gethostname()}-{os.getpid()}.json"
    atomic_write_json(path, {"pid": os.getpid(), "host": socket.gethostname(), "max_rank": max_rank, "url": url})
    return path


def withdraw(path: Path) -> None:
    path.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        return True
    return True


def running_servers(ws: Workspace) -> list[dict]:
    """The announcements of servers still running (on this host; another host's are taken as running)."""
    directory = serving_dir(ws)
    found = []
    for path in sorted(directory.glob("*.json")) if directory.is_dir() else ():
        try:
            entry = json.loads(path.read_text(encoding="utf-8"))
            pid, rank = entry["pid"], entry["max_rank"]
            if not isinstance(pid, int) or not isinstance(rank, int):
                continue
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if entry.get("host") == socket.gethostname() and not _alive(pid):
            path.unlink(missing_ok=True)
            continue
        found.append(entry)
    return found


def adapter_rank(directory: Path) -> int:
    """The largest LoRA rank in the adapter at ``directory``, from its safetensors header (no weights read)."""
    from safetensors import safe_open

    rank = 0
    weights = directory / "adapter_model.safetensors"
    if not weights.is_file():   # a router revision holds a probe, not a LoRA: no slot to fit
        return rank
    with safe_open(str(weights), framework="pt") as f:
        for key in f.keys():
            if "lora_A" in key:
                rank = max(rank, f.get_slice(key).get_shape()[0])
    return rank
