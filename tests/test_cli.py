import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mint import __version__
from mint.cli import main
from tests.conftest import chat_row, run_mint, write_jsonl


def test_version_and_help(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"mint {__version__}"
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    assert "Examples:" in help_text and "mint ingest logs/ --dataset prod" in help_text


def test_usage_error_exits_2(capsys):
    assert main(["ingest"]) == 2
    assert main(["ingest", "x", "--bogus"]) == 2


def test_init_writes_project_and_never_overwrites(tmp_path, capsys):
    assert main(["init", "--dir", str(tmp_path), "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert sorted(first["created"]) == ["contracts/", "examples/", "mint.yaml", "recipes/"]
    assert (tmp_path / "contracts" / "genui.yaml").is_file() and (tmp_path / "contracts" / "ui4a" / "catalog.v1.json").is_file()
    assert (tmp_path / "recipes" / "smoke.yaml").is_file() and (tmp_path / "examples" / "heldout" / "genui.jsonl").is_file()
    (tmp_path / "mint.yaml").write_text("base: tiny-random\nspecialists: {chat: {keywords: [hi]}}\n")
    assert main(["init", "--dir", str(tmp_path), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["created"] == [] and "mint.yaml" in second["kept"]
    assert (tmp_path / "mint.yaml").read_text().startswith("base: tiny-random")


def test_ingest_json_summary_and_exit_0(ws, tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("hi there"), "garbage"])
    assert main(["ingest", str(path), "--dataset", "d", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["created"] is True and summary["episodes_added"] == 1
    assert summary["sources"][0] | {"path": None} == {"path": None, "format": "jsonl", "bytes": path.stat().st_size,
                                                      "read": 2, "kept": 1, "duplicate": 0, "quarantined": 1,
                                                      "scrubbed": 0, "updated": 0, "pairs": 0,
                                                      "reasons": {"invalid JSON": 1}, "reads_as": {}, "hint": None}
    assert summary["reasons"] == {"invalid JSON": 1}


def test_ingest_human_summary(ws, tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("mail me at a@b.io")])
    assert main(["ingest", str(path), "--dataset", "d"]) == 0
    text = capsys.readouterr().out
    assert "kept" in text and "EMAIL 1" in text and "+1 episode, 1 in all" in text


def test_ingest_nonexistent_path_exits_2_and_writes_nothing(ws, tmp_path):
    result = run_mint("ingest", str(tmp_path / "nope.jsonl"), "--dataset", "d")
    assert result.returncode == 2
    assert "nope.jsonl: no such file or directory" in result.stderr
    assert not ws.home.exists()


def test_bad_project_file_names_file_line_and_field(ws, tmp_path, capsys):
    (tmp_path / "mint.yaml").write_text("base: smollm2-135m\nspecialists:\n  coding:\n    keywords: python\n")
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("x")])
    assert main(["ingest", str(path)]) == 2
    assert "mint.yaml:4: specialists.coding.keywords: expected a list" in capsys.readouterr().err
    assert not ws.home.exists()


def test_data_commands(ws, tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("python bug"), chat_row("hello")])
    assert main(["ingest", str(path), "--dataset", "d"]) == 0
    capsys.readouterr()
    assert main(["data", "ls", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["datasets"]
    assert listed["name"] == "d" and listed["episodes"] == 2 and listed["by_specialist"] == {"coding": 1, "chat": 1}
    assert main(["data", "show", "d", "--head", "1", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert len(shown["head"]) == 1 and shown["manifest"]["total_episodes"] == 2
    assert main(["data", "show", "d", "--head", "1"]) == 0
    assert "python bug" in capsys.readouterr().out
    assert main(["data", "export", "d", str(tmp_path / "o.jsonl"), "--format", "openai", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["episodes"] == 2
    assert main(["data", "show", "nope"]) == 2
    assert main(["data", "export", "d", str(tmp_path / "o2"), "--format", "csv"]) == 2


def test_an_output_path_under_a_file_exits_2_naming_it(ws, tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("hello")])
    assert main(["ingest", str(path), "--dataset", "d"]) == 0
    a_file = tmp_path / "notes.txt"
    a_file.write_text("not a folder")
    capsys.readouterr()
    for args in (["init", "--dir", str(a_file / "project")], ["data", "export", "d", str(a_file / "deep" / "o.jsonl")]):
        assert main(args) == 2, args
        error = capsys.readouterr().err
        assert str(a_file) in error and "internal error" not in error and "Traceback" not in error, error
    assert main(["--json", "init", "--dir", str(a_file / "project")]) == 2
    assert json.loads(capsys.readouterr().out)["file"].startswith(str(a_file))
    assert a_file.read_text() == "not a folder"


def test_show_prints_placeholders_and_brackets_literally(ws, tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("mail x@y.io about l[1::2] and [bold]")])
    assert main(["ingest", str(path), "--dataset", "d"]) == 0
    capsys.readouterr()
    assert main(["data", "show", "d"]) == 0
    assert "mail [EMAIL] about l[1::2] and [bold]" in capsys.readouterr().out


def test_home_and_json_are_accepted_after_the_subcommand(tmp_path, capsys):
    home = tmp_path / "elsewhere"
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("hello there")])
    assert main(["ingest", str(path), "--dataset", "d", "--home", str(home)]) == 0
    capsys.readouterr()
    assert main(["data", "ls", "--home", str(home), "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)["datasets"]
    assert listed["name"] == "d"
    assert main(["--json", "data", "ls", f"--home={home}"]) == 0
    assert json.loads(capsys.readouterr().out)["datasets"][0]["episodes"] == 1


def test_json_errors_are_one_object_with_file_line_and_field(tmp_path, capsys):
    (tmp_path / "mint.yaml").write_text("base: smollm2-135m\nspecialists:\n  coding:\n    keywords: python\n")
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("x")])
    code = main(["ingest", str(path), "--config", str(tmp_path / "mint.yaml"), "--home", str(tmp_path / "h"),
                 "--json"])
    assert code == 2
    error = json.loads(capsys.readouterr().out)
    assert error["exit_code"] == 2 and error["line"] == 4 and error["field"] == "specialists.coding.keywords"
    assert error["file"].endswith("mint.yaml") and "expected a list" in error["error"]


def test_json_usage_errors_are_json_too(capsys):
    assert main(["--json", "data", "ls", "--bogus"]) == 2
    error = json.loads(capsys.readouterr().out)
    assert error["exit_code"] == 2 and "--bogus" in error["error"]


def test_arguments_after_double_dash_are_left_alone():
    from mint.cli import hoist_global_options

    assert hoist_global_options(["chat", "--", "--json"]) == (["chat", "--", "--json"], False)
    assert hoist_global_options(["chat", "hi", "--json", "--home", "h"]) == (["--home", "h", "chat", "hi", "--json"],
                                                                            True)


def test_a_long_path_in_a_message_stays_on_one_line_when_output_is_piped(tmp_path):
    """A CI log or a cron mail is not a terminal: rich must not break a path across lines there (it can then be
    neither copied nor grepped)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    write_jsonl(deep / "bad.jsonl", ["not json"])
    done = run_mint("ingest", str(deep / "bad.jsonl"), "--dataset", "x", cwd=deep,
                    env={"MINT_HOME": str(deep / ".mint")})
    assert done.returncode == 2, done.stderr
    quarantine = str(deep / ".mint" / "datasets" / "x" / "quarantine.jsonl")
    assert any(quarantine in line for line in done.stdout.splitlines()), done.stdout


# --- a project is required where it matters ------------------------------------------------------------------

WRITES = [
    ["ingest", "logs.jsonl", "--dataset", "prod"],
    ["train", "--specialist", "genui", "--data", "prod", "--method", "sft", "--base", "tiny-random"],
    ["eval", "genui:v1", "--contract", "contracts/genui.yaml"],
    ["promote", "genui:v1"],
    ["reject", "genui:v1", "--why", "bad"],
    ["rollback", "genui", "--why", "bad"],
    ["loop", "recipes/smoke.yaml"],
    ["serve", "--port", "0"],
    ["chat", "hello"],
    ["registry", "import", "lora", "--specialist", "genui"],
    ["registry", "gc"],
]


def _outside_a_project(tmp_path, monkeypatch):
    for name in ("MINT_HOME", "MINT_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    write_jsonl(tmp_path / "logs.jsonl", [chat_row("hi there")])


@pytest.mark.parametrize("argv", WRITES, ids=lambda argv: " ".join(argv[:2]))
def test_a_write_outside_a_project_is_refused_and_writes_nothing(argv, tmp_path, monkeypatch, capsys):
    _outside_a_project(tmp_path, monkeypatch)
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == "error: no mint.yaml here: run `mint init`, or pass --config / --home"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs.jsonl"]     # no .mint, nothing else
    (tmp_path / ".mint").mkdir()          # a workspace folder alone is not a project: it is read, never written
    assert main(argv) == 2
    assert "no mint.yaml here" in capsys.readouterr().err and not any((tmp_path / ".mint").iterdir())


@pytest.mark.parametrize("argv", [["data", "ls"], ["runs", "ls"], ["registry", "ls"], ["registry", "history", "genui"],
                                  ["report"], ["monitor"], ["data", "quarantine", "prod"]])
def test_read_only_commands_say_so_outside_a_project_and_answer_in_a_new_one(argv, tmp_path, monkeypatch, capsys):
    _outside_a_project(tmp_path, monkeypatch)
    assert main(argv) == 2
    assert "no mint.yaml here: run `mint init`" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs.jsonl"]
    assert main(["init"]) == 0
    capsys.readouterr()
    # in a project with nothing in it yet: an empty answer, exit 0, and still nothing written
    expected = 2 if argv[:2] == ["data", "quarantine"] else 0     # a dataset that does not exist is bad input
    assert main(argv) == expected, capsys.readouterr()
    assert not (tmp_path / ".mint").exists()


def test_a_workspace_without_a_mint_yaml_is_read_but_not_written(tmp_path, monkeypatch, capsys):
    _outside_a_project(tmp_path, monkeypatch)
    (tmp_path / ".mint").mkdir()
    assert main(["data", "ls"]) == 0
    assert main(["ingest", "logs.jsonl"]) == 2


def test_config_or_home_names_the_project_from_anywhere(tmp_path, monkeypatch, capsys):
    _outside_a_project(tmp_path, monkeypatch)
    project = tmp_path / "assistant"
    assert main(["init", "--dir", str(project)]) == 0
    assert main(["ingest", "logs.jsonl", "--dataset", "a", "--config", str(project / "mint.yaml")]) == 0
    assert main(["ingest", "logs.jsonl", "--dataset", "b", "--home", str(tmp_path / "ws")]) == 0
    capsys.readouterr()
    assert main(["data", "ls", "--json"]) == 0                                # ./.mint, made by the first ingest
    assert [d["name"] for d in json.loads(capsys.readouterr().out)["datasets"]] == ["a"]
    assert main(["data", "ls", "--home", str(tmp_path / "ws"), "--json"]) == 0
    assert [d["name"] for d in json.loads(capsys.readouterr().out)["datasets"]] == ["b"]


def test_config_names_the_project_file_the_commands_read(tmp_path, monkeypatch, capsys):
    _outside_a_project(tmp_path, monkeypatch)
    (tmp_path / "legal.yaml").write_text("base: tiny-random\nspecialists:\n  legal:\n    keywords: [clause]\n")
    write_jsonl(tmp_path / "clauses.jsonl", [chat_row("explain this clause", "it binds you")])
    assert main(["ingest", "clauses.jsonl", "--config", "legal.yaml", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["by_specialist"] == {"legal": 1}
    assert main(["--config", str(tmp_path / "legal.yaml"), "train", "--specialist", "legl", "--data", "default",
                 "--method", "sft"]) == 2
    assert "did you mean legal?" in capsys.readouterr().err
    assert "MINT_CONFIG" not in os.environ                                # set for one invocation only


def test_a_workspace_path_that_is_a_file_is_exit_2(tmp_path, monkeypatch, capsys):
    _outside_a_project(tmp_path, monkeypatch)
    monkeypatch.setenv("MINT_HOME", str(tmp_path / "logs.jsonl"))
    assert main(["data", "ls"]) == 2
    assert "logs.jsonl: --home: is a file, not a workspace folder" in capsys.readouterr().err


# --- conventions: -q/-v on every command, completion, NO_COLOR ----------------------------------------------

def test_quiet_and_verbose_are_on_every_command_and_v_is_not_version():
    from mint.cli import root_command

    groups = [root_command()] + [c for c in root_command().commands.values() if hasattr(c, "commands")]
    leaves = [command for _path, command in _walk(root_command())]
    assert len(leaves) > 20
    for command in groups + leaves:
        options = {opt for param in command.params for opt in getattr(param, "opts", [])}
        assert {"-q", "--quiet", "-v", "--verbose"} <= options, command.name
    data_show = root_command().commands["data"].commands["show"]
    assert [p.opts for p in data_show.params if p.name == "version"] == [["--version"]]


def _walk(command, path=()):
    if hasattr(command, "commands"):
        for name, sub in command.commands.items():
            yield from _walk(sub, path + (name,))
    else:
        yield " ".join(path), command


def test_quiet_silences_progress_and_verbose_says_where_an_error_was_raised(tmp_path, monkeypatch):
    _outside_a_project(tmp_path, monkeypatch)
    plain = run_mint("data", "ls", cwd=tmp_path)
    assert plain.returncode == 2 and "Traceback" not in plain.stderr
    verbose = run_mint("data", "ls", "-v", cwd=tmp_path)
    assert verbose.returncode == 2 and "Traceback" in verbose.stderr and "error: no mint.yaml here" in verbose.stderr
    run_mint("init", cwd=tmp_path)
    write_jsonl(tmp_path / "bad.jsonl", [{"text": "not a conversation"}])
    loud = run_mint("ingest", "bad.jsonl", "logs.jsonl", cwd=tmp_path)
    assert loud.returncode == 0 and "warning" in loud.stderr and "bad.jsonl" in loud.stderr
    quiet = run_mint("-q", "ingest", "bad.jsonl", "logs.jsonl", "--dataset", "again", cwd=tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "" and "version" in quiet.stdout   # the result, no warning


def test_shell_completion_installs_and_completes(tmp_path):
    import shutil
    import subprocess
    import sys

    # typer installs for the shell it detects among mint's parent processes (here pytest's, which may be sh):
    # its own switch makes it take the shell named instead, as it does in typer's tests
    done = run_mint("--install-completion", "bash",
                    env={"HOME": str(tmp_path), "_TYPER_COMPLETE_TEST_DISABLE_SHELL_DETECTION": "1"})
    assert done.returncode == 0, done.stderr
    script = tmp_path / ".bash_completions" / "mint.sh"
    assert script.is_file() and f"source '{script}'" in (tmp_path / ".bashrc").read_text()
    if shutil.which("bash") is None:
        return
    # what bash does on `mint da<TAB>` and `mint data <TAB>`, with the installed script, against this mint
    shim = tmp_path / "bin" / "mint"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nexec {sys.executable} -m mint \"$@\"\n")
    shim.chmod(0o755)
    probe = (f"source {script}; COMP_WORDS=(mint da); COMP_CWORD=1; _mint_completion mint; echo ${{COMPREPLY[@]}}; "
             "COMP_WORDS=(mint data ''); COMP_CWORD=2; _mint_completion mint; echo ${COMPREPLY[@]}")
    shown = subprocess.run(["bash", "-c", probe], capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}"})
    first, second = shown.stdout.splitlines()
    assert first == "data" and {"ls", "show", "export", "quarantine"} <= set(second.split()), shown


def test_no_color_means_plain_text_not_even_bold(tmp_path):
    run_mint("init", cwd=tmp_path)
    write_jsonl(tmp_path / "logs.jsonl", [chat_row("hi there")])
    run_mint("ingest", "logs.jsonl", cwd=tmp_path)
    styled = run_mint("data", "ls", cwd=tmp_path, env={"FORCE_COLOR": "1", "NO_COLOR": ""})
    assert "\x1b[" in styled.stdout                     # a terminal gets its bold header
    plain = run_mint("data", "ls", cwd=tmp_path, env={"FORCE_COLOR": "1", "NO_COLOR": "1"})
    assert plain.returncode == 0 and "default" in plain.stdout and "\x1b[" not in plain.stdout


@pytest.mark.parametrize("args, says", [
    (["chat", "hi", "--specialist", "chta"], "did you mean chat?"),
    (["registry", "ls", "--status", "candidat"], "did you mean candidate?"),
    (["monitor", "--window", "1dd"], "did you mean 1d?"),
    (["data", "export", "prod", "out.jsonl", "--split", "trian"], "did you mean train?"),
])
def test_a_mistyped_choice_gets_a_did_you_mean(ws, capsys, args, says):
    from mint.registry import store

    store.open_store(ws).close()
    assert main(args) == 2
    assert says in capsys.readouterr().err


# --- a command that loads a model answers a mistake before it imports torch, and says its device line after ---

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "transformers", "trl", "peft", "datasets")
DEVICE_LINE = "(--device or MINT_DEVICE chooses the training device)"
TINY_PROJECT = "base: tiny-random\nspecialists:\n  chat: {keywords: [hi]}\n  genui: {keywords: [form]}\n"


def run_child(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """The CLI in a child process of this checkout, which prints its exit code and the heavy packages it imported."""
    probe = ("import sys; from mint.cli import main; code = main(sys.argv[1:]); "
             f"print(code, [m for m in {HEAVY!r} if m in sys.modules])")
    return subprocess.run([sys.executable, "-c", probe, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


@pytest.mark.parametrize("args, message", [
    (["eval", "genui:v9", "--contract", str(ROOT / "contracts" / "genui-smoke.yaml")], "genui:v9: no such revision"),
    (["eval", "base", "--contract", "nope.yaml"], "nope.yaml: no such file"),
    (["chat", "hi", "--specialist", "codng"], "unknown specialist 'codng'"),
    (["chat", "hi", "--base", "tiny-randm"], "unknown base 'tiny-randm'"),
    (["serve", "--port", "0", "--max-batch", "0"], "--max-batch >= 1"),
    (["serve", "--port", "0", "--base", "tiny-randm"], "unknown base 'tiny-randm'"),
    (["loop", "missing.yaml"], "missing.yaml: no such file"),
    (["loop", "bad.yaml"], "bad.yaml:3: invalid YAML"),
])
def test_a_mistake_is_answered_before_torch_is_imported_and_without_the_device_line(ws, args, message):
    (ws.home.parent / "mint.yaml").write_text(TINY_PROJECT)
    (ws.home.parent / "bad.yaml").write_text("recipe: bad\nsteps: [\n")
    child = run_child(args, ws.home.parent)
    assert child.stdout.split("\n")[-2] == "2 []", child.stdout + child.stderr
    assert message in child.stderr and "Traceback" not in child.stderr, child.stderr
    assert DEVICE_LINE not in child.stderr, child.stderr


def test_chat_says_its_device_line_first_once_its_checks_pass(ws):
    (ws.home.parent / "mint.yaml").write_text(TINY_PROJECT)
    child = run_child(["chat", "hi there", "--max-new-tokens", "2"], ws.home.parent)
    assert child.stdout.split("\n")[-2].startswith("0 "), child.stdout + child.stderr
    lines = child.stderr.splitlines()
    assert lines[0].startswith("decoding on cpu") and lines[0].endswith(DEVICE_LINE), child.stderr
    assert sum(DEVICE_LINE in line for line in lines) == 1


def test_a_loop_says_its_device_line_first_once_the_recipe_is_checked(ws):
    (ws.home.parent / "mint.yaml").write_text(TINY_PROJECT)
    (ws.home.parent / "r.yaml").write_text("recipe: r\nbase: tiny-random\ndataset: d\nsteps:\n"
                                           f"  - ingest: {{sources: [{ROOT / 'examples' / 'logs'}]}}\n")
    child = run_child(["loop", "r.yaml", "--dry-run"], ws.home.parent)
    assert child.stdout.split("\n")[-2].startswith("0 "), child.stdout + child.stderr
    lines = child.stderr.splitlines()
    assert lines and lines[0].startswith("training on cpu") and DEVICE_LINE in lines[0], child.stderr
