"""A promotion's time while the gateway streams a long turn, beside the same promotion on an idle gateway, in one
run: `mint serve --upstream`'s app runs in this process (as in the loop's serve step and the tests) in front of an
upstream in its own process, and the promotions and rollbacks run in this process too (`mint.registry.promotion`,
what `mint promote` and `mint rollback` call).

Run:   python scripts/bench_promote_stream.py               (a second `mint serve` as the upstream, a few minutes)
       python scripts/bench_promote_stream.py --vllm        (vLLM's CPU build as the upstream: `make vllm`)
       python scripts/bench_promote_stream.py --rounds 20 --max-tokens 3000

A toy base (scripts/vllm_toys.py: 2 layers, head size 64, so vLLM's CPU build runs it too) with a chat champion
v1 and a candidate v2, both adapters of random weights whose answers run to the token limit. Each round: chat:v2
promoted and rolled back on the idle gateway, then a long streamed turn through the gateway and, once its stream
has begun, chat:v2 promoted and rolled back while it streams (a move counts as "while streaming" only if the turn
was still in flight when the move returned). The gateway's poller publishes each move to the upstream (every
0.2 s, as reliability_vllm.py runs it). Then:
  promotion while streaming   median, p90 and max of the rounds' promotions (goal: median under 1 s)
  idle                        the same of the promotions on the idle gateway, and the ratio of the medians
  rollbacks                   the same for the rollbacks
  registry log                moves after which the registry's log (registry.sqlite-wal) had been made anew, or
                              the database file written (a checkpoint on close): each is disk syncs a promotion
                              waits for, goal 0 while a server runs
  streams                     long turns not answered 200 whole (an error event counts): goal 0
The host's CPU flags and its load average before and after are printed: on a machine other work shares, say so.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

GOAL_S = 1.0
PROMPT = [{"role": "user", "content": "Tell me a long story."}]


class LongTurn:
    """A streamed turn through the gateway, read on a thread of its own: ``began`` once its first line arrived."""

    def __init__(self, url: str, max_tokens: int) -> None:
        self.status, self.lines, self.began, self.error = None, [], threading.Event(), None
        self.thread = threading.Thread(target=self._read, args=(url, max_tokens), daemon=True)
        self.thread.start()

    def _read(self, url: str, max_tokens: int) -> None:
        import httpx

        try:
            with httpx.stream("POST", f"{url}/v1/chat/completions", timeout=600, json={
                    "model": "mint/chat", "messages": PROMPT, "max_tokens": max_tokens, "stream": True}) as reply:
                self.status = reply.status_code
                for line in reply.iter_lines():
                    self.began.set()
                    self.lines.append(line)
        except httpx.HTTPError as exc:
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.began.set()

    @property
    def in_flight(self) -> bool:
        return self.thread.is_alive()

    def whole(self) -> bool:
        """Answered 200, no error event, ended with a finish reason."""
        events = [json.loads(line[5:]) for line in self.lines if line.startswith("data:") and line != "data: [DONE]"]
        return (self.status == 200 and self.error is None and bool(events) and not any("error" in e for e in events)
                and events[-1]["choices"][0]["finish_reason"] is not None)


def registry_files(ws) -> tuple:
    """(the log file's inode or None, the database file's mtime and size)."""
    from mint.registry import store

    database = store.db_path(ws)
    log = database.with_name(database.name + "-wal")
    stat = database.stat()
    return (log.stat().st_ino if log.exists() else None, stat.st_mtime_ns, stat.st_size)


def timed(move, ws) -> tuple[float, bool]:
    """(the move's seconds, whether it made the registry's log anew or wrote the database file)."""
    before = registry_files(ws)
    started = time.perf_counter()
    move()
    seconds = time.perf_counter() - started
    after = registry_files(ws)
    return seconds, after[0] is None or after != before


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {"n": len(values), "median_s": statistics.median(values) if values else None,
            "p90_s": ordered[min(len(ordered) - 1, round(0.9 * (len(ordered) - 1)))] if values else None,
            "max_s": ordered[-1] if values else None}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10, help="promotions (and rollbacks) each way (default 10)")
    parser.add_argument("--max-tokens", type=int, default=1500, help="the long turn's tokens (default 1500)")
    parser.add_argument("--vllm", action="store_true", help="vLLM's CPU build as the upstream (`make vllm`)")
    parser.add_argument("--json", action="store_true", help="print the figures as one JSON object")
    args = parser.parse_args()

    from bench_gateway import KEY, start_server, start_vllm, stop_group
    from vllm_toys import noise_adapter, toy_base

    from mint.hardware import detect
    from mint.project import DEFAULT_PROJECT, Project
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote, rollback
    from mint.serve.app import create_app
    from mint.serve.gateway import Gateway, GatewayBackend
    from mint.serve.server import start_background
    from mint.generation.upstream import Upstream
    from mint.workspace import workspace

    hardware = detect()
    loads = [load_average()]
    figures: dict = {"host": {"device": hardware.device_name, "cores": hardware.cores,
                              "cpu_flags": list(hardware.cpu_flags)}, "upstream": "vllm" if args.vllm else "mint serve",
                     "max_tokens": args.max_tokens}
    with tempfile.TemporaryDirectory(prefix="mint-bench-promote-") as tmp:
        tmp = Path(tmp)
        base = toy_base(tmp / "toy-base")
        project = Project(base=str(base), specialists=DEFAULT_PROJECT.specialists)
        home = tmp / "gateway" / ".mint"
        home.parent.mkdir(parents=True)
        ws = workspace(home)
        v1 = register(ws, noise_adapter(base, tmp / "chat-1", seed=11), specialist="chat", base=str(base),
                      method="sft")
        promote(ws, v1.ref, force=True, why="bench_promote_stream")
        v2 = register(ws, noise_adapter(base, tmp / "chat-2", seed=12), specialist="chat", base=str(base),
                      method="sft")
        processes, running, backend = [], None, None
        try:
            if args.vllm:
                process, url, rank = start_vllm(home, project, tmp / "vllm.log")
                upstream = Upstream(url, None, 120.0)
            else:
                (tmp / "upstream" / ".mint").mkdir(parents=True)
                process, url = start_server(tmp / "upstream" / ".mint", ["--base", str(base), "--window-ms", "5",
                                                                         "--max-loras", "4"], tmp / "upstream.log")
                upstream, rank = Upstream(url, KEY, 120.0), None
            processes.append(process)
            gateway = Gateway.open(ws, project, upstream, max_rank=rank)
            backend = GatewayBackend(gateway, poll_s=0.2)
            running = start_background(create_app(backend), start_limit_s=300)
            gateway_url = f"http://127.0.0.1:{running.port}"
            moves = {"idle": {"promote": [], "rollback": []}, "streaming": {"promote": [], "rollback": []}}
            remade, streams, not_whole, not_in_flight = 0, 0, 0, 0
            for number in range(args.rounds):
                for name, move in (("promote", lambda: promote(ws, v2.ref, force=True, why="bench: idle")),
                                   ("rollback", lambda: rollback(ws, "chat", why="bench: idle"))):
                    seconds, changed = timed(move, ws)
                    moves["idle"][name].append(seconds)
                    remade += changed
                turn = LongTurn(gateway_url, args.max_tokens)
                turn.began.wait(300)
                for name, move in (("promote", lambda: promote(ws, v2.ref, force=True, why="bench: streaming")),
                                   ("rollback", lambda: rollback(ws, "chat", why="bench: streaming"))):
                    seconds, changed = timed(move, ws)
                    remade += changed
                    if turn.in_flight:
                        moves["streaming"][name].append(seconds)
                    else:
                        not_in_flight += 1
                turn.thread.join(600)
                streams += 1
                not_whole += not turn.whole()
                print(f"round {number + 1}: promote idle {moves['idle']['promote'][-1]:.3f} s, while streaming "
                      f"{moves['streaming']['promote'][-1] if moves['streaming']['promote'] else float('nan'):.3f} "
                      f"s", file=sys.stderr, flush=True)
        finally:
            if running is not None:
                running.stop()
            for process in processes:
                if args.vllm:
                    stop_group(process)
                else:
                    process.terminate()
                    process.wait(timeout=60)
    loads.append(load_average())
    streaming, idle = summary(moves["streaming"]["promote"]), summary(moves["idle"]["promote"])
    figures.update({"promotion_while_streaming": streaming, "promotion_idle": idle,
                    "rollback_while_streaming": summary(moves["streaming"]["rollback"]),
                    "rollback_idle": summary(moves["idle"]["rollback"]),
                    "registry_log_remade_or_checkpointed": remade, "moves_after_the_turn_ended": not_in_flight,
                    "streams": streams, "streams_not_whole": not_whole, "load_average": loads})
    passed = (streaming["median_s"] is not None and streaming["median_s"] < GOAL_S and remade == 0
              and not_whole == 0)
    if args.json:
        print(json.dumps({**figures, "pass": passed}, indent=2))
        return 0 if passed else 1
    print(f"host: {hardware.device_name}, {hardware.cores} cores, flags {' '.join(hardware.cpu_flags) or '-'}; load "
          f"average (1, 5, 15 min) {loads[0]} before, {loads[1]} after")
    print(f"upstream: {figures['upstream']} on a toy base; long turns of {args.max_tokens} tokens")
    for label, key in (("promotion while streaming", "promotion_while_streaming"), ("promotion, idle gateway",
                                                                                   "promotion_idle"),
                       ("rollback while streaming", "rollback_while_streaming"), ("rollback, idle gateway",
                                                                                 "rollback_idle")):
        s = figures[key]
        if s["n"]:
            print(f"  {label:27s} n={s['n']:3d}  median {s['median_s']:.3f} s  p90 {s['p90_s']:.3f} s  "
                  f"max {s['max_s']:.3f} s")
    if idle["median_s"]:
        print(f"  while streaming / idle (medians): {streaming['median_s'] / idle['median_s']:.2f}x")
    print(f"  registry log made anew or checkpointed after a move: {remade} (goal 0); moves that ended after their "
          f"turn did (not counted): {not_in_flight}; long turns not answered whole: {not_whole} of {streams}")
    shown = {k: f"{v:.3f}s" if v is not None else "-" for k, v in streaming.items() if k != "n"}
    print(f"FIGURE promote-while-streaming: median={shown['median_s']} p90={shown['p90_s']} max={shown['max_s']} "
          f"n={streaming['n']} goal<{GOAL_S:g}s {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
