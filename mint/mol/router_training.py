"""Train the router's probe from a dataset's labelled episodes, register it, and judge it by its contract.

``mint train --specialist router --data D`` lands here. The contract (``contracts/router.yaml``) names
held-out files whose true specialist is the file's, not a keyword guess; the whole router (rules, then the
probe) routes each held-out turn, and the report records accuracy, per-specialist recall, the confusion
matrix and the held-out distribution (``mint monitor`` compares live traffic with it). The report is
registered, so ``mint promote router:vN`` promotes the router like any specialist.
"""
from __future__ import annotations

import hashlib
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from mint.errors import BadInput
from mint.mol.router import ROUTER, Probe, Router, fit_probe, last_user_text, score_routes, turn_features
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
    routes = router.route([[{"role": "user", "content": text}] for _t, text, _h in rows], [h for *_x, h in rows],
                          lambda texts, layer: turn_features(model, tokenizer, texts, layer))
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


def _settings(sets: list[str]) -> dict:
    settings = {}
    for item in sets:
        key, sep, value = item.partition("=")
        if not sep or key not in ("layer", "contract", "l2"):
            raise BadInput(f"{item!r}: the router takes layer=N, l2=X and contract=FILE", field="--set")
        settings[key] = value
    try:
        layer = int(settings["layer"]) if "layer" in settings else None
        l2 = float(settings.get("l2", 1e-3))
    except ValueError:
        raise BadInput("layer is a whole number and l2 a number", field="--set") from None
    return {"layer": layer, "l2": l2, "contract": Path(settings["contract"]) if "contract" in settings else None}


def train_router(ws: Workspace, *, data: str | None, base: str | None = None, sets: list[str] | None = None,
                 project: Project | None = None):
    """Fit the probe on ``data``'s labelled episodes, register ``router:vN``, evaluate it under its contract."""
    from mint.base import load_base
    from mint.data.datasets import iter_episodes
    from mint.mol.router import default_layer
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
    name, _, version = data.partition("@")
    texts, labels = [], []
    for episode in iter_episodes(ws, name, version or None):
        text = last_user_text(episode["messages"])
        if episode["specialist"] in project.names and text.strip():
            texts.append(text)
            labels.append(episode["specialist"])
    present = sorted(set(labels))
    if len(present) < 2:
        raise BadInput(f"dataset {name} has labelled episodes of {present or 'no specialist'}; the router needs "
                       "at least two specialists", field="--data")
    base_name = base or project.base
    loaded = load_base(base_name)
    layer = settings["layer"] or default_layer(loaded.model)
    started = time.perf_counter()
    features = turn_features(loaded.model, loaded.tokenizer, texts, layer)
    probe = fit_probe(features, labels, project.names, layer, l2=settings["l2"])
    predicted = [project.names[i] for i in probe.probabilities(features).argmax(-1).tolist()]
    train_score = score_routes(labels, predicted, project.names)
    metrics = {"train_accuracy": train_score.accuracy, "examples": len(texts), "layer": layer,
               "fit_seconds": time.perf_counter() - started}
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
