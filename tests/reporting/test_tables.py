"""The tables the terminal and the HTML page both draw: one loop history, the same columns and cells in each."""
import dataclasses
import io
import json
from html.parser import HTMLParser

from rich.console import Console

from mint.cli import main
from mint.reporting.tables import (
    FAMILY_COLUMNS,
    GATE_COLUMNS,
    GENERATION_COLUMNS,
    LINEAGE_COLUMNS,
    cells,
    family_rows,
    gate_rows,
    generation_rows,
    lineage_rows,
)
from tests.reporting.test_reports import FAMILY_BEYOND_REACH, FAMILY_WITHIN_REACH, gated_report


def loop_history(ws, candidate, report_for):
    """coding:v1 from the base; coding:v2 learned from experience (retention suite beside its core), rejected, with
    its placebo twin coding:v3 and its steps control coding:v4; as the loop's state records them."""
    from mint.loop.runner import GenerationRow
    from mint.registry.promotion import reject

    v1 = candidate()
    v2, twin, control = candidate(parent=v1.id), candidate(parent=v1.id), candidate(parent=v1.id)
    gated_report(ws, report_for, v1, 0.30, 0.10, True, retention=(0.9, 0.0))
    gated_report(ws, report_for, v2, 0.50, 0.30, True, baseline_id=v1.id, retention=(0.85, 0.9))
    twin_report = gated_report(ws, report_for, twin, 0.35, 0.30, True, baseline_id=v1.id)
    control_report = gated_report(ws, report_for, control, 0.45, 0.30, True, baseline_id=v1.id)
    for revision in (twin, control):
        reject(ws, revision.ref, why="a control")
    reject(ws, v2.ref, why="forgetting: retention fell")
    experience = {"pool": {"pass@1": 0.25, "pass@4": 0.5, "k": 4, "prompts_between": 3}, "prompts": 8,
                  "accepted": 5, "kept_per_source": {"served": 6, "jsonl:requests.jsonl": 2},
                  "accepted_per_source": {"served": 4, "jsonl:requests.jsonl": 1},
                  "families": [FAMILY_WITHIN_REACH, FAMILY_BEYOND_REACH]}
    comparison = {"revision": twin.ref, "revision_id": twin.id, "report": str(twin_report), "metric": "core.pass_at_1",
                  "vs_twin": {"delta": 0.15, "interval": [-0.05, 0.35], "n": 20}, "verdict": "no experience effect",
                  "steps_control": {"revision": control.ref, "revision_id": control.id, "report": str(control_report),
                                    "vs_control": {"delta": 0.05, "interval": [-0.1, 0.2], "n": 20}}}
    rows = [GenerationRow(1, "coding", v1.ref, "pass", v1.ref, "base", {}),
            GenerationRow(2, "coding", v2.ref, "pass", v1.ref, v1.id, {}, "forgetting: retention fell", experience,
                          comparison)]
    state = ws.home / "loops" / "nightly" / "state.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"steps": {}, "generations": [dataclasses.asdict(r) for r in rows]}))


def terminal_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """Each rich table in ``text`` (drawn at its natural width) as its headers and rows of cells, a cell's lines
    joined by newlines; a row starts where its first cell has text."""
    tables: list[tuple[list[str], list[list[str]]]] = []
    for line in text.splitlines():
        if line.startswith("┏"):
            tables.append(([], []))
        elif line.startswith("┃"):
            tables[-1][0].extend(part.strip() for part in line.strip("┃").split("┃"))
        elif line.startswith("│"):
            parts = [part.strip() for part in line.strip("│").split("│")]
            rows = tables[-1][1]
            if parts[0] or not rows:
                rows.append(parts)
            else:
                rows[-1] = [f"{cell}\n{more}" if more else cell for cell, more in zip(rows[-1], parts)]
    return tables


