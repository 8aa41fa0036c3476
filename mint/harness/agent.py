"""Agent: are the model's tool calls right? Decided by BFCL's AST checker, typed by the tools' schemas.

Calls are parsed from ``<tool_call>{...}</tool_call>`` blocks, from JSON in the
message (one call, a list, ``{"tool_calls": [...]}`` or OpenAI's
``{"function": {"name", "arguments"}}``), or from Python call syntax
(``get_weather(city="Paris")``, ``f(**{"city": "Paris"})``). A record's ``ground_truth`` is BFCL's: a
list of ``{function_name: {argument: [acceptable values]}}``, where ``""`` among the values means the
argument may be left out. One expected call is checked as BFCL checks simple and multiple-function
questions, several as it checks parallel ones (any order); ``bfcl_checker`` is BFCL's own code.
"""
from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from typing import Any

from mint.harness.base import Harness, HarnessSettings, RecordProblem, as_record, joined_reasons, too_deep
from mint.harness.bfcl_checker import multiple_function_checker, parallel_function_checker_no_order
from mint.harness.specialist import LoggedAnswer, Specialist, completion_text
from mint.render import system_with_tools, tool_descriptions

Call = tuple[str, dict]
_FENCE = re.compile(r"^```(?:json|python)?\s*\n?(.*?)\n?```$", re.S)
# what parsing untrusted text may raise: bad syntax, unhashable dict keys, too-large or too-deep literals
_PARSE_ERRORS = (ValueError, TypeError, SyntaxError, RecursionError, MemoryError)


class NotACall(Exception):
    """Output that holds no tool call mint can read; the message says why."""


@dataclass(frozen=True)
class Verdict:
    """Whether the calls match the ground truth, and if not, why (BFCL's error message)."""

    valid: bool
    reason: str = ""


def parse_tool_calls(output: str) -> list[Call] | None:
    """The calls in ``output``, or None when it holds none that parse."""
    try:
        return read_tool_calls(output)
    except NotACall:
        return None


def read_tool_calls(output: Any) -> list[Call]:
    """The calls in ``output``; raises NotACall saying why there are none."""
    if not isinstance(output, str):
        raise NotACall(f"expected text, got {type(output).__name__}")
    text = output.strip()
    if not text:
        raise NotACall("empty output")
    blocks = _tagged_blocks(text)
    if blocks:
        calls = []
        for block in blocks:
            calls.extend(_json_calls(block))
        return _checked(calls)
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        return _checked(_json_calls(text))
    except NotACall as json_problem:
        try:
            return _checked(_python_calls(text))
        except NotACall as python_problem:
            looks_like_json = text[:1] in "[{"
            raise (json_problem if looks_like_json else python_problem) from None


def _tagged_blocks(text: str, open_tag: str = "<tool_call>", close_tag: str = "</tool_call>") -> list[str]:
    """The text of each closed ``<tool_call>...</tool_call>`` block. A scan, not a lazy regex: a regex
    retries every unclosed opening tag to the end of the text (16,000 of them took 88 s)."""
    blocks, position = [], 0
    while (start := text.find(open_tag, position)) != -1:
        end = text.find(close_tag, start + len(open_tag))
        if end == -1:
            break
        blocks.append(text[start + len(open_tag):end].strip())
        position = end + len(close_tag)
    return blocks


def _checked(calls: list[Call]) -> list[Call]:
    if not calls:
        raise NotACall("no tool call")
    for name, arguments in calls:
        if not isinstance(name, str) or not name:
            raise NotACall("a call without a function name")
        if not isinstance(arguments, dict) or not all(isinstance(k, str) for k in arguments):
            raise NotACall(f"{name}: arguments are not an object with named arguments")
    return calls


def _json_calls(text: str) -> list[Call]:
    try:
        value = json.loads(text)
    except _PARSE_ERRORS as exc:
        raise NotACall(f"not JSON ({type(exc).__name__})") from None
    if too_deep(value):
        raise NotACall("JSON nested too deeply")
    if isinstance(value, dict) and isinstance(value.get("tool_calls"), list):
        value = value["tool_calls"]
    items = value if isinstance(value, list) else [value]
    return [_json_call(item) for item in items]


