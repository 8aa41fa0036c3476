"""Reliability suite: kill -9 of `mint serve` while it batches turns continuously.

Run:   python scripts/reliability_serve_kill.py            (20 trials, a few minutes on 2 cores)
       python scripts/reliability_serve_kill.py --quick    (4 trials)
       python scripts/reliability_serve_kill.py --trials 50 --seed 7

One workspace (tiny-random base, a coding champion whose random adapter answers at length) serves every trial. A
trial starts `mint serve` in its own process (the one before it was killed: this start is the restart), streams a
long turn, and once its stream has begun sends the turns that join the running stream: short ones, streamed and
whole, and one streamed turn whose client leaves after its first words. Once the short ones are answered, the
server is killed with SIGKILL after a seeded delay, while the long turn still decodes. Every turn is greedy and its
prompt names its trial and turn, so its whole answer is known (the same revision's answer, recomputed here at the
end). Then:
  unclean       a client answer that looks whole (a stream's final chunk and [DONE], or a 200 body) but is not
                the whole answer; every other answer must be a clean failure (a connection error, a stream cut
                before its [DONE]): goal 0
  lost          a turn a client got whole that is not in the turn log (it is written before the client hears the
                answer): goal 0
  torn          lines of the turn log that are not whole JSON: goal 0
  half          logged turns whose answer is not the whole answer (the killed turn, the one whose client left, or
                any other cut short): goal 0
  restarts      server starts that failed after a kill: goal 0
  quarantined   lines `mint ingest` refuses when it reads the logs back at the end (what training would read): goal
                0, and every ingested served episode's answer is whole
  not joined    trials in which no turn joined the running stream (the server's /health counts them): reported
The last line is the figure; exit 1 when a goal is missed.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

TINY = "tiny-random"
LONG_TOKENS = 1500
SHORT_TOKENS = (6, 12, 20)
LEAVING_TOKENS = 400
# a wait longer than this is a hang (generous: a 2-core host other work shares starves these processes)
LIMIT_S = 1800


@dataclass
class Asked:
    """One client's turn and what it got."""
    name: str
    prompt: str
    max_tokens: int
    stream: bool
    leaves: bool = False          # the client disconnects after its first words
    status: int | None = None
    id: str | None = None
    text: str = ""
    whole: bool = False           # the client got an answer that says it is complete
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)


@dataclass
class Trial:
    number: int
    delay_s: float
    killed: bool = False
    joined: int | None = None
    asked: list[Asked] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def ask(url: str, turn: Asked, began: threading.Event | None = None) -> None:
    """Send ``turn`` (forced to coding, greedy), reading a stream as it comes; ``began`` is set at its first line."""
    import httpx

    body = {"model": "mint/coding", "messages": [{"role": "user", "content": turn.prompt}],
            "max_tokens": turn.max_tokens, "temperature": 0, "stream": turn.stream}
    try:
        if not turn.stream:
            reply = httpx.post(f"{url}/v1/chat/completions", json=body, timeout=LIMIT_S)
            turn.status = reply.status_code
            if reply.status_code == 200:
                data = reply.json()
                turn.id, turn.text = data["id"], data["choices"][0]["message"]["content"]
                turn.whole = data["choices"][0]["finish_reason"] is not None
            return
        with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=LIMIT_S) as reply:
            turn.status = reply.status_code
            pieces, finished, ended = [], False, False
            for line in reply.iter_lines():
                if began is not None:
                    began.set()
                if not line.startswith("data:"):
                    continue
                if line == "data: [DONE]":
                    ended = True
                    continue
                event = json.loads(line[5:])
                if "error" in event:
                    turn.error = event["error"].get("message")
                    continue
                turn.id = event.get("id", turn.id)
                choice = event["choices"][0]
                pieces.append(choice["delta"].get("content") or "")
                finished = finished or choice.get("finish_reason") is not None
                if turn.leaves and len(pieces) > 3:
                    break                        # the client leaves: the server stops its row, unlogged
            turn.text = "".join(pieces)
            turn.whole = finished and ended and turn.error is None
    except httpx.HTTPError as exc:
        turn.error = f"{type(exc).__name__}: {exc}"
    finally:
        if began is not None:
            began.set()
        turn.done.set()


