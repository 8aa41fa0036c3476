"""Send a file of user requests through `mint serve`, as its clients would: the loop's `serve` step.

A deployed model's experience comes from the turns it serves. So that a recipe (and `make demo`) closes the loop
the way a deployment does, this starts the real server (``create_app``, the same admission and logging as
`mint serve`) on a free loopback port with a one-time API key, posts every request to /v1/chat/completions over
HTTP from a few concurrent clients (the batcher groups them into mixed-adapter batches, one specialist per row as
the router picks), and stops it. Each turn is logged to ``$MINT_HOME/logs`` exactly as `mint serve` logs it, which
is where the experience step reads the champion's own traffic back.
"""
from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from mint.errors import BadInput
from mint.jsonl import read_jsonl
from mint.project import Project
from mint.workspace import Workspace

START_LIMIT_S = 300.0       # loading the base and the champions; past it the step fails, it never hangs
REQUEST_LIMIT_S = 600.0


def read_requests(path: Path) -> list[dict]:
    """The requests of a JSONL file: ``{"messages": [...], "tools"?: [...]}`` or ``{"prompt": "..."}`` per line;
    a bad line is BadInput naming the file, line and field."""
    rows = []
    for number, row in read_jsonl(path):
        if isinstance(row, dict) and isinstance(row.get("prompt"), str) and row["prompt"].strip() \
                and "messages" not in row:
            row = {"messages": [{"role": "user", "content": row["prompt"]}], **({"tools": row["tools"]}
                                                                              if row.get("tools") else {})}
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list) or not row["messages"]:
            raise BadInput("expected a non-empty list of chat messages (or a `prompt` string)", file=str(path),
                           line=number, field="messages")
        if "tools" in row and not isinstance(row["tools"], list):
            raise BadInput("expected a list of tool definitions", file=str(path), line=number, field="tools")
        rows.append({"messages": row["messages"], **({"tools": row["tools"]} if row.get("tools") else {})})
    if not rows:
        raise BadInput("no requests in the file", file=str(path))
    return rows


def _post(url: str, key: str, body: dict) -> dict:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=REQUEST_LIMIT_S) as response:
        return json.loads(response.read())


@dataclass(frozen=True)
class ReplayResult:
    """Requests answered through a real `mint serve`: how many were served and by which revision, the failures
    (the first ten, each with its request's index and reason), the tokens generated and the seconds taken."""

    requests: int
    served: int
    by_revision: dict[str, int] = field(default_factory=dict)
    failures: list[dict] = field(default_factory=list)
    failed: int = 0
    tokens: int = 0
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> ReplayResult:
        return cls(**data)


def serve_requests(ws: Workspace, project: Project, requests_path: Path, *, base: str | None = None,
                   clients: int = 8, max_tokens: int = 256, heldout: float | None = None,
                   heldout_at: tuple = (None, None, "traffic.heldout"),
                   progress: Callable[..., None] | None = None) -> ReplayResult:
    """Answer every request in ``requests_path`` through a real `mint serve` on loopback; returns how many were
    served, by which revision, the failures (each with its reason) and the seconds taken. ``heldout``: the share
    of the traffic held out (mint.data.split), fixed with its first turn; ``heldout_at`` is where it was asked
    for, should the log's share be another. ``progress(what, done, total)`` hears each request answered."""
    from mint.mol.mixture import Mixture
    from mint.mol.turnlog import TurnLog
    from mint.serve.admission import Access, Limits
    from mint.serve.app import create_app
    from mint.serve.local import LocalBackend
    from mint.serve.server import start_background

    rows = read_requests(Path(requests_path))
    if clients < 1 or max_tokens < 1:
        raise BadInput("clients and max_tokens must be at least 1", field="clients")
    started = time.monotonic()
    key = secrets.token_urlsafe(18)
    log = TurnLog(ws, heldout=heldout if heldout is not None else project.traffic_heldout,
                  heldout_at=heldout_at if heldout is not None else project.traffic_at)
    mixture = Mixture.open(ws, project, base=base, log=log)
    # every client's request in flight decodes in the one stream (greedy answers are the same at any batch size)
    # the replay is one caller with one key sending ``clients`` turns at once: the server's per-key and queue
    # limits (32 and 128 by default, against one caller flooding it) are raised to that, not past it
    defaults = Limits()
    limits = Limits(max_queue=max(defaults.max_queue, clients), max_per_key=max(defaults.max_per_key, clients))
    running = start_background(create_app(LocalBackend(mixture, poll_s=3600.0, max_batch=clients),
                                          access=Access((key,)), limits=limits),
                               start_limit_s=START_LIMIT_S)
    try:
        url = f"http://127.0.0.1:{running.port}/v1/chat/completions"

        def answer(row: dict) -> dict:
            try:
                reply = _post(url, key, {**row, "max_tokens": max_tokens})
                mint = reply.get("mint") or {}
                return {"served_by": mint.get("served_by"), "specialist": mint.get("specialist"),
                        "tokens": (reply.get("usage") or {}).get("completion_tokens")}
            except urllib.error.HTTPError as exc:
                return {"error": f"HTTP {exc.code}: {exc.read()[:200].decode('utf-8', 'replace')}"}
            except (urllib.error.URLError, OSError, ValueError) as exc:
                return {"error": str(exc)}

        answered, counting = [0], threading.Lock()

        def answer_told(row: dict) -> dict:
            result = answer(row)
            if progress is not None:
                with counting:
                    answered[0] += 1
                    progress("requests answered", answered[0], len(rows))
            return result

        with ThreadPoolExecutor(max_workers=clients) as pool:
            results = list(pool.map(answer_told, rows))
    finally:
        running.stop()
    served: dict[str, int] = {}
    for result in results:
        if "error" not in result:
            served[result["served_by"] or "base"] = served.get(result["served_by"] or "base", 0) + 1
    failures = [{"request": i, "error": r["error"]} for i, r in enumerate(results) if "error" in r]
    return ReplayResult(len(rows), len(rows) - len(failures), served, failures[:10], len(failures),
                        sum(r.get("tokens") or 0 for r in results), round(time.monotonic() - started, 1))
