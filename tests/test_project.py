import pytest

from mint.errors import BadInput
from mint.project import DEFAULT_PROJECT, init_project, load_project


def test_init_project_round_trips_the_defaults(tmp_path):
    init_project(tmp_path)
    loaded = load_project(tmp_path / "mint.yaml")
    assert loaded.names == ("chat", "agent", "coding", "genui")
    assert [s.keywords for s in loaded.specialists] == [s.keywords for s in DEFAULT_PROJECT.specialists]
    assert [s.tool_use for s in loaded.specialists] == [False, True, False, False]


@pytest.mark.parametrize("text, where", [
    ("base: x\nspecialists:\n  coding:\n    keywordz: [a]\n", "mint.yaml:4: specialists.coding.keywordz: unknown key"),
    ("base: x\nspecialists: [coding]\n", "mint.yaml:2: specialists: expected a mapping"),
    ("base: x\nspecialists:\n  Bad/Name: {}\n", "mint.yaml:3: specialists.Bad/Name: a specialist name"),
    ("base: x\nspecialists: {a: {keywords: [b]}\n", "mint.yaml:3: invalid YAML"),
    ("bases: x\n", "mint.yaml:1: bases: unknown key"),
    ("base: x\nspecialists: {a: {}}\nengine: vllm\n", "mint.yaml:3: engine: expected `local` or a mapping"),
    ("base: x\nspecialists: {a: {}}\nengine:\n  url: localhost:8000\n",
     "mint.yaml:4: engine.url: 'localhost:8000' is not an http(s) URL"),
    ("base: x\nspecialists: {a: {}}\nengine: {url: 'http://h:1/v1', timeout_s: 0}\n",
     "mint.yaml:3: engine.timeout_s: must be greater than 0"),
])
def test_bad_project_files_name_file_line_and_field(tmp_path, text, where):
    (tmp_path / "mint.yaml").write_text(text)
    with pytest.raises(BadInput) as info:
        load_project(tmp_path / "mint.yaml")
    assert str(info.value).startswith(str(tmp_path / where.split(":")[0]) + ":" + where.split(":", 1)[1])


def test_the_engine_is_local_by_default_or_the_server_mint_yaml_names(tmp_path):
    (tmp_path / "mint.yaml").write_text("base: x\nspecialists: {a: {}}\n")
    assert load_project(tmp_path / "mint.yaml").engine is None
    (tmp_path / "mint.yaml").write_text("base: x\nspecialists: {a: {}}\n"
                                        "engine: {url: 'http://gpu-1:8000/v1', api_key_env: VLLM_KEY}\n")
    engine = load_project(tmp_path / "mint.yaml").engine
    assert (engine.url, engine.api_key_env, engine.timeout_s) == ("http://gpu-1:8000/v1", "VLLM_KEY", 60.0)


def test_yaml_tags_are_refused(tmp_path):
    (tmp_path / "mint.yaml").write_text("base: !!python/object/apply:os.system ['echo hi']\n")
    with pytest.raises(BadInput, match="invalid YAML"):
        load_project(tmp_path / "mint.yaml")


def test_the_checkouts_contracts_folder_works_when_copied_and_its_catalog_is_the_packaged_one(tmp_path):
    import shutil
    from pathlib import Path

    from mint.harness.genui import DEFAULT_CATALOG

    checkout = Path(__file__).resolve().parent.parent / "contracts"
    copied = tmp_path / "contracts"
    shutil.copytree(checkout, copied, symlinks=True)    # as `cp -a` or a git checkout elsewhere would
    assert (copied / "ui4a" / "catalog.v1.json").read_bytes() == DEFAULT_CATALOG.read_bytes()


def test_init_declares_the_router_as_a_specialist_of_kind_router(tmp_path):
    init_project(tmp_path)
    text = (tmp_path / "mint.yaml").read_text()
    assert "  router:\n    kind: router\n" in text
    loaded = load_project(tmp_path / "mint.yaml")
    assert (loaded.router, loaded.kind_of("router"), loaded.kind_of("coding")) == ("router", "router", "generator")
    assert "router" not in loaded.names          # the router picks among the generators, not itself


