"""Loads a reliability suite's long form (``scripts/reliability_NAME.py``) so its fast form can call it."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load_script(name: str):
    """The module ``scripts/reliability_<name>.py``, loaded once."""
    module_name = f"reliability_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{module_name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module   # dataclasses look their module up there while the class is made
    spec.loader.exec_module(module)
    return module
