"""The registry is the floor: nothing in mint/registry imports the stages that stand on it."""
import ast
from pathlib import Path

import mint.registry

STAGES = ("mint.contract", "mint.train", "mint.mol", "mint.loop")


def _imports(path: Path) -> list[str]:
    names = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):   # function-level imports too
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names += [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return names


def test_the_registry_imports_no_stage_package():
    folder = Path(mint.registry.__file__).parent
    files = sorted(folder.glob("*.py"))
    assert files
    reaching_up = {f"{path.name}: {name}" for path in files for name in _imports(path)
                   if any(name == stage or name.startswith(stage + ".") for stage in STAGES)}
    assert reaching_up == set()
