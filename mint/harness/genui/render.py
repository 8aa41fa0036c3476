"""GenUI trees as a static HTML page a person can look at (``render_html``, ``mint genui render``)."""
from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from mint.errors import BadInput
from mint.harness.genui.tree import find_tree, shortened, tree_nodes, tree_problems

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


def _items(value: Any) -> list:
    return value if isinstance(value, list) else []


def _number(value: Any, default: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or abs(value) == float("inf"):
        return default
    return float(value)


def _render(node: Any) -> str:
    if not isinstance(node, dict):
        return f"<div class='unknown'>{html.escape(shortened(node, 200))}</div>"
    kind, props = node.get("type"), node.get("props") if isinstance(node.get("props"), dict) else {}
    esc = lambda key, default="": html.escape(str(props.get(key, default)))  # noqa: E731
    children = "".join(_render(c) for c in _items(node.get("children")))
    if kind == "Card":
        subtitle = f"<p class='caption'>{esc('subtitle')}</p>" if props.get("subtitle") else ""
        return f"<section class='card'><h2>{esc('title')}</h2>{subtitle}{children}</section>"
    if kind == "Stack":
        direction = "vertical" if props.get("direction", "vertical") == "vertical" else "horizontal"
        return f"<div class='stack {direction}' style='--gap:{_number(props.get('gap'), 8)}px'>{children}</div>"
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
        options = "".join(f"<option>{html.escape(str(o))}</option>" for o in _items(props.get("options")))
        return f"<label>{esc('label')}<select name='{esc('name')}'>{options}</select></label>"
    if kind == "Form":
        title = f"<h2>{esc('title')}</h2>" if props.get("title") else ""
        return f"<form class='card'>{title}{children}<button type='submit'>{esc('submitLabel', 'Submit')}</button></form>"
    if kind == "Table":
        head = "".join(f"<th>{html.escape(str(c))}</th>" for c in _items(props.get("columns")))
        rows = "".join("<tr>" + "".join(f"<td>{html.escape(str(v))}</td>" for v in row) + "</tr>"
                       for row in _items(props.get("rows")) if isinstance(row, list))
        caption = f"<caption>{esc('caption')}</caption>" if props.get("caption") else ""
        return f"<table>{caption}<tr>{head}</tr>{rows}</table>"
    if kind == "List":
        tag = "ol" if props.get("ordered") else "ul"
        items = "".join(f"<li>{html.escape(str(i))}</li>" for i in _items(props.get("items")))
        title = f"<h3>{esc('title')}</h3>" if props.get("title") else ""
        return f"{title}<{tag}>{items}</{tag}>"
    if kind == "Image":
        return f"<img src='{esc('src')}' alt='{esc('alt')}' style='max-width:240px'>"
    if kind == "Chart":
        series = next((s for s in _items(props.get("series")) if isinstance(s, dict)), {})
        values = [_number(v, 0.0) for v in _items(series.get("values"))] or [0.0]
        top = max(max(values), 1.0)
        bars = "".join(f"<div title='{html.escape(str(label))}: {value}' style='height:{100 * value / top:.0f}%'></div>"
                       for label, value in zip(_items(props.get("labels")), values))
        return (f"<figure class='card'><figcaption>{esc('title')} ({esc('kind')})</figcaption>"
                f"<div class='bar'>{bars}</div></figure>")
    return f"<div class='unknown'>unknown component {html.escape(shortened(kind, 80))}{children}</div>"


def render_file(path: Path, out: Path) -> dict:
    """Render the tree in ``path`` (JSON, or a model answer holding one) to ``out``; ``problems`` lists
    what the catalog refuses, the first failing node first."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise BadInput("no such file", file=str(path)) from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"not UTF-8 text (byte {exc.start})", file=str(path)) from None
    except OSError as exc:
        raise BadInput(f"cannot read: {exc.strerror or exc}", file=str(path)) from None
    parsed = find_tree(text)
    if parsed.tree is None:
        raise BadInput(f"not one JSON component tree: {parsed.reason}", file=str(path))
    problems = tree_problems(parsed.tree)
    page = render_html(parsed.tree, title=path.name)
    try:
        out.write_text(page, encoding="utf-8", errors="replace")   # a lone surrogate in the tree
    except OSError as exc:
        raise BadInput(f"cannot write: {exc.strerror or exc}", file=str(out)) from None
    return {"out": str(out), "valid": not problems, "problems": problems,
            "components": len(tree_nodes(parsed.tree))}