class Server:
    """`mint serve` as a user starts it, in its own process group."""

    def __init__(self, home: Path, workdir: Path, log: Path) -> None:
        from servers import free_port

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(log, "ab")
        env = {**os.environ, "MINT_HOME": str(home), "PYTHONPATH": str(ROOT)}
        self.process = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--base", TINY, "--port",
                                         str(self.port), "--poll", "60", "--window-ms", "5", "--max-batch", "8"],
                                        cwd=workdir, env=env, stdout=self.log, stderr=subprocess.STDOUT,
                                        start_new_session=True)

    def wait_ready(self, log: Path, limit_s: float = LIMIT_S) -> None:
        from servers import wait_ready

        wait_ready(self.process, f"{self.url}/health", log=log, limit_s=limit_s, what="mint serve")

    def joined(self) -> int | None:
        import httpx

        try:
            return httpx.get(f"{self.url}/health", timeout=10).json().get("joined")
        except (httpx.HTTPError, ValueError):
            return None

    def kill(self) -> bool:
        """SIGKILL; whether the server was still running to be killed."""
        running = self.process.poll() is None
        if running:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(60)
        self.log.close()
        return running


def run_trial(number: int, home: Path, workdir: Path, rng: random.Random) -> Trial:
    trial = Trial(number, round(rng.uniform(0.0, 1.5), 3))
    log = workdir / "serve.log"
    server = Server(home, workdir, log)
    try:
        server.wait_ready(log)
    except RuntimeError as exc:
        server.kill()
        trial.problems.append(f"restart: {exc}")
        return trial
    say = f"Trial {number}:"
    long = Asked("long", f"{say} tell me a very long story.", LONG_TOKENS, True)
    shorts = [Asked(f"short{i}", f"{say} short question {i}?", rng.choice(SHORT_TOKENS), stream=i % 2 == 0)
              for i in range(4)]
    leaving = Asked("leaves", f"{say} a question whose client leaves.", LEAVING_TOKENS, True, leaves=True)
    trial.asked = [long, *shorts, leaving]
    began = threading.Event()
    threads = [threading.Thread(target=ask, args=(server.url, long, began), daemon=True)]
    threads[0].start()
    began.wait(LIMIT_S)
    for turn in (*shorts, leaving):
        thread = threading.Thread(target=ask, args=(server.url, turn), daemon=True)
        thread.start()
        threads.append(thread)
    for turn in shorts:
        turn.done.wait(LIMIT_S)
    trial.joined = server.joined()
    time.sleep(trial.delay_s)
    trial.killed = server.kill()
    if not trial.killed:
        trial.problems.append("the server had exited before the kill")
    for thread in threads:
        thread.join(LIMIT_S)
    return trial


def whole_answers(home: Path, turns: list[tuple[str, int]]) -> dict[tuple[str, int], str]:
    """The champion's whole greedy answer to each (prompt, max_tokens), as `mint serve` decodes it."""
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.mol.turnlog import TurnLog
    from mint.project import DEFAULT_PROJECT, Project
    from mint.workspace import workspace

    scratch = Path(tempfile.mkdtemp(prefix="mint-serve-kill-answers-"))
    try:   # the answers are decoded into a log of their own, not the one under test
        ws = workspace(home)
        mixture = Mixture.open(ws, Project(base=TINY, specialists=DEFAULT_PROJECT.specialists),
                               log=TurnLog(workspace(scratch)))
        answers = mixture.answer([Turn([{"role": "user", "content": prompt}], specialist="coding",
                                       decoding=Decoding(max_new_tokens=tokens)) for prompt, tokens in turns],
                                 keep_for_feedback=False)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {key: answer.text for key, answer in zip(turns, answers)}


