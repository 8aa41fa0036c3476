"""mint train against a plain TRL script on the same data and settings; mint's defaults against TRL's.

Run: make bench   (or: python scripts/bench_train.py [--base smollm2-135m] [--steps 6] [--repeats 3])
Smoke run: python scripts/bench_train.py --quick   (tiny-random, 2 steps, one run per side, no warm-up)

(a) wall time of `mint train` (CLI, end to end: examples, run directory, training, adapter, registration)
    against a plain TRL SFTTrainer script that does not import mint, given exactly the settings mint
    resolved and the same examples. Goal: ratio of medians <= 1.05.
(b) training tokens/s of mint's hardware-aware defaults against TRL's defaults (plus use_cpu on a CPU),
    and against a well-tuned plain TRL script (fp32, no gradient checkpointing). Goal: >= 1.4 against
    TRL's defaults. Both sides are the plain script, so only the settings differ; their loss curves are
    compared too (bf16 must learn like fp32).
(c) the LM head: seconds per training step of SFTTrainer with TRL's fused head, which on a CPU projects every
    position through the vocabulary, against the same trainer with mint's head on the trained positions only
    (mint.train.lm_head), through TRL's kernel and through mint's CPU kernel (the whole vocabulary at once), at the
    demo's GenUI settings (batch 4, lr 1e-3); all are the plain script, the others with mint's head put on after the
    trainer is built. The loss curves must be the same (the same arithmetic on the same rows). Goal: >= 1.25x.
(d) attention on short rows: seconds per step with torch's fused attention (sdpa) against plain products (eager),
    mint's head on both, the same settings as (c) (mint.hardware.training_attention chooses eager for SFT rows up
    to EAGER_ATTENTION_MAX_TOKENS on a CPU).
(e) padding-free batches: seconds per step of `mint train` (CLI, mint's defaults, the demo's GenUI settings: batch
    4, lr 1e-3, no max_length) with a batch's rows joined without padding, each attending to itself alone
    (mint.train.padding_free), against the same run with padded batches (--set padding_free=false). The examples
    and batches are the same, so the loss curves must agree to rounding; the gain follows the padding a batch
    carries (the GenUI logs' rows are alike in length: 15% of a padded batch's tokens are padding).
Every side runs as a fresh process; sides alternate (A B A B ...) after one warm-up run of each, and
min and median are printed. The tokenizer, model and examples are read from files both sides share.
Each run's figure is printed (stderr) as it finishes, so a long benchmark shows where it is.
On a CPU without native bf16, TRL's defaults emulate bf16 and run several times slower than fp32: that side
then runs --slow-steps steps, once, with no warm-up (a rate, tokens/s, does not need the full run).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WALL_GOAL, SPEED_GOAL, HEAD_GOAL = 1.05, 1.4, 1.25

# The reference: plain TRL + PEFT, no mint import. argv: spec.json (base dir, examples, settings), out dir.
PLAIN = r"""
import json, sys, time
from datasets import Dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import SFTConfig, SFTTrainer
spec, out = json.load(open(sys.argv[1])), sys.argv[2]
tokenizer = AutoTokenizer.from_pretrained(spec["base_dir"])
tokenizer.chat_template = spec["chat_template"]
model = AutoModelForCausalLM.from_pretrained(spec["base_dir"], dtype="float32",
                                             attn_implementation=spec.get("attention", "sdpa"))
rows = [json.loads(line) for line in open(spec["examples"])]
lora = spec["lora"]
args = SFTConfig(output_dir=out, **spec["trl"])
trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                     peft_config=LoraConfig(r=lora["r"], lora_alpha=lora["alpha"], lora_dropout=lora["dropout"],
                                            target_modules=lora["target_modules"], task_type="CAUSAL_LM"))
if spec.get("trained_positions_head"):   # sides (c) and (d): mint's head on the trained positions
    from mint.train import lm_head
    if spec.get("trl_kernel"):           # through TRL's kernel rather than mint's CPU kernel
        lm_head.own_head_fits = lambda *args: False
    assert lm_head.score_trained_positions(trainer.model.get_base_model())
from transformers import TrainerCallback
step_seconds = []
class Steps(TrainerCallback):
    def on_step_begin(self, *a, **k): self.began = time.perf_counter()
    def on_step_end(self, *a, **k): step_seconds.append(time.perf_counter() - self.began)
