"""Running `mint serve`: the socket bound before anything loads, the backend opened, uvicorn with slow clients cut
off, and the workspace told what serves while it runs.

``run`` is what `mint serve` calls: it checks the options and binds the port first (a port in use, a
non-loopback address without an API key or an unknown base is bad input before the model loads), tells
``started``, opens the backend (the local mixture, or with an upstream the gateway), tells ``ready`` what serves
where, and serves until interrupted.
``start_background`` serves an app from a thread (the loop's serve step, and tests).
"""
from __future__ import annotations

import errno
import socket
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from mint.errors import BadInput
from mint.serve.admission import Access, Limits, is_loopback
from mint.workspace import Workspace


def listening_socket(host: str, port: int) -> socket.socket:
    """The server's socket, bound before the model loads: a host that does not resolve, a port in use or one
    this user may not open is bad input naming its option, not a uvicorn error after a long load. Port 0
    takes a free port (``getsockname()`` says which)."""
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise BadInput("must be from 0 to 65535", field="--port")
    try:
        family, kind, proto, _name, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                                 flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError, ValueError) as exc:
        raise BadInput(f"{host!r} is not an address to listen on ({exc})", field="--host") from None
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except OSError as exc:
        sock.close()
        field = "--port" if exc.errno in (errno.EADDRINUSE, errno.EACCES) else "--host"
        raise BadInput(f"cannot listen on {host}:{port}: {exc.strerror or exc}", field=field) from None
    return sock


def _timed_protocol(header_timeout_s: float):
    """uvicorn's h11 protocol, with a deadline for each request's headers: a client that sends part of them
    and stalls is disconnected after ``header_timeout_s`` (uvicorn's own timeout covers idle keep-alive only)."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    class TimedH11Protocol(H11Protocol):
        _header_deadline = None

        def connection_made(self, transport) -> None:
            super().connection_made(transport)
            self._await_headers()

        def _await_headers(self) -> None:
            if self._header_deadline is None:
                self._header_deadline = self.loop.call_later(header_timeout_s, self._headers_too_slow)

        def _headers_too_slow(self) -> None:
            self._header_deadline = None
            if not self.transport.is_closing():
                self.transport.close()

        def data_received(self, data: bytes) -> None:
            before = self.cycle
            super().data_received(data)
            if self.cycle is not before and self._header_deadline is not None:   # a request's headers are in
                self._header_deadline.cancel()
                self._header_deadline = None
            elif self.cycle is None or self.cycle.response_complete:            # the next request began
                self._await_headers()

        def connection_lost(self, exc) -> None:
            if self._header_deadline is not None:
                self._header_deadline.cancel()
                self._header_deadline = None
            super().connection_lost(exc)

    return TimedH11Protocol


def server_config(app, limits: Limits = Limits(), **options):
    """The uvicorn config ``serve`` runs ``app`` with: slow clients are cut off (see ``Limits``)."""
    import uvicorn

    options = {"log_level": "warning", **options}
    # uvicorn annotates timeout_keep_alive as int; it hands it to call_later, which takes float seconds
    return uvicorn.Config(app, http=_timed_protocol(limits.header_timeout_s), timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
                          h11_max_incomplete_event_size=64 << 10, **options)


class BackgroundServer:
    """``app`` served by uvicorn on a thread (``start_background``): for a step that drives the server as its
    clients would, and for tests. ``stop`` waits for the thread."""

    def __init__(self, server, thread: threading.Thread, sock: socket.socket) -> None:
        self.server, self.thread, self.sock = server, thread, sock
        self.port = sock.getsockname()[1]

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=60)
        self.sock.close()


def start_background(app, limits: Limits = Limits(), *, host: str = "127.0.0.1", port: int = 0,
                     start_limit_s: float = 300.0) -> BackgroundServer:
    """Serve ``app`` on ``host:port`` (0: a free port) from a thread, once uvicorn says it has started; a server
    that does not start within ``start_limit_s`` is stopped and BadInput, never a hang."""
    import uvicorn

    sock = listening_socket(host, port)
    server = uvicorn.Server(server_config(app, limits, log_level="error"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    running = BackgroundServer(server, thread, sock)
    deadline = time.monotonic() + start_limit_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            running.stop()
            raise BadInput(f"the server did not start within {start_limit_s:.0f} s", field="serve")
        time.sleep(0.05)
    return running


def serve(backend, sock: socket.socket, *, access: Access = Access(), limits: Limits = Limits()) -> None:
    """Serve the app over ``backend`` on ``sock`` (``listening_socket``) until interrupted (blocking). While it
    runs, the workspace knows the LoRA rank it loads where the backend knows it (``mint.registry.servers``), so
    `mint promote` refuses a champion it could not load."""
    import uvicorn

    from mint.serve.app import create_app

    app = create_app(backend, access=access, limits=limits)
    host, port = sock.getsockname()[:2]
    backend.announce(f"http://{f'[{host}]' if ':' in host else host}:{port}")
    try:
        uvicorn.Server(server_config(app, limits)).run(sockets=[sock])
    finally:
        backend.withdraw()


@dataclass(frozen=True)
class ServeOptions:
    """`mint serve`'s options (see its help)."""
    host: str = "127.0.0.1"
    port: int = 8000
    base: str | None = None
    max_rank: int | None = None
    window_ms: float = 10.0
    max_batch: int = 16
    poll_s: float = 2.0
    api_keys: tuple[str, ...] = ()        # as given: each may hold several keys separated by spaces
    insecure: bool = False
    allowed_hosts: tuple[str, ...] = ()
    limits: Limits = Limits()
    retention_days: float | None = None
    scrub_logs: bool = False
    max_loras: int = 4
    upstream: str | None = None
    upstream_key: str | None = None
    upstream_timeout: float = 60.0
    config: Path | None = None


