"""A contract's model judge on its calibration set: the agreement and flip rate `mint eval` measures before the
judge's verdicts count (and the score agreement, where the contract's judge rates answers), and whether it is
refused; with --local, the evaluation's base as the judge (mint's
engine, greedy, held to the verdict's JSON shape), whatever endpoint the contract names.

Run:   python scripts/bench_judge.py --local --base smollm2-135m          (contracts/chat-judged.yaml's pairs)
       python scripts/bench_judge.py --contract FILE [--base NAME] [--local]

Printed (one JSON object): the judge, the pairs, agreement, flip rate, the floor and the verdict (refused or
not), how often each verdict was given with the better answer shown first and shown second, the seconds the
calls took, and the host's CPU flags. Every call is made afresh (the verdict cache is a temporary workspace's).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def cpu_flags() -> list[str]:
    wanted = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return [flag for flag in line.split(":", 1)[1].split() if flag in wanted]
    except OSError:
        pass
    return []


def main() -> None:
    from mint.contract.judge import (
        CACHE_FILE,
        JudgeSession,
        LocalJudge,
        ServerJudge,
        VerdictCache,
        calibrate,
        calibration_prompts,
        endpoint_text,
    )
    from mint.contract.judge_schema import LOCAL, JudgeEndpoint
    from mint.contract.schema import load_contract

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contract", type=Path, default=ROOT / "contracts" / "chat-judged.yaml")
    parser.add_argument("--base", default="smollm2-135m", help="the base a local judge runs on")
    parser.add_argument("--local", action="store_true", help="judge with --base on mint's engine")
    args = parser.parse_args()
    spec = load_contract(args.contract).judge
    if spec is None:
        raise SystemExit(f"{args.contract} names no judge")
    if args.local:
        spec = dataclasses.replace(spec, endpoint=JudgeEndpoint(LOCAL))
    key = os.environ.get(spec.endpoint.api_key_env) if spec.endpoint.api_key_env else None
    asker = LocalJudge(spec, args.base) if spec.endpoint.kind == LOCAL else ServerJudge(spec, key)
    with tempfile.TemporaryDirectory() as home:
        session = JudgeSession(spec, asker, VerdictCache(Path(home) / CACHE_FILE), endpoint_text(spec, args.base))
        if isinstance(asker, LocalJudge):
            asker.loaded       # loaded before the clock starts
        started = time.perf_counter()
        calibration = calibrate(session, rates=spec.scale is not None)
        seconds = time.perf_counter() - started
        keys = [session.call_key(p) for p in calibration_prompts(spec)]
        said = [session.cache.get(k) for k in keys]
        session.close()
    print(json.dumps({"judge": session.label, "contract": str(args.contract), **calibration.to_dict(),
                      "refused": not calibration.passed,
                      "verdicts_better_first": dict(Counter(said[0::2])),
                      "verdicts_better_second": dict(Counter(said[1::2])),
                      "seconds": round(seconds, 1), "calls": len(keys), "cpu_flags": cpu_flags()}, indent=2))


if __name__ == "__main__":
    main()
