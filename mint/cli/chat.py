"""mint chat."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from mint.cli.common import JSON_OPT, app, err, out, print_json, quiet_transformers


@app.command()
def chat(prompt: str = typer.Argument(..., help="The user's message."),
         base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: mint.yaml's, else smollm2-135m)."),
         system: Optional[str] = typer.Option(None, "--system", help="A system prompt."),
         max_new_tokens: int = typer.Option(64, "--max-new-tokens"),
         config: Optional[Path] = typer.Option(None, "--config", help="Project file (default ./mint.yaml)."),
         json_out: bool = JSON_OPT) -> None:
    """Answer one user turn (greedy). Until specialists are promoted, the bare base answers."""
    from mint.mol.chat import chat_once
    from mint.project import load_project

    quiet_transformers()
    reply = chat_once(prompt, base=base or load_project(config).base, system=system,
                      max_new_tokens=max_new_tokens)
    if json_out:
        return print_json(reply)
    out.print(f"[bold]user:[/] {escape(reply.prompt)}", highlight=False)
    out.print(f"[bold]{reply.served_by} ({escape(reply.base)}):[/] {escape(reply.reply)}", highlight=False)
    err.print(f"{reply.new_tokens} tokens in {reply.seconds:.2f}s (load {reply.load_seconds:.1f}s)")
