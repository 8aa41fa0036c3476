"""User code named on the command line or in a config: ``module:attribute``, importable from the cwd too."""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

from mint.errors import BadInput


def load_object(spec: str, *, what: str, field: str):
    """The attribute ``spec`` names (``mypkg.rewards:exact_match``); BadInput when it cannot be loaded."""
    module_name, _, name = spec.partition(":")
    if not module_name or not name:
        raise BadInput(f"expected module:{what}, got {spec!r}", field=field)
    cwd = str(Path.cwd())
    added = cwd not in sys.path
    if added:   # for this import only: left first on sys.path, the cwd would shadow any module imported later
        sys.path.insert(0, cwd)
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as exc:
        raise BadInput(f"cannot load {spec}: {exc}", field=field) from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)