def test_a_project_without_kinds_keeps_its_router_named_router(tmp_path):
    (tmp_path / "mint.yaml").write_text("base: x\nspecialists:\n  chat: {keywords: [hi]}\n  router: {}\n")
    loaded = load_project(tmp_path / "mint.yaml")
    assert (loaded.names, loaded.router) == (("chat",), "router")
    (tmp_path / "mint.yaml").write_text("base: x\nspecialists:\n  chat: {keywords: [hi]}\n")
    assert load_project(tmp_path / "mint.yaml").router == "router"


@pytest.mark.parametrize("text, where", [
    ("base: x\nspecialists:\n  chat: {kind: poet}\n", "mint.yaml:3: specialists.chat.kind: expected one of"),
    ("base: x\nspecialists:\n  chat: {}\n  r: {kind: router, keywords: [a]}\n",
     "mint.yaml:4: specialists.r.keywords: unknown key"),
    ("base: x\nspecialists:\n  chat: {}\n  a: {kind: router}\n  b: {kind: router}\n",
     "mint.yaml:5: specialists.b.kind: a project has one router"),
    ("base: x\nspecialists:\n  r: {kind: router}\n", "mint.yaml:2: specialists: expected at least one"),
])
def test_bad_kinds_name_file_line_and_field(tmp_path, text, where):
    (tmp_path / "mint.yaml").write_text(text)
    with pytest.raises(BadInput) as info:
        load_project(tmp_path / "mint.yaml")
    assert str(info.value).startswith(str(tmp_path / where.split(":")[0]) + ":" + where.split(":", 1)[1])


def test_the_fallback_specialist_is_the_first_unless_mint_yaml_names_one(tmp_path):
    init_project(tmp_path)
    assert load_project(tmp_path / "mint.yaml").fallback == DEFAULT_PROJECT.fallback == "chat"
    (tmp_path / "mint.yaml").write_text("base: x\nfallback: coding\nspecialists:\n  chat: {}\n  coding: {}\n")
    assert load_project(tmp_path / "mint.yaml").fallback == "coding"
    (tmp_path / "mint.yaml").write_text("base: x\nspecialists:\n  chat: {}\n  coding: {}\nfallback: codin\n")
    with pytest.raises(BadInput, match=r"mint.yaml:5: fallback: 'codin' is not a generator specialist of this file "
                                       r"\(did you mean coding\?\)"):
        load_project(tmp_path / "mint.yaml")


RENAMED = """\
base: tiny-random
specialists:
  talk: {harness: chat, keywords: [hello]}
  tools: {harness: agent, tool_use: true, keywords: [book]}
  code: {harness: coding, keywords: [python]}
  poetry: {keywords: [poem]}
"""


def test_a_specialist_names_its_harness_and_is_found_by_it_whatever_it_is_called(tmp_path):
    (tmp_path / "mint.yaml").write_text(RENAMED)
    project = load_project(tmp_path / "mint.yaml")
    assert [project.harness_of(n) for n in project.names] == ["chat", "agent", "coding", "poetry"]
    assert project.specialist_with_harness("coding") == "code" and project.specialist_with_harness("genui") is None
    assert project.tool_specialist == "tools" and project.kind_of("code") == "generator"
    # without `harness:` a specialist has the harness of its own name
    assert [DEFAULT_PROJECT.harness_of(n) for n in DEFAULT_PROJECT.names] == list(DEFAULT_PROJECT.names)


def test_a_harness_no_specialist_registers_is_exit_2_at_its_line(tmp_path, capsys):
    from mint.cli import main
    from mint.harness import check_harnesses

    (tmp_path / "mint.yaml").write_text(RENAMED.replace("harness: coding", "harness: codng"))
    project = load_project(tmp_path / "mint.yaml")
    with pytest.raises(BadInput) as info:
        check_harnesses(project)
    assert str(info.value).startswith(f"{tmp_path / 'mint.yaml'}:5: specialists.code.harness: no harness named "
                                      "'codng' (did you mean coding?)")
    recipe = tmp_path / "r.yaml"
    recipe.write_text("recipe: r\nsteps:\n  - ingest: {sources: [mint.yaml]}\n")
    assert main(["recipe", "check", str(recipe)]) == 2
    assert "specialists.code.harness: no harness named 'codng'" in capsys.readouterr().err
    check_harnesses(DEFAULT_PROJECT)      # the defaults name none: each has the harness of its own name
