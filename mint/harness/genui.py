"""GenUI (UI4A, "UI for agents"): is the answer one JSON component tree that the catalog accepts?

The catalog is a versioned JSON Schema (``ui4a/catalog.v1.json``); ``render_html``
turns a tree into a static page a person can look at.
"""
from __future__ import annotations

import functools
import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mint.errors import BadInput
from mint.harness.base import Harness, RecordProblem

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
    return schema, Draft202012Validator(schema), required


def parse_tree(output: str) -> dict | None:
    """The one JSON object in ``output`` (a ```json fence is fine), or None."""
    text = output.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        value = json.loads(text)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def _nodes(tree: Any):
    if isinstance(tree, dict):
        yield tree
        for child in tree.get("children") or []:
            yield from _nodes(child)


@dataclass
class GenuiHarness(Harness):
    name: str = "genui"
    metrics: tuple[str, ...] = ("parse_rate", "schema_valid_rate", "required_props_rate", "root_type_match")

    def check_record(self, record: dict) -> None:
        super().check_record(record)
        if not self.request(record).strip():
            raise RecordProblem("messages", "no user message")
        if "reference" in record and not isinstance(record["reference"], dict):
            raise RecordProblem("reference", "expected a component tree")

    def score(self, record: dict, outputs: list[str]) -> dict[str, float | None]:
        _schema, validator, required = load_catalog(self.settings.catalog or DEFAULT_CATALOG)
        reference = record.get("reference")
        sums = {"parse_rate": 0.0, "schema_valid_rate": 0.0, "required_props_rate": 0.0, "root_type_match": 0.0}
        for output in outputs:
            tree = parse_tree(output)
            if tree is None:
                continue
            sums["parse_rate"] += 1
            sums["schema_valid_rate"] += validator.is_valid(tree)
            nodes = list(_nodes(tree))
            complete = sum(1 for n in nodes if n.get("type") in required and isinstance(n.get("props"), dict)
                           and all(p in n["props"] for p in required[n["type"]]))
            sums["required_props_rate"] += complete / len(nodes)
            if isinstance(reference, dict):
                sums["root_type_match"] += tree.get("type") == reference.get("type")
        out = {k: v / len(outputs) for k, v in sums.items()}
        if not isinstance(reference, dict):
            out["root_type_match"] = None
        return out


# --- rendering ------------------------------------------------------------------------------

_STYLE = """
body{font-family:system-ui,sans-serif;background:#f4f5f7;margin:2rem;color:#1d2330}
.card{background:#fff;border-radius:10px;box-shadow:0 1px 4px #0002;padding:1rem 1.25rem;margin:.5rem 0}
.card h2{margin:.1rem 0 .6rem;font-size:1.15rem}.stack{display:flex;gap:var(--gap)}.vertical{flex-direction:column}
button{background:#3457d5;color:#fff;border:0;border-radius:6px;padding:.5rem 1rem;font-size:.95rem}
label{display:block;margin:.4rem 0}input,select{display:block;padding:.4rem;margin-top:.2rem;min-width:16rem}
table{border-collapse:collapse;background:#fff}td,th{border:1px solid #ccd;padding:.3rem .6rem}
.heading{font-size:1.3rem;font-weight:600}.caption{color:#667;font-size:.85rem}.bar{display:flex;align-items:end;gap:.5rem;height:120px}
.bar div{background:#3457d5;width:2rem}.unknown{border:2px dashed #c33;padding:.5rem;color:#c33}
"""


def render_html(tree: dict, title: str = "UI4A preview") -> str:
    """A static HTML page for ``tree``; unknown components show as dashed boxes."""
    return (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
            f"<style>{_STYLE}</style></head><body>{_render(tree)}</body></html>\n")


def _render(node: Any) -> str:
    if not isinstance(node, dict):
        return f"<div class='unknown'>{html.escape(json.dumps(node))}</div>"
    kind, props = node.get("type"), node.get("props") if isinstance(node.get("props"), dict) else {}
    esc = lambda key, default="": html.escape(str(props.get(key, default)))  # noqa: E731
    children = "".join(_render(c) for c in node.get("children") or [])
    if kind == "Card":
        subtitle = f"<p class='caption'>{esc('subtitle')}</p>" if props.get("subtitle") else ""
        return f"<section class='card'><h2>{esc('title')}</h2>{subtitle}{children}</section>"
    if kind == "Stack":
        direction = "vertical" if props.get("direction", "vertical") == "vertical" else "horizontal"
        return f"<div class='stack {direction}' style='--gap:{float(props.get('gap', 8) or 0)}px'>{children}</div>"
    if kind == "Text":
        tag = "h3" if props.get("variant") == "heading" else "p"
        return f"<{tag} class='{esc('variant', 'body')}'>{esc('text')}</{tag}>"
    if kind == "Button":
        return f"<button data-action='{esc('action')}'>{esc('label')}</button>"
    if kind == "TextField":
        required = " required" if props.get("required") else ""
        return (f"<label>{esc('label')}<input name='{esc('name')}' type='{esc('inputType', 'text')}'"
                f" placeholder='{esc('placeholder')}'{required}></label>")
    if kind == "Select":
        options = "".join(f"<option>{html.escape(str(o))}</option>" for o in props.get("options") or [])
        return f"<label>{esc('label')}<select name='{esc('name')}'>{options}</select></label>"
    if kind == "Form":
        title = f"<h2>{esc('title')}</h2>" if props.get("title") else ""
        return f"<form class='card'>{title}{children}<button type='submit'>{esc('submitLabel', 'Submit')}</button></form>"
    if kind == "Table":
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in props.get("columns") or [])
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                       for row in props.get("rows") or [] if isinstance(row, list))
        caption = f"<caption>{esc('caption')}</caption>" if props.get("caption") else ""
        return f"<table>{caption}<tr>{head}</tr>{rows}</table>"
    if kind == "List":
        tag = "ol" if props.get("ordered") else "ul"
        items = "".join(f"<li>{html.escape(str(i))}</li>" for i in props.get("items") or [])
        title = f"<h3>{esc('title')}</h3>" if props.get("title") else ""
        return f"{title}<{tag}>{items}</{tag}>"
    if kind == "Image":
        return f"<img src='{esc('src')}' alt='{esc('alt')}' style='max-width:240px'>"
    if kind == "Chart":
        series = (props.get("series") or [{}])[0]
        values = [v for v in series.get("values", []) if isinstance(v, (int, float))] or [0]
        top = max(max(values), 1)
        bars = "".join(f"<div title='{html.escape(str(label))}: {value}' style='height:{100 * value / top:.0f}%'></div>"
                       for label, value in zip(props.get("labels") or [], values))
        return (f"<figure class='card'><figcaption>{esc('title')} ({esc('kind')})</figcaption>"
                f"<div class='bar'>{bars}</div></figure>")
    return f"<div class='unknown'>unknown component {html.escape(str(kind))}{children}</div>"


def render_file(path: Path, out: Path) -> dict:
    """Render the tree in ``path`` (JSON, or a model answer holding one) to ``out``."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput("no such file", file=str(path)) from None
    tree = parse_tree(text)
    if tree is None:
        raise BadInput("not one JSON component tree", file=str(path))
    _schema, validator, _required = load_catalog()
    problems = [f"{'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}"
                for e in validator.iter_errors(tree)][:10]
    out.write_text(render_html(tree, title=path.name), encoding="utf-8")
    return {"out": str(out), "valid": not problems, "problems": problems,
            "components": sum(1 for _ in _nodes(tree))}
