"""The package's import graph: no cycles (between modules, and between packages with the top-level modules counted
as one), the top-level modules and the registry at the floor, evaluation apart from the server, no private names
across modules.

Read from the source with ``ast`` (imports inside functions too), so a lazy import that only hides a cycle
from the interpreter is still one.
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "mint"
# the registry is the floor: it stores what its callers hand it and knows nothing of what sits above it
ABOVE_REGISTRY = ("mint.contract", "mint.train", "mint.mol", "mint.routing", "mint.generation", "mint.serve",
                  "mint.loop")
# the HTTP server, its backends, the gateway and its upstream client
SERVER = "mint.serve"
# what the loop's serve step drives the server through (it starts the real one, as clients reach it)
SERVE_STEP_CLIENT = "mint.serve.replay"


def _modules(root: Path) -> dict[str, Path]:
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def _imports(module: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, str | None, int]]:
    """(imported module, imported name or None, line) for every import of a mint module in ``path``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None, node.lineno) for alias in node.names if alias.name in modules]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                if f"{source}.{alias.name}" in modules:     # `from mint.data import datasets`: a module
                    found.append((f"{source}.{alias.name}", None, node.lineno))
                elif source in modules:
                    found.append((source, alias.name, node.lineno))
    return found


def import_graph(root: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """Each module's mint imports, with the line of the first import of each."""
    modules = _modules(root)
    graph: dict[str, dict[str, int]] = {}
    for module, path in modules.items():
        edges = graph.setdefault(module, {})
        for target, _name, line in _imports(module, path, modules):
            if target != module:
                edges.setdefault(target, line)
    return graph


def cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []

    def visit(start: str) -> None:
        # iterative: a deep chain of imports must not hit the recursion limit
        work = [(start, iter(graph.get(start, ())))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(graph.get(child, ()))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))

    for module in graph:
        if module not in index:
            visit(module)
    return found


def _describe(component: list[str], graph: dict[str, dict[str, int]]) -> str:
    members = set(component)
    edges = [f"{a} -> {b} (line {line})" for a in component for b, line in sorted(graph[a].items()) if b in members]
    return " | ".join(component) + ":\n    " + "\n    ".join(edges)


def test_no_import_cycle_inside_mint():
    graph = import_graph()
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(_describe(c, graph) for c in found)


# the top-level modules (mint/errors.py, mint/workspace.py, ...) are one package: the floor every package stands on
ROOT = "mint"
# `python -m mint` (mint/__main__.py) starts the CLI: it must sit at the top level, and stands above every package
ENTRY = "mint.__main__"


def packages_in(root: Path = PACKAGE) -> set[str]:
    """mint's packages: ``mint.loop``, ``mint.data``, ... (a folder of modules directly under ``root``)."""
    return {f"{root.name}.{path.parent.name}" for path in root.glob("*/__init__.py")}


def package_of(module: str, packages: set[str]) -> str:
    """The package a module belongs to: ``mint.loop`` for mint.loop.runner, ``mint`` (ROOT) for a top-level module,
    and the entry point apart."""
    if module == ENTRY:
        return ENTRY
    top = ".".join(module.split(".")[:2])
    return top if top in packages else ROOT


def package_graph(graph: dict[str, dict[str, int]], root: Path = PACKAGE) -> dict[str, dict[str, int]]:
    """The import graph between mint's packages (``mint.loop``, ``mint.data``, ..., and the top-level modules as
    one, ``mint``)."""
    found = packages_in(root)
    packages: dict[str, dict[str, int]] = {}
    for module, edges in graph.items():
        for target, line in edges.items():
            source, sink = package_of(module, found), package_of(target, found)
            if source != sink:
                packages.setdefault(source, {}).setdefault(sink, line)
    return packages


def test_no_import_cycle_between_packages():
    graph = import_graph()
    packages = package_graph(graph)
    found = cycles(packages)
    assert not found, "import cycles between packages:\n" + "\n".join(_describe(c, packages) for c in found)


def test_the_top_level_modules_import_no_package():
    """mint/*.py is the floor: errors, the workspace, base models, runs. A top-level module that imported a package
    (the loop, the registry, ...) would sit above it and below it at once."""
    found = packages_in(PACKAGE)
    upward = [f"{module} -> {target} (line {line})" for module, edges in sorted(import_graph().items())
              if package_of(module, found) == ROOT for target, line in sorted(edges.items())
              if package_of(target, found) != ROOT]
    assert not upward, "a top-level module imports a package:\n" + "\n".join(upward)


def test_a_cycle_between_packages_is_found_though_no_module_cycle_is(tmp_path):
    """mint.a.x imports mint.b.y and mint.b.z imports mint.a.w: no module imports itself, the packages do."""
    root = tmp_path / "mint"
    for name, text in {"__init__.py": "", "a/__init__.py": "", "a/x.py": "from mint.b import y\n", "a/w.py": "",
                       "b/__init__.py": "", "b/y.py": "", "b/z.py": "from mint.a import w\n"}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = import_graph(root)
    assert not cycles(graph) and cycles(package_graph(graph, root)) == [["mint.a", "mint.b"]]


