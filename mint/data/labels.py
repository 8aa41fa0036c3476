"""Label an episode with the specialist that should learn from it."""
from __future__ import annotations

import re

from mint.project import Project

UNLABELED = "unlabeled"


class Labeler:
    """The record's own label; else the ``tool_use`` specialist for an episode with tools; else the
    specialist whose keywords its user turns mention most (ties: the first in ``mint.yaml``); else unlabeled.
    """

    def __init__(self, project: Project) -> None:
        self.names = set(project.names)
        self.tool_specialist = next((s.name for s in project.specialists if s.tool_use), None)
        self.patterns = []
        for spec in project.specialists:
            if spec.keywords:
                words = sorted(spec.keywords, key=len, reverse=True)
                alternation = "|".join(re.escape(w).replace(r"\ ", r"\s+") for w in words)
                self.patterns.append((spec.name, re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.I)))

    def label(self, own: str | None, messages: list[dict], tools: list[dict]) -> tuple[str, str]:
        """(specialist, how): how is ``record``, ``tools``, ``keywords`` or ``none``."""
        if own is not None:
            return own, "record"
        if self.tool_specialist and (tools or any("tool_calls" in m or m["role"] == "tool" for m in messages)):
            return self.tool_specialist, "tools"
        text = "\n".join(m["content"] for m in messages if m["role"] == "user")
        best, best_hits = UNLABELED, 0
        for name, pattern in self.patterns:
            hits = len(pattern.findall(text))
            if hits > best_hits:
                best, best_hits = name, hits
        return best, ("keywords" if best_hits else "none")
