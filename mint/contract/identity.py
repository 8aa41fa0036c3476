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
    from mint.yamlfile import load_yaml

    doc = load_yaml(path)
    data = doc.data
    if isinstance(data, dict) and "heldout" in data:    # the router's contract (held-out turns), until it is
        from mint.mol.router_training import router_contract_sha256    # an ordinary contract

        name, version = data.get("contract"), data.get("version")
        if not isinstance(name, str) or not name:
            raise doc.error("contract", "expected the contract's name")
        if not isinstance(version, int) or isinstance(version, bool):
            raise doc.error("version", "expected a version number (1 or more)")
        return ContractIdentity(name, version, router_contract_sha256(path), str(path))
    contract = load_contract(path, check_data=False)
    return ContractIdentity(contract.name, contract.version, contract.sha256, str(path))
