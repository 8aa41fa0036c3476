"""Reliability suite 4: tampered revisions and reports are refused by everything that uses them.

Run: python scripts/reliability_tamper.py [--flips N] [--seed N] [--quick]

Two real LoRA revisions of the tiny random base are registered: chat:v1 (the champion) and chat:v2 (a
candidate with a registered passing report measured against v1). For every file of chat:v2 (adapter weights,
adapter config, README, mint.json) the suite flips one byte (at --flips seeded positions), truncates it,
deletes it and swaps it with chat:v1's file of the same name; it also adds files to the revision (a pickle
adapter, a note) and swaps the two revision directories whole. Each tampering is applied to a fresh copy of
the workspace, and then each consumer must refuse it with a MintError (a message, no traceback):

- load:    `load_revision` (what `mint chat`, `mint eval`, `train --from` and export use to load an adapter);
- serve:   the mixture runtime's hot swap (`sync_champions`, which `mint serve` and `mint chat` poll) after
           the intact chat:v2 was promoted and then tampered with on disk;
- promote: `promote chat:v2` with its passing report;
- verify:  `mint registry verify` (reports a problem naming the revision).

A registered report edited after `mint eval` (one byte flipped, truncated) must be refused by promote. Dataset
versions carry a hash (their name): each version's episodes.jsonl and superseded.txt are flipped, truncated,
deleted and swapped, and reading the dataset (what train, experience and router training do) must refuse.
Controls (no tampering) must pass every consumer, or the figure is void. The figure (printed last) is the
tampered cases tried and refused; goal 100%.
"""
from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mint.errors import MintError  # noqa: E402

CONTRACT = {"name": "chat-tamper", "version": 1, "sha256": "ab" * 32}
EXAMPLES = "cd" * 32


def make_lora(path: Path, seed: int) -> Path:
    """A PEFT LoRA of the tiny base with random non-zero weights, saved as safetensors."""
    import torch
    from peft import LoraConfig, get_peft_model

    from mint.base import TINY, load_base

    torch.manual_seed(seed)
    model = get_peft_model(load_base(TINY).model, LoraConfig(r=2, lora_alpha=4, target_modules=["q_proj", "v_proj"],
                                                             init_lora_weights=False))
    model.save_pretrained(path)
    return path


def write_report(root: Path, home: Path, revision, baseline: str | None) -> Path:
    """A passing report of ``revision`` measured against ``baseline``, registered as `mint eval` does."""
    from mint.registry import store
    from mint.registry.promotion import read_report, record_report
    from mint.workspace import workspace

    path = root / f"report-{revision.ref.replace(':', '-')}.json"
    path.write_text(json.dumps({"revision": revision.ref, "revision_id": revision.id, "contract": CONTRACT,
                                "baseline": {"revision_id": baseline}, "metrics": {}, "gates": [],
                                "verdict": "pass", "examples_sha256": EXAMPLES, "source": "generated",
                                "created_at": store.now()}))
    conn = store.open_store(workspace(home))
    try:
        record_report(conn, read_report(path))
    finally:
        conn.close()
    return path


@dataclass(frozen=True)
class Pristine:
    root: Path           # holds home/ (the workspace) and the reports
    champion: str        # chat:v1's id
    candidate: str       # chat:v2's id


def build(root: Path) -> Pristine:
    """chat:v1 champion, chat:v2 candidate with a registered passing report against it."""
    from mint.registry.artifacts import register
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    home = root / "home"
    ws = workspace(home)
    v1 = register(ws, make_lora(root / "lora-1", seed=1), specialist="chat", base="tiny-random", method="sft")
    v2 = register(ws, make_lora(root / "lora-2", seed=2), specialist="chat", base="tiny-random", method="sft")
    write_report(root, home, v1, baseline=None)
    promote(ws, v1.ref, force=True, why="suite setup")
    write_report(root, home, v2, baseline=v1.id)
    from mint.data.ingest import ingest
    from mint.project import DEFAULT_PROJECT

    for source in ("app_openai.jsonl", "chat_sharegpt.json"):   # two versions of one dataset
        ingest(ws, [ROOT / "examples" / "logs" / source], dataset="logs", project=DEFAULT_PROJECT, workers=0)
    return Pristine(root, v1.id, v2.id)


# --- tamperings: each takes the workspace home and the two revision ids, changes the files on disk ------------

def flip(name: str, position: float):
    def apply(home: Path, champion: str, candidate: str) -> None:
        path = home / "adapters" / candidate / name
        data = bytearray(path.read_bytes())
        data[int(position * len(data))] ^= 0x01
        path.write_bytes(bytes(data))
    return f"flip {name} @{position:.2f}", apply


