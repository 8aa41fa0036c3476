"""What the machine can do, and the training and decoding settings that follow from it, each with its reason.

``detect()`` reads the hardware once: CUDA and its compute capability; on a CPU, its flags (``amx_bf16`` /
``avx512_bf16`` on x86, ``bf16`` on Arm, from ``/proc/cpuinfo``, recorded) and a short timed probe, cached
per machine under ``$MINT_CACHE/hardware/``, that times fp32 against bf16 matmuls at a training shape and
at a decoding step's shape, a decoding step's cost per row at several batch sizes, and the decoding step at
each thread count in interleaved rounds (timings a shared CPU disturbed are not cached, see
``threads_figures``). The choices follow the figures, not the flags: on one AMX host the flags said bf16
while the base decoded at 88 tokens/s in bf16 and 130 in fp32. ``training_plan()`` and ``decoding_plan()``
turn the figures into settings plus a reason for each, which ``mint train`` records in ``run.json`` (and
prints with ``--dry-run``), a contract's ``precision: auto`` starts from (mint.contract.precision), and
contract evaluation and the mixture runtime decode with (the plan's threads, ``apply_decoding_threads``).

The device rule: training runs on CUDA when torch sees a CUDA device, else on the CPU; ``MINT_DEVICE`` (set by
every command's ``--device auto|cpu|cuda|cuda:N``) overrides it, and asking for CUDA where there is none is
refused. Decoding (evaluation, serving, chat) runs on the CPU in float32 unless a contract asks another precision;
``mint export vllm`` serves on a GPU.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

# x86: AMX tiles and AVX512-BF16 run bf16 matmuls natively; Arm (Linux "Features"): bf16 (BFMMLA/BFDOT)
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")
# reported so a run's record says what the CPU had, not only what mattered
REPORTED_CPU_FLAGS = BF16_CPU_FLAGS + ("amx_tile", "avx512f", "avx2", "fma", "asimd", "sve")
# below this much memory per device, activations are worth recomputing (gradient checkpointing)
CHECKPOINTING_BELOW_GIB = 8.0
PROBE_SPEEDUP = 1.2   # the probe calls bf16 worth using when its matmul is this much faster than fp32
PROBE_VERSION = 4     # bumped when the probe measures something else: older cached figures are measured again
# (rows, inner, outer) of the timed matmuls: a training step multiplies many tokens at once; a decoding step
# multiplies one token per row by a weight matrix (SmolLM2's hidden 576 to its MLP width 1536)
TRAINING_SHAPE = (512, 512, 512)
DECODING_SHAPE = (16, 576, 1536)
DECODING_ROWS = (1, 8, 16, 32)   # a decode step's cost per row at these batch sizes (the batch-shape figures)
ROWS_GAIN = 1.1       # a larger decoding batch is worth it while it makes each row this much cheaper
# the decoding step at each thread count is timed in this many interleaved rounds (every count once a round), so
# a burst of other work lands on every count alike; each count's figure is its best round
THREAD_ROUNDS = 7
# a quiet machine times the same matmul within ~10-20% round to round: a count whose median round is this much
# slower than its best was disturbed, and so was a probe where more threads are this much slower than one (on an
# idle core a second thread never doubles a step; waiting for a descheduled one does). A disturbed probe's
# threads decide nothing and are not cached: the next process measures them again
THREADS_SPREAD = 1.5
THREADS_SLOWDOWN = 2.0


DEVICE_ENV = "MINT_DEVICE"     # auto | cpu | cuda: the one setting that chooses the device (--device sets it)
DEVICES = ("auto", "cpu", "cuda")
DEVICE_FIELD = "--device (or MINT_DEVICE)"


def requested_device() -> str:
    """The device asked for: ``MINT_DEVICE`` (auto, cpu, cuda or cuda:N, read as cuda), auto where unset."""
    wanted = (os.environ.get(DEVICE_ENV) or "auto").strip().lower()
    kind, _sep, index = wanted.partition(":")
    if kind == "cuda" and index.isdigit():   # which GPU is select_device's (CUDA_VISIBLE_DEVICES)
        wanted = kind
    if wanted not in DEVICES:
        from mint.errors import BadInput

        raise BadInput(f"unknown device {wanted!r}: use auto, cpu, cuda or cuda:N", field=DEVICE_FIELD)
    return wanted


def select_device(value: str) -> str:
    """Make ``value`` (auto, cpu, cuda or cuda:N) the device of this process and the processes it starts:
    ``MINT_DEVICE``, and for cuda:N, ``CUDA_VISIBLE_DEVICES`` narrowed to the Nth visible GPU (what torch, TRL
    and accelerate all honour). Call it before anything touches CUDA. Returns the device asked for."""
    from mint.errors import BadInput

    wanted = value.strip().lower()
    kind, _sep, index = wanted.partition(":")
    if kind not in DEVICES or (_sep and (kind != "cuda" or not index.isdigit())):
        raise BadInput(f"unknown device {value!r}: use auto, cpu, cuda or cuda:N", field=DEVICE_FIELD)
    if index:
        visible = [v for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
        if visible and int(index) >= len(visible):
            raise BadInput(f"--device {wanted}: CUDA_VISIBLE_DEVICES names {len(visible)} GPU(s)", field="--device")
        os.environ["CUDA_VISIBLE_DEVICES"] = visible[int(index)] if visible else index
    os.environ[DEVICE_ENV] = kind
    return wanted


@dataclass(frozen=True)
class Hardware:
    device: str                          # "cuda" or "cpu"
    device_name: str
    cuda_capability: tuple[int, int] | None
    cpu_flags: tuple[str, ...]           # the REPORTED_CPU_FLAGS this CPU has
    cores: int                           # cores this process may run on
    memory_gib: float                    # of the training device
    bf16: bool                           # for training (autocast)
    bf16_reason: str
    flash_attention: bool = False
    probe: dict | None = None            # the timed probe's figures (a CPU), behind bf16 and the decoding plan


@dataclass(frozen=True)
class Choice:
    value: Any
    reason: str


@dataclass(frozen=True)
class TrainingPlan:
    """TRL settings for one method on this hardware, and why each was chosen."""

    hardware: Hardware
    choices: dict[str, Choice] = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        return {key: choice.value for key, choice in self.choices.items()}

    def record(self, overridden: dict[str, Any] | None = None) -> dict:
        """The plain-data record for run.json: the hardware, and each choice with its reason (and the
        value that replaced it, where a config file or ``--set`` did)."""
        choices = {}
        for key, choice in self.choices.items():
            entry = {"value": choice.value, "reason": choice.reason}
            if overridden and key in overridden and overridden[key] != choice.value:
                entry["overridden_by_user"] = overridden[key]
            choices[key] = entry
        hardware = asdict(self.hardware)
        hardware["cuda_capability"] = list(self.hardware.cuda_capability) if self.hardware.cuda_capability else None
        hardware["cpu_flags"] = list(self.hardware.cpu_flags)
        return {"hardware": hardware, "choices": choices}


def read_cpuinfo(path: Path = Path("/proc/cpuinfo")) -> str | None:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return None


def cpu_flags(cpuinfo: str) -> set[str] | None:
    """The flags of the first CPU (x86 ``flags``, Arm ``Features``), or None if the text lists none."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip().lower() in ("flags", "features"):
            return set(value.split())
    return None


