"""mint monitor."""
from __future__ import annotations


import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import JSON_OPT, app, err, out, print_json, problems, ws


def _pct(value) -> str:
    return "-" if value is None else f"{value:.0%}"


def _ms(value) -> str:
    return "-" if value is None else f"{value:.0f}"


@app.command("monitor")
def monitor_command(window: str = typer.Option("1d", "--window", help="1h, 1d or 7d."),
                    json_out: bool = JSON_OPT) -> None:
    """Routing share per specialist vs the previous window and the router's held-out split, feedback, latency and
    traffic per revision. Exits 1 when an alert fires (for cron).

    \b
    Example:
      mint monitor --window 1d
    """
    from mint.mol.monitor import monitor
    from mint.project import load_project

    result = monitor(ws(), load_project(), window=window)
    if json_out:
        print_json(result)
    else:
        out.print(f"{result.turns} turns from {result.start} to {result.end} ({result.previous_turns} in the "
                  f"previous {result.window})")
        table = Table("specialist", "turns", "share", "previous", "held-out", "feedback", "mean rating",
                      "p50 ms", "p95 ms")
        for s in result.specialists:
            rating = "-" if s.mean_rating is None else f"{s.mean_rating:+.2f}"
            table.add_row(escape(s.specialist), str(s.turns), _pct(s.share), _pct(s.previous_share),
                          _pct(s.heldout_share), _pct(s.feedback_rate), rating, _ms(s.latency_p50_ms),
                          _ms(s.latency_p95_ms))
        out.print(table)
        if result.revisions:
            out.print("by revision: " + escape(", ".join(f"{k} {v}" for k, v in result.revisions.items())))
        if result.skipped:
            err.print(f"{result.skipped} log lines skipped: not a turn with a time and a specialist (torn or edited)")
        for alert in result.alerts:
            problems.print(f"[red]alert:[/] {escape(alert)}", highlight=False)
    if result.alerts:
        raise typer.Exit(1)
