"""mint serve."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from mint.cli.common import app, err, quiet_transformers, ws
from mint.mol.admission import Limits


@app.command("serve")
def serve_command(host: str = typer.Option("127.0.0.1", "--host", help="Address to listen on."),
                  port: int = typer.Option(8000, "--port", help="Port to listen on."),
                  base: Optional[str] = typer.Option(None, "--base", "-b", help="Base model (default: mint.yaml's)."),
                  max_rank: Optional[int] = typer.Option(
                      None, "--max-rank", help="LoRA rank each specialist's slot holds (16); with --upstream, the "
                                               "upstream's limit (vLLM's --max-lora-rank), which `mint promote` "
                                               "then keeps to (a mint upstream says its own)."),
                  window_ms: float = typer.Option(10.0, "--window-ms", help="How long a batch waits for more requests."),
                  max_batch: int = typer.Option(16, "--max-batch", help="Most turns generated in one mixed batch."),
                  poll_s: float = typer.Option(2.0, "--poll", help="Seconds between checks for new champions."),
                  api_keys: Optional[list[str]] = typer.Option(
                      None, "--api-key", envvar="MINT_API_KEY",
                      help="A key clients must send (Authorization: Bearer KEY); repeat for several "
                           "(MINT_API_KEY: several separated by spaces)."),
                  insecure: bool = typer.Option(False, "--insecure",
                                                help="Listen beyond this machine without an API key."),
                  allowed_hosts: Optional[list[str]] = typer.Option(
                      None, "--allowed-host", help="A Host name clients may use besides localhost (repeat; * for any)."),
                  max_body_bytes: int = typer.Option(Limits.max_body_bytes, "--max-body-bytes",
                                                     help="Largest request body read (413 beyond)."),
                  max_messages: int = typer.Option(Limits.max_messages, "--max-messages",
                                                   help="Most messages in one request."),
                  max_queue: int = typer.Option(Limits.max_queue, "--max-queue",
                                                help="Most turns queued or generating (429 beyond)."),
                  max_per_key: int = typer.Option(Limits.max_per_key, "--max-per-key",
                                                  help="Most requests in flight per key (429 beyond)."),
                  retention_days: Optional[float] = typer.Option(
                      None, "--log-retention-days", help="Delete served logs last written longer ago than this."),
                  scrub_logs: bool = typer.Option(False, "--scrub-logs",
                                                  help="Replace PII in served turns before they are logged."),
                  max_loras: int = typer.Option(4, "--max-loras",
                                                help="Adapters /v1/load_lora_adapter may load by name (a slot each)."),
                  upstream: Optional[str] = typer.Option(
                      None, "--upstream", help="Route each turn here and forward it to this OpenAI-compatible "
                                               "multi-LoRA server (vLLM), instead of generating locally."),
                  upstream_key: Optional[str] = typer.Option(None, "--upstream-key", envvar="MINT_UPSTREAM_KEY",
                                                             help="The upstream's API key."),
                  upstream_timeout: float = typer.Option(60.0, "--upstream-timeout",
                                                         help="Seconds to wait for the upstream (504 beyond)."),
                  config: Optional[Path] = typer.Option(None, "--config", help="Project file (default ./mint.yaml).")
                  ) -> None:
    """OpenAI-compatible server: POST /v1/chat/completions (model `mint` routes, `mint/NAME` forces), /v1/models,
    /v1/feedback, /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's shapes), /health. New champions are
    picked up without a restart. With --upstream it is a gateway: it routes each turn on the base's early layers
    and forwards it to the upstream, naming the champion's adapter (published there on promotion).

    Example: MINT_API_KEY=$(openssl rand -hex 16) mint serve --port 8000
    Example: mint serve --upstream http://127.0.0.1:8001 --port 8000
    """
    from mint.errors import BadInput
    from mint.mol.mixture import Mixture
    from mint.mol.admission import Access, is_loopback
    from mint.mol.gateway import Upstream
    from mint.mol.serve import listening_socket, serve
    from mint.mol.turnlog import TurnLog
    from mint.project import load_project

    quiet_transformers()
    if window_ms < 0 or max_batch < 1 or poll_s <= 0:
        raise BadInput("--window-ms must be >= 0, --max-batch >= 1 and --poll > 0", field="--window-ms")
    keys = tuple(k for value in api_keys or () for k in value.split())
    # the address it listens on is a name its clients use (a wildcard is not)
    named = () if host in ("0.0.0.0", "::", "") else (host,)
    access = Access(keys, (*(allowed_hosts or ()), *named))
    limits = Limits(max_body_bytes=max_body_bytes, max_messages=max_messages, max_queue=max_queue,
                    max_per_key=max_per_key)
    sock = listening_socket(host, port)
    try:
        bound = sock.getsockname()[0]
        if not keys and not insecure and not is_loopback(bound):
            raise BadInput(f"{host} can be reached from other machines, and no API key is set: give --api-key "
                           "(or MINT_API_KEY), or --insecure to serve anyone who reaches the port", field="--host")
        workspace = ws(writes=True)
        log = TurnLog(workspace, retention_days=retention_days)
        log.forget_expired()
        if upstream is not None:
            return _serve_gateway(workspace, load_project(config), sock, Upstream(upstream, upstream_key,
                                                                                   upstream_timeout),
                                  base=base, max_rank=max_rank, log=log, scrub_logs=scrub_logs, poll_s=poll_s,
                                  access=access, limits=limits, keyless=not keys)
        if max_loras < 0:
            raise BadInput("must be 0 or more", field="--max-loras")
        mixture = Mixture.open(workspace, load_project(config), base=base, max_rank=max_rank, log=log,
                               scrub_logs=scrub_logs, named_slots=max_loras)
        revisions = ", ".join(f"{k} {v}" for k, v in mixture.revisions().items())
        url_host = f"[{host}]" if ":" in host else host
        err.print(f"serving on http://{escape(url_host)}:{sock.getsockname()[1]}/v1  ({escape(revisions)})"
                  + ("" if keys else "  [no API key: anyone who reaches the port may call]"))
        for name, problem in mixture.runtime.sync_errors.items():
            err.print(f"warning: {escape(name)}'s champion is not loaded: {escape(problem)}")
        serve(mixture, sock, window_ms=window_ms, max_batch=max_batch, poll_s=poll_s, access=access,
              limits=limits)
    finally:
        sock.close()


def _serve_gateway(workspace, project, sock, upstream, *, base, max_rank, log, scrub_logs, poll_s, access, limits,
                   keyless: bool) -> None:
    from mint.errors import BadInput
    from mint.mol.gateway import Gateway, serve_gateway

    if max_rank is not None and max_rank < 1:
        raise BadInput("must be 1 or more", field="--max-rank")
    gateway = Gateway.open(workspace, project, upstream, base=base, max_rank=max_rank, log=log,
                           scrub_logs=scrub_logs)
    host, port = sock.getsockname()[:2]
    url_host = f"[{host}]" if ":" in host else host
    revisions = ", ".join(f"{k} {v}" for k, v in gateway.revisions().items())
    err.print(f"gateway on http://{escape(url_host)}:{port}/v1 to {escape(upstream.api)}  ({escape(revisions)}; "
              f"{len(gateway.model.get_decoder().layers)} of the base's {gateway.depth} layers held)"
              + ("" if not keyless else "  [no API key: anyone who reaches the port may call]"))
    if gateway.max_rank is None:
        err.print("warning: the upstream does not say its largest LoRA rank: give --max-rank (vLLM's "
                  "--max-lora-rank) so that `mint promote` refuses an adapter it could not load")
    if gateway.upstream_error:
        err.print(f"warning: {escape(gateway.upstream_error)} (retried every {poll_s:g} s)")
    for name, problem in gateway.sync_errors.items():
        err.print(f"warning: {escape(name)}'s champion is not published: {escape(problem)}")
    serve_gateway(gateway, sock, poll_s=poll_s, access=access, limits=limits)
