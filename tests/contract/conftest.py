"""Shared pieces of the contract tests."""
from __future__ import annotations

import json


def card_contract(tmp_path, text: str):
    """A contract (``text``) over a three-card GenUI suite written beside it; its path."""
    rows = [{"messages": [{"role": "user", "content": f"Show a card titled {i}"}],
             "reference": {"type": "Card", "props": {"title": str(i)}}} for i in range(3)]
    (tmp_path / "core.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path = tmp_path / "ui.yaml"
    path.write_text(text)
    return path
