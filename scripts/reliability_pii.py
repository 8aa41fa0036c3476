"""Reliability suite 5: recall and precision of mint's PII and secret scrubber, per type.

Run: python scripts/reliability_pii.py [--quick] [--seed N] [--split dev|heldout|both]

Labelled sets: tests/data/pii_reliability_dev.jsonl (scrub.py was tuned on it) and
tests/data/pii_reliability_heldout.jsonl (different sentence templates, partly different national formats;
measured only at the end, never tuned on). Each line is {"text", "pii": [{"type", "value"}]}; a line with no
pii is a look-alike (order numbers, versions, timestamps, hashes, UUIDs, prices, ISBNs, tracking numbers,
ports, math) that must come through unchanged.

A finding is a true positive when its value is gone from the scrubbed text and its type's placeholder is
there; a placeholder beyond the true positives of its type is a false positive. Goals, overall on each split:
recall >= 0.99 and precision >= 0.95. Per-type figures are printed; the figure line is last.
"""
from __future__ import annotations

import argparse
import json
import random
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from mint.data.scrub import scrub_text  # noqa: E402

SETS = {"dev": ROOT / "tests" / "data" / "pii_reliability_dev.jsonl",
        "heldout": ROOT / "tests" / "data" / "pii_reliability_heldout.jsonl"}
RECALL_GOAL, PRECISION_GOAL = 0.99, 0.95


def read_set(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def score(items: list[dict]) -> tuple[dict[str, Counter], list[str]]:
    """Per type: tp, fn, fp counts; and one line per mistake (what was missed or wrongly replaced)."""
    scores: dict[str, Counter] = {}
    mistakes = []
    for item in items:
        counts: Counter = Counter()
        scrubbed = scrub_text(item["text"], counts)
        found: Counter = Counter()
        for pii in item["pii"]:
            kind = pii["type"]
            scores.setdefault(kind, Counter())
            if pii["value"] not in scrubbed and f"[{kind}]" in scrubbed:
                scores[kind]["tp"] += 1
                found[kind] += 1
            else:
                scores[kind]["fn"] += 1
                mistakes.append(f"missed {kind}: {item['text']!r} -> {scrubbed!r}")
        for kind, n in counts.items():
            extra = max(0, n - found[kind])
            if extra:
                scores.setdefault(kind, Counter())["fp"] += extra
                mistakes.append(f"false {kind}: {item['text']!r} -> {scrubbed!r}")
    return scores, mistakes


def rates(counts: Counter) -> tuple[float, float]:
    tp, fn, fp = counts["tp"], counts["fn"], counts["fp"]
    return tp / max(1, tp + fn), tp / max(1, tp + fp)


def render(split: str, items: list[dict], scores: dict[str, Counter]) -> tuple[float, float]:
    total = sum(scores.values(), Counter())
    recall, precision = rates(total)
    print(f"{split}: {len(items)} strings, {sum(1 for i in items if not i['pii'])} look-alikes")
    print(f"  {'type':<14} {'tp':>4} {'fn':>4} {'fp':>4} {'recall':>7} {'precision':>9}")
    for kind in sorted(scores):
        r, p = rates(scores[kind])
        mark = "" if r >= RECALL_GOAL and p >= PRECISION_GOAL else "  <- below goal"
        print(f"  {kind:<14} {scores[kind]['tp']:>4} {scores[kind]['fn']:>4} {scores[kind]['fp']:>4} "
              f"{r:>7.3f} {p:>9.3f}{mark}")
    print(f"  {'overall':<14} {total['tp']:>4} {total['fn']:>4} {total['fp']:>4} {recall:>7.3f} {precision:>9.3f}")
    return recall, precision


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=("dev", "heldout", "both"), default="both")
    parser.add_argument("--quick", action="store_true", help="a random fifth of each split")
    parser.add_argument("--seed", type=int, default=0, help="which fifth --quick draws")
    parser.add_argument("--show", action="store_true", help="print every miss and false alarm")
    args = parser.parse_args(argv)
    splits = ("dev", "heldout") if args.split == "both" else (args.split,)
    rng = random.Random(args.seed)
    figures, ok = [], True
    for split in splits:
        items = read_set(SETS[split])
        if args.quick:
            items = rng.sample(items, max(1, len(items) // 5))
        scores, mistakes = score(items)
        if args.show:
            for line in mistakes:
                print(f"  {line}")
        recall, precision = render(split, items, scores)
        ok &= recall >= RECALL_GOAL and precision >= PRECISION_GOAL
        figures.append(f"{split}_recall={recall:.3f} {split}_precision={precision:.3f}")
    print(f"FIGURE pii: {' '.join(figures)} goal=recall>={RECALL_GOAL},precision>={PRECISION_GOAL} "
          f"{'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
