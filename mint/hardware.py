"""What the machine can do, and the training settings that follow from it, each with its reason.

``detect()`` reads the hardware once: CUDA and its compute capability, the CPU's bf16 instructions
(``amx_bf16`` / ``avx512_bf16`` on x86, ``bf16`` on Arm, from ``/proc/cpuinfo``; where that file says
nothing, a one-off timed matmul probe cached per machine under ``$MINT_CACHE/hardware/``), the cores
this process may use and the memory. ``training_plan()`` turns that into TRL settings plus a reason for
each, which ``mint train`` records in ``run.json`` and prints with ``--dry-run``.
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
PROBE_SPEEDUP = 1.2   # the probe calls bf16 native when its matmul is this much faster than fp32


@dataclass(frozen=True)
class Hardware:
    device: str                          # "cuda" or "cpu"
    device_name: str
    cuda_capability: tuple[int, int] | None
    cpu_flags: tuple[str, ...]           # the REPORTED_CPU_FLAGS this CPU has
    cores: int                           # cores this process may run on
    memory_gib: float                    # of the training device
    bf16: bool
    bf16_reason: str
    flash_attention: bool = False


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


def detect(cpuinfo: str | None = None, *, cuda: bool | None = None, cache: Path | None = None) -> Hardware:
    """The hardware this process trains on. ``cpuinfo`` and ``cuda`` stand in for the real machine in tests."""
    import torch

    use_cuda = torch.cuda.is_available() if cuda is None else cuda
    cores = usable_cores()
    if use_cuda:
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
    if flags is not None:
        native = [f for f in BF16_CPU_FLAGS if f in flags]
        bf16 = bool(native)
        reason = (f"CPU has {', '.join(native)}: bf16 matmuls run natively" if bf16 else
                  "CPU has no amx_bf16/avx512_bf16/bf16: bf16 would be emulated, slower than fp32")
    else:
        bf16, reason = probe_bf16(cache)
    return Hardware("cpu", platform.processor() or platform.machine(), None, reported, cores, _memory_gib(),
                    bf16, reason)


def _has_flash_attention() -> bool:
    try:
        from transformers.utils import is_flash_attn_2_available
        return bool(is_flash_attn_2_available())
    except ImportError:
        return False


def probe_bf16(cache: Path | None = None) -> tuple[bool, str]:
    """Time a bf16 against an fp32 matmul once per machine (cached): for CPUs whose flags we cannot read."""
    from mint.workspace import atomic_write_json, cache_dir

    import torch

    machine = f"{platform.machine()}|{platform.processor()}|{os.cpu_count()}|torch {torch.__version__}"
    path = (cache or cache_dir() / "hardware") / f"bf16-probe-{hashlib.sha256(machine.encode()).hexdigest()[:16]}.json"
    try:
        found = json.loads(path.read_text())
        return bool(found["bf16"]), str(found["reason"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    speedup = _matmul_speedup()
    bf16 = speedup >= PROBE_SPEEDUP
    reason = (f"no CPU flags to read; a timed probe found bf16 matmuls {speedup:.2f}x the speed of fp32 "
              f"(bf16 when >= {PROBE_SPEEDUP}x)")
    try:
        atomic_write_json(path, {"bf16": bf16, "reason": reason, "machine": machine})
    except OSError:
        pass   # an unwritable cache costs a probe next time, nothing else
    return bf16, reason


def _matmul_speedup(size: int = 512, repeats: int = 5) -> float:
    import time

    import torch

    def best(dtype) -> float:
        a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
        torch.mm(a, b)
        times = []
        for _ in range(repeats):
            began = time.perf_counter()
            torch.mm(a, b)
            times.append(time.perf_counter() - began)
        return min(times)

    return best(torch.float32) / max(best(torch.bfloat16), 1e-9)


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
        else:
            choices["packing"] = Choice(False, "without flash attention, packing was measured no faster on CPU and "
                                               "padding-free needs its variable-length kernels")
            # TRL supports length-grouped batches (train_sampling_strategy="group_by_length"), but its sampler
            # puts the longest batch first and reorders every epoch's examples, which bends the loss curve
            # the demo and tests compare; it stays an opt-in (--set train_sampling_strategy=group_by_length)
            choices["train_sampling_strategy"] = Choice(
                "random", "shuffled batches padded to their longest row; length grouping changes the example "
                          "order (longest first) and is opt-in")
    workers = 0 if hardware.device == "cpu" else min(4, max(0, hardware.cores // 4))
    choices["dataloader_num_workers"] = Choice(
        workers, "collating text is cheap; on a CPU a worker process would take cores from the matmuls"
        if hardware.device == "cpu" else f"{workers} workers keep the GPU fed ({hardware.cores} cores)")
    return TrainingPlan(hardware, choices)


def reconcile(settings: dict[str, Any], user: dict[str, Any]) -> dict[str, Any]:
    """A user's fp16 (or bf16) replaces mint's other half-precision choice instead of clashing with it."""
    for ours, theirs in (("bf16", "fp16"), ("fp16", "bf16")):
        if user.get(theirs) is True and ours not in user:
            settings = {**settings, ours: False}
    return settings


def torch_threads(hardware: Hardware) -> Choice:
    """Intra-op threads: one per core this process may use (torch counts the machine's, which
    oversubscribes under a CPU affinity mask or a container limit)."""
    return Choice(hardware.cores, f"{hardware.cores} cores available to this process")


def apply_threads(choice: Choice) -> None:
    import torch

    if torch.get_num_threads() != choice.value:
        torch.set_num_threads(int(choice.value))
