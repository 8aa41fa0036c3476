"""Every command's --help shows an example, and every option says what it does."""
import typer.main

from mint.cli import app


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
