"""mint serve."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.markup import escape

from mint.cli.common import DEVICE_OPT, after_checks, app, choose_device, err, ws
from mint.serve.admission import Limits


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
                  config: Optional[Path] = typer.Option(None, "--config", help="Project file (default ./mint.yaml)."),
                  device: str = DEVICE_OPT,
                  ) -> None:
    """OpenAI-compatible server: POST /v1/chat/completions (model `mint` routes, `mint/NAME` forces), /v1/models,
    /v1/feedback, /v1/load_lora_adapter and /v1/unload_lora_adapter (vLLM's shapes), /health. New champions are
    picked up without a restart. With --upstream it is a gateway: it routes each turn on the base's early layers
    and forwards it to the upstream, naming the champion's adapter (published there on promotion).

    \b
    Examples:
      MINT_API_KEY=$(openssl rand -hex 16) mint serve --port 8000
      mint serve --upstream http://127.0.0.1:8001 --port 8000
    """
    from mint.serve.server import ServeOptions, run

    choose_device(device, "decode", say=False)    # said once the options' checks have passed
    limits = Limits(max_body_bytes=max_body_bytes, max_messages=max_messages, max_queue=max_queue,
                    max_per_key=max_per_key)
    options = ServeOptions(host=host, port=port, base=base, max_rank=max_rank, window_ms=window_ms,
                           max_batch=max_batch, poll_s=poll_s, api_keys=tuple(api_keys or ()), insecure=insecure,
                           allowed_hosts=tuple(allowed_hosts or ()), limits=limits, retention_days=retention_days,
                           scrub_logs=scrub_logs, max_loras=max_loras, upstream=upstream, upstream_key=upstream_key,
                           upstream_timeout=upstream_timeout, config=config)
    run(ws(writes=True), options, _render_serving, started=after_checks("decode"))


def _render_serving(serving) -> None:
    revisions = ", ".join(f"{k} {v}" for k, v in serving.revisions.items())
    keyless = "  [no API key: anyone who reaches the port may call]" if serving.keyless else ""
    if serving.upstream is None:
        err.print(f"serving on {escape(serving.url)}  ({escape(revisions)})" + keyless)
    else:
        held, depth = serving.layers_held
        err.print(f"gateway on {escape(serving.url)} to {escape(serving.upstream)}  ({escape(revisions)}; "
                  f"{held} of the base's {depth} layers held)" + keyless)
    for warning in serving.warnings:
        err.print(f"warning: {escape(warning)}")
