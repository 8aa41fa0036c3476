"""Label an episode with the specialist that should learn from it."""
from __future__ import annotations

import re

from mint.project import Project

UNLABELED = "unlabeled"


class Labeler:
    """The record's own label; else the specialist that served it (``served_by: genui:v1``), when that
    is a specialist of ``mint.yaml``; else the ``tool_use`` specialist for an episode with tools; else the
    specialist whose keywords its user turns mention most (ties: the first in ``mint.yaml``); else unlabeled.
    """

    def __init__(self, project: Project) -> None:
        self.names = set(project.names)
        self.tool_specialist = project.tool_specialist
        # single words are looked up in a set of the text's words; phrases by substring
        self.words: dict[str, list[int]] = {}
        self.phrases: list[tuple[str, int]] = []
        self.specialists = [spec.name for spec in project.specialists]
        for rank, spec in enumerate(project.specialists):
            for keyword in spec.keywords:
                tokens = _WORD.findall(keyword.lower())
                phrase = " ".join(tokens)
                if len(tokens) == 1:
                    self.words.setdefault(phrase, []).append(rank)
                else:
                    self.phrases.append((f" {phrase} ", rank))

    def label(self, own: str | None, messages: list[dict], tools: list[dict],
              served_by: str | None = None) -> tuple[str, str]:
        """(specialist, how): how is ``record``, ``served_by``, ``tools``, ``keywords`` or ``none``.

        The keyword winner is the specialist with the most distinct keywords in the user turns.
        """
        if own is not None and own != UNLABELED:   # mint's own word for none (a record it exported): label anew
            return own, "record"
        if served_by is not None:
            server = served_by.partition(":")[0]   # coding:v3 -> coding; "base" is no specialist
            if server in self.names:
                return server, "served_by"
        if self.tool_specialist and (tools or any("tool_calls" in m or m["role"] == "tool" for m in messages)):
            return self.tool_specialist, "tools"
        words = _WORD.findall("\n".join(m["content"] for m in messages if m["role"] == "user").lower())
        hits = [0] * len(self.specialists)
        for word in set(words):
            for rank in self.words.get(word, ()):
                hits[rank] += 1
        if self.phrases:
            spaced = " " + " ".join(words) + " "
            for phrase, rank in self.phrases:
                if phrase in spaced:
                    hits[rank] += 1
        best = max(range(len(hits)), key=lambda r: (hits[r], -r)) if hits else 0
        if not hits or hits[best] == 0:
            return UNLABELED, "none"
        return self.specialists[best], "keywords"


_WORD = re.compile(r"\w+")
