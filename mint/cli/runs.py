"""mint runs: the training runs in the workspace."""
from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import JSON_OPT, out, print_json, sub_app, ws
from mint.reporting.numbers import scientific, seconds, value

runs_app = sub_app("runs", "Training runs made by `mint train`.\n\nExamples:\n\n\b\n  mint runs ls\n"
                           "  mint runs ls --specialist genui\n  mint runs show genui-sft-20261130")


@runs_app.command("ls")
def runs_ls(specialist: Optional[str] = typer.Option(None, "--specialist", "-s", help="Only this specialist's runs."),
            limit: int = typer.Option(50, "--limit", help="At most this many runs, newest first."),
            json_out: bool = JSON_OPT) -> None:
    """List training runs, newest first: method, specialist, dataset, steps, final loss, duration, revision.

    \b
    Example:
      mint runs ls --specialist coding
    """
    from mint.runs import list_runs

    rows = list_runs(ws(), specialist=specialist, limit=limit)
    if json_out:
        return print_json({"runs": rows})
    if not rows:
        out.print("no runs yet: `mint train --specialist S --data D --method sft` makes one")
        return
    table = Table()
    for column in ("run", "method", "specialist", "dataset", "steps", "final loss", "duration", "revision", "status"):
        table.add_column(column, overflow="fold")
    for r in rows:
        steps = f"{value(r.steps)}/{value(r.max_steps)}" if r.max_steps else value(r.steps)
        table.add_row(escape(r.run), r.method or "-", r.specialist or "-", escape(r.dataset or "-"), steps,
                      value(r.final_loss), seconds(r.duration_s),
                      r.revision or "-", r.status)
    out.print(table)


@runs_app.command("show")
def runs_show(run: str = typer.Argument(..., help="A run folder name or a unique prefix of one."),
              json_out: bool = JSON_OPT) -> None:
    """Show one run: what it trained, with which settings, and its logged steps.

    \b
    Example:
      mint runs show genui-sft
    """
    from mint.runs import show_run

    detail = show_run(ws(), run)
    if json_out:
        return print_json(detail)
    s = detail.summary
    table = Table(show_header=False, title=escape(s.run))
    for key, shown in (("status", s.status), ("specialist", s.specialist), ("method", s.method),
                       ("dataset", s.dataset), ("base", s.base), ("steps", s.steps), ("final loss", value(s.final_loss)),
                       ("final reward", value(s.final_reward)), ("duration", seconds(s.duration_s)),
                       ("revision", s.revision), ("folder", detail.path)):
        table.add_row(key, escape(str(shown if shown is not None else "-")))
    out.print(table)
    logged = [m for m in detail.metrics if "loss" in m or "reward" in m]
    if logged:
        steps = Table(title="logged steps")
        for column in ("step", "loss", "reward", "learning rate", "tokens/s"):
            steps.add_column(column, justify="right")
        for m in logged[-20:]:
            steps.add_row(str(m.get("step")), value(m.get("loss")), value(m.get("reward")),
                          scientific(m.get("learning_rate")), value(m.get("tokens_per_s"), 3))
        out.print(steps)
