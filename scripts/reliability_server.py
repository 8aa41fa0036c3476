"""Reliability suite 6: `mint serve` under load, with a promotion in the middle.

Run:   python scripts/reliability_server.py            (1,000 requests from 16 clients, a few minutes on 2 cores)
       python scripts/reliability_server.py --quick    (100 requests from 4 clients)
       python scripts/reliability_server.py --seed 7   (another reproducible request mix)

`mint serve` (tiny base, coding:v1 champion, an API key that every client sends) runs as its own process on
127.0.0.1. Clients (the official openai client and raw httpx) send a seeded mix of valid turns (routed and
forced to mint/coding, plain and streaming, some followed by feedback), malformed bodies and oversized
requests; halfway through, `mint promote coding:v2` runs and the server's poller swaps the adapter. Then the server is stopped (SIGINT) and
the suite checks:
  5xx         responses with a 5xx status or no response at all: goal 0
  refused     valid requests not answered 200: goal 0
  lost / dup  valid completions missing from, or repeated in, $MINT_HOME/logs (matched by completion id): goal 0
  mismatches  answers whose served_by is neither coding:v1 nor coding:v2 (forced turns) or base/one of them
              (routed), or whose text differs from that revision's greedy answer to the same prompt,
              recomputed afterwards in this process for a sample: goal 0
  rss growth  the server's resident memory at the end minus at three quarters of the requests (after the
              mid-run promotion has been picked up and every kind of request served): goal < 50 MB; a leak
              keeps growing with the requests, while arenas, caches and the second adapter grow once
              (the growth from a quarter of the requests is printed too)
The last line printed is the figure; the exit code is 1 when any goal is missed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TINY = "tiny-random"
API_KEY = "reliability-key-0001"   # the server runs with a key, as one facing clients does
AUTH = {"authorization": f"Bearer {API_KEY}"}
RSS_GOAL_MB = 50
PROMPTS = ["Write a Python function that reverses a list.", "Fix this bug: for i in range(len(xs)) print(xs[i])",
           "What is 2 + 2?", "Make a signup form with email and password.", "Book a table for two at eight.",
           "Tell me a fun fact about octopuses.", "Explain recursion in one sentence.", "def add(a, b):"]
MAX_TOKENS = (4, 8)
KINDS = {"openai": 0.25, "openai_stream": 0.15, "httpx": 0.15, "httpx_routed": 0.1, "malformed": 0.2,
         "oversized": 0.15}
MALFORMED = [b"", b"not json", b"[]", b'{"messages": []}', b'{"messages": [{"role": "robot", "content": "x"}]}',
             b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}',
             b'{"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}',
             b'{"messages": [{"role": "user", "content": "x"}], "model": "gpt-4"}',
             b'{"messages": [{"role": "user", "content": "x"}], "stream": "yes"}', b"\xff\xfe\x00",
             b'{"messages": [{"role": "user", "content": "x"}], "x": ' + b"[" * 50_000 + b"]" * 50_000 + b"}"]


@dataclass
class Outcome:
    kind: str
    status: int | None            # None: no response (connection error, timeout)
    valid: bool
    prompt: str | None = None
    max_tokens: int | None = None
    forced: bool = False
    id: str | None = None
    text: str | None = None
    served_by: str | None = None
    error: str | None = None
    seconds: float = 0.0


@dataclass
class Figure:
    requests: int = 0
    server_errors: int = 0
    refused: int = 0
    lost: int = 0
    dup: int = 0
    mismatches: int = 0
    checked: int = 0
    rss_growth_mb: float = 0.0
    notes: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return not (self.server_errors or self.refused or self.lost or self.dup or self.mismatches) \
            and self.rss_growth_mb < RSS_GOAL_MB

    def line(self) -> str:
        return (f"FIGURE server: requests={self.requests} 5xx={self.server_errors} refused={self.refused} "
                f"lost={self.lost} dup={self.dup} mismatches={self.mismatches} (of {self.checked} checked) "
                f"rss_growth_mb={self.rss_growth_mb:.1f} goal=0,0,0,0,0,<{RSS_GOAL_MB} "
                f"{'PASS' if self.passed else 'FAIL'}")


# --- setup: two coding revisions of the tiny base ------------------------------------------------

def make_lora(path: Path, seed: int) -> Path:
    """A PEFT LoRA of the tiny base with random non-zero weights (so it changes the greedy tokens)."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import load_base

    torch.manual_seed(seed)
    model = get_peft_model(load_base(TINY).model, LoraConfig(r=4, lora_alpha=16, init_lora_weights=False,
                                                             target_modules=["q_proj", "v_proj", "down_proj"]))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_" in name:
                param.normal_(0, 0.3)
    model.save_pretrained(path)
    return path


