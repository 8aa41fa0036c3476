"""Counts of how typed and how large mint's code is, read with ``ast``, so they can be measured again later.

Run: python scripts/code_counts.py [PACKAGE_DIR]   (default: mint/ beside this script's folder)

- annotations naming dict: parameter, return and variable annotations that name ``dict`` or ``Dict``
- isinstance(..., dict) sites: calls of isinstance whose second argument names ``dict`` (alone or in a tuple)
- functions over 50 lines: functions and methods (nested ones too) whose end_lineno - lineno + 1 > 50
- modules over 500 lines: files of more than 500 lines
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

FUNCTION_LINES, MODULE_LINES = 50, 500


def _names_dict(node: ast.AST | None) -> bool:
    """Whether an annotation (or an isinstance class argument) names dict anywhere in it."""
    if node is None:
        return False
    if isinstance(node, ast.Constant) and isinstance(node.value, str):     # a string annotation
        try:
            return _names_dict(ast.parse(node.value, mode="eval").body)
        except SyntaxError:
            return False
    return any((isinstance(n, ast.Name) and n.id in ("dict", "Dict"))
               or (isinstance(n, ast.Attribute) and n.attr in ("dict", "Dict")) for n in ast.walk(node))


def _annotations(tree: ast.AST) -> list[ast.AST]:
    found: list[ast.AST] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            arguments = node.args
            for arg in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg,
                        arguments.kwarg]:
                if arg is not None and arg.annotation is not None:
                    found.append(arg.annotation)
            if node.returns is not None:
                found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return found


def _isinstance_dict(tree: ast.AST) -> int:
    return sum(1 for node in ast.walk(tree)
               if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance"
               and len(node.args) == 2 and _names_dict(node.args[1]))


def counts(package: Path) -> dict[str, int]:
    totals = {"modules": 0, "lines": 0, "annotations naming dict": 0, "isinstance(..., dict) sites": 0,
              "functions": 0, f"functions over {FUNCTION_LINES} lines": 0, f"modules over {MODULE_LINES} lines": 0}
    for path in sorted(package.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        tree = ast.parse(text, str(path))
        lines = len(text.splitlines())
        totals["modules"] += 1
        totals["lines"] += lines
        totals[f"modules over {MODULE_LINES} lines"] += lines > MODULE_LINES
        totals["annotations naming dict"] += sum(_names_dict(a) for a in _annotations(tree))
        totals["isinstance(..., dict) sites"] += _isinstance_dict(tree)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                totals["functions"] += 1
                length = (node.end_lineno or node.lineno) - node.lineno + 1      # the def line to the last, decorators aside
                totals[f"functions over {FUNCTION_LINES} lines"] += length > FUNCTION_LINES
    return totals


def main(argv: list[str]) -> int:
    package = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parent.parent / "mint"
    for name, value in counts(package).items():
        print(f"{name}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
