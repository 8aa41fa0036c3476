"""`mint report --html FILE`: the lineage report as one self-contained HTML page.

Figures are drawn with matplotlib (Agg) and embedded as base64 PNGs; styles are inline, so
the page opens with no network and can be mailed or archived as one file. Its tables are the rows of
mint.reporting.tables, the same columns and cells the terminal shows.
"""
from __future__ import annotations

import base64
import html
import io
from collections.abc import Iterable, Sequence

from mint.reporting.tables import (
    BAD,
    FAMILY_COLUMNS,
    GENERATION_COLUMNS,
    GOOD,
    LINEAGE_COLUMNS,
    NOTE,
    PLAIN,
    Column,
    cells,
    family_rows,
    generation_rows,
    lineage_rows,
)

GREEN, RED, GREY = "#2e7d32", "#c62828", "#9e9e9e"


def _png(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


def _figure(width=6.4, height=3.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def _on_value(row):
    """The delta's interval placed on the value (baseline + low .. baseline + high), as error bar lengths."""
    if row.interval and row.value is not None and row.baseline_value is not None:
        return (max(0.0, row.value - (row.baseline_value + row.interval[0])),
                max(0.0, row.baseline_value + row.interval[1] - row.value))
    return (0.0, 0.0)


def progress_figure(name: str, progress: list) -> str | None:
    """The primary metric per generation (green promoted, red not), its 95% interval against its baseline as
    error bars, each generation's placebo twin as a hollow diamond beside it (its steps control, when one
    ran, as a hollow square), and the same metric on the contract's other suites (retention) as dashed lines."""
    rows = [r for r in progress if r.metric and r.value is not None]
    if not rows:
        return None
    metric = rows[0].metric
    rows = [r for r in rows if r.metric == metric]      # a later contract may gate another metric: not comparable
    xs = range(len(rows))
    values = [r.value for r in rows]
    fig, ax = _figure()
    ax.plot(xs, values, color="#555", linewidth=1, zorder=1)
    ax.errorbar(xs, values, yerr=list(zip(*[_on_value(r) for r in rows])), fmt="none", ecolor="#777", capsize=3,
                zorder=2)
    ax.scatter(xs, values, c=[GREY if not r.generation else GREEN if r.decision == "promoted" else RED
                              for r in rows], s=50, zorder=3)
    twins = [(x + 0.12, r.twin.value) for x, r in zip(xs, rows) if r.twin and r.twin.value is not None]
    if twins:
        ax.scatter(*zip(*twins), marker="D", facecolors="none", edgecolors="#6a1b9a", s=45, zorder=3,
                   label="placebo twin")
    controls = [(x + 0.24, r.twin.steps_control.value) for x, r in zip(xs, rows)
                if r.twin and r.twin.steps_control and r.twin.steps_control.value is not None]
    if controls:
        ax.scatter(*zip(*controls), marker="s", facecolors="none", edgecolors="#ef6c00", s=45, zorder=3,
                   label="steps control (logs alone)")
    others = sorted({f.metric for r in rows for f in r.suites})
    for other, style in zip(others, ("--", ":", "-.")):     # retention beside what users ask now
        points = [(x, f.value) for x, r in zip(xs, rows) for f in r.suites if f.metric == other and f.value is not None]
        if points:
            ax.plot(*zip(*points), linestyle=style, marker="o", markersize=3, color="#1565c0", linewidth=1,
                    label=other)
    if twins or controls or others:
        ax.legend(fontsize=8)
    ax.set_xticks(list(xs), [r.revision.partition(":")[2] or r.revision for r in rows])
    ax.set_title(f"{name}: {metric} per generation (95% CI vs baseline)")
    ax.set_ylabel(metric)
    ax.grid(alpha=0.3)
    return _png(fig)


def loss_figure(name: str, entry: dict) -> str | None:
    runs = [g for g in entry["generations"] if g["loss"]]
    if not runs:
        return None
    fig, ax = _figure()
    for g in runs:
        steps, losses = zip(*g["loss"])
        ax.plot(steps, losses, marker="o", markersize=3, label=g["ref"])
    ax.set_title(f"{name}: training loss per run")
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _png(fig)


def gates_figure(name: str, entry: dict) -> str | None:
    rows = [g for g in entry["generations"] if g["gates"]]
    if not rows:
        return None
    metrics = []
    for g in rows:
        for gate in g["gates"]:
            if gate.metric not in metrics:
                metrics.append(gate.metric)
    from matplotlib.colors import ListedColormap

    grid = [[next((1 if x.passed else 0 for x in g["gates"] if x.metric == m), 0.5) for m in metrics]
            for g in rows]
    fig, ax = _figure(6.4, 0.6 + 0.35 * len(rows))
    ax.imshow(grid, cmap=ListedColormap([RED, "#eeeeee", GREEN]), vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(metrics)), [str(m) for m in metrics], rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), [g["ref"] for g in rows], fontsize=8)
    ax.set_title(f"{name}: gate outcomes (green pass, red fail)")
    return _png(fig)


