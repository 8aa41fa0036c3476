"""mint loop and mint recipe: run the self-improvement loop a recipe describes."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import DEVICE_OPT, JSON_OPT, after_checks, app, choose_device, err, out, print_json, sub_app, ws
from mint.reporting.numbers import SUMMARY_DIGITS, delta_with_interval, value

recipe_app = sub_app("recipe", "Recipes: YAML chains of ingest, experience, train, eval, promote and route.\n\n"
                               "Example:\n\n\b\n  mint recipe check recipes/demo.yaml")


@recipe_app.command("check")
def recipe_check(path: Path = typer.Argument(..., help="The recipe YAML."), json_out: bool = JSON_OPT) -> None:
    """Validate a recipe and the contracts it names without running anything (exit 2 with file:line: field).

    \b
    Example:
      mint recipe check recipes/smoke.yaml
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
    for setting in summary["settings"]:
        if setting["off"]:
            out.print(f"[yellow]  {setting['step'] + 1}. {escape(setting['label'])}: {escape(setting['setting'])} "
                      f"is off (line {setting['line']})[/]")


@app.command("loop")
def loop_command(recipe: Path = typer.Argument(..., help="The recipe YAML (see recipes/)."),
                 iterations: Optional[int] = typer.Option(None, "--iterations", "-n",
                                                          help="Override the recipe's loop.iterations."),
                 resume: bool = typer.Option(False, "--resume", help="Continue a killed run from its iteration; "
                                                                     "finished steps are skipped."),
                 dry_run: bool = typer.Option(False, "--dry-run", help="Print the plan; run nothing."),
                 requests: Optional[Path] = typer.Option(
                     None, "--requests", help="A JSONL of chat requests ({\"messages\": [...]} or {\"prompt\": ...} "
                                              "a line) that every serve step sends instead of the recipe's."),
                 device: str = DEVICE_OPT,
                 json_out: bool = JSON_OPT) -> None:
    """Run a recipe's steps for N iterations: unattended, idempotent, resumable, one at a time per workspace.

    Exit 0 when the loop ran (promoted or not), 1 when a step marked fatal failed its contract or another
    loop holds the workspace, 2 on bad input.

    A specialist whose contract follows the served traffic waits, without failing, while the traffic's
    held-out slice is smaller than its gates need ("not enough traffic yet"); the next run continues.

    \b
    Example:
      mint loop recipes/demo.yaml --iterations 2 --requests my-requests.jsonl
    """
    from mint.loop.heartbeat import Heartbeat
    from mint.loop.runner import run_loop

    choose_device(device, "both", json_out, say=False)    # said once the recipe's checks have passed
    checked = after_checks("both", json_out)
    heartbeat = Heartbeat()

    def events(event: dict) -> None:
        checked()                    # the loop's first event comes once the recipe and its inputs are checked
        if json_out:
            return
        if event["event"] == "estimate":
            err.print(f"estimate: about {_duration(event['seconds'])} for the whole run "
                      f"({escape(event['basis'])}); refined as steps finish", highlight=False)
        elif event["event"] == "start":
            expected = f" (estimated {_duration(event['estimated_s'])})" if event.get("estimated_s") else ""
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])} …{expected}", highlight=False)
        elif event["event"] == "progress":
            if not heartbeat.due(event):
                return
            count = f" {event['done']}/{event['total']}" if event.get("total") else \
                f" {event['done']}" if event.get("done") else ""
            if event.get("share") is not None:     # a batch's rows finish near its end: say how far it decoded
                count += f" ({event['share']:.0%} of its tokens decoded)"
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])}: {escape(event['what'])}"
                      f"{count}" + (f", {escape(event['detail'])}" if event.get("detail") else "")
                      + f" ({_duration(event['seconds'])} in; about {_duration(event['left_s'])} left in the run)",
                      highlight=False)
        elif event["event"] == "skip":
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])}: skipped (inputs unchanged)",
                      highlight=False)
        elif event["event"] == "end":
            expected = f", estimated {event['estimated_s']:.0f}s" if event.get("estimated_s") else ""
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])}: done in "
                      f"{event['seconds']:.0f}s{expected}; about {_duration(event['left_s'])} left", highlight=False)
        elif event["event"] == "note":
            err.print(escape(event["message"]))

    result = run_loop(ws(writes=True), recipe, iterations=iterations, resume=resume, dry_run=dry_run,
                      events=events, requests=requests)
    checked()                        # a run that told nothing on its way (a dry run, nothing new) says it now
    if json_out:
        print_json(result)
    elif result.status == "dry run":
        table = Table(title=f"plan: {result.recipe}")
        for column in ("iteration", "step", "will"):
            table.add_column(column)
        for row in result.plan:
            table.add_row(str(row["iteration"]), escape(row["label"]), row["will"])
        out.print(table)
        _render_settings(result)
        if result.message:
            out.print(result.message)
    else:
        if result.status == "nothing new":
            out.print(f"{result.recipe}: {result.message}")
        else:
            _render_generations(result)
            _render_step_times(result)
        for wait in result.waiting:
            out.print(f"[yellow]iteration {wait['iteration']}, {escape(wait['message'])}[/]")
        for message in result.turned_off:
            out.print(f"[yellow]{escape(message)}[/]")
        for alert in result.alerts:
            out.print(f"[yellow]warning (mint monitor):[/] {escape(alert)}")
    if result.exit_code:
        raise typer.Exit(result.exit_code)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} min"