def check(trials: list[Trial], home: Path, workdir: Path) -> dict:
    """The figure's counts (see the module's docstring), each trial's problems added to it."""
    from mint.data.datasets import iter_episodes
    from mint.data.ingest import ingest
    from mint.mol.turnlog import logs_dir
    from mint.project import DEFAULT_PROJECT
    from mint.workspace import workspace

    ws = workspace(home)
    lines = [line for path in sorted(logs_dir(ws).glob("served*.jsonl"))
             for line in path.read_bytes().splitlines()]
    logged, torn = [], 0
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            torn += 1
            continue
        if "messages" in record:
            logged.append(record)
    by_prompt = {}
    for trial in trials:
        for turn in trial.asked:
            by_prompt[turn.prompt] = (trial, turn)
    logged_prompts = {record["messages"][0]["content"] for record in logged}
    # the whole answers a check compares with: of the turns a client got whole, and of the logged ones (not the
    # killed turn's 1,500 tokens, which nothing holds)
    wanted = sorted({(t.prompt, t.max_tokens) for trial in trials for t in trial.asked
                     if t.whole or t.prompt in logged_prompts})
    whole = whole_answers(home, wanted) if wanted else {}
    counts = {"turns": sum(len(t.asked) for t in trials), "answered_whole": 0, "failed_cleanly": 0, "unclean": 0,
              "lost": 0, "torn": torn, "half": 0, "logged": len(logged), "restarts": 0,
              "not_joined": sum(1 for t in trials if not t.joined)}
    logged_ids = {record.get("upstream_id") for record in logged}
    for trial in trials:
        counts["restarts"] += any(p.startswith("restart") for p in trial.problems)
        for turn in trial.asked:
            if turn.whole and turn.status == 200:
                full = whole[(turn.prompt, turn.max_tokens)]
                if turn.text != full:
                    counts["unclean"] += 1
                    trial.problems.append(f"{turn.name}: answered as whole, but {len(turn.text)} of {len(full)} "
                                          "characters")
                    continue
                counts["answered_whole"] += 1
                if turn.id not in logged_ids and turn.prompt not in logged_prompts:
                    counts["lost"] += 1
                    trial.problems.append(f"{turn.name}: answered whole, missing from the turn log")
            else:
                counts["failed_cleanly"] += 1
    for record in logged:
        prompt = record["messages"][0]["content"]
        if prompt not in by_prompt:
            continue
        trial, turn = by_prompt[prompt]
        if record["messages"][-1]["content"] != whole[(turn.prompt, turn.max_tokens)]:
            counts["half"] += 1
            trial.problems.append(f"{turn.name}: logged with {len(record['messages'][-1]['content'])} characters "
                                  "of its answer")
    if torn:
        trials[-1].problems.append(f"{torn} torn line(s) in the turn log")
    result = ingest(ws, [logs_dir(ws)], dataset="served-after-kills", project=DEFAULT_PROJECT, workers=0)
    counts["quarantined"] = result.quarantined_new
    ingested_half = 0
    for episode in iter_episodes(ws, "served-after-kills"):
        prompt = episode["messages"][0]["content"]
        if prompt in by_prompt:
            _trial, turn = by_prompt[prompt]
            ingested_half += episode["messages"][-1]["content"] != whole[(turn.prompt, turn.max_tokens)]
    counts["ingested_half"] = ingested_half
    return counts


def prepare(home: Path, seed: int) -> None:
    from reliability_server import make_lora

    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    ws = workspace(home)
    revision = register(ws, make_lora(home.parent / "lora", seed), specialist="coding", base=TINY, method="sft")
    promote(ws, revision.ref, force=True, why="reliability_serve_kill: the champion")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, help="trials (default 20, --quick 4)")
    parser.add_argument("--quick", action="store_true", help="4 trials")
    parser.add_argument("--seed", type=int, default=5, help="seeds the kill delays and the turns (default 5)")
    parser.add_argument("--keep", type=Path, help="work in this folder and keep it (default: a temp folder)")
    args = parser.parse_args(argv)
    count = args.trials if args.trials is not None else (4 if args.quick else 20)
    work = args.keep or Path(tempfile.mkdtemp(prefix="mint-serve-kill-"))
    work.mkdir(parents=True, exist_ok=True)
    home = work / "ws"
    started = time.perf_counter()
    rng = random.Random(args.seed)
    try:
        prepare(home, args.seed)
        trials = []
        for number in range(1, count + 1):
            trial = run_trial(number, home, work, rng)
            trials.append(trial)
            outcomes = ", ".join(f"{t.name} {'whole' if t.whole else 'failed'}" for t in trial.asked)
            print(f"trial {number:3d} kill after {trial.delay_s:.3f}s, joined {trial.joined}: {outcomes}", flush=True)
        counts = check(trials, home, work)
        for trial in trials:
            for problem in trial.problems:
                print(f"  trial {trial.number}: {problem}", flush=True)
        tracebacks = (work / "serve.log").read_text(errors="replace").count("Traceback")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    failures = sum(bool(t.problems) for t in trials)
    passed = failures == 0 and not (counts["unclean"] or counts["lost"] or counts["torn"] or counts["half"]
                                    or counts["restarts"] or counts["quarantined"] or counts["ingested_half"]
                                    or tracebacks)
    print(f"{counts['turns']} turns: {counts['answered_whole']} answered whole, {counts['failed_cleanly']} failed "
          f"cleanly; {counts['logged']} logged; trials where no turn joined the stream: {counts['not_joined']}; "
          f"{time.perf_counter() - started:.0f} s")
    print(f"FIGURE serve-kill9: trials={len(trials)} killed={sum(t.killed for t in trials)} "
          f"unclean={counts['unclean']} "
          f"lost={counts['lost']} torn={counts['torn']} half={counts['half']} restarts={counts['restarts']} "
          f"quarantined={counts['quarantined']} ingested_half={counts['ingested_half']} tracebacks={tracebacks} "
          f"goal=0 {'PASS' if passed else 'FAIL'}")
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
