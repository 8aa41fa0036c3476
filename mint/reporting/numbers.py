"""Numbers as mint's tables show them, in the terminal and on the HTML page alike: a value, a delta with its sign,
a 95% interval, seconds. Every table formats its numbers here, so one figure reads the same wherever it is shown.
"""
from __future__ import annotations

from collections.abc import Sequence

# the figures of a loop's generations, their families and a lineage: three significant digits, beside intervals of
# about that precision; a report's own metrics keep four
SUMMARY_DIGITS = 3


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def value(x, digits: int = 4, none: str = "-") -> str:
    """A number as people read it in a table: ``0.8958``, ``38,460`` (never ``3.846e+04``), ``0`` for a float
    sum's ``2.8e-17``; ``none`` for a missing value; anything that is not a number as its text."""
    if x is None:
        return none
    if not _is_number(x):
        return str(x)
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    return f"{round(x, 6) + 0.0:.{digits}g}"


def delta(x, digits: int = 4, none: str = "-") -> str:
    """A change, with its sign: ``+0.2``, ``-0.05``, ``0`` (no sign where it rounds to nothing)."""
    shown = value(x, digits, none)
    return "+" + shown if _is_number(x) and shown != "0" and not shown.startswith("-") else shown


def interval(bounds: Sequence | None, digits: int = 4) -> str:
    """A 95% interval as ``[low, high]``; empty where there is none."""
    if not bounds or len(bounds) != 2:
        return ""
    return f"[{value(bounds[0], digits)}, {value(bounds[1], digits)}]"


def delta_with_interval(x, bounds: Sequence | None, digits: int = 4) -> str:
    """A paired delta and its interval: ``+0.2 [0.1, 0.3]``, or the delta alone where no interval was recorded."""
    shown = interval(bounds, digits)
    return delta(x, digits) + (" " + shown if shown else "")


def seconds(x, none: str = "-") -> str:
    """A duration in whole seconds: ``41s``."""
    return f"{x:.0f}s" if _is_number(x) else none


def scientific(x, none: str = "-") -> str:
    """A small rate that ``value`` would round away (a learning rate): ``2.00e-04``."""
    return f"{x:.2e}" if _is_number(x) else none
