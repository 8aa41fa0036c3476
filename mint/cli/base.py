"""mint base: the base models."""
from __future__ import annotations

from rich.table import Table

from mint.cli.common import (
    JSON_OPT,
    out,
    print_json,
    quiet_transformers,
    sub_app,
)

base_app = sub_app("base", "Base models: the embedded default, tiny-random, local directories.")


@base_app.command("ls")
def base_ls(json_out: bool = JSON_OPT) -> None:
    """List the built-in bases and whether they are ready.

    \b
    Example:
      mint base ls
    """
    from mint.base import list_bases

    rows = list_bases()
    if json_out:
        return print_json({"bases": rows})
    table = Table()
    for column in ("base", "ready", "cached", "description", "path"):
        table.add_column(column)
    for r in rows:
        table.add_row(r.name, "yes" if r.available else f"no: {r.fix}", "yes" if r.cached else "no",
                      r.description, r.path or "-")
    out.print(table)
    out.print("Any local Hugging Face model directory works too: --base ./path/to/model")


@base_app.command("show")
def base_show(name: str, json_out: bool = JSON_OPT) -> None:
    """Load a base and show its architecture, size and fingerprint (converts the embedded GGUF once).

    \b
    Example:
      mint base show smollm2-135m
    """
    from mint.base import describe_base

    quiet_transformers()
    info = describe_base(name)
    if json_out:
        return print_json(info)
    table = Table(show_header=False)
    for key, value in info.items():
        table.add_row(key, f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value))
    out.print(table)