def usable_cores() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):   # not Linux
        return max(1, os.cpu_count() or 1)


def _memory_gib() -> float:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (AttributeError, ValueError, OSError):
        return 0.0


def training_device(cuda: bool | None = None) -> str:
    """``cuda`` or ``cpu``: CUDA when torch sees it, unless ``MINT_DEVICE`` says otherwise (``cuda`` stands for
    whether torch sees CUDA, in tests). Asking for CUDA where there is none is BadInput naming --device."""
    import torch

    available = torch.cuda.is_available() if cuda is None else cuda
    wanted = requested_device()
    if wanted == "cuda" and not available:
        from mint.errors import BadInput

        raise BadInput(f"cuda asked for, but torch {torch.__version__} sees no CUDA device here; use --device cpu (or "
                       "auto), or install a CUDA build of torch (make setup TORCH_INDEX=...)", field=DEVICE_FIELD)
    return "cuda" if available and wanted != "cpu" else "cpu"


def detect(cpuinfo: str | None = None, *, cuda: bool | None = None, cache: Path | None = None,
           measure: bool = True) -> Hardware:
    """The hardware this process trains and decodes on. ``cpuinfo`` and ``cuda`` stand in for the real
    machine in tests; ``cache`` for ``$MINT_CACHE/hardware``. ``measure=False`` never runs the timed probe:
    a CPU whose figures are not cached yet is then described without them (fp32, saying so)."""
    import torch

    cores = usable_cores()
    if training_device(cuda) == "cuda":
        capability = tuple(torch.cuda.get_device_capability(0))
        supported = bool(torch.cuda.is_bf16_supported())
        flash = _has_flash_attention()
        return Hardware("cuda", torch.cuda.get_device_name(0), capability, (), cores,
                        torch.cuda.get_device_properties(0).total_memory / 2**30, supported,
                        f"CUDA compute capability {capability[0]}.{capability[1]}"
                        f"{' supports' if supported else ' lacks'} bf16", flash)
    text = read_cpuinfo() if cpuinfo is None else cpuinfo
    flags = cpu_flags(text) if text else None
    reported = tuple(f for f in REPORTED_CPU_FLAGS if flags and f in flags)
    name = platform.processor() or platform.machine()
    figures = probe(name, flags or set(), cores, cache) if measure else cached_probe(name, flags or set(), cores,
                                                                                      cache)
    if figures is None:
        return Hardware("cpu", name, None, reported, cores, _memory_gib(), False,
                        "the timed bf16 probe has not run on this machine yet (the first `mint train` or `mint eval` "
                        "runs it, a few seconds): fp32 until it finds bf16 faster")
    speedup = figures["training"]["bf16_speedup"]
    bf16 = speedup >= PROBE_SPEEDUP
    native = [f for f in BF16_CPU_FLAGS if flags and f in flags]
    said = (f"CPU has {', '.join(native)}" if native else "no bf16 CPU flags" if flags is not None
            else "no CPU flags to read")
    reason = (f"{said}; the timed probe found bf16 matmuls at a training shape {speedup:.2f}x the speed of fp32 "
              f"(bf16 when >= {PROBE_SPEEDUP}x)")
    return Hardware("cpu", name, None, reported, cores, _memory_gib(), bf16, reason, probe=figures)