def prepare(home: Path, seed: int) -> None:
    """coding:v1 (champion) and coding:v2 (a candidate, promoted mid-run) in a fresh workspace."""
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    ws = workspace(home)
    first = register(ws, make_lora(home.parent / "lora-v1", seed), specialist="coding", base=TINY, method="sft")
    register(ws, make_lora(home.parent / "lora-v2", seed + 1), specialist="coding", base=TINY, method="sft")
    promote(ws, first.ref, force=True, why="reliability_server: the starting champion")


# --- the server ------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ServeProcess:
    """`mint serve` as a user starts it, in its own process."""

    def __init__(self, home: Path, workdir: Path) -> None:
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(workdir / "serve.log", "wb")
        env = {**os.environ, "MINT_HOME": str(home), "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--base", TINY, "--port",
                                         str(self.port), "--poll", "0.2", "--window-ms", "10", "--api-key", API_KEY],
                                        cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT)

    def wait_ready(self, limit_s: float = 300) -> None:
        import httpx

        deadline = time.monotonic() + limit_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"mint serve exited with {self.process.returncode}")
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise RuntimeError("mint serve did not start")

    def rss_mb(self) -> float:
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        return 0.0

    def stop(self) -> int:
        """SIGINT, as Ctrl-C: uvicorn runs the shutdown that logs the turns still awaiting feedback."""
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout=120)
        finally:
            self.log.close()


# --- the clients -------------------------------------------------------------------------------

def plan_requests(count: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    kinds, weights = zip(*KINDS.items())
    plan = []
    for _ in range(count):
        kind = rng.choices(kinds, weights)[0]
        plan.append({"kind": kind, "prompt": rng.choice(PROMPTS), "max_tokens": rng.choice(MAX_TOKENS),
                     "feedback": rng.random() < 0.3, "malformed": rng.choice(MALFORMED),
                     "oversized": rng.choice(["context", "max_tokens", "big_body"])})
    return plan


def send(url: str, request: dict) -> Outcome:
    import httpx
    import openai

    kind, prompt, max_tokens = request["kind"], request["prompt"], request["max_tokens"]
    messages = [{"role": "user", "content": prompt}]
    try:
        if kind in ("openai", "openai_stream"):
            client = openai.OpenAI(base_url=f"{url}/v1", api_key=API_KEY, max_retries=0, timeout=300)
            if kind == "openai":
                reply = client.chat.completions.create(model="mint/coding", messages=messages, max_tokens=max_tokens)
                answer = Outcome(kind, 200, True, prompt, max_tokens, True, reply.id,
                                 reply.choices[0].message.content, reply.model_extra["mint"]["served_by"])
            else:
                text, served_by, answer_id = [], None, None
                for chunk in client.chat.completions.create(model="mint/coding", messages=messages,
                                                            max_tokens=max_tokens, stream=True):
                    answer_id = chunk.id
                    if chunk.choices and chunk.choices[0].delta.content:
                        text.append(chunk.choices[0].delta.content)
                    extra = (chunk.model_extra or {}).get("mint")
                    if extra:
                        served_by = extra.get("served_by", served_by)
                answer = Outcome(kind, 200, True, prompt, max_tokens, True, answer_id, "".join(text), served_by)
        elif kind in ("httpx", "httpx_routed"):
            body = {"messages": messages, "max_tokens": max_tokens,
                    **({"model": "mint/coding"} if kind == "httpx" else {})}
            response = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=300, headers=AUTH)
            if response.status_code != 200:
                return Outcome(kind, response.status_code, True, prompt, error=response.text[:200])
            data = response.json()
            answer = Outcome(kind, 200, True, prompt, max_tokens, kind == "httpx", data["id"],
                             data["choices"][0]["message"]["content"], data["mint"]["served_by"])
        else:
            if kind == "malformed":
                body = request["malformed"]
            elif request["oversized"] == "context":
                body = json.dumps({"messages": [{"role": "user", "content": "word " * 3000}]}).encode()
            elif request["oversized"] == "max_tokens":
                body = json.dumps({"messages": messages, "max_tokens": 100_000}).encode()
            else:   # half a megabyte of text: far past the tiny base's context
                body = json.dumps({"messages": [{"role": "user", "content": "x " * (1 << 18)}]}).encode()
            response = httpx.post(f"{url}/v1/chat/completions", content=body, timeout=300,
                                  headers={"content-type": "application/json", **AUTH})
            return Outcome(kind, response.status_code, False, error=response.text[:200])
    except openai.APIStatusError as exc:
        return Outcome(kind, exc.status_code, True, prompt, error=str(exc)[:200])
    except (openai.APIConnectionError, httpx.HTTPError) as exc:
        return Outcome(kind, None, kind not in ("malformed", "oversized"), prompt, error=repr(exc)[:200])
    if request["feedback"] and answer.id:
        try:
            given = httpx.post(f"{url}/v1/feedback", json={"id": answer.id, "rating": 1}, timeout=60, headers=AUTH)
            if given.status_code != 200:
                answer.error = f"feedback: {given.status_code} {given.text[:100]}"
        except httpx.HTTPError as exc:
            answer.error = f"feedback: {exc!r}"
    return answer


