"""mint genui."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from mint.cli.common import (
    JSON_OPT,
    counted,
    out,
    print_json,
    sub_app,
)

genui_app = sub_app("genui", "UI4A component trees.")


@genui_app.command("render")
def genui_render(path: Path, out_path: Path = typer.Option(..., "-o", "--out", help="The HTML file to write."),
                 json_out: bool = JSON_OPT) -> None:
    """Render a UI4A component tree (a JSON file, or a model answer with prose around one) to static HTML,
    and say which node, if any, the catalog refuses and why. Exit 0 for a valid tree, 1 when the catalog
    refuses it (the page shows what could be drawn), 2 when the file holds no tree at all.

    \b
    Example:
      mint genui render answer.txt -o page.html
    """
    from mint.harness.genui import render_file

    result = render_file(path, out_path)
    if json_out:
        print_json(result)
    else:
        problems = result["problems"]
        verdict = "valid" if result["valid"] else "[red]not valid[/]: " + escape(problems[0]) + (
            f" (and {len(problems) - 1} more problem{'s' if len(problems) > 2 else ''})" if len(problems) > 1 else "")
        out.print(f"wrote {escape(result['out'])} ({counted(result['components'], 'component')}, {verdict})")
    if not result["valid"]:
        raise typer.Exit(1)