def _has_flash_attention() -> bool:
    try:
        from transformers.utils import is_flash_attn_2_available
        return bool(is_flash_attn_2_available())
    except ImportError:
        return False


def machine_key(name: str, flags: set[str], cores: int) -> str:
    """What the probe's figures depend on: the CPU, all its flags, the cores this process may use, torch."""
    import torch

    machine = (f"v{PROBE_VERSION}|{platform.machine()}|{name}|{' '.join(sorted(flags))}|{cores} cores|"
               f"torch {torch.__version__}")
    return hashlib.sha256(machine.encode()).hexdigest()[:16]


# cache files whose disturbed thread timings this process measured again already (once per process is enough)
_threads_measured_here: set[str] = set()


def probe(name: str, flags: set[str], cores: int, cache: Path | None = None) -> dict:
    """The timed probe's figures for this machine, measured once and cached (a corrupt or older cache is
    measured again; an unwritable one costs a probe next time, nothing else). Thread timings that were
    disturbed (see ``threads_figures``) are measured again by the next process until they settle."""
    from mint.workspace import atomic_write_json

    key = machine_key(name, flags, cores)
    path = _probe_path(key, cache)
    found = cached_probe(name, flags, cores, cache)
    if found is not None and (found.get("threads_settled") is True or str(path) in _threads_measured_here):
        return found
    figures = found or {"machine": key, **_measure_probe(cores)}
    figures = {**figures, **threads_figures(_measure_threads(cores))}
    _threads_measured_here.add(str(path))
    try:
        atomic_write_json(path, figures)
    except OSError:
        pass
    return figures


