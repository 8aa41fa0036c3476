"""Router accuracy per layer: rules alone, the probe alone and the whole router (rules, then the probe).

Run: python scripts/bench_router.py            (SmolLM2-135M, layers 4..20 every 2, 15 and 10+15; minutes on a quiet machine)
     python scripts/bench_router.py --quick    (SmolLM2-135M, layers 10, 15 and 10+15 only)
     python scripts/bench_router.py --layers "6;15;10,15" --sets heldout,validation --json

Trains a probe per layer (or group of layers, `10,15`: their pooled states side by side) on what
`mint train --specialist router` learns from (the labelled episodes of examples/logs, less possible keyword
guesses, plus HumanEval's plain-word task descriptions and mint's plain turns, mint/routing/plain_turns/) and
judges it on:
  heldout     examples/heldout through contracts/router.yaml (the true specialist is the file's)
  validation  a seeded fifth of the logs' training turns, held back from a second probe fitted on the rest
  crossfit    each plain set (set1, set2, set3) routed by a probe that learnt from the others only
  everyday3   tests/routing/data/everyday_turns_3.jsonl: plain turns never trained on, written before plain set 2
              became training data and kept from repeating the plain sets (plain set 3 added, after it
              routed 0.925, the kind of turn it missed most: coding concepts, "what are promises")
  everyday4   tests/routing/data/everyday_turns_4.jsonl: 120 more, written before plain set 3 and never tuned on
              (0.950 before set 3); measure both last
The features pool the last user message inside its templated prompt, as `mint train --specialist router`
trains them (`--reads turn`: that message alone, as probes saved before did).
Prints accuracy and per-specialist recall for each, also for the rules alone and for a project without a
router champion (the keywords, then the starter probe fitted on the plain turns alone); the probe's settings (l2, the plain turns' weight, the
tool-use prior) were chosen on heldout and crossfit.
The features of every layer come from one forward pass.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EVERYDAY = {f"everyday{n}": REPO / "tests" / "routing" / "data" / f"everyday_turns_{n}.jsonl" for n in (3, 4)}
SETS = ("heldout", "validation", "crossfit", *EVERYDAY)


def read_everyday(path: Path) -> list[tuple[str, str, bool]]:
    """(true specialist, turn, carries tools) for each line of an everyday set."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                rows.append((record["specialist"], record["messages"][-1]["content"], False))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="layers 10, 15 and 10+15 only")
    parser.add_argument("--layers", help="semicolon-separated layer groups, e.g. '6;15;10,15'")
    parser.add_argument("--sets", default=",".join(SETS), help=f"comma-separated, of {', '.join(SETS)}")
    parser.add_argument("--augment", default="humaneval,plain", help="none, or of humaneval,plain (the default)")
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--reads", default="prompt", choices=("prompt", "turn"),
                        help="what the probe's features pool: the last user message inside its templated prompt "
                             "(what mint trains; the mixture routes inside the prefill) or that message alone "
                             "(probes saved before)")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    groups = ([tuple(int(x) for x in group.split(",")) for group in args.layers.split(";")] if args.layers else
              [(10,), (15,), (10, 15)] if args.quick else [*((n,) for n in sorted({*range(4, 21, 2), 15})), (10, 15)])
    sets = args.sets.split(",")
    if set(sets) - set(SETS):
        parser.error(f"--sets: unknown {sorted(set(sets) - set(SETS))}")

    import torch

    from mint.base import load_base
    from mint.data.ingest import ingest
    from mint.contract.schema import load_contract
    from mint.routing.router import (PLAIN_TURNS, PROMPT, Router, Rules, fit_probe, one_turn, probe_features,
                                 prompt_features_by_layer, score_routes, starter_router, turn_features_by_layer)
    from mint.errors import BadInput
    from mint.train.router import _augment, heldout_turns, router_training_set
    from mint.project import DEFAULT_PROJECT as project
    from mint.workspace import workspace

    try:
        augment = _augment(args.augment)
    except BadInput as exc:
        parser.error(str(exc))
    if "crossfit" in sets and "plain" not in augment:
        parser.error("--sets crossfit needs the plain turns in --augment")
    names = project.names
    contract = load_contract(REPO / "contracts" / "router.yaml")
    with tempfile.TemporaryDirectory(prefix="bench-router-") as home:
        ws = workspace(Path(home))
        ingest(ws, [REPO / "examples" / "logs"], dataset="prod", project=project, workers=0)
        training = router_training_set(ws, "prod", project, contract, augment=augment)
    texts, labels = training.texts, training.labels
    counts = {"possible_keyword_guesses": training.possible_keyword_guesses,
              "augmented_coding": training.augmented_coding, "augmented_plain": training.augmented_plain}
    # the public and plain turns come last and are never validated on
    logs = len(texts) - training.augmented_coding - training.augmented_plain
    fifth = set(random.Random(0).sample(range(logs), logs // 5))
    plain_sets = {path.stem: {t for _, t, _ in read_everyday(path)} for path in sorted(PLAIN_TURNS.glob("*.jsonl"))}
    plain_start = len(texts) - training.augmented_plain
    set_of = {i: next(name for name, turns in plain_sets.items() if texts[i] in turns)
              for i in range(plain_start, len(texts))}
    suites = {"heldout": heldout_turns(contract, names) if "heldout" in sets else [],
              "validation": [(labels[i], texts[i], training.tools[i]) for i in sorted(fifth)],
              "crossfit": [(labels[i], texts[i], False) for i in sorted(set_of)],
              **{name: read_everyday(path) for name, path in EVERYDAY.items() if name in sets}}
    suites = {name: rows for name, rows in suites.items() if name in sets}
    layers = sorted({n for group in groups for n in group})
    loaded = load_base(args.base)
    started = time.perf_counter()
    def by_layer(turns):
        if args.reads == PROMPT:
            return prompt_features_by_layer(loaded.model, loaded.tokenizer, [one_turn(t) for t in turns], layers)
        return turn_features_by_layer(loaded.model, loaded.tokenizer, turns, layers)

    features = {"train": by_layer(texts)}
    for suite, rows in suites.items():
        if suite not in ("validation", "crossfit"):
            features[suite] = by_layer([t for _, t, _ in rows])
    feature_seconds = time.perf_counter() - started
    rest = [i for i in range(len(texts)) if i not in fifth]
    features["validation"] = {n: table[sorted(fifth)] for n, table in features["train"].items()}
    features["crossfit"] = {n: table[sorted(set_of)] for n, table in features["train"].items()}

    def summary(score) -> dict:
        return {"accuracy": round(score.accuracy, 4), "recall": {k: round(v, 4) for k, v in score.recall.items()}}

    rules = Rules(project)
    result = {"base": args.base, "reads": args.reads, "train_examples": len(texts), **counts, "feature_seconds": round(feature_seconds, 1),
              "rules": {}, "layers": {}}
    for suite, rows in suites.items():
        predicted = [(rules.certain(t, tools) or rules.keywords(t)).specialist for _, t, tools in rows]
        result["rules"][suite] = summary(score_routes([r[0] for r in rows], predicted, names))
    # a project without a router champion: the keywords, then the starter probe (fitted on the plain turns alone,
    # so only the suites it never saw)
    def on_base(turns, layer, reads):
        return probe_features(loaded.model, loaded.tokenizer, turns, layer, reads)

    starter = starter_router(project, Router(project), loaded.model, on_base)
    result["starter"] = {}
    for suite, rows in suites.items():
        if suite in ("heldout", *EVERYDAY):
            routed = starter.route([[{"role": "user", "content": t}] for _, t, _ in rows], [x for *_, x in rows],
                                   on_base)
            result["starter"][suite] = summary(score_routes([r[0] for r in rows], [r.specialist for r in routed],
                                                            names))
    for group in groups:
        def fitted(indices):
            table = torch.cat([features["train"][n][indices] for n in group], dim=-1)
            return fit_probe(table, [labels[i] for i in indices], names, group[-1], shallower=group[:-1],
                             example_weights=[training.weights[i] for i in indices],
                             tools=[training.tools[i] for i in indices], tool_specialist=rules.tool_specialist,
                             reads=args.reads)

        everything = list(range(len(texts)))
        probes = {"all": fitted(everything), "rest": fitted(rest) if "validation" in suites else None,
                  **{name: fitted([i for i in everything if set_of.get(i) != name])
                     for name in plain_sets if "crossfit" in suites}}
        key = "+".join(map(str, group))
        result["layers"][key] = {}
        for suite, rows in suites.items():
            truth = [r[0] for r in rows]
            table = torch.cat([features[suite][n] for n in group], dim=-1)
            # a crossfit row is judged by the probe that never saw its plain set
            judges = ([probes[set_of[i]] for i in sorted(set_of)] if suite == "crossfit" else
                      [probes["rest" if suite == "validation" else "all"]] * len(rows))
            alone, routed = [], []
            for row, probe, features_row in zip(rows, judges, table):
                alone.append(names[probe.probabilities(features_row[None]).argmax(-1).item()])
                routed.append(Router(project, probe).route([[{"role": "user", "content": row[1]}]], [row[2]],
                                                           lambda *_: features_row[None])[0].specialist)
            result["layers"][key][suite] = {"probe": summary(score_routes(truth, alone, names)),
                                            "router": summary(score_routes(truth, routed, names))}
    if args.json:
        print(json.dumps(result))
        return 0

    def line(label: str, s: dict) -> str:
        recall = " ".join(f"{k}={v:.2f}" for k, v in s["recall"].items())
        return f"  {label:<18} {s['accuracy']:.3f}  ({recall})"

    print(f"{args.base}: {len(texts)} training turns ({counts['possible_keyword_guesses']} possible keyword guesses "
          f"weighted down, {counts['augmented_coding']} public coding requests and {counts['augmented_plain']} "
          f"plain turns added); features ({args.reads}) in "
          f"{feature_seconds:.0f} s")
    for suite in suites:
        print(line(f"rules, {suite}", result["rules"][suite]))
    for suite, score in result["starter"].items():
        print(line(f"starter, {suite}", score))
    for key, by_suite in result["layers"].items():
        print(f"layer {key}:")
        for suite, scores in by_suite.items():
            print(line(f"{suite} probe", scores["probe"]))
            print(line(f"{suite} router", scores["router"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
