"""The ``mint`` command line: parse, call one library function, render.

One module per command group; each registers its commands on the root app in
``mint.cli.common``. Every command takes ``--json`` for one machine-readable
object instead of tables. Exit codes: 0 success, 1 refused (a gate failed),
2 bad input, 3 a bug.
"""
from __future__ import annotations

import json
import os
import sys
import traceback

import click
import typer
from rich.markup import escape

try:   # newer typer vendors its own copy of click, with its own exception classes
    from typer._click.exceptions import ClickException as _TyperClickException
except ImportError:  # pragma: no cover
    _TyperClickException = click.ClickException  # type: ignore[misc,assignment]  # older typer: click's own class

from mint.cli import (base, chat, contract, data, export, genui, loop, monitor, project,  # noqa: F401
                      registry, report, route, runs, serve, train)  # each module registers its commands
from mint.cli.common import app, problems, reset_state, set_verbosity, verbose
from mint.errors import MintError, bad_path, unwritable

EXAMPLES = """
Examples:

\b
  mint init                                   # a project: mint.yaml, contracts/, recipes/, examples/
  mint ingest logs/ --dataset prod            # logs -> a versioned dataset
  mint data show prod --head 3                # what was kept, by specialist
  mint data export prod --format openai out.jsonl
  mint base show smollm2-135m                 # the embedded default base
  mint train --specialist coding --data prod --method sft --set max_steps=20
  mint contract check contracts/coding.yaml   # validate a contract without running it
  mint eval coding:v1 --contract contracts/coding.yaml
  mint promote coding:v1                      # only if its report passed against the champion
  mint chat "What is the capital of France?"  # one turn through the champions
  mint rollback coding --why "breaks JSON"    # back to the previous champion

\b
Commands that write (ingest, train, eval, promote, reject, rollback, loop, chat, serve, registry import/gc)
run in a project: a folder with a mint.yaml (`mint init` makes one), or name it with --config FILE or its
workspace with --home DIR. A contract is the YAML that says what "better" means for one specialist: the
harness it runs in, the suites it is measured on and the gates a candidate must pass.
"""

app.info.help = "mint: keep a deployed Mixture-of-LoRA model learning.\n" + EXAMPLES

_command = None


def _verbosity_options() -> list:
    """-q/--quiet and -v/--verbose as click parameters, made by typer from a signature like any command's."""
    import typer.main

    flags = typer.Typer()

    @flags.command()
    def _flags(
        quiet: bool = typer.Option(False, "-q", "--quiet", expose_value=False, callback=set_verbosity,
                                   help="Print results and errors only: no progress lines, no warnings."),
        verbose: bool = typer.Option(False, "-v", "--verbose", expose_value=False, callback=set_verbosity,
                                     help="Say more: keep transformers', TRL's and datasets' own logs and progress "
                                          "bars, and print where an error was raised."),
    ) -> None:
        """-q and -v."""

    return [p for p in typer.main.get_command(flags).params if p.name in ("quiet", "verbose")]


def root_command():
    """The click command of the whole CLI, built once, with --quiet and --verbose on the root and on every
    command."""
    global _command
    if _command is None:
        import typer.main

        command = typer.main.get_command(app)
        options = _verbosity_options()

        def add(each) -> None:
            each.params.extend(options)
            for sub in getattr(each, "commands", {}).values():
                add(sub)

        add(command)
        _command = command
    return _command


ROOT_OPTIONS = ("--home", "--registry", "--config")
ROOT_FLAGS = ("--track",)


def hoist_global_options(argv: list[str]) -> tuple[list[str], bool]:
    """Accept ``--home DIR``, ``--config FILE``, ``--registry URL``, ``--track`` and ``--json`` anywhere on the line,
    as users type them.

    ``--home``, ``--config``, ``--registry`` and ``--track`` are root options, so they move to the front;
    ``--json`` belongs to every command, so it moves to the end. Arguments after ``--`` are left alone.
    """
    head, rest, json_out = [], [], False
    args = list(argv)
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--":
            rest += args[i:]
            break
        if arg == "--json":
            json_out = True
        elif arg in ROOT_FLAGS:
            head.append(arg)
        elif arg in ROOT_OPTIONS and i + 1 < len(args):
            head += [arg, args[i + 1]]
            i += 1
        elif arg.startswith(tuple(f"{option}=" for option in ROOT_OPTIONS)):
            head.append(arg)
        else:
            rest.append(arg)
        i += 1
    if json_out:
        cut = rest.index("--") if "--" in rest else len(rest)
        rest.insert(cut, "--json")
    return head + rest, json_out


def _report_error(json_out: bool, message: str, exit_code: int, exc: BaseException | None = None) -> int:
    """One line on stderr for people; with --json, one JSON object on stdout for programs."""
    if json_out:
        record = {"error": message, "file": getattr(exc, "file", None), "line": getattr(exc, "line", None),
                  "field": getattr(exc, "field", None), "exit_code": exit_code}
        sys.stdout.write(json.dumps(record, ensure_ascii=False) + "\n")
    else:
        if exc is not None and verbose():
            problems.print("".join(traceback.format_exception(exc)), markup=False, highlight=False)
        problems.print(f"[red]error:[/] {escape(message)}", highlight=False, soft_wrap=True)
    return exit_code


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map MintError to its exit code, anything unexpected to 3."""
    argv, json_out = hoist_global_options(sys.argv[1:] if argv is None else argv)
    config_env, track_env = os.environ.get("MINT_CONFIG"), os.environ.get("MINT_TRACK")
    reset_state()
    try:
        code = root_command().main(args=argv, standalone_mode=False, prog_name="mint")
        return code if isinstance(code, int) else 0   # a raised typer.Exit comes back as its code
    except MintError as exc:
        return _report_error(json_out, str(exc), exc.exit_code, exc)
    except (click.exceptions.Exit, typer.Exit) as exc:
        return exc.exit_code
    except (click.ClickException, _TyperClickException) as exc:   # unknown option, missing argument
        if json_out:
            return _report_error(True, exc.format_message(), 2)
        exc.show()
        return 2
    except (click.exceptions.Abort, typer.Abort, KeyboardInterrupt):
        problems.print("aborted")
        return 130
    except Exception as exc:  # noqa: BLE001 - the last line of defence: a bug, reported as one
        refused_write = unwritable(exc)   # a full disk or a read-only workspace is the machine's answer, not a bug
        if refused_write is not None:
            return _report_error(json_out, str(refused_write), refused_write.exit_code, refused_write)
        path_error = bad_path(exc)        # a file where the command needs a folder, and the like: the user's path
        if path_error is not None:
            return _report_error(json_out, str(path_error), path_error.exit_code, path_error)
        problems.print("[red]internal error[/] (a bug in mint; please report it with this trace):")
        problems.print(traceback.format_exc(), markup=False, highlight=False)
        if json_out:
            _report_error(True, f"internal error: {type(exc).__name__}: {exc}", 3)
        return 3
    finally:   # --config, --track, --quiet and --verbose hold for this invocation only
        reset_state()
        for name, value in (("MINT_CONFIG", config_env), ("MINT_TRACK", track_env)):
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def entry() -> None:
    sys.exit(main())