def _probe_path(key: str, cache: Path | None) -> Path:
    from mint.workspace import cache_dir

    return (cache or cache_dir() / "hardware") / f"probe-{key}.json"


def cached_probe(name: str, flags: set[str], cores: int, cache: Path | None = None) -> dict | None:
    """The probe's figures cached for this machine, or None (none yet, corrupt, or from an older probe)."""
    key = machine_key(name, flags, cores)
    try:
        found = json.loads(_probe_path(key, cache).read_text())
        if found.get("machine") == key and found["training"]["bf16_speedup"] > 0 and found["decoding"]:
            return found
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        pass
    return None


def threads_figures(rounds: dict[str, list[float]]) -> dict:
    """The decoding step's figure at each thread count (its best round, in ms) from interleaved rounds of
    timings, and whether they settled: None in ``threads_disturbed`` when every count's median round is
    within THREADS_SPREAD of its best and no count is THREADS_SLOWDOWN slower than one thread, else why not."""
    import statistics

    best = {count: min(times) for count, times in rounds.items()}
    spread = {count: round(statistics.median(times) / max(best[count], 1e-9), 2) for count, times in rounds.items()}
    def named(count: str) -> str:
        return f"{count} thread" if count == "1" else f"{count} threads"

    disturbed = [f"{named(count)}: median round {spread[count]:.2f}x the best" for count in sorted(rounds, key=int)
                 if spread[count] > THREADS_SPREAD]
    one = best.get("1")
    disturbed += [f"{named(count)}: {best[count] / one:.1f}x slower than 1" for count in sorted(rounds, key=int)
                  if one and best[count] > THREADS_SLOWDOWN * one]
    return {"threads_ms": {count: round(value, 4) for count, value in best.items()},
            "threads_rounds_ms": {count: [round(t, 4) for t in times] for count, times in rounds.items()},
            "threads_spread": spread, "threads_disturbed": "; ".join(disturbed) or None,
            "threads_settled": not disturbed}


def _best_ms(rows: int, inner: int, outer: int, dtype, samples: int = 20, budget_s: float = 0.15) -> float:
    """One matmul of this shape, in ms: the best of up to ``samples`` timings within ``budget_s`` (the least
    disturbed by other work on the machine; the first calls, which set kernels up, are not timed)."""
    import time

    import torch

    a, b = torch.randn(rows, inner, dtype=dtype), torch.randn(inner, outer, dtype=dtype)
    for _ in range(3):
        torch.mm(a, b)
    times: list[float]
    times, started = [], time.perf_counter()
    while len(times) < samples and (len(times) < 3 or time.perf_counter() - started < budget_s):
        began = time.perf_counter()
        for _ in range(4):
            torch.mm(a, b)
        times.append((time.perf_counter() - began) / 4)
    return min(times) * 1000


def _measure_probe(cores: int) -> dict:
    """fp32 against bf16 at a training and a decoding shape, and a decoding step's cost per row at several
    batch sizes, in ms, on one thread (see ``_best_ms``)."""
    import torch

    def versus(shape: tuple[int, int, int]) -> dict:
        fp32, bf16 = _best_ms(*shape, torch.float32), _best_ms(*shape, torch.bfloat16)
        return {"shape": list(shape), "fp32_ms": round(fp32, 4), "bf16_ms": round(bf16, 4),
                "bf16_speedup": round(fp32 / max(bf16, 1e-9), 3)}

    threads_before = torch.get_num_threads()
    try:
        # one thread for what compares kernels (bf16 against fp32, rows per step): on a machine shared with
        # other work, a multi-threaded matmul waits for a descheduled thread (one scheduler slice, ~4-8 ms on
        # 2 busy cores) and the figure would measure the neighbours, not the kernel
        torch.set_num_threads(1)
        figures = {"training": versus(TRAINING_SHAPE), "decoding": versus(DECODING_SHAPE)}
        _rows, inner, outer = DECODING_SHAPE
        figures["decoding_rows_ms_per_row"] = {str(rows): round(_best_ms(rows, inner, outer, torch.float32) / rows, 5)
                                               for rows in DECODING_ROWS}
    finally:
        torch.set_num_threads(threads_before)
    return figures


