"""A static KV cache with `torch.compile` against eager decoding: is compiling the decode step worth it here?

Run: python scripts/bench_compile.py [--base smollm2-135m] [--batch 24] [--steps 128] [--rounds 2] [--mode MODE]

Greedy decode steps of the base (fp32), from one prefill of --batch random 64-token prompts, three ways in
alternated rounds: the eager model with HF's DynamicCache (what a plain loop does), the eager model with HF's
StaticCache (fixed shapes), and the model's forward under `torch.compile` (inductor) with the StaticCache. The
compile's own time (its first call) is printed apart. Printed: tokens/s of each, the ratio compiled / eager, the
CPU flags. The engine's own cache (mint.generation.cache) is not used here: this measures what compiling buys
the model's step itself.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
PROMPT = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--batch", type=int, default=24)
    parser.add_argument("--steps", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--mode", default=None, help="torch.compile's mode (default: its default)")
    args = parser.parse_args()

    import torch
    from transformers import StaticCache

    from mint.base import load_base
    from mint.hardware import detect

    model = load_base(args.base).model.float().eval()
    ids = torch.randint(100, 1000, (args.batch, PROMPT), generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(model.forward, mode=args.mode)

    def dynamic() -> float:
        with torch.inference_mode():
            out = model(input_ids=ids, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1, keepdim=True)
            began = time.perf_counter()
            for _ in range(args.steps):
                out = model(input_ids=token, past_key_values=cache, use_cache=True)
                token = out.logits[:, -1].argmax(-1, keepdim=True)
            return time.perf_counter() - began

    def static(forward) -> float:
        with torch.inference_mode():
            cache = StaticCache(config=model.config, max_cache_len=PROMPT + args.steps + 8)
            out = model(input_ids=ids, past_key_values=cache, use_cache=True, cache_position=torch.arange(PROMPT))
            token = out.logits[:, -1].argmax(-1, keepdim=True)
            began = time.perf_counter()
            for step in range(args.steps):
                position = torch.tensor([PROMPT + step])
                out = forward(input_ids=token, past_key_values=cache, use_cache=True, cache_position=position,
                              position_ids=position[None].expand(args.batch, 1))
                token = out.logits[:, -1].argmax(-1, keepdim=True)
            return time.perf_counter() - began

    hardware = detect()
    print(f"{args.base}, fp32, batch {args.batch}, {args.steps} steps after a {PROMPT}-token prefill; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; flags {' '.join(hardware.cpu_flags) or '-'}")
    began = time.perf_counter()
    static(compiled)
    print(f"compile and first run: {time.perf_counter() - began:.1f} s")
    tokens = args.batch * args.steps
    rates: dict[str, list[float]] = {"eager, DynamicCache": [], "eager, StaticCache": [], "compiled, StaticCache": []}
    for round_index in range(args.rounds):
        for name, run in (("eager, DynamicCache", dynamic), ("eager, StaticCache", lambda: static(model.forward)),
                          ("compiled, StaticCache", lambda: static(compiled))):
            rates[name].append(tokens / run())
        print(f"round {round_index + 1}: " + ", ".join(f"{name} {r[-1]:.1f} tokens/s" for name, r in rates.items()))
    best = {name: max(r) for name, r in rates.items()}
    print(f"best: compiled / eager DynamicCache {best['compiled, StaticCache'] / best['eager, DynamicCache']:.2f}x, "
          f"compiled / eager StaticCache {best['compiled, StaticCache'] / best['eager, StaticCache']:.2f}x")


if __name__ == "__main__":
    main()
