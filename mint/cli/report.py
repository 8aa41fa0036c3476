"""mint report: look at evaluation reports and compare two of them."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import JSON_OPT, app, out, print_json, ws

report_app = typer.Typer(help="The lineage of every specialist with its metrics and gates; evaluation reports.\n\n"
                              "Examples:\n\n\b\n  mint report --html report.html\n  mint report show coding:v3\n"
                              "  mint report diff coding:champion coding:v4", invoke_without_command=True)
app.add_typer(report_app, name="report")


@report_app.callback()
def report_lineage(ctx: typer.Context,
                   html: Optional[Path] = typer.Option(None, "--html", help="Write the report as one self-contained "
                                                                             "HTML page (figures embedded)."),
                   json_out: bool = JSON_OPT) -> None:
    """Per specialist: each generation's primary metric against its baseline, its verdict, and the champion.

    \b
    Example:
      mint report --html report.html
    """
    if ctx.invoked_subcommand is not None:
        return
    from mint.cli.tables import rich_table
    from mint.reporting.reports import lineage_report
    from mint.reporting.tables import FAMILY_COLUMNS, LINEAGE_COLUMNS, family_rows, lineage_rows

    report = lineage_report(ws())
    if html is not None:
        from mint.reporting.html import render_html
        from mint.workspace import atomic_write_text

        atomic_write_text(html, render_html(report))
    if json_out:
        return print_json({**report, "html": str(html) if html else None})
    if not report["specialists"]:
        out.print("nothing to report yet: no revision is registered (`mint train` or `mint loop` makes one)")
    for name, entry in sorted(report["specialists"].items()):
        out.print(rich_table(f"{name} (champion {entry['champion'] or 'none'})", LINEAGE_COLUMNS,
                             lineage_rows(entry["generations"])))
        for g in entry["generations"]:
            if g.get("forced"):
                out.print(f"{g['ref']} was promoted with --force past its report's verdict "
                          f"({g['verdict'] or 'none'}): {escape(g['forced'])}")
        learnable = family_rows(entry["progress"])
        if learnable:
            out.print(rich_table(f"{name}: what each generation's experience found learnable, per family of requests",
                                 FAMILY_COLUMNS, learnable))
    if html is not None:
        out.print(f"wrote {escape(str(html))}")


def _gate(passed) -> str:
    return "" if passed is None else ("[green]pass[/]" if passed else "[red]FAIL[/]")


@report_app.command("show")
def report_show(ref: str = typer.Argument(..., metavar="REF|FILE",
                                          help="A revision (its newest report) or a report.json / its folder."),
                json_out: bool = JSON_OPT) -> None:
    """Show a report: each metric with its baseline, the gate rule and outcome, and the verdict.

    \b
    Example:
      mint report show genui:v1
    """
    from mint.cli.common import baseline_description, report_table
    from mint.contract.served import engine_text
    from mint.reporting.reports import load_report

    report = load_report(ws(), ref)
    if json_out:
        return print_json({**report.to_dict(), "path": report.path})
    out.print(report_table(report))
    out.print(f"verdict: {escape(report.verdict)}  baseline: {escape(baseline_description(report))}  "
              f"source: {escape(report.source)}")
    out.print(f"engine: {escape(engine_text(report))}", highlight=False)
    out.print(f"report: {escape(str(report.path))}")


@report_app.command("diff")
def report_diff(a: str = typer.Argument(..., metavar="A", help="A revision or a report file."),
                b: str = typer.Argument(..., metavar="B", help="A revision or a report file."),
                json_out: bool = JSON_OPT) -> None:
    """Compare two reports metric by metric: A, B, B − A, and each one's gate outcome.

    \b
    Example:
      mint report diff coding:champion coding:v4
    """
    from mint.reporting.numbers import delta, value
    from mint.reporting.reports import diff_reports, load_report

    workspace = ws()
    diff = diff_reports(load_report(workspace, a), load_report(workspace, b))
    if json_out:
        return print_json(diff)
    if not diff.same_contract:
        out.print("[yellow]note:[/] the two reports were made under different contract versions or files")
    table = Table(title=escape(f"{diff.a['revision']} ({diff.a['verdict']}) → {diff.b['revision']} "
                               f"({diff.b['verdict']})"))
    for column in ("metric", "A", "B", "B − A", "gate A", "gate B", "rule"):
        table.add_column(column, overflow="fold")
    for m in diff.metrics:
        table.add_row(escape(m.metric), value(m.a), value(m.b), delta(m.delta), _gate(m.gate_a), _gate(m.gate_b),
                      escape(m.rule or ""))
    out.print(table)
