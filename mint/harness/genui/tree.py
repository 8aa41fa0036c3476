"""GenUI trees: the UI4A catalog (a versioned JSON Schema, ``ui4a/catalog.v1.json`` beside this module), finding
the one component tree in an answer, checking it against the catalog, and repairing an answer's form (closing
brackets, a cut-off or repeating tree) without adding to what it says."""
from __future__ import annotations

import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mint.errors import BadInput
from mint.harness.base import MAX_NESTING, too_deep
from mint.jsontext import json_bracket_end, outside_strings
from mint.text import closest

DEFAULT_CATALOG = Path(__file__).with_name("ui4a") / "catalog.v1.json"
_FENCE = re.compile(r"^```(?:json)?\s*\n?(.*?)\n?```$", re.S)


@functools.lru_cache(maxsize=4)
def load_catalog(path: Path = DEFAULT_CATALOG) -> tuple[dict, Any, dict[str, tuple[str, ...]]]:
    """(schema, validator, required props per component) of a catalog file."""
    from jsonschema import Draft202012Validator
    from jsonschema.exceptions import SchemaError

    try:
        schema = json.loads(Path(path).read_text())
        Draft202012Validator.check_schema(schema)
    except FileNotFoundError:
        raise BadInput("no such catalog", file=str(path)) from None
    except (ValueError, SchemaError) as exc:
        raise BadInput(f"not a valid JSON Schema: {exc}", file=str(path)) from None
    required = {name: tuple(spec.get("properties", {}).get("props", {}).get("required", ()))
                for name, spec in schema.get("$defs", {}).items() if name[:1].isupper()}
    return schema, TreeValidator(schema, Draft202012Validator(schema)), required


class TreeValidator:
    """Checks a component tree against a catalog node by node, each node against the one component its
    ``type`` names, its children as nodes of their own: the same verdict as the catalog's schema, in
    time linear in the tree. (jsonschema's ``oneOf`` validates each child under every container
    alternative, so a wrong leaf under n nested Cards costs about 3^n: 6 levels took 6 s, 8 took 56 s.)
    A catalog not shaped as ``node: oneOf`` of components with distinct ``type`` consts is validated
    whole, as before."""

    def __init__(self, schema: dict, whole: Any) -> None:
        self.whole = whole
        defs = schema.get("$defs") if isinstance(schema.get("$defs"), dict) else {}
        node = defs.get("node") if isinstance(defs.get("node"), dict) else {}
        names = [ref.removeprefix("#/$defs/") for ref in (a.get("$ref") for a in node.get("oneOf") or []
                                                          if isinstance(a, dict)) if isinstance(ref, str)]
        kinds = {}
        for name in names:
            const = ((defs.get(name) or {}).get("properties") or {}).get("type", {}).get("const")
            if isinstance(const, str):
                kinds[const] = name
        self.walkable = schema.get("$ref") == "#/$defs/node" and names and len(kinds) == len(names) == len(
            node.get("oneOf") or [])
        # the same catalog with every child accepted as is: each child is then checked as a node itself
        # (without $id, whose registered resource would still resolve #/$defs/node to the full node)
        shallow = {key: value for key, value in schema.items() if key != "$id"} | {"$defs": {**defs, "node": True}}
        self.components = {kind: type(whole)({**shallow, "$ref": f"#/$defs/{name}"})
                           for kind, name in kinds.items()} if self.walkable else {}

    def is_valid(self, tree: Any) -> bool:
        if not self.walkable:
            return self.whole.is_valid(tree)
        return all(isinstance(node, dict) and isinstance(node.get("type"), str) and node["type"] in self.components
                   and self.components[node["type"]].is_valid(node) for _path, node in tree_nodes(tree))

    def problems(self, tree: Any, limit: int = 10) -> list[str]:
        """What is wrong, node by node in document order (the first failing node first)."""
        from jsonschema.exceptions import best_match

        if not self.walkable:
            error = best_match(self.whole.iter_errors(tree))
            return [] if error is None else [f"(root): {_short_message(error.message)}"]
        kinds = sorted(self.components)
        problems: list[str] = []
        for path, node in tree_nodes(tree):
            if len(problems) >= limit:
                break
            if not isinstance(node, dict):
                problems.append(f"{path}: expected a component object, got {type(node).__name__}")
                continue
            kind = node.get("type")
            if not isinstance(kind, str) or kind not in self.components:
                hint = closest(kind if isinstance(kind, str) else None, kinds, listing="components:")
                problems.append(f"{path}: unknown component {shortened(kind)}{hint}" if "type" in node else
                                f"{path}: no \"type\"{hint}")
                continue
            error = best_match(self.components[kind].iter_errors(node))
            if error is not None:
                where = ".".join(map(str, error.absolute_path))
                problems.append(f"{path} ({kind}): {where + ': ' if where else ''}{_short_message(error.message)}")
        return problems


