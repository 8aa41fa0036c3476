"""mint init."""
from __future__ import annotations

from pathlib import Path

import typer

from mint.cli.common import JSON_OPT, app, out, print_json


@app.command()
def init(directory: Path = typer.Option(Path("."), "--dir", help="Project folder."),
         json_out: bool = JSON_OPT) -> None:
    """Scaffold a working project: mint.yaml (the specialists and their routing keywords), the default contracts
    with their suites and catalog, the recipes and the example logs. Existing files are never overwritten.

    \b
    Example:
      mint init --dir my-assistant
    """
    from mint.project import init_project

    result = init_project(directory)
    if json_out:
        return print_json(result)
    for name in result.created:
        out.print(f"[green]created[/] {Path(result.directory) / name}")
    for name in result.kept:
        out.print(f"[yellow]kept[/]    {Path(result.directory) / name} (exists)")