def _render_settings(result) -> None:
    """What each step decides (guards and their thresholds, early stop, backward transfer), and each one the
    recipe turned off, in yellow."""
    if not result.settings:
        return
    table = Table(title="what the steps decide")
    for column in ("step", "setting", "value", "what it does"):
        table.add_column(column, overflow="fold")
    for s in result.settings:
        value = f"[yellow]{s.shown}[/]" if s.off else escape(s.shown)
        table.add_row(f"{s.step + 1}. {escape(s.label)}", escape(s.setting), value, escape(s.what))
    out.print(table)
    for message in result.turned_off:
        out.print(f"[yellow]{escape(message)}[/]")


def _render_step_times(result) -> None:
    """Where the loop's time went: each step that ran, its seconds, and the total."""
    ran = [s for s in result.steps if s.status in ("ran", "failed")]
    if not ran:
        return
    total = sum(s.seconds for s in ran)
    table = Table(title=f"time: {total:.0f} s in {len(ran)} step(s) that ran")
    for column in ("iter", "step", "seconds", "estimated", "share"):
        table.add_column(column, justify="left" if column in ("iter", "step") else "right")
    for step in ran:
        table.add_row(str(step.iteration), escape(step.label) + ("" if step.status == "ran" else " (failed)"),
                      f"{step.seconds:.0f}", f"{step.estimated_s:.0f}" if step.estimated_s is not None else "-",
                      f"{step.seconds / total:.0%}" if total else "-")
    out.print(table)


def _fmt(x) -> str:
    return value(x, SUMMARY_DIGITS)


def _change(comparison: dict) -> str:
    """A recorded comparison's delta and 95% interval (``{"delta": ..., "interval": [low, high]}``)."""
    bounds = comparison.get("interval")
    return delta_with_interval(comparison.get("delta"), bounds if isinstance(bounds, (list, tuple)) else None,
                               SUMMARY_DIGITS)


def _render_generations(result) -> None:
    table = Table(title=f"{result.recipe}: {result.iterations} iteration(s)")
    for column in ("iter", "specialist", "candidate", "metric: baseline → candidate (Δ, 95% CI)", "verdict",
                   "champion after"):
        table.add_column(column, overflow="fold")
    for row in result.generations:
        lines = [f"{escape(name)}: {_fmt(m.get('baseline'))} → {_fmt(m.get('value'))} ({_change(m)})"
                 for name, m in row.metrics.items()]
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
                      f"{row.experience.get('accepted')} answer(s) accepted"
                      + (f" ({row.experience['repaired']} of them repaired)" if row.experience.get("repaired") else ""))
            for r in row.experience.get("rounds") or []:
                out.print(f"  round {r.get('round')}, sampled by {escape(str(r.get('sampled_by')))}: "
                          f"{r.get('prompts')} prompt(s), pass@1 {_fmt((r.get('pool') or {}).get('pass@1'))}, "
                          f"{r.get('accepted')} accepted ({r.get('repaired', 0)} repaired)")
            _render_families(result, row)
        if row.twin:
            out.print(f"{row.specialist} (iteration {row.iteration}) vs its placebo twin {row.twin.get('revision')}: "
                      f"{escape(str(row.twin.get('metric')))} Δ {_change(row.twin.get('vs_twin') or {})}: "
                      f"{row.twin.get('verdict')}")
            control = row.twin.get("steps_control")
            if isinstance(control, dict):
                out.print(f"{row.specialist} (iteration {row.iteration}) vs its steps control "
                          f"{control.get('revision')} (the same steps on the logs alone): Δ "
                          f"{_change(control.get('vs_control') or {})}"
                          + (f" — {escape(row.twin['why'])}" if row.twin.get("why") else ""))


def _render_families(result, row) -> None:
    """What an iteration's experience found learnable per family of requests (mint.reporting.tables.family_rows_of:
    the rows `mint report` shows of its generation), and where it is within reach."""
    from mint.cli.tables import rich_table
    from mint.loop.results import WITHIN_REACH, FamilyStats
    from mint.reporting.tables import FAMILY_COLUMNS, family_rows_of

    families = [f if isinstance(f, FamilyStats) else FamilyStats.from_dict(f)
                for f in row.experience.get("families") or []]
    if not families:
        return
    what = f"{row.specialist} (iteration {row.iteration}) experience"
    # the generation the candidate became, as `mint report` numbers it (none where it was never registered)
    generation = next((g.generation for g in result.progress.get(row.specialist, []) if g.revision == row.candidate),
                      None)
    out.print(rich_table(f"{what}: what was learnable per family", FAMILY_COLUMNS,
                         family_rows_of(generation, row.candidate, families)))
    reach = [f for f in families if f.reading == WITHIN_REACH]
    out.print(f"{what}: within reach: " + (escape(", ".join(
        f"{f.family} ({f.sometimes} of {f.requests} request(s) passed sometimes)"
        for f in sorted(reach, key=lambda f: -f.signal))) if reach else "no family (no request passed sometimes)"))


def _render_progress(result) -> None:
    """Per specialist, every generation from the bare base on (mint.loop.progress.generation_progress) as the
    per-generation table `mint report --html` draws too (mint.reporting.tables.generation_rows)."""
    from mint.cli.tables import rich_table
    from mint.reporting.tables import GENERATION_COLUMNS, generation_rows

    for specialist, rows in result.progress.items():
        metric = next((r.metric for r in rows if r.metric), None)
        if metric is None:
            continue
        out.print(rich_table(f"{specialist}: {metric} per generation", GENERATION_COLUMNS, generation_rows(rows)))
