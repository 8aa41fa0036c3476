"""The ``mint`` command line: parse, call one library function, render.

One module per command group; each registers its commands on the root app in
``mint.cli.common``. Every command takes ``--json`` for one machine-readable
object instead of tables. Exit codes: 0 success, 1 refused (a gate failed),
2 bad input, 3 a bug.
"""
from __future__ import annotations

import sys
import traceback

import click
import typer
from rich.markup import escape

try:   # newer typer vendors its own copy of click, with its own exception classes
    from typer._click.exceptions import ClickException as _TyperClickException
except ImportError:  # pragma: no cover
    _TyperClickException = click.ClickException

from mint.cli import base, chat, contract, data, export, genui, monitor, project, registry, route, serve, train  # noqa: F401 - registers commands
from mint.cli.common import app, err
from mint.errors import MintError

EXAMPLES = """
Examples:

\b
  mint init                                   # mint.yaml, contracts/, recipes/
  mint ingest logs/ --dataset prod            # logs -> a versioned dataset
  mint data show prod --head 3                # what was kept, by specialist
  mint data export prod --format openai out.jsonl
  mint base show smollm2-135m                 # the embedded default base
  mint chat "What is the capital of France?"  # one turn on the base
  mint train --specialist coding --data prod --method sft --set max_steps=20
  mint contract check contracts/coding.yaml   # validate without running
  mint eval coding:v2 --contract contracts/coding.yaml
  mint registry import ./my-lora --specialist coding
  mint promote coding:v2 --report report.json # only if it beat the current champion
  mint rollback coding                        # back to the previous champion
"""

app.info.help = "mint: keep a deployed Mixture-of-LoRA model learning.\n" + EXAMPLES


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map MintError to its exit code, anything unexpected to 3."""
    try:
        code = app(args=argv, standalone_mode=False, prog_name="mint")
        return code if isinstance(code, int) else 0   # a raised typer.Exit comes back as its code
    except MintError as exc:
        err.print(f"[red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        return exc.exit_code
    except (click.exceptions.Exit, typer.Exit) as exc:
        return exc.exit_code
    except (click.ClickException, _TyperClickException) as exc:   # unknown option, missing argument
        exc.show()
        return 2
    except (click.exceptions.Abort, typer.Abort, KeyboardInterrupt):
        err.print("aborted")
        return 130
    except Exception:  # noqa: BLE001 - the last line of defence: a bug, reported as one
        err.print("[red]internal error[/] (a bug in mint; please report it with this trace):")
        err.print(traceback.format_exc(), markup=False, highlight=False)
        return 3


def entry() -> None:
    sys.exit(main())
