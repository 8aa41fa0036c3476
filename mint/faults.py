"""Fault injection for crash tests.

``MINT_FAULT=<point>`` makes the process SIGKILL itself when it reaches
``checkpoint("<point>")``, so tests can prove that a kill at that step leaves
nothing half-written. Unset in normal use, where a checkpoint costs one
environment lookup.
"""
from __future__ import annotations

import os
import signal


def checkpoint(point: str) -> None:
    if os.environ.get("MINT_FAULT") == point:
        os.kill(os.getpid(), signal.SIGKILL)