@pytest.mark.parametrize("files, expected", [
    ({"errors.py": "", "report.py": "from mint.loop import runner\n", "loop/__init__.py": "",
      "loop/runner.py": "from mint import errors\n"}, [["mint", "mint.loop"]]),
    ({"errors.py": "", "report.py": "", "loop/__init__.py": "", "loop/runner.py": "from mint import errors\n",
      "__main__.py": "from mint.loop import runner\n"}, []),
])
def test_the_top_level_modules_count_as_one_package(tmp_path, files, expected):
    """mint/report.py imports the loop, which imports mint/errors.py: no module imports itself back, but the top
    level is above the loop and below it at once; `python -m mint`'s entry point may start whatever it needs."""
    root = tmp_path / "mint"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = import_graph(root)
    assert not cycles(graph) and cycles(package_graph(graph, root)) == expected


def test_registry_imports_nothing_above_it():
    upward = [f"{module} -> {target} (line {line})" for module, edges in sorted(import_graph().items())
              if module == "mint.registry" or module.startswith("mint.registry.")
              for target, line in sorted(edges.items())
              if any(target == above or target.startswith(above + ".") for above in ABOVE_REGISTRY)]
    assert not upward, "the registry imports from above it:\n" + "\n".join(upward)


def _within(module: str, packages) -> bool:
    return any(module == package or module.startswith(package + ".") for package in packages)


def reachable(graph: dict[str, dict[str, int]], start: str, skip: tuple[str, ...] = ()) -> dict[str, list[str]]:
    """Every module ``start`` imports directly or through others (lazy imports too), each with one chain of imports
    that reaches it; modules in ``skip`` are not followed."""
    chains = {start: [start]}
    todo = [start]
    while todo:
        module = todo.pop()
        for target in sorted(graph.get(module, ())):
            if target not in chains and target not in skip:
                chains[target] = chains[module] + [target]
                todo.append(target)
    return chains


def _reaching(graph, packages, forbidden, skip=()) -> list[str]:
    return sorted({" -> ".join(chain) for module in graph if _within(module, packages)
                   for target, chain in reachable(graph, module, skip).items() if _within(target, forbidden)})


def test_evaluation_decodes_without_the_server_or_the_mixture():
    """Contract evaluation, its harnesses, the engine and the router (which the router's contract scores) reach no
    server module and nothing of the mixture: the engine decodes every answer without them."""
    graph = import_graph()
    found = _reaching(graph, ("mint.contract", "mint.harness", "mint.generation", "mint.routing"), (SERVER, "mint.mol"))
    assert not found, "evaluation reaches the server or the mixture:\n" + "\n".join(found)


def test_the_loop_reaches_the_server_only_through_its_serve_step():
    """The loop's modules import nothing of the server but the serve step's client, and nothing else of the loop
    (its eval, experience and controls) reaches the server at all."""
    graph = import_graph()
    direct = [f"{module} -> {target} (line {line})" for module, edges in sorted(graph.items())
              if _within(module, ("mint.loop",)) for target, line in sorted(edges.items())
              if _within(target, (SERVER,)) and target != SERVE_STEP_CLIENT]
    through = _reaching(graph, ("mint.loop",), (SERVER,), skip=(SERVE_STEP_CLIENT,))
    assert not direct and not through, "the loop reaches the server:\n" + "\n".join(direct + through)


@pytest.mark.parametrize("files, rule", [
    ({"contract/__init__.py": "", "contract/evaluate.py": "def f():\n    from mint.serve import gateway\n",
      "serve/__init__.py": "", "serve/gateway.py": ""}, test_evaluation_decodes_without_the_server_or_the_mixture),
    ({"harness/__init__.py": "from mint.mol import runtime\n", "mol/__init__.py": "", "mol/runtime.py": ""},
     test_evaluation_decodes_without_the_server_or_the_mixture),
    ({"loop/__init__.py": "", "loop/placebo.py": "from mint.contract import evaluate\n", "contract/__init__.py": "",
      "contract/evaluate.py": "from mint.serve import app\n", "serve/__init__.py": "", "serve/app.py": ""},
     test_the_loop_reaches_the_server_only_through_its_serve_step),
    ({"loop/__init__.py": "", "loop/steps.py": "from mint.serve import local\n", "serve/__init__.py": "",
      "serve/local.py": ""}, test_the_loop_reaches_the_server_only_through_its_serve_step),
])
def test_the_server_rules_catch_a_server_import_however_it_is_reached(tmp_path, monkeypatch, files, rule):
    root = tmp_path / "mint"
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    graph = import_graph(root)
    monkeypatch.setattr(sys.modules[__name__], "import_graph", lambda root=root: graph)
    with pytest.raises(AssertionError, match="reaches the server"):
        rule()


def test_no_private_name_is_imported_from_another_mint_module():
    modules = _modules(PACKAGE)
    private = [f"{path.relative_to(PACKAGE.parent)}:{line}: {name} from {source}"
               for module, path in modules.items()
               for source, name, line in _imports(module, path, modules)
               if name is not None and name.startswith("_") and not name.endswith("__") and source != module]
    assert not private, "private names imported across modules (give them a public name):\n" + "\n".join(private)


@pytest.mark.parametrize("files, expected", [
    ({"a.py": "from mint import b\n", "b.py": "def f():\n    from mint.a import x\n"}, [["mint.a", "mint.b"]]),
    ({"a.py": "from mint import b\n", "b.py": "x = 1\n"}, []),
    ({"a.py": "import mint.b\n", "b.py": "import mint.c\n", "c.py": "from . import a\n"},
     [["mint.a", "mint.b", "mint.c"]]),
])
def test_the_cycle_check_sees_cycles_through_any_import_form(tmp_path, files, expected):
    root = tmp_path / "mint"
    root.mkdir()
    (root / "__init__.py").write_text("")
    for name, text in files.items():
        (root / name).write_text(text)
    assert cycles(import_graph(root)) == expected
