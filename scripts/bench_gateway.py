"""The gateway's goals (overhead per turn, routing, memory), measured side by side in one run: `mint serve --upstream` in front of a second
`mint serve` (the upstream, as vLLM would be), each its own process on 127.0.0.1.

Run:   python scripts/bench_gateway.py                       (tiny-random base, a few minutes on 2 cores)
       python scripts/bench_gateway.py --base smollm2-135m --clients 8 --turns 64
       python scripts/bench_gateway.py --upstream http://GPU-HOST:8001 --upstream-key KEY   (e.g. vLLM from
              `mint export vllm`'s launch.sh; the workspace's champions must be the ones it serves)
       python scripts/bench_gateway.py --vllm --base smollm2-135m --upstream-cores 1   (a real vLLM, its CPU
              build from `make vllm`, started here by the launch.sh `mint export vllm` writes for the champions)

A scratch workspace gets a random LoRA champion for each specialist (registered and promoted, --force) unless
--upstream is given; the gateway publishes them to the upstream (with --vllm, vLLM starts with them). Then:
  overhead   the same N turns from C concurrent clients, sent straight to the upstream (naming the adapter the
             gateway chose for each turn) and through the gateway, in alternating rounds: median and p95 latency
             of each, and the gateway's overhead on the median (goal <= 5%)
  routing    the held-out routing set (contracts/router.yaml's suites): the specialist the gateway routed each
             turn to against the one the local runtime routes it to (goal: identical)
  memory     resident memory (VmRSS, and its peak VmHWM) of the gateway's process against the upstream's, a full
             local server (the gateway holds the base's first layers only)
"""
from __future__ import annotations

import argparse
import json
import os
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

KEY = "bench-gateway-key-01"
AUTH = {"authorization": f"Bearer {KEY}"}
OVERHEAD_GOAL = 0.05
TURNS = ["Write a Python function that reverses a list.", "What do you think about rainy Sundays?",
         "Make a signup form with email and password fields, and a submit button.",
         "Book me a table for two tomorrow at eight.", "how do i undo my last commit",
         "Explain what a hash map is in two sentences.", "whats big O of binary search",
         "Tell me a short story about a lighthouse."]


def start_server(home: Path, args: list[str], log: Path, cores: set[int] | None = None) -> tuple[subprocess.Popen, str]:
    """`mint serve ARGS` in its own process with MINT_HOME=home (on ``cores`` only, if given), once /health
    answers."""
    port = free_port()
    env = {**os.environ, "MINT_HOME": str(home), "PYTHONPATH": str(ROOT)}
    pin = (lambda: os.sched_setaffinity(0, cores)) if cores else None
    process = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--port", str(port), "--api-key", KEY,
                                *args], cwd=home.parent, env=env, stdout=subprocess.DEVNULL, stderr=open(log, "wb"),
                               preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, f"{url}/health", log=log, limit_s=600, what="mint serve", headers=AUTH)
    except RuntimeError:
        process.kill()
        raise
    return process, url


def start_vllm(home: Path, project, log: Path, cores: set[int] | None = None) -> tuple[subprocess.Popen, str, int]:
    """vLLM (its CPU build) started by the launch.sh `mint export vllm` writes for the workspace's champions, on
    ``cores`` only if given, once it answers: (its process, its URL, the LoRA rank it loads)."""
    from mint.mol.export import export_vllm
    from mint.workspace import workspace

    exported = export_vllm(workspace(home), project, home.parent.parent / "vllm-out")
    port = free_port()
    env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    if cores:       # vLLM's CPU build binds its threads itself ("auto": every core): to these only
        env["VLLM_CPU_OMP_THREADS_BIND"] = ",".join(map(str, sorted(cores)))

    def pin():
        os.setsid()
        if cores:
            os.sched_setaffinity(0, cores)

    process = subprocess.Popen([str(Path(exported.out) / "launch.sh"), "--host", "127.0.0.1", "--port", str(port),
                                "--dtype", "float32", "--max-model-len", "2048"], env=env,
                               stdout=open(log, "wb"), stderr=subprocess.STDOUT, preexec_fn=pin)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(process, f"{url}/v1/models", log=log, limit_s=900, what="vLLM", every_s=0.5)
    except RuntimeError:
        stop_group(process)
        raise
    return process, url, exported.max_lora_rank


def stop_group(process: subprocess.Popen) -> None:
    """vLLM's whole process group (its engine core runs in a child)."""
    import signal

    if process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=60)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)


