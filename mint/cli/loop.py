"""mint loop and mint recipe: run the self-improvement loop a recipe describes."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import DEVICE_OPT, choose_device, JSON_OPT, app, err, families_table, out, print_json, quiet_transformers, sub_app, ws
from mint.text import figure

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
    from mint.loop.runner import run_loop

    choose_device(device, "both", json_out)
    quiet_transformers()
    said: dict[tuple, float] = {}    # when each running step's heartbeat was last printed

    def events(event: dict) -> None:
        if json_out:
            return
        if event["event"] == "estimate":
            err.print(f"estimate: about {_duration(event['seconds'])} for the whole run "
                      f"({escape(event['basis'])}); refined as steps finish", highlight=False)
        elif event["event"] == "start":
            expected = f" (estimated {_duration(event['estimated_s'])})" if event.get("estimated_s") else ""
            err.print(f"[dim]iteration {event['iteration']}[/] {escape(event['step'])} …{expected}", highlight=False)
        elif event["event"] == "progress":
            key, now = (event["iteration"], event["step"]), time.monotonic()
            if key in said and now - said[key] < HEARTBEAT_S:
                return
            said[key] = now
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


# a running step says what it is doing at most this often (and at least once a minute while it reports progress)
HEARTBEAT_S = 30.0


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


def _fmt(value) -> str:
    return figure(value, 3)


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
                      f"{row.experience.get('accepted')} answer(s) accepted"
                      + (f" ({row.experience['repaired']} of them repaired)" if row.experience.get("repaired") else ""))
            for r in row.experience.get("rounds") or []:
                out.print(f"  round {r.get('round')}, sampled by {escape(str(r.get('sampled_by')))}: "
                          f"{r.get('prompts')} prompt(s), pass@1 {_fmt((r.get('pool') or {}).get('pass@1'))}, "
                          f"{r.get('accepted')} accepted ({r.get('repaired', 0)} repaired)")
            _render_families(f"{row.specialist} (iteration {row.iteration}) experience",
                             row.experience.get("families") or [])
        if row.twin:
            vs = row.twin.get("vs_twin") or {}
            interval = vs.get("interval") or [None, None]
            out.print(f"{row.specialist} (iteration {row.iteration}) vs its placebo twin {row.twin.get('revision')}: "
                      f"{escape(str(row.twin.get('metric')))} Δ {_fmt(vs.get('delta'))} "
                      f"[{_fmt(interval[0])}, {_fmt(interval[1])}]: {row.twin.get('verdict')}")
            control = row.twin.get("steps_control")
            if isinstance(control, dict):
                vs = control.get("vs_control") or {}
                interval = vs.get("interval") or [None, None]
                out.print(f"{row.specialist} (iteration {row.iteration}) vs its steps control "
                          f"{control.get('revision')} (the same steps on the logs alone): Δ {_fmt(vs.get('delta'))} "
                          f"[{_fmt(interval[0])}, {_fmt(interval[1])}]"
                          + (f" — {escape(row.twin['why'])}" if row.twin.get("why") else ""))


def _render_families(what: str, recorded: list) -> None:
    """What the experience found learnable per family of requests (as this run found them, or as a recorded run's
    state holds them), and where it is within reach."""
    from mint.loop.results import WITHIN_REACH, FamilyStats

    families = [f if isinstance(f, FamilyStats) else FamilyStats.from_dict(f) for f in recorded]
    if not families:
        return
    out.print(families_table(f"{what}: what was learnable per family", families))
    reach = [f for f in families if f.reading == WITHIN_REACH]
    out.print(f"{what}: within reach: " + (escape(", ".join(
        f"{f.family} ({f.sometimes} of {f.requests} request(s) passed sometimes)"
        for f in sorted(reach, key=lambda f: -f.signal))) if reach else "no family (no request passed sometimes)"))


def _ci(delta, interval) -> str:
    return _fmt(delta) + (f" [{_fmt(interval[0])}, {_fmt(interval[1])}]" if interval else "")


def _render_progress(result) -> None:
    """Per specialist, every generation from the bare base on (mint.loop.progress.generation_progress): its held-out
    metric against its baseline, the experience pool and what was accepted from which source, the placebo twin
    and the gain over it, the gain over the steps control when one ran, and the verdict."""
    from mint.loop.placebo import EXPERIENCE_EFFECT

    for specialist, rows in result.progress.items():
        metric = next((r.metric for r in rows if r.metric), None)
        if metric is None:
            continue
        table = Table(title=f"{specialist}: {metric} per generation")
        for column in ("gen", "revision", "value", "Δ vs baseline (95% CI)", "other suites (Δ, 95% CI)",
                       "pool pass@1 / pass@k",
                       "accepted (per source)", "twin", "Δ vs twin (95% CI)", "Δ vs logs-only steps (95% CI)",
                       "verdict"):
            table.add_column(column, overflow="fold")
        for r in rows:
            e, t = r.experience, r.twin
            pool = f"{_fmt(e.pass_at_1)} / {_fmt(e.pass_at_k)} (k={e.k})" if e and e.k else "-"
            sources = ", ".join(f"{n} {s}" for s, n in e.accepted_per_source.items() if n) if e else ""
            accepted = f"{e.accepted} ({sources or 'none'})" if e else "-"
            reading = ("[green]" if t.reading == EXPERIENCE_EFFECT else "[yellow]") + f"{t.reading}[/]" \
                if t and t.reading else ""
            verdict = "" if not r.generation else \
                ("[green]promoted[/]" if r.decision == "promoted" else "[red]rejected[/]" if r.decision == "rejected"
                 else r.decision or "-") + (" by force" if r.forced else "") + \
                f" ({r.verdict or 'not evaluated'})"
            table.add_row(str(r.generation), escape(r.revision), _fmt(r.value),
                          f"{escape(r.baseline or '')} {_ci(r.delta, r.interval)}" if r.generation else "",
                          "\n".join(f"{escape(f.metric)} {_fmt(f.value)}"
                                    + (f" ({_ci(f.delta, f.interval)})" if r.generation else "")
                                    for f in r.suites) or "-",
                          pool, escape(accepted), f"{escape(t.revision or '-')} {_fmt(t.value)}" if t else "-",
                          f"{_ci(t.delta, t.interval)} {reading}" if t else "-",
                          f"{escape(t.steps_control.revision or '-')} {_ci(t.steps_control.delta, t.steps_control.interval)}"
                          if t and t.steps_control else "-", verdict)
        out.print(table)
