"""The gateway (`mint serve --upstream`) in front of a real vLLM (its CPU build) under load, with a promotion and a
rollback in the middle.

Run:   python scripts/reliability_vllm.py              (1,000 requests from 16 clients, a few minutes on 2 cores)
       python scripts/reliability_vllm.py --quick      (100 requests from 4 clients)
Needs: make vllm   (vLLM's CPU build in .venv-vllm; MINT_VLLM_VENV names another venv)

A fresh project on a toy base vLLM's CPU build runs (scripts/vllm_toys.py), every specialist with a champion
whose adapter answers one known sentence to any turn, and coding:v2 beside coding:v1 with a sentence of its own.
`mint export vllm` writes launch.sh, which starts vLLM; `mint serve --upstream` runs in front of it as its own
process, polling the registry every 0.2 s. Sixteen clients send a seeded mix of turns (forced to mint/coding and
routed, plain and streamed, some followed by feedback); at 40% of the requests coding:v2 is promoted, at 70%
rolled back to coding:v1 (the gateway loads each through vLLM's runtime LoRA API and drains the old one). Then:
  5xx         responses with a 5xx status or no response at all: goal 0
  refused     requests not answered 200: goal 0
  lost / dup  answered completions missing from, or repeated in, the gateway's turn log (by the answer's id,
              a logged turn's upstream_id): goal 0
  mismatches  answers that are not the sentence of the adapter the gateway says served them (served_by): goal 0
  switches    whether coding:v2 served turns after the promotion and coding:v1 again after the rollback
  drained     whether vLLM unloaded coding-v2 after the rollback, once the turns on it were answered (the gateway
              keeps a replaced adapter loaded while a turn uses it), and kept coding-v1
The last line printed is the figure; the exit code is 1 when any goal is missed.
"""
from __future__ import annotations

import argparse
import contextlib
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
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

SENTENCES = {"chat:v1": "Chat one speaking.", "agent:v1": "Agent one speaking.", "genui:v1": "Genui one speaking.",
             "coding:v1": "Coding one speaking.", "coding:v2": "Coding two speaking."}
PROMPTS = ["Write a Python function that reverses a list.", "What is 2 + 2?", "Make a signup form with email.",
           "Book a table for two at eight.", "Tell me a fun fact about octopuses.", "hi",
           "Explain recursion in one sentence.", "What's the weather in Paris tomorrow?"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _dies_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def start(command: list[str], log: Path, ready_url: str, limit_s: float, **kwargs) -> subprocess.Popen:
    """A process in its own group, started and waited for until ``ready_url`` answers 200."""
    import httpx

    with open(log, "ab") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=_dies_with_parent, **kwargs)
    deadline = time.monotonic() + limit_s
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(ready_url, timeout=5).status_code == 200:
                return process
        if process.poll() is not None or time.monotonic() > deadline:
            stop(process)
            sys.exit(f"error: {command[0]} did not start; the end of its log ({log}):\n{log.read_text()[-3000:]}")
        time.sleep(0.5)


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(30)