def truncate(name: str):
    def apply(home: Path, champion: str, candidate: str) -> None:
        path = home / "adapters" / candidate / name
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return f"truncate {name}", apply


def delete(name: str):
    def apply(home: Path, champion: str, candidate: str) -> None:
        (home / "adapters" / candidate / name).unlink()
    return f"delete {name}", apply


def swap(name: str):
    def apply(home: Path, champion: str, candidate: str) -> None:
        a, b = home / "adapters" / champion / name, home / "adapters" / candidate / name
        data = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(data)
    return f"swap {name} with chat:v1's", apply


def add(name: str, content: bytes):
    def apply(home: Path, champion: str, candidate: str) -> None:
        (home / "adapters" / candidate / name).write_bytes(content)
    return f"add {name}", apply


def swap_directories():
    def apply(home: Path, champion: str, candidate: str) -> None:
        adapters = home / "adapters"
        (adapters / candidate).rename(adapters / "swap")
        (adapters / champion).rename(adapters / candidate)
        (adapters / "swap").rename(adapters / champion)
    return "swap the directories of chat:v1 and chat:v2", apply


def tamperings(pristine: Pristine, flips: int, rng: random.Random) -> list:
    adapters = pristine.root / "home" / "adapters"
    names = sorted(p.name for p in (adapters / pristine.candidate).iterdir() if p.is_file())
    cases = []
    for name in names:
        cases += [flip(name, rng.random()) for _ in range(flips)]
        cases += [truncate(name), delete(name)]
        if (adapters / pristine.champion / name).read_bytes() != (adapters / pristine.candidate / name).read_bytes():
            cases.append(swap(name))   # swapping identical files changes nothing: not a tampering
    cases += [add("adapter_model.bin", b"\x80\x04K\x01."), add("notes.txt", b"hello"), swap_directories()]
    return cases


# --- consumers: each returns None when it refused with a MintError, else what it did instead --------------

def refused(action) -> str | None:
    try:
        action()
    except MintError as exc:
        return None if str(exc) else "refused without a message"
    except Exception as exc:  # noqa: BLE001 - a crash is not a refusal: reported as a failure
        return f"crashed: {type(exc).__name__}: {exc}"
    return "accepted"


def consumers(home: Path, pristine: Pristine, runtime) -> dict:
    from mint.registry.artifacts import load_revision
    from mint.registry.maintenance import verify
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    ws = workspace(home)
    report = pristine.root / "report-chat-v2.json"

    def verify_refuses():
        result = verify(ws)
        if not result.ok:
            raise MintError("; ".join(p["problem"] for p in result.problems))

    def serve_refuses():   # a champion that fails to load is kept out of its slot and reported, not raised
        runtime.clear("chat")
        runtime.sync_champions(ws)
        if "chat" in runtime.sync_errors:
            raise MintError(runtime.sync_errors["chat"])

    return {"load": lambda: load_revision(ws, "chat:v2"), "promote": lambda: promote(ws, "chat:v2",
                                                                                         report_path=report),
            "verify": verify_refuses, "serve": serve_refuses}


def copy_workspace(pristine: Pristine, target: Path) -> Path:
    home = target / "home"
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(pristine.root / "home", home)
    return home


def run_case(pristine: Pristine, scratch: Path, tamper, runtime) -> dict[str, str | None]:
    """Per consumer: None (refused) or what went wrong. ``tamper`` None: the control, which must be accepted."""
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    outcomes = {}
    for consumer in ("load", "promote", "verify", "serve"):
        home = copy_workspace(pristine, scratch)
        if consumer == "serve":   # promoted while intact, tampered with on disk afterwards
            promote(workspace(home), "chat:v2", report_path=pristine.root / "report-chat-v2.json")
        if tamper is not None:
            tamper(home, pristine.champion, pristine.candidate)
        outcome = refused(consumers(home, pristine, runtime)[consumer])
        if tamper is None:   # the control: anything but "accepted" is a false alarm
            outcome = None if outcome == "accepted" else f"intact revision refused: {outcome}"
        outcomes[consumer] = outcome
    return outcomes


