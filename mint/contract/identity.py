"""A contract's identity (name, version, content hash) as the registry stores and compares it.

The one place that computes it: promotion is handed this function by its callers, so the registry never
loads a contract itself.
"""
from __future__ import annotations

from pathlib import Path

from mint.registry.report import ContractIdentity


def contract_identity(path: Path) -> ContractIdentity:
    """The current identity of the contract file ``path``; BadInput when it no longer loads."""
    from mint.contract.schema import load_contract
    contract = load_contract(path, check_data=False)
    return ContractIdentity(contract.name, contract.version, contract.sha256, str(path))
