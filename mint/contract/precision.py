"""A contract's decoding precision, fixed before anything is generated under it.

``harness.decoding.precision`` is part of the contract (its YAML is in the contract's hash). ``fp32``,
``bf16`` and ``int8`` are the contract's word. ``auto`` is resolved once per (contract hash, base
fingerprint, host) by measurement and kept in ``$MINT_HOME/precision/``: bf16 only where the hardware probe
finds bf16 faster at a decoding step's shape, and then only if the bare base decodes the contract's first
prompts at least ``AUTO_SPEEDUP`` times as fast in bf16 as in fp32 with greedy outputs that match fp32 on
``PARITY_MIN_AGREEMENT`` of them. Every generation compared under that contract on that host (a candidate,
its baseline, the champion measured as one) then decodes at the resolved precision, and each report records
it, so a paired comparison never mixes model quality with numerics.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

from mint.registry.report import Report
from mint.workspace import Workspace, atomic_write_json, file_lock

AUTO_SPEEDUP = 1.1            # bf16 must decode this much faster than fp32 to be worth a numerics change
PARITY_MIN_AGREEMENT = 0.75   # ... and match fp32's greedy outputs on at least this share of the prompts


@dataclass(frozen=True)
class DecodingPrecision:
    requested: str                  # the contract's harness.decoding.precision
    used: str                       # fp32, bf16 or int8: what every generation under the contract runs at
    reason: str
    resolution: dict | None = None  # auto: the host, the figures measured and when (the cached record)

    def record(self) -> dict:
        return asdict(self)


def host(hardware) -> dict:
    """What an ``auto`` resolution depends on besides the contract and the base: the device and its flags."""
    return {"device": hardware.device, "device_name": hardware.device_name, "cpu_flags": list(hardware.cpu_flags),
            "cores": hardware.cores}


def resolution_path(ws: Workspace, contract, fingerprint: str, machine: dict) -> Path:
    key = hashlib.sha256(json.dumps([contract.sha256, fingerprint, machine], sort_keys=True).encode()).hexdigest()
    return ws.home / "precision" / f"{contract.name}-v{contract.version}-{key[:16]}.json"


def decoding_precision(ws: Workspace, contract, fingerprint: Callable[[], str], bare_base: Callable[[], object],
                       conversations: Callable[[], list], *, hardware=None) -> DecodingPrecision:
    """The precision every generation under ``contract`` decodes at on this host. ``fingerprint()`` gives the
    base's fingerprint (called for ``auto`` only: a contract that names its precision loads nothing here),
    ``bare_base()`` the loaded base without an adapter and ``conversations()`` the suites' conversations in
    order; those two only when ``auto`` is measured (the first time on this host for this base and contract)."""
    requested = contract.settings.precision
    if requested != "auto":
        return DecodingPrecision(requested, requested, f"the contract asks for {requested}")
    from mint import hardware as machine_probe

    found = hardware or machine_probe.detect()
    machine = host(found)
    base_fingerprint = fingerprint()
    path = resolution_path(ws, contract, base_fingerprint, machine)
    path.parent.mkdir(parents=True, exist_ok=True)
    # one resolution per key even when two evaluations start together: the second reads the first's
    with file_lock(path.with_name(path.name + ".lock")):
        cached = _read(path)
        if cached is not None:
            return DecodingPrecision("auto", cached["used"], cached["reason"], cached)
        used, reason, figures = _measure(found, bare_base, conversations, contract)
        from mint.registry import store

        record = {"used": used, "reason": reason, "contract": contract.ref, "base_fingerprint": base_fingerprint,
                  "host": machine, "figures": figures, "resolved_at": store.now()}
        atomic_write_json(path, record)
    return DecodingPrecision("auto", used, reason, record)


def _read(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if isinstance(data, dict) and data.get("used") in ("fp32", "bf16") and isinstance(data.get("reason"), str):
        return data
    return None   # a damaged record is measured again


def _measure(found, bare_base, conversations, contract) -> tuple[str, str, dict]:
    from mint import hardware as machine_probe
    from mint.generation.engine import compare_precisions
    from mint.harness import answer_ends

    plan = machine_probe.decoding_plan(found)
    figures = {"probe": {"decoding": (found.probe or {}).get("decoding"), "bf16": plan["bf16"].reason}}
    if not plan["bf16"].value:
        return "fp32", f"auto: {plan['bf16'].reason}", figures
    loaded = bare_base()
    measured = compare_precisions(loaded.model, loaded.tokenizer, conversations(), contract.settings,
                                  answer_ends(contract.harness_name, contract.settings))
    figures["model"] = measured
    parity, speedup = measured["parity"], measured["speedup"]
    said = (f"auto: on the bare base, bf16 decoded the contract's first {parity['examples']} prompts at "
            f"{speedup:.2f}x fp32's tokens/s and matched fp32 on {parity['identical']}/{parity['examples']}")
    if speedup < AUTO_SPEEDUP:
        return "fp32", f"{said} (bf16 needs >= {AUTO_SPEEDUP}x)", figures
    if parity["agreement"] < PARITY_MIN_AGREEMENT:
        return "fp32", f"{said} (bf16 needs >= {PARITY_MIN_AGREEMENT:.0%} identical)", figures
    return "bf16", said, figures


def report_precision(report: Report) -> str | None:
    """The precision a report's outputs were generated at: its ``precision`` record, or for a report made
    before contracts fixed it, the one precision all its suites were generated at (None if they differ)."""
    recorded = report.precision
    if isinstance(recorded, dict) and isinstance(recorded.get("used"), str):
        return recorded["used"]
    generation = report.generation
    if isinstance(generation, dict):
        used = {g.get("precision") for g in generation.values() if isinstance(g, dict)}
        if len(used) == 1:
            return used.pop()
    return None