def make_project(root: Path):
    """(the project folder, its workspace, the adapters by revision ref) with every v1 crowned."""
    from vllm_toys import signature_adapter, toy_base

    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    base = toy_base(root / "toy-base")
    project = root / "project"
    subprocess.run([str(ROOT / ".venv" / "bin" / "mint"), "init", "--dir", str(project)], check=True,
                   capture_output=True)
    text = (project / "mint.yaml").read_text()
    (project / "mint.yaml").write_text(text.replace("base: smollm2-135m", f"base: {base}", 1))
    ws = workspace(project / ".mint")
    refs = {}
    for seed, (ref, sentence) in enumerate(SENTENCES.items()):
        specialist = ref.split(":")[0]
        directory = signature_adapter(base, root / f"lora-{ref.replace(':', '-')}", sentence, seed=seed)
        revision = register(ws, directory, specialist=specialist, base=str(base), method="sft")
        assert revision.ref == ref, (revision.ref, ref)
        if ref != "coding:v2":
            promote(ws, ref, force=True, why="reliability run")
        refs[ref] = directory
    return project, ws, base


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--quick", action="store_true", help="100 requests from 4 clients")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep", type=Path, help="keep the run's folder here (else a temporary one)")
    args = parser.parse_args()
    if args.quick:
        args.requests, args.clients = 100, 4

    from mint.mol.export import export_vllm, find_vllm
    from mint.mol.turnlog import read_turns
    from mint.project import load_project
    from mint.registry.promotion import promote, rollback

    if not find_vllm().found:
        sys.exit("error: no vLLM installed here: run `make vllm` (or point MINT_VLLM_VENV at a venv it made)")
    root = args.keep or Path(tempfile.mkdtemp(prefix="mint-reliability-vllm-"))
    root.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    project_dir, ws, _base = make_project(root)
    print(f"project and adapters ready in {time.perf_counter() - started:.0f} s ({root})", flush=True)
    exported = export_vllm(ws, load_project(project_dir / "mint.yaml"), root / "vllm-out")
    vllm_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    vllm = start([str(Path(exported.out) / "launch.sh"), "--host", "127.0.0.1", "--port", str(vllm_port),
                  "--dtype", "float32", "--max-model-len", "2048", "--max-num-seqs", "32"],
                 root / "vllm.log", f"http://127.0.0.1:{vllm_port}/v1/models", 600, env=env)
    gateway = None
    try:
        gateway = start([str(ROOT / ".venv" / "bin" / "mint"), "serve", "--upstream",
                         f"http://127.0.0.1:{vllm_port}", "--max-rank", str(exported.max_lora_rank), "--port",
                         str(gateway_port), "--poll", "0.2", "--max-per-key", "64"],
                        root / "gateway.log", f"http://127.0.0.1:{gateway_port}/health", 300,
                        cwd=project_dir, env={**env, "MINT_HOME": str(project_dir / ".mint")})
        print(f"vLLM and the gateway answer ({time.perf_counter() - started:.0f} s)", flush=True)
        results = run_load(f"http://127.0.0.1:{gateway_port}", args, ws, promote, rollback)
        drained = drained_on(f"http://127.0.0.1:{vllm_port}")
    finally:
        if gateway is not None:
            stop(gateway)
        stop(vllm)
    logged = read_turns(ws)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    report(results, logged, drained, time.perf_counter() - started)


def drained_on(vllm_url: str, limit_s: float = 30.0) -> bool:
    """Whether vLLM unloads coding-v2 (the adapter the rollback replaced, once its turns were answered) and keeps
    coding-v1 (the gateway polls every 0.2 s; the limit only catches an adapter never unloaded)."""
    import httpx

    deadline = time.monotonic() + limit_s
    while True:
        served = [m["id"] for m in httpx.get(f"{vllm_url}/v1/models", timeout=10).json()["data"]]
        if "coding-v2" not in served and "coding-v1" in served:
            return True
        if time.monotonic() > deadline:
            print(f"  not drained: vLLM still serves {served}", flush=True)
            return False
        time.sleep(0.2)


