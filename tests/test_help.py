"""Every command's --help shows an example, and every option says what it does."""
import re
from pathlib import Path

import pytest
import typer.main

from mint.cli import app, main


def leaf_commands():
    root = typer.main.get_command(app)

    def walk(command, path):
        if hasattr(command, "commands"):          # a group (typer vendors its own click classes)
            for name, sub in command.commands.items():
                yield from walk(sub, path + [name])
        else:
            yield " ".join(path), command

    yield from walk(root, [])


def test_every_command_has_an_example_and_every_option_a_description():
    missing = []
    for path, command in leaf_commands():
        if "Example" not in (command.help or ""):
            missing.append(f"mint {path}: no example in its help")
        for param in command.params:
            if param.param_type_name == "option" and not (getattr(param, "help", None) or "").strip():
                missing.append(f"mint {path} {param.opts[0]}: no description")
    assert len(list(leaf_commands())) > 20
    assert not missing, "\n".join(missing)


def help_pages():
    """Every command's and group's --help as a user reads it on a 100-column terminal."""
    from typer.testing import CliRunner

    runner = CliRunner()
    paths = {""} | {path for path, _command in leaf_commands()}
    paths |= {path.split()[0] for path in paths if " " in path}      # the groups: mint data, mint registry, ...
    for path in sorted(paths):
        result = runner.invoke(app, [*path.split(), "--help"], env={"COLUMNS": "100"}, terminal_width=100)
        assert result.exit_code == 0, (path, result.output)
        yield path, result.output


def test_help_shows_each_example_on_a_line_of_its_own():
    import re

    # two examples run together put the second "Example:" after text on the same line
    joined = [f"mint {path}: {line.strip()}" for path, page in help_pages() for line in page.splitlines()
              if re.search(r"\S.*\bExamples?:", line)]
    assert not joined, "\n".join(joined)


def test_help_never_breaks_a_line_inside_a_hyphenated_name():
    import re

    split = [f"mint {path}: {line.strip()}" for path, page in help_pages() for line in page.splitlines()
             if re.search(r"\w-$", line)]
    assert not split, "\n".join(split)


def test_help_usage_names_arguments_in_capitals_without_braces():
    usages = {path: next(line for line in page.splitlines() if line.startswith("Usage:"))
              for path, page in help_pages()}
    assert usages["loop"].endswith("[OPTIONS] RECIPE") and usages["data export"].endswith("NAME OUT")
    assert not [usage for usage in usages.values() if "{" in usage]


def gpu_guide_commands() -> list[list[str]]:
    """The `mint ...` lines of docs/gpu.md's code blocks, as words (comments dropped)."""
    import re
    import shlex

    text = (Path(__file__).resolve().parents[1] / "docs" / "gpu.md").read_text()
    lines = [re.sub(r"\s+#.*$", "", line).strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.splitlines()]
    return [shlex.split(line)[1:] for line in lines if line.startswith("mint ")]


@pytest.mark.parametrize("words", gpu_guide_commands(), ids=" ".join)
def test_every_command_of_the_gpu_guide_exists_with_its_options(words, capsys):
    path = [w for w in words[:2] if not w.startswith("-") and re.fullmatch(r"[a-z]+", w)]
    while path and main([*path, "--help"]) != 0:   # `mint train` takes no subcommand; `mint base show` does
        path.pop()
    shown = capsys.readouterr().out
    assert path and "Usage: mint " + " ".join(path) in shown
    for option in (w.split("=")[0] for w in words if w.startswith("--")):
        assert option in shown, f"mint {' '.join(path)} has no {option}"
