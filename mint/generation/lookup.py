"""Prompt lookup decoding: a greedy row drafts the tokens that followed the last earlier occurrence of its latest
1-3 tokens in its own text, and one step checks them all; the row keeps the drafted tokens the model picks and
one more, so its output is the same as without drafts."""
from __future__ import annotations

# a row's draft follows the last earlier occurrence of its longest recent n-gram, n <= this
LOOKUP_NGRAM = 3


class Lookup:
    """Where each n-gram (n = 1..LOOKUP_NGRAM) of a row's text (prompt and tokens) last occurred with a token
    after it, kept as the text grows, so a draft costs a dict lookup per n, not a search of the text."""

    def __init__(self, ids: list[int]):
        self.ids: list[int] = []
        self.after: dict[tuple[int, ...], int] = {}   # n-gram -> where the text continued after it, last seen
        self.extend(ids)

    def extend(self, tokens) -> None:
        for token in tokens:
            self.ids.append(token)
            end = len(self.ids) - 1   # the n-grams ending just before the new token are now followed by it
            for n in range(1, min(LOOKUP_NGRAM, end) + 1):
                self.after[tuple(self.ids[end - n:end])] = end

    def draft(self, limit: int) -> list[int]:
        """Up to ``limit`` tokens: what followed the last earlier occurrence of the longest suffix n-gram."""
        if limit <= 0:
            return []
        for n in range(min(LOOKUP_NGRAM, len(self.ids)), 0, -1):
            start = self.after.get(tuple(self.ids[-n:]))
            if start is not None:
                return self.ids[start:start + limit]
        return []


def take_checked(row, draft: list[int], picks: list[int], finished, mask, index: int, width: int) -> bool:
    """Take a row's greedy picks after one step over its last token and ``draft``: ``picks[j]`` is the
    model's choice after column j, so it counts while every drafted token before it was the one picked. The
    columns of drafted tokens not taken are masked out for good (the cache keeps them, no step reads them).
    Whether the row finished."""
    taken = 0
    for token in picks:
        taken += 1
        if finished(row, token):
            return True
        if taken > len(draft) or draft[taken - 1] != token:
            break
    if taken < width:
        mask[index, mask.shape[1] - width + taken:] = 0
    return False
