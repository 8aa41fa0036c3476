"""Send a file of user requests through `mint serve`, as clients of a deployed model would.

Starts `mint serve` on a free loopback port with a one-time API key, waits until it answers /health, posts
every request in the JSONL file to /v1/chat/completions from a few concurrent clients (the server batches
them into mixed-adapter batches), then stops the server. The server logs each turn to $MINT_HOME/logs, which
is how the loop's experience step later reads them back. Prints one line per request and a summary; exits 1
if any request failed, 2 on a bad file.

Run (in a mint project): python scripts/demo_serve.py examples/requests/genui.jsonl [--mint PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def read_requests(path: Path) -> list[dict]:
    rows = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SystemExit(f"{path}: cannot read ({exc})") from None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            print(f"{path}:{number}: not JSON ({exc.msg})", file=sys.stderr)
            sys.exit(2)
        if not isinstance(row, dict) or not isinstance(row.get("messages"), list) or not row["messages"]:
            print(f"{path}:{number}: field 'messages': expected a non-empty list", file=sys.stderr)
            sys.exit(2)
        rows.append(row)
    return rows


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(url: str, key: str, body: dict, timeout: float) -> dict:
    data = json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method="POST", headers={
        "Authorization": f"Bearer {key}", "Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=timeout) as response:
        return json.loads(response.read())


def wait_healthy(base_url: str, server: subprocess.Popen, deadline_s: float) -> None:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        if server.poll() is not None:
            raise SystemExit(f"mint serve exited with status {server.returncode} before it answered")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.5)
    raise SystemExit(f"mint serve did not answer /health within {deadline_s:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("requests", type=Path)
    parser.add_argument("--mint", default="mint", help="The mint command (default: mint on PATH).")
    parser.add_argument("--clients", type=int, default=8, help="Concurrent clients.")
    parser.add_argument("--max-tokens", type=int, default=256, help="max_tokens of each request.")
    args = parser.parse_args()
    rows = read_requests(args.requests)
    port, key = free_port(), secrets.token_urlsafe(16)
    env = dict(os.environ, MINT_API_KEY=key)
    server = subprocess.Popen([args.mint, "serve", "--port", str(port), "--poll", "3600"], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    base_url = f"http://127.0.0.1:{port}"
    started = time.monotonic()
    try:
        wait_healthy(base_url, server, 300)
        url = f"{base_url}/v1/chat/completions"

        def answer(row: dict):
            body = {"messages": row["messages"], "max_tokens": args.max_tokens}
            if row.get("tools"):
                body["tools"] = row["tools"]
            try:
                reply = call(url, key, body, timeout=600)
                served_by = (reply.get("mint") or {}).get("served_by") or reply["model"]
                return served_by, reply["choices"][0]["message"].get("content") or "", None
            except (urllib.error.URLError, OSError, KeyError, ValueError) as exc:
                return None, None, str(exc)

        with ThreadPoolExecutor(max_workers=max(1, args.clients)) as pool:
            results = list(pool.map(answer, rows))
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
    failed = 0
    served: dict[str, int] = {}
    for row, (model, content, error) in zip(rows, results):
        prompt = next((m.get("content") for m in reversed(row["messages"]) if m.get("role") == "user"), "")
        if error:
            failed += 1
            print(f"FAILED  {prompt[:60]!r}: {error}")
            continue
        served[model] = served.get(model, 0) + 1
        print(f"{model:<20} {prompt[:60]!r} -> {len(content)} chars")
    by_model = ", ".join(f"{m} {n}" for m, n in sorted(served.items()))
    print(f"served {len(rows) - failed} of {len(rows)} requests in {time.monotonic() - started:.0f} s ({by_model}); "
          f"each turn is logged in the workspace's logs/")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