@dataclass(frozen=True)
class Serving:
    """What serves where, said before serving begins."""
    url: str                              # the API's base URL (…/v1)
    revisions: dict[str, str]             # specialist (and router) -> what answers for it
    keyless: bool                         # no API key: anyone who reaches the port may call
    warnings: list[str] = field(default_factory=list)
    upstream: str | None = None           # the gateway's upstream API
    layers_held: tuple[int, int] | None = None   # the gateway's decoder layers held, of the base's


def run(ws: Workspace, options: ServeOptions, ready: Callable[[Serving], None],
        started: Callable[[], None] | None = None) -> None:
    """Serve as ``options`` say until interrupted: bind, check the options, ``started()`` (nothing is loaded yet),
    open the backend, ``ready(what serves)``, serve."""
    from mint.base import check_base_name
    from mint.generation.upstream import Upstream
    from mint.mol.turnlog import TurnLog
    from mint.project import load_project

    if options.window_ms < 0 or options.max_batch < 1 or options.poll_s <= 0:
        raise BadInput("--window-ms must be >= 0, --max-batch >= 1 and --poll > 0", field="--window-ms")
    keys = tuple(k for value in options.api_keys for k in value.split())
    # the address it listens on is a name its clients use (a wildcard is not)
    named = () if options.host in ("0.0.0.0", "::", "") else (options.host,)
    access = Access(keys, (*options.allowed_hosts, *named))
    sock = listening_socket(options.host, options.port)
    try:
        host, port = sock.getsockname()[:2]
        if not keys and not options.insecure and not is_loopback(host):
            raise BadInput(f"{options.host} can be reached from other machines, and no API key is set: give "
                           "--api-key (or MINT_API_KEY), or --insecure to serve anyone who reaches the port",
                           field="--host")
        project = load_project(options.config)
        upstream = None
        if options.upstream is not None:
            upstream = Upstream(options.upstream, options.upstream_key, options.upstream_timeout)
            if options.max_rank is not None and options.max_rank < 1:
                raise BadInput("must be 1 or more", field="--max-rank")
        elif options.max_loras < 0:
            raise BadInput("must be 0 or more", field="--max-loras")
        check_base_name(options.base or project.base)
        log = TurnLog(ws, retention_days=options.retention_days, heldout=project.traffic_heldout,
                      heldout_at=project.traffic_at)
        if started is not None:
            started()
        log.forget_expired()
        url = f"http://{f'[{options.host}]' if ':' in options.host else options.host}:{port}/v1"
        if upstream is not None:
            backend, serving = _gateway(ws, project, options, upstream, log, url, not keys)
        else:
            backend, serving = _local(ws, project, options, log, url, not keys)
        ready(serving)
        serve(backend, sock, access=access, limits=options.limits)
    finally:
        sock.close()


def _local(ws: Workspace, project, options: ServeOptions, log, url: str, keyless: bool):
    from mint.mol.mixture import Mixture
    from mint.serve.local import LocalBackend

    mixture = Mixture.open(ws, project, base=options.base, max_rank=options.max_rank, log=log,
                           scrub_logs=options.scrub_logs, named_slots=options.max_loras)
    warnings = [f"{name}'s champion is not loaded: {problem}" for name, problem in mixture.runtime.sync_errors.items()]
    backend = LocalBackend(mixture, window_ms=options.window_ms, max_batch=options.max_batch, poll_s=options.poll_s)
    return backend, Serving(url, mixture.revisions(), keyless, warnings)


def _gateway(ws: Workspace, project, options: ServeOptions, upstream, log, url: str, keyless: bool):
    from mint.serve.gateway import Gateway, GatewayBackend

    gateway = Gateway.open(ws, project, upstream, base=options.base, max_rank=options.max_rank, log=log,
                           scrub_logs=options.scrub_logs)
    warnings = []
    if gateway.max_rank is None:
        warnings.append("the upstream does not say its largest LoRA rank: give --max-rank (vLLM's --max-lora-rank) "
                        "so that `mint promote` refuses an adapter it could not load")
    if gateway.upstream_error:
        warnings.append(f"{gateway.upstream_error} (retried every {options.poll_s:g} s)")
    warnings += [f"{name}'s champion is not published: {problem}" for name, problem in gateway.sync_errors.items()]
    serving = Serving(url, gateway.revisions(), keyless, warnings, upstream.api,
                      (len(gateway.model.get_decoder().layers), gateway.depth))
    return GatewayBackend(gateway, poll_s=options.poll_s), serving
