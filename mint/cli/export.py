"""mint export."""
from __future__ import annotations

from pathlib import Path

import typer
from rich.markup import escape

from mint.cli.common import JSON_OPT, out, print_json, sub_app, ws

export_app = sub_app("export", "Hand the champions to another serving stack.")


@export_app.command("vllm")
def export_vllm_command(target: Path = typer.Argument(..., help="A new folder for the adapters and launch files."),
                        json_out: bool = JSON_OPT) -> None:
    """Write what serves every current champion on vLLM: adapters, launch command (--lora-modules,
    --max-lora-rank), and a note on running mint's router beside it.

    \b
    Example:
      mint export vllm out/vllm
    """
    from mint.mol.export import export_vllm
    from mint.project import load_project

    result = export_vllm(ws(), load_project(), target)
    if json_out:
        return print_json(result)
    out.print(f"{len(result.adapters)} champions for vLLM in {escape(result.out)}: "
              + escape(", ".join(f"{k} {v}" for k, v in result.adapters.items())), highlight=False)
    out.print(f"launch: {escape(result.out)}/launch.sh", highlight=False)