@dataclass(frozen=True)
class TreeParse:
    """The component tree found in a model answer, or None and why there is none."""

    tree: dict | None
    reason: str = ""


def find_tree(output: Any) -> TreeParse:
    """The one JSON object in ``output``: the whole answer, one ```json fence, or one object with prose
    around it. Shared by the harness, the GRPO reward and ``mint genui render``."""
    if not isinstance(output, str):
        return TreeParse(None, f"expected text, got {type(output).__name__}")
    text = output.strip()
    if not text:
        return TreeParse(None, "empty answer")
    fenced = _FENCE.match(text)
    whole = _json_value(fenced.group(1).strip() if fenced else text)
    if whole is _TOO_DEEP:
        return TreeParse(None, f"the tree nests more than {MAX_NESTING} levels")
    if whole is not None:
        return _one_tree(whole)
    found, too_deep_seen = [], False
    for region in _brace_regions(text):
        value = _json_value(region)
        too_deep_seen |= value is _TOO_DEEP
        if isinstance(value, dict):
            found.append(value)
    if len(found) > 1:
        return TreeParse(None, f"{len(found)} JSON objects in the answer; expected one component tree")
    if found:
        return _one_tree(found[0])
    if too_deep_seen:
        return TreeParse(None, f"the tree nests more than {MAX_NESTING} levels")
    return TreeParse(None, "no JSON object in the answer")


_CLOSER = {"{": "}", "[": "]"}


def _closed(text: str) -> str | None:
    """``text`` from its first ``{`` with each closing bracket made the one its opener needs (a small model
    writes ``]}`` where ``}]`` belongs), up to where the tree closes; an answer cut off before that is cut back
    to its last complete element (before its last comma, or after its last closing bracket) and closed. None
    when there is no ``{`` or nothing complete in it."""
    start = text.find("{")
    if start < 0:
        return None
    # the open brackets as links (opener, the links below): a snapshot of them is one reference, so keeping the
    # last complete point at every comma stays linear in the answer's length
    pieces: list[str]
    stack: Any              # (opener, the stack below it), or None
    pieces, stack, copied, last_complete = [], None, start, None
    for index, char in outside_strings(text, start):
        if char in _CLOSER:
            stack = (char, stack)
        elif char == "," and stack is not None:
            last_complete = (len(pieces), copied, index, stack)
        elif char in "}]":
            opener, stack = stack
            pieces.append(text[copied:index] + _CLOSER[opener])
            copied = index + 1
            if stack is None:
                return "".join(pieces)
            last_complete = (len(pieces), copied, copied, stack)
    if last_complete is None:
        return None
    count, begin, end, still_open = last_complete
    closers = []
    while still_open is not None:
        opener, still_open = still_open
        closers.append(_CLOSER[opener])
    return "".join(pieces[:count]) + text[begin:end] + "".join(closers)


def _without_repeats(value: Any) -> Any:
    """``value`` with every object or text that repeats an earlier sibling in the same list dropped (the loop a
    small model falls into until its token limit: the same child or list item again and again). Numbers may
    repeat: a chart's values do."""
    if isinstance(value, dict):
        return {key: _without_repeats(item) for key, item in value.items()}
    if not isinstance(value, list):
        return value
    kept, seen = [], set()
    for item in map(_without_repeats, value):
        if isinstance(item, (dict, str)):
            key = json.dumps(item, sort_keys=True)     # hashable, and one form for two equal objects
            if key in seen:
                continue
            seen.add(key)
        kept.append(item)
    return kept


@functools.lru_cache(maxsize=4)
def _catalog_parts(catalog: Path = DEFAULT_CATALOG) -> dict[str, tuple[frozenset, dict, frozenset]]:
    """Per component type: the keys a node may have, a validator per prop it may have, its required props."""
    from jsonschema import Draft202012Validator

    schema = load_catalog(catalog)[0]
    defs = schema.get("$defs") or {}
    parts = {}
    for name, spec in defs.items():
        node_keys = (spec.get("properties") or {}) if isinstance(spec, dict) else {}
        const = (node_keys.get("type") or {}).get("const") if isinstance(node_keys.get("type"), dict) else None
        if not isinstance(const, str):
            continue
        props = node_keys.get("props") if isinstance(node_keys.get("props"), dict) else {}
        validators = {key: Draft202012Validator({"$defs": defs, **sub})
                      for key, sub in (props.get("properties") or {}).items() if isinstance(sub, dict)}
        parts[const] = (frozenset(node_keys), validators, frozenset(props.get("required") or ()))
    return parts