def memory_kib(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM of a process, in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in ("VmRSS", "VmHWM"):
            fields[name] = int(value.split()[0])
    return fields


def make_champions(home: Path, base: str, project) -> None:
    """A random LoRA champion (rank 8, attention projections) for each specialist of ``project``."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import load_base
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    ws = workspace(home)
    for seed, name in enumerate(project.names):
        torch.manual_seed(seed)
        model = get_peft_model(load_base(base).model, LoraConfig(
            r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
        with torch.no_grad():
            for pname, param in model.named_parameters():
                if "lora_" in pname:
                    param.normal_(0, 0.02)
        out = home.parent / "loras" / name
        model.save_pretrained(out)
        revision = register(ws, out, specialist=name, base=base, method="sft")
        promote(ws, revision.ref, force=True, why="bench_gateway")


def ask(url: str, model: str, text: str, max_tokens: int, key: str | None = KEY) -> tuple[float, dict]:
    import httpx

    started = time.perf_counter()
    reply = httpx.post(f"{url}/v1/chat/completions", timeout=600,
                       headers={"authorization": f"Bearer {key}"} if key else {},
                       json={"model": model, "messages": [{"role": "user", "content": text}],
                             "max_tokens": max_tokens})
    elapsed = time.perf_counter() - started
    if reply.status_code != 200:
        raise RuntimeError(f"{url} answered {reply.status_code}: {reply.text[:300]}")
    return elapsed, reply.json()


def concurrently(jobs: list, clients: int) -> list:
    """Run the callables of ``jobs`` on ``clients`` threads; their results in order."""
    results = [None] * len(jobs)
    cursor = iter(range(len(jobs)))
    lock = threading.Lock()

    def worker():
        while True:
            with lock:
                i = next(cursor, None)
            if i is None:
                return
            results[i] = jobs[i]()

    threads = [threading.Thread(target=worker) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def bench_overhead(home: Path, gateway: str, upstream: str, upstream_key: str | None, turns: int, clients: int,
                   max_tokens: int, rounds: int) -> dict:
    import httpx

    from mint.mol.export import adapter_name
    from mint.mol.turnlog import read_turns
    from mint.workspace import workspace

    texts = [TURNS[i % len(TURNS)] for i in range(turns)]
    # the adapter the gateway names for each turn: the direct calls ask the upstream for the same one
    models = {}
    for text in set(texts):
        _elapsed, reply = ask(gateway, "mint", text, 1)
        served = reply["mint"]["served_by"]
        models[text] = adapter_name(served) if served != "base" else None
    listed = httpx.get(f"{upstream.rstrip('/').removesuffix('/v1')}/v1/models",
                       headers={"authorization": f"Bearer {upstream_key}"} if upstream_key else {}).json()["data"]
    base_model = next(m["id"] for m in listed if not m.get("parent"))
    logged_before = len(read_turns(workspace(home)))
    direct, through = [], []
    for _ in range(rounds):    # alternating rounds: a busy neighbour slows both sides alike
        direct += [e for e, _r in concurrently(
            [lambda t=t: ask(upstream, models[t] or base_model, t, max_tokens, upstream_key) for t in texts], clients)]
        through += [e for e, _r in concurrently([lambda t=t: ask(gateway, "mint", t, max_tokens) for t in texts],
                                                clients)]
    figures = {"turns": len(direct), "clients": clients, "max_tokens": max_tokens,
               "direct_median_ms": statistics.median(direct) * 1000, "direct_p95_ms": percentile(direct, 0.95) * 1000,
               "gateway_median_ms": statistics.median(through) * 1000,
               "gateway_p95_ms": percentile(through, 0.95) * 1000}
    figures["overhead_median"] = figures["gateway_median_ms"] / figures["direct_median_ms"] - 1
    # where the gateway's time goes, as it logged each turn: routing (the probe pass and any wait for it), and
    # routing plus forwarding (the upstream's answer)
    logged = read_turns(workspace(home))[logged_before:]
    figures["gateway_route_median_ms"] = statistics.median(t["route_ms"] for t in logged) if logged else None
    figures["gateway_logged_median_ms"] = statistics.median(t["latency_ms"] for t in logged) if logged else None
    return figures


def bench_routing(home: Path, gateway: str, project, base: str, limit: int | None) -> dict:
    """The gateway's route of every held-out routing turn against the local runtime's."""
    import httpx

    from mint.contract.schema import load_contract
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.train.router import heldout_turns
    from mint.workspace import workspace

    rows = heldout_turns(load_contract(ROOT / "contracts" / "router.yaml"), project.names)[:limit]
    tool = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}]
    through = []
    for _truth, text, tools in rows:
        reply = httpx.post(f"{gateway}/v1/chat/completions", headers=AUTH, timeout=600, json={
            "messages": [{"role": "user", "content": text}], "max_tokens": 1, **({"tools": tool} if tools else {})})
        reply.raise_for_status()
        through.append(reply.json()["mint"]["specialist"])
    mixture = Mixture.open(workspace(home), project, base=base)
    local = []
    for start in range(0, len(rows), 16):
        turns = [Turn([{"role": "user", "content": text}], tool if tools else [], decoding=Decoding(1))
                 for _truth, text, tools in rows[start:start + 16]]
        local += [a.specialist for a in mixture.answer(turns, keep_for_feedback=False)]
    same = sum(a == b for a, b in zip(through, local))
    return {"turns": len(rows), "identical": same, "share": same / len(rows) if rows else 1.0,
            "gateway_accuracy": sum(a == r[0] for a, r in zip(through, rows)) / len(rows) if rows else 1.0}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base", default="tiny-random")
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--turns", type=int, default=32, help="turns per round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--routing-limit", type=int, default=None, help="route only the first N held-out turns")
    parser.add_argument("--upstream", default=None, help="an upstream already running (default: start one)")
    parser.add_argument("--upstream-key", default=None)
    parser.add_argument("--vllm", action="store_true",
                        help="start vLLM (its CPU build, `make vllm`) as the upstream, from `mint export vllm`")
    parser.add_argument("--upstream-cores", type=int, default=0,
                        help="run the started upstream on the last N cores and the gateway and the clients on the "
                             "others, as on two hosts (default: all share every core)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    upstream_cores = None
    if args.upstream_cores:
        cores = sorted(os.sched_getaffinity(0))
        if not 0 < args.upstream_cores < len(cores):
            parser.error(f"--upstream-cores: between 1 and {len(cores) - 1} on this machine ({len(cores)} cores)")
        upstream_cores = set(cores[-args.upstream_cores:])
        os.sched_setaffinity(0, set(cores[:-args.upstream_cores]))    # the clients, and the gateway they start
        print(f"cores: upstream {sorted(upstream_cores)}, gateway and clients {sorted(os.sched_getaffinity(0))}",
              file=sys.stderr)

    from mint.hardware import detect
    from mint.project import DEFAULT_PROJECT, Project

    hardware = detect()
    print(f"hardware: {hardware.device} {hardware.device_name}, {hardware.cores} cores, flags "
          f"{', '.join(hardware.cpu_flags) or '-'}", file=sys.stderr)
    project = Project(base=args.base, specialists=DEFAULT_PROJECT.specialists)
    processes = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        home = tmp / "gateway" / ".mint"
        home.parent.mkdir(parents=True)
        try:
            gateway_args = []
            if args.vllm:
                make_champions(home, args.base, project)
                process, upstream, rank = start_vllm(home, project, tmp / "vllm.log", upstream_cores)
                processes.append(process)
                upstream_key, gateway_args = None, ["--max-rank", str(rank)]
            elif args.upstream is None:
                make_champions(home, args.base, project)
                upstream_home = tmp / "upstream" / ".mint"
                upstream_home.parent.mkdir(parents=True)
                process, upstream = start_server(upstream_home, ["--base", args.base, "--window-ms", "5",
                                                                 "--max-loras", "8"], tmp / "upstream.log",
                                                  upstream_cores)
                processes.append(process)
                upstream_key = KEY
            else:
                upstream, upstream_key = args.upstream, args.upstream_key
            process, gateway = start_server(home, ["--base", args.base, "--upstream", upstream, *gateway_args,
                                                   *(["--upstream-key", upstream_key] if upstream_key else [])],
                                            tmp / "gateway.log")
            processes.append(process)
            overhead = bench_overhead(home, gateway, upstream, upstream_key, args.turns, args.clients, args.max_tokens,
                                      args.rounds)
            routing = bench_routing(home, gateway, project, args.base, args.routing_limit)
            memory = {"gateway": memory_kib(processes[-1].pid)}
            if args.upstream is None and not args.vllm:
                memory["upstream (a full local server)"] = memory_kib(processes[0].pid)
        finally:
            for process in processes:
                if args.vllm and process is processes[0]:
                    stop_group(process)
                else:
                    process.terminate()
                    process.wait(timeout=60)
    result = {"base": args.base, "upstream": "vllm" if args.vllm else args.upstream or "mint serve",
              "upstream_cores": sorted(upstream_cores) if upstream_cores else None,
              "overhead": overhead, "routing": routing, "memory_kib": memory,
              "goals": {"overhead_median <= 0.05": overhead["overhead_median"] <= OVERHEAD_GOAL,
                        "routing identical": routing["identical"] == routing["turns"]}}
    if args.json:
        print(json.dumps(result, indent=2))
        return
    o = overhead
    print(f"base {args.base}: {o['turns']} turns from {o['clients']} clients, {o['max_tokens']} new tokens each")
    print(f"  upstream directly   median {o['direct_median_ms']:8.1f} ms   p95 {o['direct_p95_ms']:8.1f} ms")
    print(f"  through the gateway median {o['gateway_median_ms']:8.1f} ms   p95 {o['gateway_p95_ms']:8.1f} ms")
    print(f"  gateway overhead on the median: {o['overhead_median']:+.1%} (goal <= {OVERHEAD_GOAL:.0%})")
    if o["gateway_route_median_ms"] is not None:
        print(f"  the gateway's log: routing median {o['gateway_route_median_ms']:.1f} ms, routing and the "
              f"upstream's answer median {o['gateway_logged_median_ms']:.1f} ms")
    print(f"routing: {routing['identical']}/{routing['turns']} held-out turns routed as the local runtime routes "
          f"them (gateway accuracy {routing['gateway_accuracy']:.3f})")
    for name, figures in memory.items():
        print(f"memory {name}: RSS {figures['VmRSS'] / 1024:.0f} MiB, peak {figures['VmHWM'] / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
