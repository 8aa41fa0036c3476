"""GenUI (UI4A, "UI for agents"): is the answer one JSON component tree that the catalog accepts, and the one
the request asks for?

One folder, as any specialist (docs/specialists.md): ``tree`` (the catalog, finding, checking and repairing
trees), ``request`` (agreement with the request, the verifier), ``render`` (a tree as an HTML page), and here the
harness, its reward, its live-suite record and its ``SPECIALIST``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass

from mint.harness.base import Harness, RecordProblem, joined_reasons
from mint.harness.genui.render import render_file, render_html
from mint.harness.genui.request import (CHART_KINDS, COMPONENT_WORDS, RequestTerms, request_problem, request_terms,
                                        tree_text, tree_types, verify)
from mint.harness.genui.tree import (DEFAULT_CATALOG, TreeParse, TreeValidator, find_tree, load_catalog, parse_tree,
                                     repair, tree_nodes, tree_problems)
from mint.harness.specialist import LoggedAnswer, Specialist, completion_text, last_user_text


@dataclass
class GenuiHarness(Harness):
    name: str = "genui"
    metrics: tuple[str, ...] = ("parse_rate", "schema_valid_rate", "required_props_rate", "root_type_match",
                                "request_match", "off_request_rate")
    # off_request_rate: answers that parse as a tree but are not the one asked for (a fixed or empty tree
    # scores 1, text that holds no tree 0)
    lower_is_better: tuple[str, ...] = ("off_request_rate",)
    # without a reference the tree is judged by the catalog and the request (request_problem: the root and parts
    # it names, its labels); root_type_match compares with a reference only
    request_metrics: tuple[str, ...] = ("parse_rate", "schema_valid_rate", "required_props_rate", "request_match",
                                        "off_request_rate")

    def check_record(self, record: dict) -> None:
        super().check_record(record)
        if not self.request(record).strip():
            raise RecordProblem("messages", "no user message")
        if "reference" in record and not isinstance(record["reference"], dict):
            raise RecordProblem("reference", "expected a component tree")

    def family(self, record: dict) -> str | None:
        """The root component the request names (``request_terms``, as ``verify`` reads it): a stat card and an
        alert card are both ``Card``; None for a request that names none."""
        return request_terms(self.request(record)).root

    def answer_schema(self, record: dict) -> dict | None:
        """The catalog: every valid answer is one of its trees. Written compact (``{"type":"Card",...}``, as the
        logs' answers are), and its ``oneOf`` of components read as ``anyOf`` (each branch fixes ``type`` to
        its own name, so no tree matches two)."""
        schema, _validator, _required = load_catalog(self.settings.catalog or DEFAULT_CATALOG)
        return {**schema, "x-guidance": {"key_separator": ":", "item_separator": ",", "coerce_one_of": True}}

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        catalog = self.settings.catalog or DEFAULT_CATALOG
        _schema, validator, required = load_catalog(catalog)
        reference = record.get("reference")
        request = self.request(record)
        sums = {"parse_rate": 0.0, "schema_valid_rate": 0.0, "required_props_rate": 0.0, "root_type_match": 0.0,
                "request_match": 0.0, "off_request_rate": 0.0}
        reasons: list[str | None] = []
        for output in outputs:
            parsed = find_tree(output)
            if parsed.tree is None:
                reasons.append(f"unparseable: {parsed.reason}")
                continue
            tree = parsed.tree
            sums["parse_rate"] += 1
            valid = validator.is_valid(tree)
            sums["schema_valid_rate"] += valid
            nodes = [node for _path, node in tree_nodes(tree)]
            complete = sum(1 for n in nodes if isinstance(n, dict) and isinstance(n.get("type"), str)
                           and n["type"] in required and isinstance(n.get("props"), dict)
                           and all(p in n["props"] for p in required[n["type"]]))
            sums["required_props_rate"] += complete / len(nodes)
            if isinstance(reference, dict):
                sums["root_type_match"] += tree.get("type") == reference.get("type")
            mismatch = request_problem(request, tree, valid, reference if isinstance(reference, dict) else None)
            sums["request_match"] += mismatch is None
            sums["off_request_rate"] += mismatch is not None   # a tree, but not the one asked for
            if not valid:
                reasons.append((tree_problems(tree, catalog, limit=1) or ["not valid"])[0])
            else:
                reasons.append(mismatch)       # None: the tree the request asks for
        out: dict = {k: v / max(1, len(outputs)) for k, v in sums.items()}
        if not isinstance(reference, dict):
            out["root_type_match"] = None
        reason = joined_reasons(reasons)
        if reason:
            out["_reason"] = reason
        return out


def reward(prompts, completions, **_) -> list[float]:
    """GRPO's default GenUI reward: 1 for the tree the request asks for (``verify``: valid under the UI4A
    catalog, with the components and labels the request names), 0.6 for a valid tree that is not it (one fixed
    tree for every request earns no more), 0.3 for JSON that parses but does not validate."""
    _schema, validator, _required = load_catalog()
    rewards = []
    for prompt, completion in zip(prompts, completions):
        text = completion_text(completion)
        tree = find_tree(text).tree
        if tree is None:
            rewards.append(0.0)
        elif not validator.is_valid(tree):
            rewards.append(0.3)
        else:
            rewards.append(1.0 if verify(last_user_text(prompt), text)[0] else 0.6)
    return rewards


def suite_record(record: dict, logged: LoggedAnswer) -> dict:
    """A live record: the request, with the endorsed (or corrected) tree as its reference when it is one."""
    try:
        tree = json.loads(logged.text) if logged.text.strip() else None
    except ValueError:
        tree = None
    if isinstance(tree, dict):
        record["reference"] = tree
    return record


SPECIALIST = Specialist("genui", GenuiHarness, verify=verify, repair=repair, reward=reward,
                        answer_ends=("json", "fence"), suite_record=suite_record)


__all__ = ["CHART_KINDS", "COMPONENT_WORDS", "DEFAULT_CATALOG", "GenuiHarness", "RequestTerms", "SPECIALIST", "TreeParse",
           "TreeValidator", "find_tree", "load_catalog", "parse_tree", "render_file", "render_html", "repair", "request_problem",
           "request_terms", "reward", "suite_record", "tree_nodes", "tree_problems", "tree_text", "tree_types", "verify"]