def dataset_tamperings(pristine: Pristine, flips: int, rng: random.Random) -> list:
    """Each version's episodes.jsonl and superseded.txt: flipped bytes, truncated, deleted; the two versions'
    episodes swapped."""
    from mint.data.datasets import chain, read_head

    directory = pristine.root / "home" / "datasets" / "logs"
    versions = chain(directory, read_head(directory))
    cases = []

    def edit(label, version, name, change):
        def apply(home: Path) -> None:
            path = home / "datasets" / "logs" / version / name
            change(path)
        return f"{label} {version}/{name}", apply

    def flipper(position):
        def change(path):
            data = bytearray(path.read_bytes())
            data[int(position * len(data))] ^= 0x01
            path.write_bytes(bytes(data))
        return change

    for version in versions:
        for name in ("episodes.jsonl", "superseded.txt"):
            if (directory / version / name).stat().st_size:
                cases += [edit(f"flip @{p:.2f}", version, name, flipper(p)) for p in
                          (rng.random() for _ in range(flips))]
                cases.append(edit("truncate", version, name,
                                  lambda path: path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])))
            cases.append(edit("delete", version, name, lambda path: path.unlink()))

    def swap_episodes(home: Path) -> None:
        a, b = (home / "datasets" / "logs" / v / "episodes.jsonl" for v in versions[:2])
        data = a.read_bytes()
        a.write_bytes(b.read_bytes())
        b.write_bytes(data)
    cases.append(("swap episodes.jsonl of the two versions", swap_episodes))
    return cases


def dataset_refused(home: Path) -> str | None:
    """What training, experience and router training read: every episode of the dataset's head."""
    from mint.data.datasets import iter_episodes
    from mint.workspace import workspace

    return refused(lambda: sum(1 for _ in iter_episodes(workspace(home), "logs")))


def report_cases(pristine: Pristine, scratch: Path) -> dict[str, str | None]:
    """A registered report edited afterwards: promote must refuse it."""
    from mint.registry.promotion import promote
    from mint.workspace import workspace

    outcomes = {}
    def flip_middle(data: bytes) -> bytes:
        middle = len(data) // 2
        return data[:middle] + bytes([data[middle] ^ 0x01]) + data[middle + 1:]

    for label, edit in (("flip a byte of the report", flip_middle),
                        ("truncate the report", lambda b: b[: len(b) // 2]),
                        ("add a metric to the report", lambda b: b.replace(b'"metrics": {}', b'"metrics": {"x": 1}')),
                        ("re-point the report's baseline", lambda b: b.replace(pristine.champion.encode(),
                                                                               pristine.candidate.encode()))):
        home = copy_workspace(pristine, scratch)
        report = scratch / "report.json"
        report.write_bytes(edit((pristine.root / "report-chat-v2.json").read_bytes()))
        outcomes[label] = refused(lambda: promote(workspace(home), "chat:v2", report_path=report))
    return outcomes


def run_suite(root: Path, flips: int, seed: int) -> tuple[int, list[str], list[str]]:
    """(cases tried, failures: cases not refused, control failures)."""
    from mint.base import TINY, load_base
    from mint.mol.runtime import MixtureRuntime

    pristine = build(root / "pristine")
    runtime = MixtureRuntime(load_base(TINY), ["chat"], max_rank=8)
    scratch = root / "case"
    controls = [f"control {c}: {o}" for c, o in run_case(pristine, scratch, None, runtime).items() if o]
    tried, failures = 0, []
    for label, tamper in tamperings(pristine, flips, random.Random(seed)):
        for consumer, outcome in run_case(pristine, scratch, tamper, runtime).items():
            tried += 1
            if outcome:
                failures.append(f"{label} -> {consumer}: {outcome}")
    for label, outcome in report_cases(pristine, scratch).items():
        tried += 1
        if outcome:
            failures.append(f"{label} -> promote: {outcome}")
    control = dataset_refused(copy_workspace(pristine, scratch))
    if control != "accepted":
        controls.append(f"control dataset read: {control}")
    for label, tamper in dataset_tamperings(pristine, flips, random.Random(seed)):
        home = copy_workspace(pristine, scratch)
        tamper(home)
        tried += 1
        outcome = dataset_refused(home)
        if outcome:
            failures.append(f"dataset: {label} -> read: {outcome}")
    return tried, failures, controls


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flips", type=int, default=8, help="byte flips per file, at seeded positions")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="one byte flip per file")
    args = parser.parse_args(argv)
    if args.quick:
        args.flips = 1
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mint-tamper-") as tmp:
        tried, failures, controls = run_suite(Path(tmp), args.flips, args.seed)
    for line in controls + failures:
        print(f"  {line}")
    refused_count = tried - len(failures)
    rate = refused_count / max(1, tried)
    ok = not failures and not controls
    print(f"{tried} tampered cases in {time.perf_counter() - started:.0f} s; controls "
          f"{'accepted' if not controls else 'FAILED'}")
    print(f"FIGURE tamper: tried={tried} refused={refused_count} rate={rate:.1%} goal=100% "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
