"""A harness registered under a name of its own that runs the answers' code as coding's does (``mint contract
check`` asks the harness whether it runs code, not its name): tests/contract/test_schema.py adds it to
mint.harness.SPECIALISTS."""
from __future__ import annotations

from dataclasses import dataclass

from mint.harness.coding import CodingHarness
from mint.harness.specialist import Specialist


@dataclass
class DoctestsHarness(CodingHarness):
    name: str = "doctests"


SPECIALIST = Specialist("doctests", DoctestsHarness)