trainer.add_callback(Steps())
began = time.perf_counter()
trainer.train()
seconds = time.perf_counter() - began
trainer.model.save_pretrained(f"{out}/adapter")
history = trainer.state.log_history
later = step_seconds[1:] or step_seconds   # the first step sets kernels up
print(json.dumps({"tokens": max(h.get("num_tokens", 0) for h in history), "train_seconds": seconds,
                  "step_seconds": sum(later) / len(later),
                  "losses": [h["loss"] for h in history if "loss" in h],
                  "bf16": args.bf16, "gradient_checkpointing": args.gradient_checkpointing}))
"""
# what a user states for the task, given to every side; the rest is each side's defaults
TASK_KEYS = ("max_steps", "per_device_train_batch_size", "learning_rate", "seed", "report_to", "save_steps",
             "assistant_only_loss", "max_length", "logging_steps")


def run(command: list[str], env: dict, cwd: str) -> tuple[float, str]:
    began = time.perf_counter()
    child = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd)
    seconds = time.perf_counter() - began
    if child.returncode != 0:
        raise SystemExit(f"{' '.join(command[:4])} ... failed:\n{child.stderr[-3000:]}")
    return seconds, child.stdout


def alternate(sides: dict, repeats: int, warmup: bool, once: tuple[str, ...] = (),
              shown=lambda result: f"{result['wall_s']:.1f} s", rotate: bool = False) -> dict[str, list]:
    """Each side's results, run in turn (A B C A B C ...) after one discarded warm-up of each; the sides
    named in ``once`` run once, in the first round, without a warm-up. ``rotate``: each round starts one side
    later (A B C, B C A, ...), so no side always runs right after the same one."""
    if warmup:
        for name, side in sides.items():
            if name not in once:
                began = time.perf_counter()
                side()
                print(f"  warm-up: {name} ({time.perf_counter() - began:.0f} s)", file=sys.stderr, flush=True)
    results = {name: [] for name in sides}
    names = list(sides)
    for round_number in range(repeats):
        shift = round_number % len(names) if rotate else 0
        for name in names[shift:] + names[:shift]:
            if name in once and round_number > 0:
                continue
            results[name].append(sides[name]())
            print(f"  round {round_number + 1}/{repeats}: {name}: {shown(results[name][-1])}", file=sys.stderr,
                  flush=True)
    return results


def spread(values: list[float]) -> str:
    return f"min {min(values):7.2f}  median {statistics.median(values):7.2f}  (n={len(values)})"


def verdict(ok: bool) -> str:
    return "MET" if ok else "MISSED"


def prepare_base(base: str, tmp: Path) -> tuple[str, Path]:
    """(the --base mint is given, the model directory the plain script loads): the embedded base's own
    directory; tiny-random (built in code) saved once as a local model directory both sides load."""
    from mint.base import load_base, resolve_base, training_chat_template

    directory = resolve_base(base)
    if directory is not None:
        return base, directory
    loaded = load_base(base)
    target = tmp / "base"
    loaded.model.save_pretrained(target)
    loaded.tokenizer.chat_template = training_chat_template()   # local bases train with their own template
    loaded.tokenizer.save_pretrained(target)
    return str(target), target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per side (after one warm-up)")
    parser.add_argument("--slow-steps", type=int, default=2,
                        help="steps for TRL's defaults where bf16 would be emulated (run once)")
    parser.add_argument("--head-steps", type=int, default=12, help="steps of each side of (c)")
    parser.add_argument("--parts", default="a,b,c,d,e", help="which comparisons to run (a-e; comma-separated)")
    parser.add_argument("--quick", action="store_true", help="smoke run: tiny-random, 2 steps, 1 run per side")
    args = parser.parse_args()
    if args.quick:
        args.base, args.steps, args.repeats, args.head_steps = "tiny-random", 2, 1, 2
    parts = set(args.parts.split(","))

    from mint.base import training_chat_template
    from mint.hardware import detect

    hardware = detect()
    python = sys.executable
    with tempfile.TemporaryDirectory(prefix="mint-bench-train-") as tmp_name:
        tmp = Path(tmp_name)
        env = {**os.environ, "MINT_HOME": str(tmp / "home"), "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        mint = [python, "-m", "mint"]
        run([*mint, "ingest", str(ROOT / "examples/logs/server_log.jsonl.gz"), "--dataset", "ui", "--json"], env,
            tmp_name)
        base_arg, base_dir = prepare_base(args.base, tmp)
        task = [f"max_steps={args.steps}", "per_device_train_batch_size=4", "save_steps=1000", "max_length=384"]
        sets = [x for s in task for x in ("--set", s)]
        train_cli = [*mint, "train", "--specialist", "genui", "--data", "ui", "--method", "sft", "--base", base_arg,
                     "--json", *sets]
        _, shown = run([*mint, "train", "--dry-run", "--method", "sft", "--json", *sets], env, tmp_name)
        resolved = json.loads(shown)
        # one mint run first: its examples.jsonl is what every plain run trains on
        _, out = run(train_cli, env, tmp_name)
        examples = Path(json.loads(out)["run_dir"]) / "examples.jsonl"

        def spec_file(name: str, trl: dict) -> Path:
            path = tmp / f"{name}.json"
            path.write_text(json.dumps({"base_dir": str(base_dir), "chat_template": training_chat_template(),
                                        "examples": str(examples), "lora": resolved["lora"], "trl": trl}))
            return path

        counter = iter(range(10**6))

        example_count = sum(1 for _ in open(examples))
        plain_env = {k: v for k, v in env.items() if k != "PYTHONPATH"}   # the reference cannot import mint

        def plain(spec: Path):
            def side():
                seconds, out = run([python, "-c", PLAIN, str(spec), str(tmp / f"out-{next(counter)}")], plain_env,
                                   tmp_name)
                return {**json.loads(out.strip().splitlines()[-1]), "wall_s": seconds}
            return side

        def mint_train():
            return {"wall_s": run(train_cli, env, tmp_name)[0]}

        mint_trl = resolved["trl"]
        trl_defaults = {k: mint_trl[k] for k in TASK_KEYS if k in mint_trl}
        if hardware.device == "cpu":
            trl_defaults["use_cpu"] = True   # without it TRL's bf16 default does not start on a CPU
        tuned = {**trl_defaults, "bf16": False, "gradient_checkpointing": False}
        # TRL's defaults train in bf16; where the CPU only emulates it, one short run gives its rate
        emulated = hardware.device == "cpu" and not hardware.bf16 and not args.quick
        slow = ("TRL defaults",) if emulated else ()
        trl_defaults_run = {**trl_defaults, "max_steps": min(args.slow_steps, args.steps)} if emulated else trl_defaults
        walls = speeds = heads = attentions = None
        if "a" in parts:
            print("(a) mint train vs the plain TRL script", file=sys.stderr, flush=True)
            walls = alternate({"mint train": mint_train, "plain TRL": plain(spec_file("same", mint_trl))},
                              args.repeats, warmup=not args.quick)
            walls = {name: [r["wall_s"] for r in results] for name, results in walls.items()}
        if "b" in parts:
            print("(b) training tokens/s by settings", file=sys.stderr, flush=True)
            speeds = alternate({"mint defaults": plain(spec_file("mint", mint_trl)),
                                "TRL defaults": plain(spec_file("trl", trl_defaults_run)),
                                "tuned fp32": plain(spec_file("tuned", tuned))}, args.repeats,
                               warmup=not args.quick, once=slow,
                               shown=lambda r: f"{r['tokens'] / r['train_seconds']:.1f} tok/s ({r['wall_s']:.0f} s)")
        demo = {**mint_trl, "max_steps": args.head_steps, "learning_rate": 1e-3}

        def head_side(name: str, ours: bool, **extra):
            path = spec_file(name, demo)
            path.write_text(json.dumps({**json.loads(path.read_text()), "trained_positions_head": ours, **extra}))

            def side():   # mint's head needs mint importable; TRL's side runs without it
                seconds, out = run([python, "-c", PLAIN, str(path), str(tmp / f"out-{next(counter)}")],
                                   env if ours else plain_env, tmp_name)
                return {**json.loads(out.strip().splitlines()[-1]), "wall_s": seconds}
            return side

        per_step = lambda r: f"{r['step_seconds']:.2f} s/step"   # noqa: E731
        if "c" in parts:
            print("(c) seconds per step by LM head", file=sys.stderr, flush=True)
            heads = alternate({"TRL's head": head_side("trl-head", False),
                               "TRL's kernel": head_side("trl-kernel", True, trl_kernel=True),
                               "trained positions": head_side("mint-head", True)}, args.repeats,
                              warmup=not args.quick, shown=per_step)
        if "d" in parts:
            print("(d) seconds per step by attention kernel", file=sys.stderr, flush=True)
            attentions = alternate({"sdpa": head_side("sdpa", True, attention="sdpa"),
                                    "eager": head_side("eager", True, attention="eager")}, args.repeats,
                                   warmup=not args.quick, shown=per_step)

        rows = None
        if "e" in parts:
            print("(e) seconds per step, padded against padding-free batches (mint train)", file=sys.stderr, flush=True)
            rows = alternate({"padded": mint_steps(mint, base_arg, args.head_steps, env, tmp_name,
                                                   "padding_free=false"),
                              "padding-free": mint_steps(mint, base_arg, args.head_steps, env, tmp_name)},
                             args.repeats, warmup=not args.quick, shown=per_step)

    print(f"hardware: {hardware.device} {hardware.device_name}, {hardware.cores} cores, "
          f"flags {', '.join(hardware.cpu_flags) or '-'}; bf16: {hardware.bf16} ({hardware.bf16_reason})")
    print("mint's choices: " + "; ".join(f"{k}={v['value']}" for k, v in resolved["hardware"]["choices"].items()))
    print(f"base {args.base}, SFT, {example_count} GenUI examples, {args.steps} steps, batch 4, "
          f"max_length {resolved['trl'].get('max_length')} (the task's), "
          f"LoRA r={resolved['lora']['r']} on {resolved['lora']['target_modules']}; "
          f"{args.repeats} alternated runs per side{'' if args.quick else ' after a warm-up'}")
    if slow:
        print(f"TRL's defaults emulate bf16 on this CPU: that side ran {trl_defaults_run['max_steps']} steps, once, "
              f"without a warm-up")
    if walls:
        report_walls(walls)
    if speeds:
        report_speeds(speeds)
    if heads:
        report_heads(heads, args.head_steps)
    if attentions:
        report_attention(attentions, args.head_steps)
    if rows:
        report_rows(rows, args.head_steps)


def mint_steps(mint: list[str], base: str, steps: int, env: dict, cwd: str, *sets: str):
    """A side that runs `mint train` at the demo's GenUI settings (and ``sets``) and reads its seconds per step
    (steps 2 on: the first sets kernels up) and losses from the run's metrics.jsonl."""
    task = [f"max_steps={steps}", "per_device_train_batch_size=4", "save_steps=1000", "learning_rate=1e-3", *sets]
    command = [*mint, "train", "--specialist", "genui", "--data", "ui", "--method", "sft", "--base", base, "--json",
               *[x for s in task for x in ("--set", s)]]

    def side():
        seconds, out = run(command, env, cwd)
        run_dir = Path(json.loads(out)["run_dir"])
        records = [json.loads(line) for line in open(run_dir / "metrics.jsonl")]
        logged = [r for r in records if "loss" in r]
        times = [r["time"] for r in logged]
        steps_timed = [b - a for a, b in zip(times, times[1:])] or [seconds]
        effective = json.loads((run_dir / "run.json").read_text())["effective"]["backend"]
        return {"wall_s": seconds, "step_seconds": statistics.median(steps_timed),
                "losses": [r["loss"] for r in logged], "padding_free": effective.get("padding_free")}
    return side