def _measure_threads(cores: int, rounds: int = THREAD_ROUNDS) -> dict[str, list[float]]:
    """The fp32 decoding step at 1, half and all of ``cores`` threads, in ms: ``rounds`` rounds, each timing
    every count once (the best of a few samples), so the counts share whatever else the machine was doing."""
    import torch

    counts = sorted({1, max(1, cores // 2), cores})
    timings: dict[str, list[float]] = {str(count): [] for count in counts}
    threads_before = torch.get_num_threads()
    try:
        for _ in range(rounds):
            for count in counts:
                torch.set_num_threads(count)
                timings[str(count)].append(_best_ms(*DECODING_SHAPE, torch.float32, samples=5, budget_s=0.02))
    finally:
        torch.set_num_threads(threads_before)
    return timings


def decoding_plan(hardware: Hardware) -> dict[str, Choice]:
    """For decoding: whether bf16 is worth measuring on a model (a contract's ``precision: auto`` then times
    the model itself, see mint.contract.precision), the intra-op threads, and the batch size past which a
    decode step stops getting cheaper per row (recorded; a contract's ``batch_size`` is what runs)."""
    if hardware.device == "cuda":
        return {"bf16": Choice(hardware.bf16, hardware.bf16_reason),
                "threads": torch_threads(hardware), "rows": Choice(None, "not probed on a GPU")}
    figures = hardware.probe or {}
    decoding = figures.get("decoding") or {}
    speedup = decoding.get("bf16_speedup", 0.0)
    choices = {"bf16": Choice(speedup >= PROBE_SPEEDUP,
                              f"the timed probe found bf16 at a decoding step's shape {speedup:.2f}x the speed of "
                              f"fp32 (worth measuring on the model when >= {PROBE_SPEEDUP}x)")}
    threads = {int(k): v for k, v in (figures.get("threads_ms") or {}).items()}
    shown = ", ".join(f"{k}: {v:.3f} ms" for k, v in sorted(threads.items()))
    rounds = len(next(iter((figures.get("threads_rounds_ms") or {"": []}).values())))
    if threads and figures.get("threads_settled") is True:
        fastest = min(threads, key=lambda k: (threads[k], -k))
        choices["threads"] = Choice(fastest, f"fastest decoding step of the probe, each count's best of {rounds} "
                                             f"interleaved rounds ({shown}; settled: every median round within "
                                             f"{THREADS_SPREAD}x its best)")
    elif threads:
        default = torch_threads(hardware)
        choices["threads"] = Choice(default.value, f"{default.reason}: the probe's thread timings ({shown}) were "
                                                   f"disturbed ({figures.get('threads_disturbed')}), so they decide "
                                                   "nothing; measured again by the next run")
    else:
        choices["threads"] = torch_threads(hardware)
    per_row = {int(k): v for k, v in (figures.get("decoding_rows_ms_per_row") or {}).items()}
    rows = None
    for size in sorted(per_row):
        if rows is None or per_row[rows] >= ROWS_GAIN * per_row[size]:
            rows = size
    shown = ", ".join(f"{k}: {v * 1000:.1f} us" for k, v in sorted(per_row.items()))
    choices["rows"] = Choice(rows, f"a decode step's cost per row ({shown}) falls by {ROWS_GAIN}x or more up to "
                                   f"{rows} rows" if rows else "not measured")
    return choices


def training_plan(method: str, hardware: Hardware) -> TrainingPlan:
    """The precision, activation memory, batch shape and data loading for ``method`` on ``hardware``."""
    choices: dict[str, Choice] = {}
    if hardware.device == "cpu":
        choices["use_cpu"] = Choice(True, "no CUDA device")
    if hardware.bf16:
        choices["bf16"] = Choice(True, f"bf16 autocast: {hardware.bf16_reason}")
        choices["fp16"] = Choice(False, "bf16 is available and needs no loss scaling")
    elif hardware.device == "cuda":
        choices["bf16"] = Choice(False, hardware.bf16_reason)
        choices["fp16"] = Choice(True, f"fp16 autocast with loss scaling: {hardware.bf16_reason}")
    else:
        choices["bf16"] = Choice(False, f"fp32: {hardware.bf16_reason}")
        choices["fp16"] = Choice(False, "fp16 autocast on a CPU is emulated")
    if hardware.device == "cuda":
        choices["tf32"] = Choice(hardware.cuda_capability is not None and hardware.cuda_capability >= (8, 0),
                                 "TF32 matmuls for the fp32 parts where the GPU has them (compute capability >= 8.0)")
    small = 0 < hardware.memory_gib < CHECKPOINTING_BELOW_GIB
    where = "GPU" if hardware.device == "cuda" else "RAM"
    choices["gradient_checkpointing"] = Choice(
        small, f"{hardware.memory_gib:.0f} GiB {where}: " +
        ("recompute activations to fit" if small else
         f"activations fit (>= {CHECKPOINTING_BELOW_GIB:g} GiB), so no recompute (it costs ~1.3-1.5x compute)"))
    if method == "sft":
        if hardware.flash_attention:
            choices["padding_free"] = Choice(True, "flash attention is installed: no pad tokens at all")
            choices["packing"] = Choice(True, "padding-free needs packing (best-fit decreasing) to enforce max_length")
        elif hardware.device == "cpu":
            choices["padding_free"] = Choice(True, "a batch's rows joined without pad tokens, each attending to "
                                                   "itself alone (mint.train.padding_free): the projections run on "
                                                   "the rows' own tokens")
            choices["packing"] = Choice(False, "padding-free rows are never cut; packing would join examples "
                                               "across batches and change which train together")
        else:
            choices["packing"] = Choice(False, "without flash attention, packing was measured no faster on CPU and "
                                               "padding-free needs its variable-length kernels")
        if not hardware.flash_attention:
            # TRL supports length-grouped batches (train_sampling_strategy="group_by_length"), but its sampler
            # puts the longest batch first and reorders every epoch's examples, which bends the loss curve
            # the demo and tests compare; it stays an opt-in (--set train_sampling_strategy=group_by_length)
            choices["train_sampling_strategy"] = Choice(
                "random", "shuffled batches; length grouping changes the example order (longest first) and is "
                          "opt-in")
    workers = 0 if hardware.device == "cpu" else min(4, max(0, hardware.cores // 4))
    choices["dataloader_num_workers"] = Choice(
        workers, "collating text is cheap; on a CPU a worker process would take cores from the matmuls"
        if hardware.device == "cpu" else f"{workers} workers keep the GPU fed ({hardware.cores} cores)")
    return TrainingPlan(hardware, choices)


# rows this long or shorter attend faster in plain matrix products ("eager") than in torch's fused CPU kernel, whose
# backward is slow on short rows (SmolLM2, batch 4, bf16 autocast, 2 cores: 1.27 s a step against 1.38 at 185
# tokens, even at 256, slower from 384 on: scripts/bench_train.py (d)); eager's [heads, rows, rows] scores stay small
EAGER_ATTENTION_MAX_TOKENS = 256
# the attention implementation (mint.train.padding_free) that keeps a padding-free batch's joined rows apart on a CPU
ROW_ATTENTION = "mint_rows"


def training_attention(device: str, method: str, max_length: int | None, padding_free: bool = False) -> Choice:
    """The attention kernel an SFT run on ``device`` trains with, given its rows' ``max_length`` (mint sets it to
    the longest example's tokens) and whether its batches are padding-free: ``ROW_ATTENTION``, ``eager``, or None for
    the model's own (torch's fused kernel where it has one)."""
    if device != "cpu" or method != "sft":
        return Choice(None, "the model's own")
    if padding_free:
        return Choice(ROW_ATTENTION, f"padding-free rows, each attending to itself alone: plain products for a row "
                                     f"up to {EAGER_ATTENTION_MAX_TOKENS} tokens, torch's fused kernel above")
    if max_length is None or max_length > EAGER_ATTENTION_MAX_TOKENS:
        return Choice(None, f"rows up to {max_length or 'any number of'} tokens: the model's own (plain products "
                            f"are faster on a CPU up to {EAGER_ATTENTION_MAX_TOKENS})")
    return Choice("eager", f"rows up to {max_length} tokens: plain products, faster than torch's fused CPU kernel "
                           f"up to {EAGER_ATTENTION_MAX_TOKENS}")


def joins_rows_uncut(trl: dict[str, Any]) -> bool:
    """Whether TRL settings ``trl`` join a batch's rows without padding and without packing: such rows are never cut,
    so no ``max_length`` applies to them (TRL refuses one)."""
    return bool(trl.get("padding_free")) and not trl.get("packing")


def reconcile(settings: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """A user's fp16 (or bf16) replaces mint's other half-precision choice instead of clashing with it; a user's
    ``max_length`` without packing turns mint's padding-free batches off (TRL cuts rows to it only when it pads
    them)."""
    for ours, theirs in (("bf16", "fp16"), ("fp16", "bf16")):
        if user.get(theirs) is True and ours not in user:
            settings = {**settings, ours: False}
    if joins_rows_uncut(settings) and "padding_free" not in user and user.get("max_length") is not None:
        settings = {**settings, "padding_free": False}
    return settings


def torch_threads(hardware: Hardware) -> Choice:
    """Intra-op threads: one per core this process may use (torch counts the machine's, which
    oversubscribes under a CPU affinity mask or a container limit)."""
    return Choice(hardware.cores, f"{hardware.cores} cores available to this process")


def apply_threads(choice: Choice) -> None:
    import torch

    if torch.get_num_threads() != choice.value:
        torch.set_num_threads(int(choice.value))


def apply_decoding_threads(hardware: Hardware | None = None) -> Choice:
    """Set torch's intra-op threads to the decoding plan's (``decoding_plan``, of this machine unless
    ``hardware`` is given); returns the choice applied, with the figures behind it in its reason."""
    choice = decoding_plan(hardware or detect())["threads"]
    apply_threads(choice)
    return choice


def training_precision(hardware: Hardware) -> str:
    """The training plan's precision in a word: bf16 autocast, fp16 autocast or fp32."""
    settings = training_plan("sft", hardware).settings()
    return "bf16 autocast" if settings.get("bf16") else "fp16 autocast" if settings.get("fp16") else "fp32"


def machine_plan(hardware: Hardware | None = None) -> dict:
    """Which device and precision mint trains and decodes with here, each with why (without running the timed
    probe: ``detect(measure=False)``)."""
    hardware = hardware or detect(measure=False)
    where = f"{hardware.device} ({hardware.device_name})"
    return {"training_device": where, "training_precision": training_precision(hardware),
            "training_reason": hardware.bf16_reason,
            "decoding_device": f"cpu ({platform.processor() or platform.machine()})" if hardware.device != "cpu"
            else where,
            "decoding_precision": "fp32 (a contract's harness.decoding.precision may ask bf16, int8 or auto)",
            "device_rule": f"CUDA when torch sees it, else the CPU; {DEVICE_ENV}={requested_device()} "
                           "(--device auto|cpu|cuda|cuda:N overrides it)"}


def device_line(role: str, hardware: Hardware | None = None) -> str:
    """The one line a command says at its start: where and at what precision it trains (``role`` train), decodes
    (decode) or both. What trains reads the timed probe (training runs it anyway); what only decodes never runs it."""
    plan = machine_plan(hardware or detect(measure=role != "decode"))
    training = f"training on {plan['training_device']}, {plan['training_precision']}"
    decoding = f"decoding on {plan['decoding_device']}, {plan['decoding_precision']}"
    said = {"train": training, "decode": decoding}.get(role, f"{training}; {decoding}")
    return f"{said} (--device or {DEVICE_ENV} chooses the training device)"