def _json_call(item: Any) -> Call:
    if not isinstance(item, dict):
        raise NotACall(f"a call must be a JSON object, got {type(item).__name__}")
    fn = item.get("function") if isinstance(item.get("function"), dict) else item
    name = fn.get("name")
    args = fn.get("arguments", fn.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except _PARSE_ERRORS:
            raise NotACall(f"the arguments of {str(name)[:60]!r} are not JSON") from None
        if too_deep(args):
            raise NotACall("JSON nested too deeply")
    if isinstance(name, str) and isinstance(args, dict):
        return name, args
    if len(item) == 1:   # BFCL's own shape: {"name": {"arg": value}}
        (name, args), = item.items()
        if isinstance(args, dict):
            return name, args
    raise NotACall("a JSON object that is not a call (expected name and arguments)")


def _python_calls(text: str) -> list[Call]:
    try:
        tree = ast.parse(text, mode="eval").body
    except _PARSE_ERRORS as exc:
        raise NotACall(f"neither JSON nor a Python call ({type(exc).__name__})") from None
    nodes = tree.elts if isinstance(tree, (ast.List, ast.Tuple)) else [tree]
    return [_python_call(node) for node in nodes]


def _dotted_name(node: ast.expr) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _python_call(node: ast.expr) -> Call:
    if not isinstance(node, ast.Call):
        raise NotACall("Python that is not a function call")
    name = _dotted_name(node.func)
    if name is None:
        raise NotACall("a call of something that is not a function name")
    if node.args:
        raise NotACall(f"{name}: positional arguments (BFCL calls name every argument)")
    arguments: dict = {}
    for keyword in node.keywords:
        try:
            value = ast.literal_eval(keyword.value)
        except _PARSE_ERRORS as exc:
            raise NotACall(f"{name}: an argument that is not a literal ({type(exc).__name__})") from None
        if too_deep(value):
            raise NotACall(f"{name}: an argument nested too deeply")
        if keyword.arg is not None:
            given = {keyword.arg: value}
        elif isinstance(value, dict) and all(isinstance(k, str) for k in value):   # f(**{"x": 1})
            given = value
        else:
            raise NotACall(f"{name}: ** of something that is not a dict of named arguments")
        repeated = set(given) & set(arguments)
        if repeated:
            raise NotACall(f"{name}: argument {sorted(repeated)[0]!r} given twice")
        arguments.update(given)
    return name, arguments


# --- matching --------------------------------------------------------------------------------

def _as_options(ground_truth: list[dict]) -> list[dict]:
    """Ground truth with every argument's acceptable values as a list (a bare value is the only one)."""
    normalized = []
    for call in ground_truth:
        (name, arguments), = call.items()
        normalized.append({name: {arg: options if isinstance(options, list) else [options]
                                  for arg, options in arguments.items()}})
    return normalized


def check_calls(calls: list[Call], ground_truth: list[dict], tools: Any = None) -> Verdict:
    """BFCL's decision on ``calls``: one expected call as its simple/multiple checker, several as its
    order-free parallel checker. Functions the tools do not describe are typed from their answers."""
    try:
        decoded = [{name: arguments} for name, arguments in calls]
        truth = _as_options(ground_truth)
        descriptions = tool_descriptions(tools)
        check = multiple_function_checker if len(truth) == 1 else parallel_function_checker_no_order
        result = check(descriptions, decoded, truth)
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one odd output must not end an eval
        return Verdict(False, f"scorer error: {type(exc).__name__}: {str(exc)[:200]}")
    return Verdict(bool(result["valid"]), result["error"])


def calls_match(calls: list[Call], ground_truth: list[dict], tools: Any = None) -> bool:
    """Whether BFCL accepts ``calls`` for ``ground_truth`` (see ``check_calls``)."""
    return check_calls(calls, ground_truth, tools).valid


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
        shape = "expected a non-empty list of {function: {argument: [acceptable values]}}"
        if not isinstance(truth, list) or not truth:
            raise RecordProblem("ground_truth", shape)
        for i, call in enumerate(truth):
            if not isinstance(call, dict) or len(call) != 1 or not isinstance(next(iter(call.values())), dict):
                raise RecordProblem(f"ground_truth[{i}]", shape)
            (function, arguments), = call.items()
            for argument, options in arguments.items():
                if not isinstance(options, list) or not options:
                    raise RecordProblem(f"ground_truth[{i}].{function}.{argument}",
                                        "expected a non-empty list of acceptable values (\"\" marks optional)")

    def tools(self, record: dict) -> list[dict]:
        tools = [t for t in record.get("tools") or [] if isinstance(t, dict)]
        if self.settings.tools is not None:
            allowed = {d["name"] for d in tool_descriptions(tools)} & set(self.settings.tools)
            tools = [t for t in tools if tool_descriptions([t]) and tool_descriptions([t])[0]["name"] in allowed]
        return tools

    def system(self, record: dict) -> str | None:
        return system_with_tools(super().system(record), self.tools(record))

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        tools = self.tools(record)
        allowed = {d["name"] for d in tool_descriptions(tools)}
        truth = record.get("ground_truth")
        sums = {"call_accuracy": 0.0, "name_accuracy": 0.0, "parse_rate": 0.0}
        reasons: list[str | None] = []
        for output in outputs:
            try:
                calls = read_tool_calls(output)
            except NotACall as exc:
                reasons.append(f"unparseable: {exc}")
                continue
            sums["parse_rate"] += 1
            names = [name for name, _ in calls]
            unknown = [n for n in names if n not in allowed]
            if unknown:
                reasons.append(f"calls a function not offered: {unknown[0][:80]!r}")
                continue
            if isinstance(truth, list) and sorted(names) == sorted(str(next(iter(g)))
                                                                    for g in truth if isinstance(g, dict) and g):
                sums["name_accuracy"] += 1
            verdict = check_calls(calls, truth, tools)
            sums["call_accuracy"] += verdict.valid
            reasons.append(None if verdict.valid else verdict.reason)
        scores: dict = {k: v / max(1, len(outputs)) for k, v in sums.items()}
        reason = joined_reasons(reasons)
        if reason:
            scores["_reason"] = reason
        return scores


# --- verifying an answer without a reference ------------------------------------------------------

# BFCL's parameter types that JSON Schema spells differently
_SCHEMA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "str": "string",
                 "int": "integer", "bool": "boolean"}


