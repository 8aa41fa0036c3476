"""mint chat."""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from mint.cli.common import DEVICE_OPT, JSON_OPT, after_checks, app, choose_device, err, out, print_json, ws


def _print_piece(text: str) -> None:
    out.print(escape(text), end="", highlight=False, soft_wrap=True)
    out.file.flush()


def _render_reply(reply) -> None:
    out.print(f"[bold]{escape(reply.specialist)} ({escape(reply.served_by)}, {reply.decided_by}):[/] "
              f"{escape(reply.reply)}", highlight=False)
    err.print(f"{reply.new_tokens} tokens in {reply.seconds:.2f}s")


@app.command()
def chat(prompt: Optional[str] = typer.Argument(None, help="The user's message; without one, an interactive session."),
         specialist: Optional[str] = typer.Option(None, "--specialist", "-s", help="Force a specialist instead of routing."),
         base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: mint.yaml's, else smollm2-135m)."),
         system: Optional[str] = typer.Option(None, "--system", help="A system prompt."),
         max_new_tokens: int = typer.Option(64, "--max-new-tokens", help="Longest answer, in tokens."),
         tools: Optional[Path] = typer.Option(None, "--tools", help="A JSON file of tool definitions (OpenAI's "
                                              "format) the model may call; the tool-use specialist answers."),
         device: str = DEVICE_OPT,
         json_out: bool = JSON_OPT) -> None:
    """Answer with the routed specialist's champion (the bare base where none is promoted); the turn is logged.

    Without a message: a REPL (replies are printed as they are decoded) with /feedback +1|-1, /correct TEXT
    and /specialist NAME.

    \b
    Examples:
      mint chat "Make a signup form with name and email"
      mint chat "Weather in Paris?" --tools examples/tools/weather.json
    """
    from mint.base import check_base_name
    from mint.errors import BadInput
    from mint.mol.chat import ChatSession, chat_once, read_tools
    from mint.mol.mixture import Mixture
    from mint.project import load_project
    from mint.text import closest

    choose_device(device, "decode", json_out, say=False)    # said once the request's checks have passed
    checked = after_checks("decode", json_out)
    project = load_project()
    if specialist is not None and specialist not in project.names:
        raise BadInput(f"unknown specialist {specialist!r}{closest(specialist, project.names)} "
                       f"(expected {', '.join(project.names)})", field="--specialist")
    tool_list = read_tools(tools) if tools is not None else []
    if prompt is not None:
        reply = chat_once(prompt, base=base, system=system, max_new_tokens=max_new_tokens, specialist=specialist,
                          ws=ws(writes=True), project=project, tools=tool_list, started=checked)
        if json_out:
            return print_json(reply)
        out.print(f"[bold]user:[/] {escape(reply.prompt)}", highlight=False)
        return _render_reply(reply)
    if max_new_tokens < 1:
        raise BadInput("must be at least 1", field="--max-new-tokens")
    workspace = ws(writes=True)
    check_base_name(base or project.base)
    checked()
    session = ChatSession(Mixture.open(workspace, project, base=base), system=system, max_new_tokens=max_new_tokens,
                          specialist=specialist, tools=tool_list)
    revisions = ", ".join(f"{k} {v}" for k, v in session.mixture.revisions().items())
    err.print(f"serving: {escape(revisions)}  (/help for commands, /quit to leave)")
    # bytes that are not UTF-8 arrive as lone surrogates, which the session refuses, instead of ending the REPL
    if hasattr(sys.stdin, "reconfigure"):
        sys.stdin.reconfigure(errors="surrogateescape")
    try:
        while True:
            try:
                line = input("you> ")
            except EOFError:
                break
            if line.strip() and not line.strip().startswith("/"):
                out.print("[bold]assistant:[/] ", end="")
            event = session.handle(line, on_text=_print_piece)   # the reply is printed as it is decoded
            if event.kind == "quit":
                return
            if event.kind == "reply":
                reply = event.reply
                out.print(f"\n[dim]{escape(reply.specialist)} ({escape(reply.served_by)}, {reply.decided_by})[/]",
                          highlight=False)
                err.print(f"{reply.new_tokens} tokens in {reply.seconds:.2f}s")
            elif event.kind == "error":
                err.print(f"[red]error:[/] {escape(event.message)}", highlight=False)
            else:
                err.print(escape(event.message), highlight=False)
    finally:
        session.close()
