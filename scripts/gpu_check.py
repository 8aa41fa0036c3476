"""The checks of scripts/gpu_check.sh that need Python: CUDA's presence, the evaluation engine on CUDA against
`mint serve`, and vLLM's GPU build behind the gateway. Each prints one line, ``PASS|FAIL|INFO name: what``, and
exits 1 on a failure (``cuda`` exits 3 where there is no CUDA, which gpu_check.sh reports and exits 0 on).

Run:   python scripts/gpu_check.py cuda
       python scripts/gpu_check.py parity --contract contracts/genui-smoke.yaml --ref genui:v1   (in a project)
       python scripts/gpu_check.py vllm --ref genui:v1 --out DIR                               (in a project)

mint loads every base in float32 on the CPU (``mint.base.load_base``); nothing in it moves a model to a GPU for
decoding. ``parity`` therefore moves each base it loads to ``--device`` itself, then runs what `mint eval` runs
(``mint.contract.evaluate.evaluate``) and what `mint serve` runs (the local backend over ``Mixture.open``, served
over HTTP) on that device: the contract's greedy answers must be the served ones, byte for byte. It also asks a
`mint serve` as shipped (its own process, on the CPU) and says how many of its answers the device's equal.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

NO_CUDA = 3


def say(verdict: str, name: str, what: str) -> None:
    print(f"{verdict} {name}: {what}", flush=True)


def check_cuda(_args) -> int:
    import torch

    if not torch.cuda.is_available():
        has_gpu = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).returncode == 0 \
            if _which("nvidia-smi") else False
        if has_gpu:
            say("FAIL", "cuda", f"nvidia-smi sees a GPU, but this venv's torch {torch.__version__} has no CUDA: "
                                "make setup TORCH_INDEX=https://download.pytorch.org/whl/cu126 (a CUDA build)")
            return 1
        say("INFO", "cuda", f"no CUDA device here (torch {torch.__version__})")
        return NO_CUDA
    capability = torch.cuda.get_device_capability(0)
    say("PASS", "cuda", f"{torch.cuda.get_device_name(0)}, compute capability {capability[0]}.{capability[1]}, "
                        f"bf16 {'yes' if torch.cuda.is_bf16_supported() else 'no'}, torch {torch.__version__}, "
                        f"CUDA {torch.version.cuda}")
    return 0


def _which(command: str) -> bool:
    import shutil

    return shutil.which(command) is not None


@contextlib.contextmanager
def bases_on(device: str):
    """Every base mint loads meanwhile is moved to ``device`` once loaded (see the module's docstring)."""
    import mint.base as bases

    load = bases.load_base

    def on_device(name, **options):
        loaded = load(name, **options)
        loaded.model.to(device)
        return loaded

    bases.load_base = on_device
    try:
        yield
    finally:
        bases.load_base = load


def check_parity(args) -> int:
    with bases_on(args.device):
        return _parity(args)


def _parity(args) -> int:
    from mint.contract.evaluate import evaluate
    from mint.contract.live import read_suites
    from mint.contract.schema import load_contract
    from mint.mol.mixture import Mixture
    from mint.project import load_project
    from mint.serve.app import create_app
    from mint.serve.local import LocalBackend
    from mint.serve.server import start_background
    from mint.workspace import workspace

    ws = workspace(Path(os.environ.get("MINT_HOME", ".mint")))
    project = load_project(None)
    contract = load_contract(Path(args.contract))
    started = time.perf_counter()
    result = evaluate(ws, args.ref, Path(args.contract), reuse=False)
    harness = contract.harness()
    requests = {(suite.name, index): harness.messages(record)
                for suite, records in read_suites(ws, contract)[0] for index, record in enumerate(records)}
    predicted = [json.loads(line) for line in open(result.predictions_path, encoding="utf-8")]
    scored = [p["outputs"][0] for p in predicted]
    asked = [requests.get((p["suite"], p["index"])) for p in predicted]
    if not predicted or None in asked:
        say("FAIL", "parity", f"the report's {len(predicted)} answers do not match the contract's requests")
        return 1
    mixture = Mixture.open(ws, project)
    device = str(next(mixture.runtime.model.parameters()).device)
    max_tokens = contract.settings.max_new_tokens
    running = start_background(create_app(LocalBackend(mixture, window_ms=20, poll_s=3600)), start_limit_s=300)
    try:
        served = [_ask(f"http://127.0.0.1:{running.port}", contract.specialist, messages, max_tokens)
                  for messages in asked]
    finally:
        running.stop()
    same = sum(a == b for a, b in zip(served, scored))
    precision = (result.report.precision or {}).get("used", "?")
    verdict = "PASS" if same == len(scored) and device.startswith(args.device.split(":")[0]) else "FAIL"
    say(verdict, "parity", f"`mint eval` and `mint serve` both on {device}: {same} of {len(scored)} greedy answers "
                           f"identical (contract {contract.name} v{contract.version}, precision {precision}, "
                           f"{time.perf_counter() - started:.0f} s)")
    shipped = _shipped_serve_answers(asked, contract.specialist, max_tokens)
    if shipped is not None:
        agree = sum(a == b for a, b in zip(shipped, scored))
        say("INFO", "parity", f"`mint serve` as shipped (its own process, CPU) gives {agree} of {len(scored)} of "
                              f"the same answers")
    return 0 if verdict == "PASS" else 1


def _ask(url: str, specialist: str, messages: list[dict], max_tokens: int) -> str | None:
    import httpx

    reply = httpx.post(f"{url}/v1/chat/completions", timeout=300, json={
        "model": f"mint/{specialist}", "messages": messages, "max_tokens": max_tokens, "temperature": 0})
    return reply.json()["choices"][0]["message"]["content"] if reply.status_code == 200 else None


def _shipped_serve_answers(asked: list, specialist: str, max_tokens: int) -> list | None:
    from servers import free_port, wait_ready

    port = free_port()
    log = Path(os.environ.get("MINT_HOME", ".mint")).parent / "gpu-check-serve.log"
    process = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--port", str(port), "--poll", "3600"],
                               stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        wait_ready(process, f"http://127.0.0.1:{port}/health", log=log, limit_s=600, what="mint serve")
        return [_ask(f"http://127.0.0.1:{port}", specialist, messages, max_tokens) for messages in asked]
    except RuntimeError as exc:
        say("INFO", "parity", f"`mint serve` as shipped did not answer: {exc}")
        return None
    finally:
        process.terminate()
        process.wait(60)


def check_vllm(args) -> int:
    import httpx

    from servers import free_port, wait_ready

    from mint.mol.export import adapter_name, export_vllm, find_vllm
    from mint.mol.mixture import Turn, prompt_of
    from mint.project import load_project
    from mint.workspace import workspace

    runner = find_vllm()
    if not runner.found or runner.cpu:
        say("FAIL", "vllm", ("this machine's vLLM is the CPU build (.venv-vllm, MINT_VLLM_VENV)" if runner.found else
                             "no vLLM installed here") + ": install the GPU build (pip install vllm, in a venv of its "
                             "own) and put its `vllm` command on PATH, or point MINT_VLLM_VENV at that venv")
        return 1
    ws = workspace(Path(os.environ.get("MINT_HOME", ".mint")))
    project = load_project(None)
    out = Path(args.out)
    exported = export_vllm(ws, project, out)
    specialist = args.ref.split(":")[0]
    adapter = adapter_name(args.ref)
    if exported.adapters.get(specialist) != args.ref:
        say("FAIL", "vllm", f"{args.ref} is not the champion the export serves ({exported.adapters})")
        return 1
    vllm_port, gateway_port = free_port(), free_port()
    logs = out.parent
    started = time.perf_counter()
    import torch

    # mint's bases are float32 files, which not every vLLM attention backend on a GPU takes; no CUDA graphs: a
    # faster start, and this checks answers, not speed
    dtype = "bfloat16" if torch.cuda.is_bf16_supported() else "float16"
    vllm = subprocess.Popen([str(out / "launch.sh"), "--host", "127.0.0.1", "--port", str(vllm_port),
                             "--dtype", dtype, "--max-model-len", "2048", "--gpu-memory-utilization", "0.5",
                             "--enforce-eager"],
                            stdout=open(logs / "gpu-check-vllm.log", "wb"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    gateway = None
    try:
        wait_ready(vllm, f"http://127.0.0.1:{vllm_port}/v1/models", log=logs / "gpu-check-vllm.log", limit_s=300,
                   what="vLLM", every_s=1.0)
        gateway = subprocess.Popen([sys.executable, "-m", "mint", "serve", "--upstream",
                                    f"http://127.0.0.1:{vllm_port}", "--max-rank", str(exported.max_lora_rank),
                                    "--port", str(gateway_port)],
                                   stdout=open(logs / "gpu-check-gateway.log", "wb"), stderr=subprocess.STDOUT)
        wait_ready(gateway, f"http://127.0.0.1:{gateway_port}/health", log=logs / "gpu-check-gateway.log",
                   limit_s=120, what="the gateway")
        messages = [{"role": "user", "content": "Show a signup form with an email field."}]
        reply = httpx.post(f"http://127.0.0.1:{gateway_port}/v1/chat/completions", timeout=120, json={
            "model": f"mint/{specialist}", "messages": messages, "max_tokens": 32, "temperature": 0})
        direct = httpx.post(f"http://127.0.0.1:{vllm_port}/v1/chat/completions", timeout=120, json={
            "model": adapter, "messages": prompt_of(Turn(messages)), "max_tokens": 32, "temperature": 0})
        if reply.status_code != 200 or direct.status_code != 200:
            say("FAIL", "vllm", f"the gateway answered {reply.status_code}, vLLM {direct.status_code}: "
                                f"{reply.text[:200]} {direct.text[:200]}")
            return 1
        served_by = reply.json()["mint"]["served_by"]
        text, expected = reply.json()["choices"][0]["message"]["content"], \
            direct.json()["choices"][0]["message"]["content"]
        ok = served_by == args.ref and text == expected and bool(text)
        say("PASS" if ok else "FAIL", "vllm", f"the gateway routed to {served_by} on vLLM's GPU build ({adapter}); "
                                              f"its answer {'is' if text == expected else 'is NOT'} vLLM's own "
                                              f"({len(text)} characters; {time.perf_counter() - started:.0f} s "
                                              "with vLLM's start)")
        return 0 if ok else 1
    except RuntimeError as exc:
        say("FAIL", "vllm", str(exc))
        return 1
    finally:
        for process in (gateway, vllm):
            if process is not None and process.poll() is None:
                if process is vllm:
                    os.killpg(process.pid, 15)
                else:
                    process.terminate()
                try:
                    process.wait(60)
                except subprocess.TimeoutExpired:
                    process.kill()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("cuda")
    parity = commands.add_parser("parity")
    parity.add_argument("--contract", required=True)
    parity.add_argument("--ref", required=True)
    parity.add_argument("--device", default="cuda")
    vllm = commands.add_parser("vllm")
    vllm.add_argument("--ref", required=True)
    vllm.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    return {"cuda": check_cuda, "parity": check_parity, "vllm": check_vllm}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
