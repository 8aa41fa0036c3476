"""Agent: are the model's tool calls right? BFCL-style matching of names and arguments.

Calls are parsed from ``<tool_call>{...}</tool_call>`` blocks, from JSON in the
message (one call, a list, ``{"tool_calls": [...]}`` or OpenAI's
``{"function": {"name", "arguments"}}``), or from Python call syntax
(``get_weather(city="Paris")``). A record's ``ground_truth`` is BFCL's: a list of
``{function_name: {argument: [acceptable values]}}``, where ``""`` among the
values means the argument may be left out.
"""
from __future__ import annotations

import ast
import itertools
import json
import re
from dataclasses import dataclass
from typing import Any

from mint.harness.base import Harness, RecordProblem

Call = tuple[str, dict]
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.S)
_FENCE = re.compile(r"^```(?:json|python)?\s*\n?(.*?)\n?```$", re.S)


def parse_tool_calls(output: str) -> list[Call] | None:
    """The calls in ``output``, or None when it holds none that parse."""
    text = output.strip()
    blocks = _TOOL_CALL.findall(text)
    if blocks:
        calls = []
        for block in blocks:
            parsed = _json_calls(block)
            if parsed is None:
                return None
            calls.extend(parsed)
        return calls or None
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    return _json_calls(text) or _python_calls(text)


def _json_calls(text: str) -> list[Call] | None:
    try:
        value = json.loads(text)
    except ValueError:
        return None
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    calls = []
    for item in items:
        call = _json_call(item)
        if call is None:
            return None
        calls.append(call)
    return calls or None


def _json_call(item: Any) -> Call | None:
    if not isinstance(item, dict):
        return None
    fn = item.get("function") if isinstance(item.get("function"), dict) else item
    name = fn.get("name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError:
            return None
    if isinstance(name, str) and isinstance(args, dict):
        return name, args
    if len(item) == 1:   # BFCL's own shape: {"name": {"arg": value}}
        (name, args), = item.items()
        if isinstance(args, dict):
            return name, args
    return None


def _python_calls(text: str) -> list[Call] | None:
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    calls = []
    for node in nodes:
        if not isinstance(node, ast.Call) or node.args:
            return None
        try:
            name = ast.unparse(node.func)
            args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
        except ValueError:
            return None
        calls.append((name, args))
    return calls or None


# --- matching --------------------------------------------------------------------------------

def _standard(value: Any) -> Any:
    """BFCL's string normalization: case, spaces and light punctuation do not matter."""
    if isinstance(value, str):
        return re.sub(r"[ ,./\-_*^]", "", value).lower()
    return value


def value_matches(value: Any, acceptable: Any) -> bool:
    if isinstance(acceptable, bool) or isinstance(value, bool):
        return type(value) is type(acceptable) and value == acceptable
    if isinstance(acceptable, (int, float)):
        if isinstance(value, str):
            try:
                value = float(value)
            except ValueError:
                return False
        return isinstance(value, (int, float)) and float(value) == float(acceptable)
    if isinstance(acceptable, str):
        return isinstance(value, str) and _standard(value) == _standard(acceptable)
    if isinstance(acceptable, (list, tuple)):
        return isinstance(value, (list, tuple)) and len(value) == len(acceptable) and \
            all(value_matches(v, a) for v, a in zip(value, acceptable))
    if isinstance(acceptable, dict):
        return isinstance(value, dict) and arguments_match(value, acceptable)
    return value == acceptable


def arguments_match(given: dict, expected: dict) -> bool:
    """Every given argument expected, each with an acceptable value; ``""`` among the options marks one
    that may be left out."""
    if set(given) - set(expected):
        return False
    for argument, options in expected.items():
        options = options if isinstance(options, list) else [options]
        if argument not in given:
            if "" not in options:
                return False
        elif not any(value_matches(given[argument], o) for o in options if o != ""):
            return False
    return True


def _same_name(predicted: str, expected: str) -> bool:
    return predicted == expected or predicted.replace(".", "_") == expected.replace(".", "_")


def call_matches(call: Call, expected: dict) -> bool:
    (name, arguments), = expected.items()
    predicted_name, predicted_args = call
    return _same_name(predicted_name, name) and arguments_match(predicted_args, arguments)


def calls_match(calls: list[Call], ground_truth: list[dict]) -> bool:
    """Every expected call made exactly once, in any order (parallel calls are order-free)."""
    if len(calls) != len(ground_truth):
        return False
    if len(calls) > 6:   # permutations explode; greedy matching is exact when calls differ by name
        remaining = list(ground_truth)
        for call in calls:
            hit = next((g for g in remaining if call_matches(call, g)), None)
            if hit is None:
                return False
            remaining.remove(hit)
        return True
    return any(all(call_matches(c, g) for c, g in zip(calls, order))
               for order in itertools.permutations(ground_truth))


@dataclass
class AgentHarness(Harness):
    name: str = "agent"
    metrics: tuple[str, ...] = ("call_accuracy", "name_accuracy", "parse_rate")

    def check_record(self, record: dict) -> None:
        super().check_record(record)
        if not isinstance(record.get("messages"), list) or not record["messages"]:
            raise RecordProblem("messages", "missing")
        if not isinstance(record.get("tools"), list):
            raise RecordProblem("tools", "missing (the tool definitions the model may call)")
        truth = record.get("ground_truth")
        if not isinstance(truth, list) or not all(isinstance(g, dict) and len(g) == 1 for g in truth):
            raise RecordProblem("ground_truth", "expected a list of {function: {argument: [acceptable values]}}")

    def tools(self, record: dict) -> list[dict]:
        tools = [t for t in record.get("tools", []) if isinstance(t, dict)]
        if self.settings.tools is not None:
            tools = [t for t in tools if (t.get("function") or t).get("name") in self.settings.tools]
        return tools

    def system(self, record: dict) -> str | None:
        base = super().system(record) or ""
        tools = json.dumps([t.get("function", t) for t in self.tools(record)], ensure_ascii=False)
        return (base + "\n\n" if base else "") + (
            "You can call these functions:\n" + tools + "\nAnswer with the call as JSON: "
            '{"name": "...", "arguments": {...}}, or a JSON list of such calls.')

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        allowed = {(t.get("function") or t).get("name") for t in self.tools(record)}
        truth = record["ground_truth"]
        expected_names = sorted(next(iter(g)) for g in truth)
        sums = {"call_accuracy": 0.0, "name_accuracy": 0.0, "parse_rate": 0.0}
        for output in outputs:
            calls = parse_tool_calls(output)
            if calls is None:
                continue
            sums["parse_rate"] += 1
            names = [c[0] for c in calls]
            if all(any(_same_name(n, a) for a in allowed) for n in names):
                if sorted(n.replace(".", "_") for n in names) == sorted(n.replace(".", "_") for n in expected_names):
                    sums["name_accuracy"] += 1
                if calls_match(calls, truth):
                    sums["call_accuracy"] += 1
        return {k: v / len(outputs) for k, v in sums.items()}
