"""Label an episode with the specialist that should learn from it."""
from __future__ import annotations

import re

from mint.project import Project

UNLABELED = "unlabeled"   # what ingest wrote for "no rule labels it" before episodes went to a fallback


class Labeler:
    """The record's own label; else the specialist that served it (``served_by: genui:v1``), when that is a
    specialist of ``mint.yaml``; else the ``tool_use`` specialist for an episode with tools; else the specialist
    whose keywords its user turns mention most (ties: the first in ``mint.yaml``), when that is decisive: two of
    its one-word keywords or one of its phrases. One common word is no evidence (a chat turn that says "my card
    is ..." is not a UI request). An episode no rule labels is for the router champion, else the fallback
    specialist (``mint.data.ingest``).
    """

    def __init__(self, project: Project) -> None:
        self.names = set(project.names)
        self.tool_specialist = project.tool_specialist
        # single words are looked up in a set of the text's words; phrases by substring
        self.words: dict[str, list[int]] = {}
        self.phrases: list[tuple[str, str, int]] = []   # (first word, " the phrase ", rank)
        self.specialists = [spec.name for spec in project.specialists]
        for rank, spec in enumerate(project.specialists):
            for keyword in spec.keywords:
                tokens = _WORD.findall(keyword.lower())
                phrase = " ".join(tokens)
                if len(tokens) == 1:
                    self.words.setdefault(phrase, []).append(rank)
                else:
                    self.phrases.append((tokens[0], f" {phrase} ", rank))

    def label(self, own: str | None, user_text: str, has_tools: bool,
              served_by: str | None = None) -> tuple[str | None, str]:
        """(specialist, how): how is ``record``, ``served_by``, ``tools`` or ``keywords``; (None, ``none``) when
        no rule decides. ``user_text``: the episode's user turns; ``has_tools``: it defines tools, calls them or
        has tool results."""
        if own is not None and own != UNLABELED:   # what older mint wrote for none (a record it exported): anew
            return own, "record"
        if served_by is not None:
            server = served_by.partition(":")[0]   # coding:v3 -> coding; "base" is no specialist
            if server in self.names:
                return server, "served_by"
        if self.tool_specialist and has_tools:
            return self.tool_specialist, "tools"
        winner, decisive = self.keywords(user_text)
        if winner is not None and decisive:
            return winner, "keywords"
        return None, "none"

    def keywords(self, text: str) -> tuple[str | None, bool]:
        """(the specialist with the most distinct keywords in ``text``, whether that decides: two one-word
        keywords or a phrase); (None, False) when no keyword appears."""
        words = _WORD.findall(text.lower())
        distinct = set(words)
        hits = [0] * len(self.specialists)
        phrased = [False] * len(self.specialists)
        for word in distinct:
            for rank in self.words.get(word, ()):
                hits[rank] += 1
        spaced = None
        for first, phrase, rank in self.phrases:
            if first in distinct:   # most texts hold no phrase's first word: no substring search
                if spaced is None:
                    spaced = " " + " ".join(words) + " "
                if phrase in spaced:
                    hits[rank] += 1
                    phrased[rank] = True
        best = max(range(len(hits)), key=lambda r: (hits[r], -r)) if hits else 0
        if not hits or hits[best] == 0:
            return None, False
        return self.specialists[best], hits[best] >= 2 or phrased[best]


_WORD = re.compile(r"\w+")