def run_load(url: str, plan: list[dict], clients: int, promote, on_warm) -> list[Outcome]:
    """Send ``plan`` from ``clients`` threads; ``on_warm`` runs after the first quarter (by then every kind of
    request has been served: the allocator's arenas and caches have grown) and again at three quarters,
    ``promote`` halfway."""
    done = Counter()
    lock = threading.Lock()
    warm_at, promote_at = max(1, len(plan) // 4), len(plan) // 2
    hooks = {warm_at: on_warm, promote_at: promote, max(warm_at + 1, len(plan) * 3 // 4): on_warm}

    def one(request: dict) -> Outcome:
        started = time.perf_counter()
        outcome = send(url, request)
        outcome.seconds = time.perf_counter() - started
        with lock:
            done["n"] += 1
            hook = hooks.pop(done["n"], None)
        if hook:
            hook()
        return outcome

    with ThreadPoolExecutor(clients) as pool:
        return list(pool.map(one, plan))


# --- the checks ------------------------------------------------------------------------------------

def logged_ids(home: Path) -> Counter:
    counts: Counter = Counter()
    for path in sorted((home / "logs").glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                record = json.loads(line)
                if "messages" in record:     # a turn; feedback lines ({"upstream_id", "feedback"}) name one
                    counts[record["id"]] += 1
    return counts


def reference_answers(home: Path, keys: set[tuple[str, str, int]]) -> dict[tuple[str, str, int], str]:
    """(served_by, prompt, max_tokens) -> that revision's greedy answer, generated alone in this process."""
    from mint.base import load_base
    from mint.mol.runtime import Decoding, MixtureRuntime
    from mint.registry.artifacts import load_revision
    from mint.workspace import workspace

    runtime = MixtureRuntime(load_base(TINY), ["coding"])
    answers = {}
    for served_by in sorted({k[0] for k in keys}):
        if served_by == "base":
            runtime.clear("coding")
        else:
            revision, directory = load_revision(workspace(home), served_by)
            runtime.load_adapter("coding", directory, revision_id=revision.id, ref=revision.ref)
        for key in sorted(k for k in keys if k[0] == served_by):
            _served, prompt, max_tokens = key
            out = runtime.generate([[{"role": "user", "content": prompt}]], ["coding" if served_by != "base" else None],
                                   Decoding(max_new_tokens=max_tokens))
            answers[key] = out[0].text
    return answers


def judge(outcomes: list[Outcome], home: Path, rss_growth_mb: float, sample: int, seed: int) -> Figure:
    figure = Figure(requests=len(outcomes), rss_growth_mb=rss_growth_mb)
    for o in outcomes:
        if o.status is None or o.status >= 500:
            figure.server_errors += 1
            figure.notes.append(f"{o.kind}: {o.status} {o.error}")
        elif o.valid and o.status != 200:
            figure.refused += 1
            figure.notes.append(f"valid {o.kind} answered {o.status}: {o.error}")
        elif not o.valid and not 400 <= o.status < 500:
            figure.notes.append(f"bad {o.kind} answered {o.status}")
            figure.refused += 1
    answered = [o for o in outcomes if o.valid and o.status == 200]
    counts = logged_ids(home)
    figure.lost = sum(1 for o in answered if counts[o.id] == 0)
    figure.dup = sum(1 for o in answered if counts[o.id] > 1)
    allowed_forced = {"coding:v1", "coding:v2"}
    for o in answered:
        if o.served_by not in (allowed_forced if o.forced else allowed_forced | {"base"}):
            figure.mismatches += 1
            figure.notes.append(f"{o.id} served by {o.served_by!r}")
    rng = random.Random(seed)
    checked = rng.sample(answered, min(sample, len(answered)))
    references = reference_answers(home, {(o.served_by, o.prompt, o.max_tokens) for o in checked
                                          if o.served_by in allowed_forced | {"base"} and o.forced})
    for o in checked:
        key = (o.served_by, o.prompt, o.max_tokens)
        if key in references:
            figure.checked += 1
            if references[key] != o.text:
                figure.mismatches += 1
                figure.notes.append(f"{o.id} ({o.served_by}): {o.text!r} != alone {references[key]!r}")
    return figure


# --- the driver ------------------------------------------------------------------------------------

def run_suite(requests: int, clients: int, seed: int, *, sample: int = 64, log=print) -> Figure:
    scratch = Path(tempfile.mkdtemp(prefix="mint-serve-load-"))
    home = scratch / "home"
    server = None
    try:
        prepare(home, seed)
        started = time.perf_counter()
        server = ServeProcess(home, scratch)
        server.wait_ready()
        log(f"server up in {time.perf_counter() - started:.1f} s; {requests} requests from {clients} clients")
        rss = {}
        promoted = {}

        def promote() -> None:
            result = subprocess.run([sys.executable, "-m", "mint", "promote", "coding:v2", "--force", "--why",
                                     "reliability_server: mid-run promotion"], capture_output=True, text=True,
                                    env={**os.environ, "MINT_HOME": str(home), "PYTHONPATH": str(ROOT)})
            promoted["code"], promoted["output"] = result.returncode, result.stdout + result.stderr
            log(f"mint promote coding:v2 -> exit {result.returncode}")

        def on_warm() -> None:   # the first call is the warm-up mark; later ones show whether growth levels off
            rss.setdefault("warm", server.rss_mb())
            rss.setdefault("series", []).append(round(server.rss_mb()))

        started = time.perf_counter()
        outcomes = run_load(server.url, plan_requests(requests, seed), clients, promote, on_warm)
        seconds = time.perf_counter() - started
        rss["end"] = server.rss_mb()
        code = server.stop()
        server = None
        log(f"{requests} requests in {seconds:.1f} s; server RSS {rss.get('warm', 0):.0f} MB after warm-up, "
            f"{rss['end']:.0f} MB at the end (at 25%/75% of the requests: {rss.get('series')}); exit {code} "
            "on SIGINT")
        if promoted.get("code") != 0:
            raise RuntimeError(f"mint promote failed: {promoted.get('output')}")
        by_kind: dict[str, list[float]] = {}
        for o in outcomes:
            by_kind.setdefault(o.kind, []).append(o.seconds)
        log("mean seconds per request: " + ", ".join(f"{k} {sum(v) / len(v):.2f}" for k, v in sorted(by_kind.items())))
        served = Counter(o.served_by for o in outcomes if o.served_by)
        log("served_by: " + ", ".join(f"{k} {v}" for k, v in sorted(served.items())))
        log(f"RSS growth from a quarter of the requests to the end: {rss['end'] - rss.get('warm', rss['end']):.0f} MB")
        last_mark = (rss.get("series") or [rss["end"]])[-1]
        figure = judge(outcomes, home, rss["end"] - last_mark, sample, seed)
        if not served.get("coding:v2"):
            figure.notes.append("no answer came from coding:v2: the promotion was not picked up")
            figure.mismatches += 1
        return figure
    finally:
        if server is not None:
            server.process.kill()
            server.log.close()
        shutil.rmtree(scratch, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="100 requests from 4 clients")
    parser.add_argument("--requests", type=int, default=None, help="requests in all (default 1000; --quick 100)")
    parser.add_argument("--clients", type=int, default=None, help="concurrent clients (default 16; --quick 4)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the request mix and the adapters")
    args = parser.parse_args()
    requests = args.requests or (100 if args.quick else 1000)
    clients = args.clients or (4 if args.quick else 16)
    from mint.cli.common import quiet_transformers
    quiet_transformers()
    started = time.perf_counter()
    figure = run_suite(requests, clients, args.seed)
    for note in figure.notes[:20]:
        print("  " + note)
    print(f"({time.perf_counter() - started:.0f} s)")
    print(figure.line())
    return 0 if figure.passed else 1


if __name__ == "__main__":
    sys.exit(main())
