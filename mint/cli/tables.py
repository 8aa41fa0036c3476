"""The tables of mint.reporting.tables in the terminal: the HTML page's columns and cells, a tone as a colour."""
from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from mint.reporting.tables import BAD, GOOD, NOTE, Column, cells

TONE_STYLES = {GOOD: "green", BAD: "red", NOTE: "yellow"}


def rich_table(title: str, columns: Sequence[Column], rows: Iterable) -> Table:
    """``rows`` under ``columns``, each cell's text as it is (never read as markup), folded where it is too wide."""
    table = Table(title=escape(title))
    for column in columns:
        table.add_column(escape(column.header), overflow="fold")
    for row in rows:
        table.add_row(*(Text(text, style=TONE_STYLES.get(tone or "", "")) for text, tone in cells(row, columns)))
    return table
