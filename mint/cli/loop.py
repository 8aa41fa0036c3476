"""mint loop and mint recipe: run the self-improvement loop a recipe describes."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import JSON_OPT, app, err, out, print_json, quiet_transformers, sub_app, ws

recipe_app = sub_app("recipe", "Recipes: YAML chains of ingest, experience, train, eval, promote and route.\n\n"
                               "Example:\n\n\b\n  mint recipe check recipes/demo.yaml")


@recipe_app.command("check")
def recipe_check(path: Path = typer.Argument(..., help="The recipe YAML."), json_out: bool = JSON_OPT) -> None:
    """Validate a recipe and the contracts it names without running anything (exit 2 with file:line: field).

    Example: mint recipe check recipes/smoke.yaml
    """
    from mint.loop.recipe import check_recipe

    summary = check_recipe(path)
    if json_out:
        return print_json(summary)
    out.print(f"[green]ok[/] {escape(str(path))}: recipe {escape(summary['recipe'])}, "
              f"{summary['iterations']} iteration(s) of {len(summary['steps'])} step(s) on dataset "
              f"{escape(summary['dataset'])}; specialists: {', '.join(summary['specialists']) or '-'}")
    for step in summary["steps"]:
        detail = ", ".join(f"{k}={v}" for k, v in step.items()
                           if k not in ("index", "kind", "line", "from_iteration", "until_iteration", "fatal"))
        extra = (f" (from iteration {step['from_iteration']})" if step["from_iteration"] > 1 else "") + \
            (f" (until iteration {step['until_iteration']})" if step["until_iteration"] else "") + \
            (" [fatal]" if step["fatal"] else "")
        out.print(f"  {step['index'] + 1}. {step['kind']}: {escape(detail)}{extra}")


@app.command("loop")
def loop_command(recipe: Path = typer.Argument(..., help="The recipe YAML (see recipes/)."),
                 iterations: Optional[int] = typer.Option(None, "--iterations", "-n",
                                                          help="Override the recipe's loop.iterations."),
                 resume: bool = typer.Option(False, "--resume", help="Continue a killed run from its iteration; "
                                                                     "finished steps are skipped."),
                 dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; run nothing."),
                 json_out: bool = JSON_OPT) -> None:
    """Run a recipe's steps for N iterations: unattended, idempotent, resumable, one at a time per workspace.

    Exit 0 when the loop ran (promoted or not), 1 when a step marked fatal failed its contract or another
    loop holds the workspace, 2 on bad input.

    Example: mint loop recipes/demo.yaml --iterations 2
    """
    from mint.loop.runner import run_loop

    quiet_transformers()

    def events(event: dict) -> None:
        if json_out:
            return
        if event["event"] == "start":
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])} …", highlight=False)
        elif event["event"] == "skip":
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])}: skipped (inputs unchanged)",
                      highlight=False)
        elif event["event"] == "end":
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])}: done in "
                      f"{event['seconds']:.0f}s", highlight=False)
        elif event["event"] == "note":
            err.print(escape(event["message"]))

    result = run_loop(ws(), recipe, iterations=iterations, resume=resume, dry_run=dry_run, events=events)
    if json_out:
        print_json(result)
    elif result.status == "dry run":
        table = Table(title=f"plan: {result.recipe}")
        for column in ("iteration", "step", "will"):
            table.add_column(column)
        for row in result.plan:
            table.add_row(str(row["iteration"]), escape(row["label"]), row["will"])
        out.print(table)
        if result.message:
            out.print(result.message)
    else:
        if result.status == "nothing new":
            out.print(f"{result.recipe}: {result.message}")
        else:
            _render_generations(result)
        for alert in result.alerts:
            out.print(f"[yellow]warning (mint monitor):[/] {escape(alert)}")
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.3g}"


def _render_generations(result) -> None:
    table = Table(title=f"{result.recipe}: {result.iterations} iteration(s)")
    for column in ("iter", "specialist", "candidate", "metric: baseline → candidate (Δ, 95% CI)", "verdict",
                   "champion after"):
        table.add_column(column, overflow="fold")
    for row in result.generations:
        lines = []
        for name, m in row.metrics.items():
            interval = m.get("interval")
            ci = f", [{_fmt(interval[0])}, {_fmt(interval[1])}]" if isinstance(interval, (list, tuple)) \
                and len(interval) == 2 else ""
            lines.append(f"{escape(name)}: {_fmt(m.get('baseline'))} → {_fmt(m.get('value'))} "
                         f"({_fmt(m.get('delta'))}{ci})")
        verdict = "[green]pass[/]" if row.verdict == "pass" else "[red]fail[/]"
        table.add_row(str(row.iteration), row.specialist, row.candidate or "-", "\n".join(lines) or "-", verdict,
                      row.champion_after or "-")
    out.print(table)
    _render_progress(result)
    for row in result.generations:
        if row.reason:
            out.print(f"[yellow]{row.specialist} (iteration {row.iteration}):[/] {escape(row.reason)}")
        if row.experience:
            pool, sources = row.experience.get("pool") or {}, row.experience.get("kept_per_source") or {}
            k = pool.get("k")
            out.print(f"{row.specialist} (iteration {row.iteration}) experience: {row.experience.get('prompts')} "
                      f"prompt(s) ({escape(', '.join(f'{n} {s}' for s, n in sources.items()) or 'none')}), "
                      f"pass@1 {_fmt(pool.get('pass@1'))}, pass@{k} {_fmt(pool.get(f'pass@{k}'))}, "
                      f"{pool.get('prompts_between', 0)} strictly between 0 and 1; "
                      f"{row.experience.get('accepted')} answer(s) accepted")
        if row.twin:
            vs = row.twin.get("vs_twin") or {}
            interval = vs.get("interval") or [None, None]
            out.print(f"{row.specialist} (iteration {row.iteration}) vs its placebo twin {row.twin.get('revision')}: "
                      f"{escape(str(row.twin.get('metric')))} Δ {_fmt(vs.get('delta'))} "
                      f"[{_fmt(interval[0])}, {_fmt(interval[1])}]: {row.twin.get('verdict')}")


def _render_progress(result) -> None:
    """Per specialist, its primary metric from the bare base through each generation this run made."""
    by_specialist: dict[str, list] = {}
    for row in result.generations:
        by_specialist.setdefault(row.specialist, []).append(row)
    for specialist, rows in by_specialist.items():
        primary = next(iter(rows[0].metrics), None)
        if primary is None:
            continue
        table = Table(title=f"{specialist}: {primary}")
        table.add_column("generation")
        table.add_column("revision")
        table.add_column("value")
        table.add_column("Δ vs its baseline (95% CI)")
        table.add_column("verdict")
        first = rows[0].metrics[primary]
        if rows[0].baseline == "base":
            table.add_row("0 (base)", "base", _fmt(first.get("baseline")), "", "")
        for i, row in enumerate(rows, start=1):
            m = row.metrics.get(primary, {})
            interval = m.get("interval")
            ci = f" [{_fmt(interval[0])}, {_fmt(interval[1])}]" if isinstance(interval, (list, tuple)) \
                and len(interval) == 2 else ""
            table.add_row(str(i), row.candidate or "-", _fmt(m.get("value")), f"{_fmt(m.get('delta'))}{ci}",
                          "[green]promoted[/]" if row.verdict == "pass" else "[red]rejected[/]")
        out.print(table)