def _json_schema(schema: Any) -> Any:
    """A tool's parameter schema with BFCL's type names as JSON Schema's (``any`` accepts anything)."""
    if isinstance(schema, list):
        return [_json_schema(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    out = {key: _json_schema(value) for key, value in schema.items() if key != "type"}
    kind = schema.get("type")
    if isinstance(kind, str) and kind != "any":
        out["type"] = _SCHEMA_TYPES.get(kind, kind)
    return out


def call_problem(call: Call, tools: list[dict], request: str) -> str | None:
    """Why one call is not an answer to ``request`` with ``tools`` (None when it is): the function must be
    offered, its arguments valid under its parameter schema (required ones present, types, enums), and every
    free-text argument must be said in the request (a value it did not name is the model's guess)."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    name, arguments = call
    described = {d["name"]: d.get("parameters") for d in tool_descriptions(tools)}
    if name not in described:
        return f"calls a function not offered: {name[:80]!r}"
    schema: dict = _json_schema(described[name]) if isinstance(described[name], dict) else {"type": "object"}
    try:
        errors = sorted(Draft202012Validator(schema).iter_errors(arguments), key=lambda e: list(e.path))
    except SchemaError as exc:
        return f"the tool {name}'s parameters are not a JSON Schema: {exc.message[:120]}"
    if errors:
        where = ".".join(map(str, errors[0].absolute_path))
        return f"{name}: {where + ': ' if where else ''}{errors[0].message[:160]}"
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    said = " ".join(request.lower().split())
    for argument, value in arguments.items():
        spec = properties.get(argument) if isinstance(properties.get(argument), dict) else {}
        if isinstance(value, str) and "enum" not in spec and " ".join(value.lower().split()) not in said:
            return f"{name}: {argument}={value[:60]!r} is not in the request"
    return None


def verify(request: dict | str, answer: str) -> tuple[bool, str]:
    """Whether ``answer`` makes acceptable calls for ``request`` (a suite record or canonical episode with
    ``messages`` and ``tools``). Where the record carries BFCL ``ground_truth`` it decides as the gated metric
    ``call_accuracy`` does (BFCL's checker); without one, by the request and the tools alone: at least one call,
    each to an offered function with schema-valid arguments whose free-text values the request names.

    What it cannot check without ground truth: whether the right function of several valid ones was chosen,
    numbers and enum values the request implies, calls the request needs but the answer leaves out; nor the
    end state of a stateful world (that is the orders/calendar environment's reward, mint.train.envs)."""
    record = as_record(request)
    tools = [t for t in record.get("tools") or [] if isinstance(t, dict)]
    try:
        calls = read_tool_calls(answer)
    except NotACall as exc:
        return False, f"unparseable: {exc}"
    if not calls:
        return False, "no call"
    truth = record.get("ground_truth")
    if isinstance(truth, list) and truth:
        verdict = check_calls(calls, truth, tools)
        return verdict.valid, verdict.reason or "matches the expected calls"
    text = Harness(HarnessSettings()).request(record)
    for call in calls:
        problem = call_problem(call, tools, text)
        if problem:
            return False, problem
    return True, "offered functions, valid arguments, values the request names"


def reward(prompts, completions, reference=None, **_) -> list[float]:
    """GRPO's default agent reward: 1 for the logged (or corrected) tool calls, name for name and argument for
    argument; 0.2 for calls that at least parse; 0 otherwise."""
    rewards = []
    for i, completion in enumerate(completions):
        calls = parse_tool_calls(completion_text(completion))
        expected = parse_tool_calls(reference[i]) if reference and reference[i] else None
        if calls is None:
            rewards.append(0.0)
        elif expected and calls_match(calls, [{name: {k: [v] for k, v in args.items()}} for name, args in expected]):
            rewards.append(1.0)
        else:
            rewards.append(0.2)
    return rewards


def suite_record(record: dict, logged: LoggedAnswer) -> dict | None:
    """A live record scored against the calls the episode made (endorsed, not corrected), with its tools; None
    for an episode without such calls."""
    calls = (logged.message or {}).get("tool_calls") if logged.endorsed and not logged.correction else None
    if not calls:
        return None
    record["tools"] = logged.tools
    record["ground_truth"] = [{c["function"]["name"]: {k: [v] for k, v in
                                                      (c["function"].get("arguments") or {}).items()}}
                              for c in calls]
    return record


SPECIALIST = Specialist("agent", AgentHarness, verify=verify, reward=reward, answer_ends=("json", "fence", "tool_call"),
                        suite_record=suite_record)
