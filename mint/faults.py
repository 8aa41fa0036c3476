"""Fault injection for crash tests.

``MINT_FAULT=<point>`` makes the process SIGKILL itself when it reaches
``checkpoint("<point>")``, so tests can prove that a kill at that step leaves
nothing half-written. ``MINT_FAULT=<point>@N`` kills at the Nth time the process
reaches it (a loop passes the same point in several steps: ``ingest.version_published@3``
is the third dataset version it publishes). Unset in normal use, where a checkpoint
costs one environment lookup.
"""
from __future__ import annotations

import os
import signal
from collections import Counter

_reached: Counter = Counter()


def checkpoint(point: str) -> None:
    fault = os.environ.get("MINT_FAULT")
    if not fault:
        return
    name, _, nth = fault.partition("@")
    if name != point:
        return
    _reached[point] += 1
    if _reached[point] == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)