def run_load(url: str, args, ws, promote, rollback) -> list[dict]:
    import httpx

    rng = random.Random(args.seed)
    plan = [{"i": i, "prompt": rng.choice(PROMPTS), "forced": rng.random() < 0.6, "stream": rng.random() < 0.35,
             "feedback": rng.random() < 0.1} for i in range(args.requests)]
    moves = {int(args.requests * 0.4): ("promote", "coding:v2"), int(args.requests * 0.7): ("rollback", "coding")}
    results: list[dict] = [{} for _ in plan]
    issued = Counter()
    lock = threading.Lock()
    client = httpx.Client(timeout=120, limits=httpx.Limits(max_connections=args.clients * 2))

    def one(item: dict) -> None:
        with lock:
            n = issued["n"]
            issued["n"] += 1
            move = moves.get(n)
        if move is not None:            # the registry moves, as an operator's `mint promote` / `mint rollback`
            if move[0] == "promote":
                promote(ws, move[1], force=True, why="reliability run: promotion under load")
            else:
                rollback(ws, move[1], why="reliability run: rollback under load")
            print(f"{move[0]} {move[1]} at request {n}", flush=True)
        body = {"model": "mint/coding" if item["forced"] else "mint",
                "messages": [{"role": "user", "content": item["prompt"]}], "max_tokens": 24,
                "stream": item["stream"]}
        result = results[item["i"]]
        result.update(item, order=n, started=time.monotonic())
        try:
            if item["stream"]:
                with client.stream("POST", f"{url}/v1/chat/completions", json=body) as reply:
                    result["status"] = reply.status_code
                    lines = [line for line in reply.iter_lines() if line.startswith("data:")]
                events = [json.loads(line[5:]) for line in lines if line != "data: [DONE]"]
                if result["status"] == 200:
                    if any("error" in e for e in events):
                        result["status"] = 599           # an error event mid-stream counts as a 5xx
                    else:
                        result["id"] = events[-1]["id"]
                        result["served_by"] = events[-1]["mint"]["served_by"]
                        result["text"] = "".join(e["choices"][0]["delta"].get("content") or ""
                                                 for e in events if e.get("choices"))
            else:
                reply = client.post(f"{url}/v1/chat/completions", json=body)
                result["status"] = reply.status_code
                if reply.status_code == 200:
                    data = reply.json()
                    result["id"], result["served_by"] = data["id"], data["mint"]["served_by"]
                    result["text"] = data["choices"][0]["message"]["content"]
            if item["feedback"] and "id" in result:
                given = client.post(f"{url}/v1/feedback", json={"id": result["id"], "rating": 1})
                result["feedback_status"] = given.status_code
        except httpx.HTTPError as exc:
            result["status"], result["error"] = None, f"{type(exc).__name__}: {exc}"
        result["seconds"] = time.monotonic() - result["started"]

    began = time.monotonic()
    with ThreadPoolExecutor(args.clients) as pool:
        list(pool.map(one, plan))
    client.close()
    print(f"{args.requests} requests from {args.clients} clients in {time.monotonic() - began:.0f} s", flush=True)
    return results


def report(results: list[dict], logged: list[dict], drained: bool, seconds: float) -> None:
    fives = [r for r in results if r.get("status") is None or r["status"] >= 500]
    refused = [r for r in results if r.get("status") != 200]
    ids = Counter(t["upstream_id"] for t in logged)   # the answer's id (a logged turn's own id is its content hash)
    answered = [r for r in results if "id" in r]
    lost = [r for r in answered if ids[r["id"]] == 0]
    duplicated = [r for r in answered if ids[r["id"]] > 1]
    mismatched = [r for r in answered if SENTENCES.get(r["served_by"]) != r["text"]]
    feedback_refused = [r for r in results if r.get("feedback_status") not in (None, 200)]
    forced = sorted((r for r in answered if r["forced"]), key=lambda r: r["order"])
    served = [r["served_by"] for r in forced]
    switched = "coding:v2" in served and served[-1] == "coding:v1" and served.index("coding:v2") > 0
    print(f"served_by: {dict(Counter(r['served_by'] for r in answered))}")
    for name, rows in (("5xx", fives), ("refused", refused), ("lost", lost), ("duplicated", duplicated),
                       ("mismatches", mismatched), ("feedback refused", feedback_refused)):
        for row in rows[:3]:
            print(f"  {name}: {json.dumps({k: row.get(k) for k in ('i', 'status', 'error', 'served_by', 'text')})}")
    latencies = sorted(r["seconds"] for r in results if "seconds" in r)
    p50, p99 = latencies[len(latencies) // 2], latencies[int(len(latencies) * 0.99) - 1]
    ok = not (fives or refused or lost or duplicated or mismatched or feedback_refused) and switched and drained
    print(f"{len(results)} requests: 5xx {len(fives)}, refused {len(refused)}, lost {len(lost)}, duplicated "
          f"{len(duplicated)}, mismatches {len(mismatched)} of {len(answered)} answers, switched v1->v2->v1 "
          f"{'yes' if switched else 'NO'}; latency p50 {p50:.2f} s p99 {p99:.2f} s; {seconds:.0f} s in all")
    print(f"FIGURE vllm: requests={len(results)} 5xx={len(fives)} refused={len(refused)} lost={len(lost)} "
          f"dup={len(duplicated)} mismatches={len(mismatched)} switched={'yes' if switched else 'no'} "
          f"drained={'yes' if drained else 'no'} goal=0,0,0,0,0,yes,yes {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