def routing_figure(routing: dict) -> str | None:
    if not routing.get("buckets"):
        return None
    fig, ax = _figure()
    names = sorted(routing["shares"])
    ax.stackplot(range(len(routing["buckets"])), [routing["shares"][n] for n in names], labels=names, alpha=0.85)
    step = max(1, len(routing["buckets"]) // 8)
    ax.set_xticks(range(0, len(routing["buckets"]), step), routing["buckets"][::step], rotation=30, ha="right",
                  fontsize=8)
    ax.set_ylim(0, 1)
    ax.set_ylabel("share of turns")
    ax.set_title(f"routing share over time ({routing['turns']} served turns)")
    ax.legend(fontsize=8, loc="upper left")
    return _png(fig)


TONE_COLOURS = {GOOD: GREEN, BAD: RED, NOTE: GREY, PLAIN: GREY}


def html_table(columns: Sequence[Column], rows: Iterable, css_class: str | None = None) -> str:
    """Rows of mint.reporting.tables as an HTML table: the terminal's columns and cells, a cell's lines kept as
    lines, its tone as a colour."""
    head = "<tr>" + "".join(f"<th>{html.escape(c.header)}</th>" for c in columns) + "</tr>"
    body = []
    for row in rows:
        shown = []
        for text, tone in cells(row, columns):
            style = f' style="color:{TONE_COLOURS[tone]}"' if tone else ""
            shown.append(f"<td{style}>" + html.escape(text).replace("\n", "<br>") + "</td>")
        body.append("<tr>" + "".join(shown) + "</tr>")
    opening = f"<table class='{css_class}'>" if css_class else "<table>"
    return opening + head + "".join(body) + "</table>"


def progress_table(progress: list) -> str:
    """Per generation: the held-out metric against its baseline, the experience pool and what was accepted from
    which source, the placebo twin and the gain over it with its reading, the gain over the steps control, and
    the verdict (mint.reporting.tables.generation_rows)."""
    return html_table(GENERATION_COLUMNS, generation_rows(progress), "progress")


def families_table(progress: list) -> str | None:
    """Per generation that learned from experience, each family of the requests its parent answered
    (mint.reporting.tables.family_rows); None when no generation's experience recorded families."""
    rows = family_rows(progress)
    return html_table(FAMILY_COLUMNS, rows, "families") if rows else None


def render_html(report: dict) -> str:
    """The whole page for ``mint.reporting.reports.lineage_report``'s data."""
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>mint report</title><style>",
             "body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}",
             "table{border-collapse:collapse;margin:1em 0;font-size:14px}",
             "td,th{border:1px solid #ddd;padding:4px 8px;text-align:left}th{background:#f5f5f5}",
             "img{max-width:100%;margin:.5em 0}.figs{display:flex;flex-wrap:wrap;gap:1em}",
             ".figs img{width:520px}</style></head><body>",
             "<h1>mint: lineage, metrics and gates</h1>",
             f"<p>workspace <code>{html.escape(report['home'])}</code></p>"]
    routing = routing_figure(report["routing"])
    for name, entry in sorted(report["specialists"].items()):
        parts.append(f"<h2>{html.escape(name)}</h2><p>champion: <b>{html.escape(entry['champion'] or 'none')}</b></p>")
        if entry["progress"]:
            parts.append("<h3>per generation</h3>" + progress_table(entry["progress"]))
            learnable = families_table(entry["progress"])
            if learnable:
                parts.append("<h3>what each generation's experience found learnable, per family of requests</h3>"
                             + learnable)
        parts.append("<h3>lineage</h3>" + html_table(LINEAGE_COLUMNS, lineage_rows(entry["generations"])))
        figures = [(f"{name}: primary metric per generation", progress_figure(name, entry["progress"])),
                   (f"{name}: training loss", loss_figure(name, entry)),
                   (f"{name}: gate outcomes", gates_figure(name, entry))]
        parts.append("<div class='figs'>" + "".join(f"<img alt='{html.escape(alt)}' src='{f}'>"
                                                    for alt, f in figures if f) + "</div>")
        rejected = [e for e in entry["events"] if e["action"] in ("reject", "rollback")]
        if rejected:
            parts.append("<ul>" + "".join(f"<li>{html.escape(e['at'])}: {html.escape(e['action'])} "
                                          f"{html.escape(str(e['new'] or e['old']))}: "
                                          f"{html.escape(e['reason'] or '')}</li>" for e in rejected) + "</ul>")
    parts.append("<h2>routing</h2>")
    parts.append(f"<img alt='routing share' src='{routing}'>" if routing else
                 "<p>no served turns in <code>$MINT_HOME/logs</code> yet</p>")
    parts.append("</body></html>")
    return "\n".join(parts)