def _catalog_pruned(node: Any, parts: dict, root: bool = True) -> Any:
    """``node`` with what the catalog does not allow dropped: keys a node or its props may not have, an
    optional prop whose value the catalog refuses, and a child that stays refused (an unknown component, a
    required prop missing or refused); None for such a child. Children written inside ``props`` (a props object
    the answer forgot to close first) are the node's own. Nothing else is added or changed, and the root is kept
    even when it stays refused (the verifier says why)."""
    if not isinstance(node, dict) or node.get("type") not in parts or not isinstance(node.get("props"), dict):
        return node if root else None
    node_keys, validators, required = parts[node["type"]]
    kept = {key: value for key, value in node["props"].items()
            if key in validators and validators[key].is_valid(value)}
    if not root and not required <= kept.keys():
        return None
    pruned = {"type": node["type"], "props": kept}
    children = node.get("children")
    if children is None and "children" not in validators:   # written before props closed: the node's own children
        children = node["props"].get("children")
    if "children" in node_keys and isinstance(children, list):
        pruned["children"] = [child for child in (_catalog_pruned(c, parts, root=False) for c in children)
                              if child is not None]
    return pruned


_SPACED_KEY = re.compile(r'"\s*:\s')


def _dumped(value: Any, written: str = "") -> str:
    """``value`` as JSON text that can be written as UTF-8 (a lone surrogate, ``"\\udcff"`` in the answer,
    stays escaped), laid out as ``written`` was: compact, as the logs' answers and a model trained on them
    write trees, unless ``written`` put a space after its keys. A repaired answer is a training example
    (experience's ``repair``): re-spaced, it would teach the next generation a layout its logs never had."""
    separators = (", ", ": ") if _SPACED_KEY.search(written) else (",", ":")
    text = json.dumps(value, ensure_ascii=False, separators=separators)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=separators)
    return text


def repair(answer: str, catalog: Path = DEFAULT_CATALOG) -> str | None:
    """A failing answer's tree put into form without adding to what it says, or None when there is none to
    repair: closing brackets in the right order, a cut-off answer closed after its last complete element,
    what the catalog does not allow dropped (a prop or key a component may not have, an optional prop with a
    refused value, a child node that stays refused), objects repeated in a list dropped. The repaired answer is
    one more candidate for the verifier, which decides as for any other (experience's ``repair``: answers the
    champion almost wrote, which a prompt it never solves would otherwise not give). What it cannot repair: a
    wrong component, a missing part or label, text that is not JSON inside the brackets."""
    if not isinstance(answer, str):
        return None
    closed = _closed(answer)
    value = _json_value(closed) if closed is not None else None
    if not isinstance(value, dict) or too_deep(value):
        return None
    cleaned = _without_repeats(_catalog_pruned(value, _catalog_parts(catalog)))
    text = closed if cleaned == value else _dumped(cleaned, written=answer)
    return text if text.strip() != answer.strip() else None


def _brace_regions(text: str) -> list[str]:
    """The outermost balanced ``{...}`` spans of ``text`` (braces inside JSON strings do not count). An
    object that never closes (a cut-off answer) yields nothing: its inner objects are not the tree."""
    regions, start = [], text.find("{")
    while start != -1:
        end = json_bracket_end(text, start)
        if end is None:
            break
        regions.append(text[start:end])
        start = text.find("{", end)
    return regions


_TOO_DEEP = object()


def _json_value(text: str) -> Any:
    """``text`` as JSON, None when it is not JSON (JSON's own null is no tree either), or _TOO_DEEP."""
    try:
        return json.loads(text)
    except ValueError:
        return None
    except RecursionError:
        return _TOO_DEEP


def _one_tree(value: Any) -> TreeParse:
    if not isinstance(value, dict):
        return TreeParse(None, f"the JSON is {type(value).__name__}, not a component object")
    if too_deep(value):
        return TreeParse(None, f"the tree nests more than {MAX_NESTING} levels")
    return TreeParse(value)


def parse_tree(output: str) -> dict | None:
    """The one JSON object in ``output`` (see ``find_tree``), or None."""
    return find_tree(output).tree


def tree_nodes(tree: Any) -> list[tuple[str, Any]]:
    """(path, node) for every node, parents first; children that are not a list are not walked."""
    found, stack = [], [("(root)", tree)]
    while stack:
        path, node = stack.pop()
        found.append((path, node))
        children = node.get("children") if isinstance(node, dict) else None
        if isinstance(children, list):
            prefix = "" if path == "(root)" else path + "."
            stack.extend((f"{prefix}children[{i}]", child) for i, child in reversed(list(enumerate(children))))
    return found


def tree_problems(tree: Any, catalog: Path = DEFAULT_CATALOG, limit: int = 10) -> list[str]:
    """What the catalog refuses in ``tree``, the first failing node first: an unknown component with the
    closest known name, or the best-matching error of the node itself."""
    return load_catalog(catalog)[1].problems(tree, limit)


def shortened(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, ensure_ascii=False) if not isinstance(value, str) else repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _short_message(message: str, limit: int = 200) -> str:
    return message if len(message) <= limit else message[:limit] + "..."