class _PageTables(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tables: list[tuple[list[str], list[list[str]]]] = []
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append(([], []))
        elif tag == "tr":
            self.tables[-1][1].append([])
        elif tag in ("td", "th"):
            self.cell = []
        elif tag == "br" and self.cell is not None:
            self.cell.append("\n")

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None:
            headers, rows = self.tables[-1]
            (headers if tag == "th" else rows[-1]).append("".join(self.cell))
            self.cell = None
        elif tag == "table":
            headers, rows = self.tables[-1]
            rows[:] = [row for row in rows if row]         # the header's own <tr>


def page_tables(page: str) -> list[tuple[list[str], list[list[str]]]]:
    parser = _PageTables()
    parser.feed(page)
    return parser.tables


def texts(rows, columns) -> list[list[str]]:
    return [[text for text, _tone in cells(row, columns)] for row in rows]


def headers(columns) -> list[str]:
    return [c.header for c in columns]


def test_the_terminal_and_the_page_show_the_same_generations_lineage_and_families(ws, candidate, report_for,
                                                                                   monkeypatch, capsys):
    from mint.cli import loop as loop_cli
    from mint.loop.progress import generation_progress
    from mint.loop.runner import LoopResult
    from mint.reporting.html import render_html
    from mint.reporting.reports import lineage_report

    loop_history(ws, candidate, report_for)
    progress = generation_progress(ws)["coding"]
    terminal = io.StringIO()
    monkeypatch.setattr(loop_cli, "out", Console(file=terminal, width=10_000, color_system=None))
    loop_cli._render_progress(LoopResult("nightly", "ran", 2, 0, progress={"coding": progress}))   # `mint loop`
    assert main(["report"]) == 0                                                                    # `mint report`
    (generations,), (lineage, families) = terminal_tables(terminal.getvalue()), terminal_tables(capsys.readouterr().out)
    page = page_tables(render_html(lineage_report(ws)))                                  # `mint report --html`
    assert len(page) == 3
    for columns, rows, shown, drawn in (
            (GENERATION_COLUMNS, generation_rows(progress), generations, page[0]),
            (FAMILY_COLUMNS, family_rows(progress), families, page[1]),
            (LINEAGE_COLUMNS, lineage_rows(lineage_report(ws)["specialists"]["coding"]["generations"]), lineage,
             page[2])):
        assert shown[0] == drawn[0] == headers(columns)
        assert shown[1] == drawn[1] == texts(rows, columns)
    # what the rows hold: every figure of the generation that learned from experience, as both show it
    (second,) = [row for row in page[0][1] if row[1] == "coding:v2"]
    assert dict(zip(headers(GENERATION_COLUMNS), second)) == {
        "gen": "2", "revision": "coding:v2", "loop": "nightly #2", "metric": "core.pass_at_1", "value": "0.5",
        "Δ vs baseline (95% CI)": "coding:v1 0.3: +0.2 [0.1, 0.3]",
        "other suites: value (Δ, 95% CI)": "retention.pass_at_1 0.85 (-0.05 [-0.1, 0])",
        "pool pass@1 / pass@k": "0.25 / 0.5 (k=4)", "accepted (per source)": "5 (4 served, 1 jsonl:requests.jsonl)",
        "Δ vs twin (95% CI)": "coding:v3 0.35: +0.15 [-0.05, 0.35]", "reading": "no experience effect",
        "Δ vs logs-only steps (95% CI)": "coding:v4 0.45: +0.05 [-0.1, 0.2]",
        "verdict": "pass, rejected\nforgetting: retention fell"}
    assert [row[:4] for row in families[1]] == [["2", "coding:v2", "Card", "within reach"],
                                                 ["2", "coding:v2", "Table", "beyond reach"]]


def test_report_show_draws_the_reports_gate_rows(ws, candidate, report_for, capsys):
    from mint.reporting.reports import load_report

    revision = candidate()
    path = gated_report(ws, report_for, revision, 0.25, 0.30, False)
    assert main(["report", "show", str(path)]) == 0
    (shown,) = terminal_tables(capsys.readouterr().out)
    rows = gate_rows(load_report(ws, str(path)))
    assert shown == (headers(GATE_COLUMNS), texts(rows, GATE_COLUMNS))
    assert texts(rows, GATE_COLUMNS) == [["core.pass_at_1", "0.25", "0.3", "no_regression 0.0", "FAIL"],
                                         ["latency.p95_ms", "800", "-", "max 2000", "pass"]]
