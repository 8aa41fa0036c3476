"""mint train against plain TRL on the same data and settings, and mint's defaults against TRL's.

Run: make bench   (or: python scripts/bench_train.py [--base smollm2-135m] [--steps 6])

(a) `mint train` (CLI, end to end: data, run directory, checkpoints, registration) against a plain
    TRL SFTTrainer script given exactly the settings mint resolved; wall-time ratio, goal <= 1.05.
(b) mint's hardware-aware defaults against TRL's defaults (plus use_cpu on a CPU, without which TRL's
    bf16 default does not start); training tokens/s ratio, goal >= 1.4.
Both sides of each pair run as fresh processes on the same examples.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PLAIN = r"""
import json, sys, time
from datasets import Dataset
from peft import LoraConfig
from trl import SFTConfig, SFTTrainer
from mint.base import load_base, training_chat_template
run_dir, out, mode = sys.argv[1], sys.argv[2], sys.argv[3]
run = json.load(open(f"{run_dir}/run.json"))
rows = [json.loads(l) for l in open(f"{run_dir}/examples.jsonl")]
loaded = load_base(run["base"])
loaded.tokenizer.chat_template = training_chat_template()
trl = dict(run["settings"]["trl"])
if mode == "trl-defaults":
    import torch
    trl = {k: trl[k] for k in ("max_steps", "per_device_train_batch_size", "learning_rate", "seed", "report_to",
                               "save_steps", "assistant_only_loss", "max_length")}
    if not torch.cuda.is_available():
        trl["use_cpu"] = True
lora = run["settings"]["lora"]
args = SFTConfig(output_dir=out, **trl)
trainer = SFTTrainer(model=loaded.model, args=args, train_dataset=Dataset.from_list(rows),
                     processing_class=loaded.tokenizer,
                     peft_config=LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                                            target_modules=lora["target_modules"], task_type="CAUSAL_LM"))
began = time.perf_counter()
trainer.train()
seconds = time.perf_counter() - began
tokens = max(h.get("num_tokens", 0) for h in trainer.state.log_history)
trainer.model.save_pretrained(f"{out}/adapter")
print(json.dumps({"tokens": tokens, "train_seconds": seconds,
                  "gradient_checkpointing": args.gradient_checkpointing, "bf16": args.bf16}))
"""


def timed(command: list[str], env: dict) -> tuple[float, str]:
    began = time.perf_counter()
    child = subprocess.run(command, capture_output=True, text=True, env=env, cwd=env["BENCH_CWD"])
    if child.returncode != 0:
        raise SystemExit(child.stderr[-3000:])
    return time.perf_counter() - began, child.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    mint = [sys.executable, "-m", "mint"]
    with tempfile.TemporaryDirectory(prefix="mint-bench-train-") as tmp:
        env = {**os.environ, "MINT_HOME": f"{tmp}/home", "BENCH_CWD": tmp, "HF_HUB_OFFLINE": "1"}
        subprocess.run([*mint, "ingest", str(ROOT / "examples/logs/server_log.jsonl.gz"), "--dataset", "ui",
                        "--json"], check=True, capture_output=True, env=env, cwd=tmp)
        sets = [f"max_steps={args.steps}", "per_device_train_batch_size=4", "save_steps=1000", "max_length=384"]
        mint_s, out = timed([*mint, "train", "--specialist", "genui", "--data", "ui", "--method", "sft", "--base",
                             args.base, "--json", *[x for s in sets for x in ("--set", s)]], env)
        run_dir = json.loads(out)["run_dir"]
        plain_s, out = timed([sys.executable, "-c", PLAIN, run_dir, f"{tmp}/plain", "same"], env)
        plain = json.loads(out.strip().splitlines()[-1])
        _defaults_s, out = timed([sys.executable, "-c", PLAIN, run_dir, f"{tmp}/defaults", "trl-defaults"], env)
        defaults = json.loads(out.strip().splitlines()[-1])
        mint_metrics = [json.loads(l) for l in open(f"{run_dir}/metrics.jsonl")]
        start = next(m["time"] for m in mint_metrics if m.get("event") == "start")
        end = max(m["time"] for m in mint_metrics)
        run = json.load(open(f"{run_dir}/run.json"))

    trl = run["settings"]["trl"]
    print(f"base {args.base}, SFT, {run['examples']} GenUI examples, {args.steps} steps, batch "
          f"{trl['per_device_train_batch_size']}, max_length {trl['max_length']}, LoRA r={run['settings']['lora']['r']}"
          f" on {run['settings']['lora']['target_modules']}")
    wall = mint_s / plain_s
    print(f"\n(a) wall time, whole process: mint train {mint_s:.1f} s, plain TRL script {plain_s:.1f} s "
          f"-> ratio {wall:.3f} (goal <= 1.05): {'MET' if wall <= 1.05 else 'MISSED'}")
    mint_tps = plain["tokens"] / plain["train_seconds"]
    default_tps = defaults["tokens"] / defaults["train_seconds"]
    speed = mint_tps / default_tps
    print(f"(b) training tokens/s: mint defaults {mint_tps:.0f} (gradient_checkpointing "
          f"{plain['gradient_checkpointing']}, bf16 {plain['bf16']}), TRL defaults {default_tps:.0f} "
          f"(gradient_checkpointing {defaults['gradient_checkpointing']}, bf16 {defaults['bf16']}) "
          f"-> ratio {speed:.2f} (goal >= 1.4): {'MET' if speed >= 1.4 else 'MISSED'}")
    print(f"    (mint's own run trained for {end - start:.1f} s between its first and last metrics lines)")


if __name__ == "__main__":
    main()
