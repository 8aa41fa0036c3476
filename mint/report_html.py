"""`mint report --html FILE`: the lineage report as one self-contained HTML page.

Figures are drawn with matplotlib (Agg) and embedded as base64 PNGs; styles are inline, so
the page opens with no network and can be mailed or archived as one file.
"""
from __future__ import annotations

import base64
import html
import io

from mint.text import figure

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


def _fmt(value) -> str:
    return "–" if isinstance(value, bool) or not isinstance(value, (int, float)) else figure(value, 3)


def _table(entry: dict) -> str:
    head = "<tr><th>revision</th><th>parent</th><th>method</th><th>status</th><th>primary metric</th>" \
           "<th>baseline</th><th>value</th><th>Δ (95% CI)</th><th>verdict</th></tr>"
    rows = []
    for g in entry["generations"]:
        metric = g["primary"]
        gate = next((x for x in g["gates"] if x.metric == metric), None)
        value = g["metrics"].get(metric) if metric else None
        before = gate.baseline if gate and gate.baseline is not None else g["baseline_metrics"].get(metric)
        delta = gate.paired_delta if gate else None
        if delta is None and isinstance(value, (int, float)) and isinstance(before, (int, float)):
            delta = value - before
        interval = gate.interval if gate else None
        ci = f" [{_fmt(interval[0])}, {_fmt(interval[1])}]" if interval else ""
        verdict = g["verdict"] or "not evaluated"
        color = GREEN if verdict == "pass" else RED if verdict == "fail" else GREY
        verdict += f", promoted by force: {g['forced']}" if g.get("forced") else ""
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in (
            g["ref"], g["parent"] or "–", g["method"] or "–", g["status"], metric or "–",
            _fmt(before), _fmt(value), _fmt(delta) + ci)) + f'<td style="color:{color}">{html.escape(verdict)}</td></tr>')
    return f"<table>{head}{''.join(rows)}</table>"


def _ci(delta, interval) -> str:
    return _fmt(delta) + (f" [{_fmt(interval[0])}, {_fmt(interval[1])}]" if interval else "")


def _per_source(counts: dict) -> str:
    return ", ".join(f"{n} {source}" for source, n in counts.items() if n) or "–"


def progress_table(progress: list) -> str:
    """Per generation: the held-out metric against its baseline, the experience pool and what was accepted from
    which source, the placebo twin and the gain over it with its reading, the gain over the steps control, and
    the verdict."""
    from mint.loop.placebo import EXPERIENCE_EFFECT

    head = "<tr><th>gen</th><th>revision</th><th>loop</th><th>metric</th><th>value</th><th>baseline</th>" \
           "<th>Δ (95% CI)</th><th>other suites: value (Δ, 95% CI)</th><th>pool pass@1</th><th>pool pass@k</th><th>accepted (per source)</th>" \
           "<th>twin</th><th>Δ vs twin (95% CI)</th><th>Δ vs logs-only steps (95% CI)</th><th>reading</th>" \
           "<th>verdict</th></tr>"
    rows = []
    for r in progress:
        e, t = r.experience, r.twin
        cells = [str(r.generation), r.revision, f"{r.recipe} #{r.iteration}" if r.recipe else "–", r.metric or "–",
                 _fmt(r.value), f"{r.baseline} {_fmt(r.baseline_value)}" if r.baseline else "–",
                 _ci(r.delta, r.interval) if r.generation else "",
                 "; ".join(f"{f.metric} {_fmt(f.value)}" + (f" ({_ci(f.delta, f.interval)})" if r.generation else "")
                           for f in r.suites) or "–",
                 _fmt(e.pass_at_1) if e else "–", f"{_fmt(e.pass_at_k)} (k={e.k})" if e and e.k else "–",
                 f"{e.accepted} ({_per_source(e.accepted_per_source)})" if e else "–",
                 f"{t.revision} {_fmt(t.value)}" if t else "–", _ci(t.delta, t.interval) if t else "–",
                 f"{t.steps_control.revision} {_fmt(t.steps_control.value)}: "
                 f"{_ci(t.steps_control.delta, t.steps_control.interval)}" if t and t.steps_control else "–"]
        row = "".join(f"<td>{html.escape(str(c))}</td>" for c in cells)
        reading = t.reading if t else None
        row += f'<td style="color:{GREEN if reading == EXPERIENCE_EFFECT else GREY}">' \
               f"{html.escape(reading or '–')}</td>"
        verdict = "" if not r.generation else f"{r.verdict or 'not evaluated'}, {r.decision or '–'}" + \
            (f" by force: {r.forced}" if r.forced else "")
        color = GREEN if r.decision == "promoted" else RED if r.decision == "rejected" else GREY
        why = f"<br><small>{html.escape(r.reason)}</small>" if r.reason else ""
        rows.append(f"<tr>{row}<td style=\"color:{color}\">{html.escape(verdict)}{why}</td></tr>")
    return f"<table class='progress'>{head}{''.join(rows)}</table>"


def families_table(progress: list) -> str | None:
    """Per generation that learned from experience, each family of the requests its parent answered: where it
    stood (within reach, solved, beyond reach), pass@1 and pass@k as drawn and after verified repair, the requests
    passed always / sometimes / never, the p(1-p) signal and the answers accepted; None when no generation's
    experience recorded families."""
    from mint.loop.results import WITHIN_REACH

    head = "<tr><th>gen</th><th>revision</th><th>family</th><th>reading</th><th>requests</th><th>samples</th>" \
           "<th>pass@1 raw → repaired</th><th>pass@k raw → repaired</th><th>always / sometimes / never</th>" \
           "<th>signal Σ p(1−p)</th><th>accepted</th></tr>"
    rows = []
    for r in progress:
        for f in r.experience.families if r.experience else ():
            cells = [str(r.generation), r.revision, f.family]
            after = [str(f.requests), str(f.samples), f"{_fmt(f.raw_pass_at_1)} → {_fmt(f.repaired_pass_at_1)}",
                     f"{_fmt(f.raw_pass_at_k)} → {_fmt(f.repaired_pass_at_k)} (k={f.k})",
                     f"{f.always} / {f.sometimes} / {f.never}", _fmt(f.signal), str(f.accepted)]
            reading = f'<td style="color:{GREEN if f.reading == WITHIN_REACH else GREY}">{html.escape(f.reading)}</td>'
            rows.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + reading
                        + "".join(f"<td>{html.escape(c)}</td>" for c in after) + "</tr>")
    return f"<table class='families'>{head}{''.join(rows)}</table>" if rows else None


def render_html(report: dict) -> str:
    """The whole page for ``mint.reports.lineage_report``'s data."""
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
        parts.append("<h3>lineage</h3>" + _table(entry))
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
