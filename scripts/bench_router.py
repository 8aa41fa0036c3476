"""Router accuracy per layer: rules alone, the probe alone and the whole router (rules, then the probe).

Run: python scripts/bench_router.py            (SmolLM2-135M, layers 4..20 every 2; minutes on a quiet machine)
     python scripts/bench_router.py --quick    (SmolLM2-135M, layers 8, 12 and 15 only)
     python scripts/bench_router.py --layers 6,9,15 --json

Trains a probe per layer on the labelled episodes of examples/logs (as `mint train --specialist router`
does) and judges it on examples/heldout (the true specialist is the file's, through contracts/router.yaml)
and on tests/mol/data/everyday_turns.jsonl (turns in everyday words, never trained on). Prints accuracy and
per-specialist recall for each. The features of every layer come from one forward pass.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

EVERYDAY = REPO / "tests" / "mol" / "data" / "everyday_turns.jsonl"


def read_everyday(path: Path = EVERYDAY) -> list[tuple[str, str, bool]]:
    """(true specialist, turn, carries tools) for each line of the everyday set."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                record = json.loads(line)
                rows.append((record["specialist"], record["messages"][-1]["content"], False))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="layers 8, 12 and 15 only")
    parser.add_argument("--layers", help="comma-separated layers (default 4..20 every 2, and 15)")
    parser.add_argument("--base", default="smollm2-135m")
    parser.add_argument("--json", action="store_true", help="one JSON object instead of the table")
    args = parser.parse_args()
    layers = ([int(x) for x in args.layers.split(",")] if args.layers else
              [8, 12, 15] if args.quick else sorted({*range(4, 21, 2), 15}))

    from mint.base import load_base
    from mint.data.datasets import iter_episodes
    from mint.data.ingest import ingest
    from mint.mol.router import Router, Rules, fit_probe, last_user_text, score_routes, turn_features_by_layer
    from mint.mol.router_training import load_router_contract, read_heldout
    from mint.project import DEFAULT_PROJECT as project
    from mint.workspace import workspace

    names = project.names
    with tempfile.TemporaryDirectory(prefix="bench-router-") as home:
        ws = workspace(Path(home))
        ingest(ws, [REPO / "examples" / "logs"], dataset="prod", project=project, workers=0)
        train = [(e["specialist"], last_user_text(e["messages"])) for e in iter_episodes(ws, "prod")
                 if e["specialist"] in names and last_user_text(e["messages"]).strip()]
    suites = {"heldout": read_heldout(load_router_contract(REPO / "contracts" / "router.yaml", names)),
              "everyday": read_everyday()}
    loaded = load_base(args.base)
    started = time.perf_counter()
    features = {"train": turn_features_by_layer(loaded.model, loaded.tokenizer, [t for _, t in train], layers)}
    for suite, rows in suites.items():
        features[suite] = turn_features_by_layer(loaded.model, loaded.tokenizer, [t for _, t, _ in rows], layers)
    feature_seconds = time.perf_counter() - started

    def summary(score) -> dict:
        return {"accuracy": round(score.accuracy, 4), "recall": {k: round(v, 4) for k, v in score.recall.items()}}

    rules = Rules(project)
    result = {"base": args.base, "train_examples": len(train), "feature_seconds": round(feature_seconds, 1),
              "rules": {}, "layers": {}}
    for suite, rows in suites.items():
        predicted = [(rules.certain(t, tools) or rules.keywords(t)).specialist for _, t, tools in rows]
        result["rules"][suite] = summary(score_routes([r[0] for r in rows], predicted, names))
    for layer in layers:
        probe = fit_probe(features["train"][layer], [label for label, _ in train], names, layer)
        result["layers"][layer] = {}
        for suite, rows in suites.items():
            truth = [r[0] for r in rows]
            table = features[suite][layer]
            alone = [names[i] for i in probe.probabilities(table).argmax(-1).tolist()]
            index = {text: i for i, (_, text, _) in enumerate(rows)}
            routes = Router(project, probe).route([[{"role": "user", "content": t}] for _, t, _ in rows],
                                                  [tools for *_, tools in rows],
                                                  lambda texts, _layer: table[[index[t] for t in texts]])
            result["layers"][layer][suite] = {"probe": summary(score_routes(truth, alone, names)),
                                              "router": summary(score_routes(truth, [r.specialist for r in routes],
                                                                             names))}
    if args.json:
        print(json.dumps(result))
        return 0

    def line(label: str, s: dict) -> str:
        recall = " ".join(f"{k}={v:.2f}" for k, v in s["recall"].items())
        return f"  {label:<8} {s['accuracy']:.3f}  ({recall})"

    print(f"{args.base}: {len(train)} training turns; features for all layers in {feature_seconds:.0f} s")
    for suite in suites:
        print(f"rules alone, {suite}:\n" + line("rules", result["rules"][suite]))
    for layer, by_suite in result["layers"].items():
        print(f"layer {layer}:")
        for suite, scores in by_suite.items():
            print(line(f"{suite[:5]} probe", scores["probe"]).replace("  ", " ", 1))
            print(line(f"{suite[:5]} router", scores["router"]).replace("  ", " ", 1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