def report_rows(rows: dict, steps: int) -> None:
    per_step = step_table(f"\n(e) seconds per training step (median of steps 2-{steps}), mint train, the demo's GenUI "
                          f"settings (batch 4, lr 1e-3)", rows)
    assert rows["padding-free"][0]["padding_free"] and not rows["padded"][0]["padding_free"], "a side ran the other way"
    ratio = statistics.median(per_step["padded"]) / statistics.median(per_step["padding-free"])
    print(f"  padded / padding-free: {ratio:.2f}x; "
          f"{loss_gap(rows['padding-free'][0]['losses'], rows['padded'][0]['losses'])}")


def report_walls(walls: dict) -> None:
    print("\n(a) wall time, whole process (s)")
    for name, values in walls.items():
        print(f"  {name:<14} {spread(values)}")
    wall_ratio = statistics.median(walls["mint train"]) / statistics.median(walls["plain TRL"])
    wall_min = min(walls["mint train"]) / min(walls["plain TRL"])
    print(f"  ratio mint / plain: median {wall_ratio:.3f}, min {wall_min:.3f} (goal <= {WALL_GOAL}): "
          f"{verdict(wall_ratio <= WALL_GOAL)}")


def report_speeds(speeds: dict) -> None:
    print("\n(b) training tokens/s")
    tps = {name: [r["tokens"] / r["train_seconds"] for r in results] for name, results in speeds.items()}
    for name, results in speeds.items():
        print(f"  {name:<14} {spread(tps[name])}   bf16 {results[0]['bf16']}, "
              f"gradient_checkpointing {results[0]['gradient_checkpointing']}")
    versus_defaults = statistics.median(tps["mint defaults"]) / statistics.median(tps["TRL defaults"])
    versus_tuned = statistics.median(tps["mint defaults"]) / statistics.median(tps["tuned fp32"])
    print(f"  mint defaults / TRL defaults: {versus_defaults:.2f} (goal >= {SPEED_GOAL}): "
          f"{verdict(versus_defaults >= SPEED_GOAL)}")
    print(f"  mint defaults / tuned fp32 TRL: {versus_tuned:.2f} (goal >= 1.0: mint's defaults are at least the "
          f"tuned script's): {verdict(versus_tuned >= 1.0)}")
    mint_losses, fp32_losses = speeds["mint defaults"][0]["losses"], speeds["tuned fp32"][0]["losses"]
    trl_losses = speeds["TRL defaults"][0]["losses"]
    if trl_losses and speeds["TRL defaults"][0]["bf16"] and not speeds["mint defaults"][0]["bf16"]:
        common = min(len(trl_losses), len(fp32_losses))
        gap = max(abs(a - b) for a, b in zip(trl_losses[:common], fp32_losses[:common]))
        print(f"  loss curve, TRL's bf16 defaults vs fp32, first {common} steps: max per-step gap {gap:.4f}")
    if mint_losses and len(mint_losses) == len(fp32_losses):
        gap = max(abs(a - b) for a, b in zip(mint_losses, fp32_losses))
        print(f"  loss curve, mint defaults vs fp32 (same seed): max per-step gap {gap:.4f} "
              f"(final {mint_losses[-1]:.4f} vs {fp32_losses[-1]:.4f})")


