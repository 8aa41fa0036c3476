"""mint route."""
from __future__ import annotations

from typing import Optional

import typer
from rich.markup import escape
from rich.table import Table

from mint.cli.common import JSON_OPT, app, out, print_json, quiet_transformers, ws


@app.command("route")
def route_command(text: str = typer.Argument(..., help="One user turn."),
                  tools: bool = typer.Option(False, "--tools", help="The turn comes with tool definitions."),
                  base: Optional[str] = typer.Option(None, "--base", "-b", help="Base for the probe (default: the router's)."),
                  json_out: bool = JSON_OPT) -> None:
    """Which specialist answers TEXT, its probability per specialist, and whether rules or the probe decided.

    \b
    Example:
      mint route "book me a table for two at 8pm" --json
    """
    from mint.routing.router import route_text
    from mint.project import load_project

    quiet_transformers()
    route = route_text(ws(), text, project=load_project(), tools=tools, base=base)
    if json_out:
        return print_json({"specialist": route.specialist, "probabilities": route.probabilities,
                           "decided_by": route.decided_by, "revision": route.revision})
    how = f"probe {route.revision}" if route.decided_by == "probe" else f"rules ({route.rule})"
    out.print(f"[bold]{escape(route.specialist)}[/] decided by {escape(how)}", highlight=False)
    table = Table("specialist", "probability")
    for name, probability in sorted(route.probabilities.items(), key=lambda kv: -kv[1]):
        table.add_row(escape(name), f"{probability:.3f}")
    out.print(table)
