"""Every specialist has a kind; training, evaluation, promotion and the loop ask the kind, never the name."""
from __future__ import annotations

import re
from pathlib import Path

from mint.project import DEFAULT_PROJECT, load_project

MINT = Path(__file__).resolve().parents[2] / "mint"
# the router's own modules, and the project file that names the kinds
ROUTER_FILES = {"mol/router.py", "train/router.py", "harness/router.py", "train/kinds.py", "project.py"}
# a name compared with the literal "router": `x == "router"`, `"router" != x`, `x in ("router", ...)`,
# or the literal added to a tuple of names
NAME_TEST = re.compile(r"""[=!]=\s*["']router["']|["']router["']\s*[=!]=|\bin\s*[(\[{]\s*["']router["']|"""
                       r"""\+\s*\(\s*["']router["']\s*,\s*\)""")


def name_tests(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if NAME_TEST.search(line)]


def test_no_module_outside_the_routers_own_compares_a_specialist_name_with_router():
    found = {str(path.relative_to(MINT)): hits for path in sorted(MINT.rglob("*.py"))
             if str(path.relative_to(MINT)) not in ROUTER_FILES and (hits := name_tests(path.read_text()))}
    assert found == {}


def test_the_name_test_finds_the_comparisons_it_forbids():
    assert name_tests('    if specialist == "router":   # a probe') == ['if specialist == "router":   # a probe']
    assert name_tests("specialists=project.names + ('router',))")
    assert name_tests('if "router" != name: pass') and name_tests('if name in ("router", "x"): pass')
    assert not name_tests('harness = "router"') and not name_tests("name == project.router")


def test_each_kind_says_what_it_trains_from_how_it_is_scored_and_what_it_makes():
    from mint.train.kinds import KINDS, kind_of

    assert set(KINDS) == {"generator", "router"}
    router, coding = kind_of(DEFAULT_PROJECT, DEFAULT_PROJECT.router), kind_of(DEFAULT_PROJECT, "coding")
    assert (router.name, coding.name) == ("router", "generator")
    # the harness that scores each is the project's to say (mint.yaml's harness:, by default its own name's)
    assert DEFAULT_PROJECT.harness_of(DEFAULT_PROJECT.router) == "router" and DEFAULT_PROJECT.harness_of("coding") == "coding"
    assert "probe" in router.artifact and "LoRA" in coding.artifact


def test_a_router_declared_under_another_name_is_trained_and_scored_as_the_router(tmp_path):
    from mint.train.kinds import kind_of

    path = tmp_path / "mint.yaml"
    path.write_text("base: tiny-random\nspecialists:\n  chat: {keywords: [hi]}\n  coding: {keywords: [python]}\n"
                    "  dispatcher: {kind: router}\n")
    project = load_project(path)
    assert project.router == "dispatcher" and project.names == ("chat", "coding")
    assert kind_of(project, "dispatcher").name == "router" and kind_of(project, "router").name == "generator"
    assert project.all_names == ("chat", "coding", "dispatcher")