def step_table(title: str, sides: dict) -> dict[str, list[float]]:
    """Print each side's seconds per step; return them."""
    print(title)
    per_step = {name: [r["step_seconds"] for r in results] for name, results in sides.items()}
    for name, values in per_step.items():
        print(f"  {name:<18} {spread(values)}")
    return per_step


def loss_gap(ours: list[float], theirs: list[float]) -> str:
    gap = max((abs(a - b) for a, b in zip(theirs, ours)), default=float("nan"))
    return f"loss curves, {len(ours)} steps: max per-step gap {gap:.2g} (final {ours[-1]:.4f} vs {theirs[-1]:.4f})"


def report_heads(heads: dict, steps: int) -> None:
    per_step = step_table(f"\n(c) seconds per training step (steps 2-{steps}), the demo's GenUI settings (batch 4, "
                          f"lr 1e-3)", heads)
    ratio = statistics.median(per_step["TRL's head"]) / statistics.median(per_step["trained positions"])
    print(f"  TRL's head / trained positions: {ratio:.2f}x (goal >= {HEAD_GOAL}): {verdict(ratio >= HEAD_GOAL)}")
    kernel = statistics.median(per_step["TRL's kernel"]) / statistics.median(per_step["trained positions"])
    print(f"  TRL's kernel on the trained positions / mint's CPU kernel: {kernel:.2f}x")
    for name in ("TRL's head", "TRL's kernel"):
        print(f"  against {name}: {loss_gap(heads['trained positions'][0]['losses'], heads[name][0]['losses'])}")


def report_attention(attentions: dict, steps: int) -> None:
    per_step = step_table(f"\n(d) seconds per training step (steps 2-{steps}) by attention kernel, mint's head, the "
                          f"settings of (c)", attentions)
    ratio = statistics.median(per_step["sdpa"]) / statistics.median(per_step["eager"])
    print(f"  sdpa / eager: {ratio:.2f}x; {loss_gap(attentions['eager'][0]['losses'], attentions['sdpa'][0]['losses'])}")

if __name__ == "__main__":
    main()
