"""The router's harness: each held-out turn is labelled with the specialist it belongs to, and the router
(mint.yaml's rules, then the revision's probe) is scored on where it sends the turn.

A suite record is a turn (``messages`` with a user message, or ``prompt``; ``tools`` when the turn carried
some) and ``specialist``, its true label: the record's source, not a keyword guess. Nothing is generated: the
"output" of a record is the specialist the router chose. Per example ``accuracy`` is 1 when it chose the label,
and ``recall.NAME`` the same for the examples labelled NAME, so their means are the accuracy and each
specialist's recall. The report also carries the confusion matrix and the held-out distribution (``mint
monitor`` compares live traffic with it).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from mint.harness.base import Harness, RecordProblem
from mint.harness.specialist import Specialist

RECALL = "recall."
_RECALL_METRIC = re.compile(r"^recall\.[a-z][a-z0-9_-]{0,63}\Z")


@dataclass
class RouterHarness(Harness):
    name: str = "router"
    metrics: tuple[str, ...] = ("accuracy",)

    def knows_metric(self, metric: str) -> bool:
        """``accuracy``, or ``recall.NAME`` for a specialist NAME (the suite's labels say which exist)."""
        return metric in self.metrics or bool(_RECALL_METRIC.match(metric))

    def check_record(self, record: dict) -> None:
        super().check_record(record)
        label = record.get("specialist")
        if not isinstance(label, str) or not label:
            raise RecordProblem("specialist", "expected the name of the specialist this turn belongs to")
        if not self.request(record).strip():
            raise RecordProblem("messages", "no user turn (messages with a user message, or prompt)")

    def carries_tools(self, record: dict) -> bool:
        return bool(record.get("tools"))

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        label = record["specialist"]
        hit = float(outputs[0] == label)
        return {"accuracy": hit, f"{RECALL}{label}": hit}

    def aggregate(self, scores: list[dict[str, float | None]]) -> dict[str, float]:
        """Accuracy and the recall of every specialist that has examples."""
        keys = sorted({key for score in scores for key in score})
        out = {}
        for key in keys:
            values = [s[key] for s in scores if s.get(key) is not None]
            if values:
                out[key] = sum(values) / len(values)
        return out

    def report_fields(self, records: list[dict], outputs: list[list[str]]) -> dict:
        """The confusion matrix (true -> chosen -> count) and the held-out distribution of the labels."""
        labels = sorted({r["specialist"] for r in records} | {o[0] for o in outputs})
        confusion = {t: {p: 0 for p in labels} for t in labels}
        for record, output in zip(records, outputs):
            confusion[record["specialist"]][output[0]] += 1
        total = len(records)
        share = {t: sum(row.values()) / total for t, row in confusion.items() if sum(row.values())} if total else {}
        return {"confusion": {t: row for t, row in confusion.items() if sum(row.values())}, "heldout_share": share}

    def respond(self, loaded, adapter_dir, records: list[dict], revision_ref: str | None) -> list[str]:
        """Where the router sends each record's turn: the probe saved in ``adapter_dir`` (a router revision),
        or, for the bare base (generation 0), what routes a project without a router champion: the rules, the
        keywords, then the starter probe."""
        from mint.routing.router import Probe, Router, probe_features, starter_router
        from mint.project import load_project

        project = load_project()
        turns = [[{"role": "user", "content": self.request(r)}] for r in records]

        def features(conversations, layer, reads):
            return probe_features(loaded.model, loaded.tokenizer, conversations, layer, reads)

        if adapter_dir is not None:
            router = Router(project, Probe.load(adapter_dir), revision_ref)
        else:
            router = starter_router(project, Router(project), loaded.model, features)
        routes = router.route(turns, [self.carries_tools(r) for r in records], features)
        return [route.specialist for route in routes]


SPECIALIST = Specialist("router", RouterHarness)
