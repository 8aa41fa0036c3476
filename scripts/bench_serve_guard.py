"""The server's safety goals, measured on a real `mint serve` on 127.0.0.1: keys, admission, isolation.

Run:   python scripts/bench_serve_guard.py                  (tiny-random base, about a minute on 2 cores)
       python scripts/bench_serve_guard.py --base smollm2-135m

`mint serve` starts as a user starts it (its own process, an API key, --window-ms 200 so concurrent requests
share a batch), in a scratch workspace. Then, each with a bounded number of requests:
  auth          requests without a valid key (none, wrong, not Bearer) on every /v1 route: accepted must be 0;
                a cross-origin text/plain POST and a foreign Host must be refused (415, 403)
  abandoned     a 2-token request's latency on the idle server, then with three `max_tokens: 1900` requests
                whose clients left: goal within 2 s of idle
  big body      a 10 MB body: refused 413 in under 100 ms
  bad row       16 concurrent requests, one longer than the base's context: the other 15 answered 200
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from servers import free_port, wait_ready

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

KEY = "bench-guard-key-0001"
AUTH = {"authorization": f"Bearer {KEY}"}


def start_server(home: Path, base: str) -> tuple[subprocess.Popen, str, int]:
    port = free_port()
    env = {**os.environ, "MINT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--base", base, "--port", str(port),
                                "--window-ms", "200", "--api-key", KEY], cwd=home.parent, env=env,
                               stdout=subprocess.DEVNULL, stderr=open(home.parent / "serve.log", "wb"))
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, f"{url}/health", log=home.parent / "serve.log", limit_s=300, what="mint serve")
    except RuntimeError:
        process.kill()
        raise
    return process, url, port


def short(url: str) -> float:
    import httpx

    started = time.perf_counter()
    response = httpx.post(f"{url}/v1/chat/completions", headers=AUTH, timeout=300,
                          json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2})
    assert response.status_code == 200, response.text
    return time.perf_counter() - started


def auth_figures(url: str) -> dict:
    import httpx

    body = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    bad = [{}, {"authorization": "Bearer not-the-key-123"}, {"authorization": KEY},
           {"authorization": f"Basic {KEY}"}, {"authorization": f"Bearer {KEY}x"}]
    sent = accepted = 0
    for headers in bad * 4:
        for method, path, payload in (("POST", "/v1/chat/completions", body), ("GET", "/v1/models", None),
                                      ("POST", "/v1/feedback", {"id": "chatcmpl-x", "rating": 1})):
            response = httpx.request(method, f"{url}{path}", json=payload, headers=headers, timeout=60)
            sent += 1
            accepted += response.status_code < 400
    plain = httpx.post(f"{url}/v1/chat/completions", content=json.dumps(body), timeout=60,
                       headers={"content-type": "text/plain", "origin": "https://evil.example", **AUTH})
    foreign = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60,
                         headers={"host": "evil.example", **AUTH})
    health = httpx.get(f"{url}/health", timeout=60).json()
    return {"sent_without_key": sent, "accepted_without_key": accepted, "text_plain": plain.status_code,
            "foreign_host": foreign.status_code, "health_without_key": health}


def abandon(port: int, max_tokens: int) -> None:
    """A request whose client sends it and leaves before the answer."""
    body = json.dumps({"messages": [{"role": "user", "content": "write a long story"}],
                       "max_tokens": max_tokens}).encode()
    with socket.create_connection(("127.0.0.1", port)) as raw:
        raw.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                    + f"Authorization: Bearer {KEY}\r\nContent-Length: {len(body)}\r\n\r\n".encode() + body)
        time.sleep(0.3)      # long enough for its batch to begin


def abandoned_figures(url: str, port: int) -> dict:
    idle = statistics.median(short(url) for _ in range(3))
    leavers = [threading.Thread(target=abandon, args=(port, 1900)) for _ in range(3)]
    for thread in leavers:
        thread.start()
    for thread in leavers:
        thread.join()
    loaded = short(url)
    import httpx

    cancelled = httpx.get(f"{url}/health", headers=AUTH, timeout=60).json()["cancelled"]
    return {"idle_s": round(idle, 3), "with_three_abandoned_s": round(loaded, 3),
            "difference_s": round(loaded - idle, 3), "abandoned_rows_stopped": cancelled}


def big_body_figures(url: str) -> dict:
    import httpx

    body = json.dumps({"messages": [{"role": "user", "content": "x" * (10 << 20)}]}).encode()
    timings, statuses = [], []
    for _ in range(3):
        started = time.perf_counter()
        try:
            response = httpx.post(f"{url}/v1/chat/completions", content=body, timeout=60,
                                  headers={"content-type": "application/json", **AUTH})
            statuses.append(response.status_code)
        except httpx.WriteError:        # refused while the rest was still on its way: the socket closed
            statuses.append("closed")
        timings.append(time.perf_counter() - started)
    return {"statuses": statuses, "median_ms": round(statistics.median(timings) * 1000, 1)}


def bad_row_figures(url: str) -> dict:
    import httpx

    results: dict[int, int] = {}

    def send(row: int) -> None:
        content = "word " * 3000 if row == 7 else f"hello number {row}"
        response = httpx.post(f"{url}/v1/chat/completions", headers=AUTH, timeout=300,
                              json={"messages": [{"role": "user", "content": content}], "max_tokens": 4,
                                    "temperature": 0.7, "seed": row})
        results[row] = response.status_code
    before = httpx.get(f"{url}/health", headers=AUTH, timeout=60).json()["batches"]
    threads = [threading.Thread(target=send, args=(row,)) for row in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = httpx.get(f"{url}/health", headers=AUTH, timeout=60).json()["batches"]
    return {"bad_row": results[7], "others_answered": sum(results[r] == 200 for r in results if r != 7),
            "batches": after - before}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", default="tiny-random")
    args = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="mint-serve-guard-"))
    process, url, port = start_server(scratch / "home", args.base)
    try:
        figures = {"auth": auth_figures(url), "abandoned": abandoned_figures(url, port),
                   "big_body": big_body_figures(url), "bad_row": bad_row_figures(url)}
    finally:
        process.terminate()
        process.wait(timeout=60)
    goals = {
        "0 accepted without a key": figures["auth"]["accepted_without_key"] == 0,
        "text/plain and foreign Host refused": (figures["auth"]["text_plain"], figures["auth"]["foreign_host"])
        == (415, 403),
        "short request within 2 s of idle with 3 abandoned": figures["abandoned"]["difference_s"] < 2.0,
        "10 MB body refused in < 100 ms": figures["big_body"]["median_ms"] < 100
        and all(s in (413, "closed") for s in figures["big_body"]["statuses"]),
        "1 bad row of 16 leaves 15 answered": figures["bad_row"]["others_answered"] == 15
        and figures["bad_row"]["bad_row"] == 400,
    }
    print(json.dumps({"base": args.base, **figures}, indent=2))
    for goal, met in goals.items():
        print(f"{'PASS' if met else 'FAIL'}  {goal}")
    return 0 if all(goals.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
