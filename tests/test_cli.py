import json

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
                                                      "reasons": {"invalid JSON": 1}}
    assert summary["reasons"] == {"invalid JSON": 1}


def test_ingest_human_summary(ws, tmp_path, capsys):
    path = write_jsonl(tmp_path / "a.jsonl", [chat_row("mail me at a@b.io")])
    assert main(["ingest", str(path), "--dataset", "d"]) == 0
    text = capsys.readouterr().out
    assert "kept" in text and "EMAIL 1" in text and "+1 episodes" in text


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
