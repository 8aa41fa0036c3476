"""mint serve."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from mint.cli.common import app, err, quiet_transformers, ws


@app.command("serve")
def serve_command(host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
                  port: int = typer.Option(8000, "--port", help="Port to listen on."),
                  base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: mint.yaml's)."),
                  max_rank: int = typer.Option(16, "--max-rank", help="LoRA rank each specialist's slot holds."),
                  window_ms: float = typer.Option(10.0, "--window-ms", help="How long a batch waits for more requests."),
                  max_batch: int = typer.Option(16, "--max-batch", help="Most turns generated in one mixed batch."),
                  poll_s: float = typer.Option(2.0, "--poll", help="Seconds between checks for new champions."),
                  config: Optional[Path] = typer.Option(None, "--config", help="Project file (default ./mint.yaml).")
                  ) -> None:
    """OpenAI-compatible server: POST /v1/chat/completions (model `mint` routes, `mint/NAME` forces), /v1/models,
    /v1/feedback, /health. New champions are picked up without a restart.

    Example: mint serve --port 8000
    """
    from mint.errors import BadInput
    from mint.mol.mixture import Mixture
    from mint.mol.serve import listening_socket, serve
    from mint.project import load_project

    quiet_transformers()
    if window_ms < 0 or max_batch < 1 or poll_s <= 0:
        raise BadInput("--window-ms must be >= 0, --max-batch >= 1 and --poll > 0", field="--window-ms")
    sock = listening_socket(host, port)
    try:
        mixture = Mixture.open(ws(), load_project(config), base=base, max_rank=max_rank)
        revisions = ", ".join(f"{k} {v}" for k, v in mixture.revisions().items())
        url_host = f"[{host}]" if ":" in host else host
        err.print(f"serving on http://{escape(url_host)}:{sock.getsockname()[1]}/v1  ({escape(revisions)})")
        serve(mixture, sock, window_ms=window_ms, max_batch=max_batch, poll_s=poll_s)
    finally:
        sock.close()
