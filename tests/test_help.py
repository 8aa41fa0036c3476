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
