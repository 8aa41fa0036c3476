"""A row's text as it is decoded, for listeners: whole characters, in pieces that join to the final answer."""
from __future__ import annotations

from typing import Callable

# called after every decode step of its row with the text that became final (often ""); False: stop the row
TextListener = Callable[[str], bool]


class StopFlag:
    """A listener that wants no text, only a way to stop its row: a non-streamed request whose client left
    calls ``stop`` and the row ends ``cancelled`` at its next step (nothing is decoded for it meanwhile)."""

    wants_text = False

    def __init__(self) -> None:
        self.stopped = False

    def stop(self) -> None:
        self.stopped = True

    def __call__(self, _delta: str) -> bool:
        return not self.stopped


def final_text(tokenizer, tokens: list[int]) -> str:
    """The answer a row's tokens make: decoded without special tokens, stripped."""
    return tokenizer.decode(tokens, skip_special_tokens=True).strip()


class IncrementalText:
    """The text of a growing token list, handed out in pieces whose concatenation is the final answer.

    The final answer is ``final_text(tokens)``, so leading whitespace is never sent and trailing whitespace
    waits until more text follows it; a trailing U+FFFD (an incomplete UTF-8 sequence, the rest of it still to
    come in the next token) waits too.
    """

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.sent = ""

    def push(self, tokens: list[int]) -> str:
        """The new text that ``tokens`` make final (often "")."""
        ready = final_text(self.tokenizer, tokens).rstrip("\ufffd").rstrip()
        if not ready.startswith(self.sent):   # decoding revised earlier text: wait until it agrees again
            return ""
        delta, self.sent = ready[len(self.sent):], ready
        return delta

    def finish(self, tokens: list[int]) -> tuple[str, str]:
        """(the final text, what of it was not sent yet)."""
        final = final_text(self.tokenizer, tokens)
        return final, final[len(self.sent):] if final.startswith(self.sent) else ""


class StopAt:
    """A listener before another (``inner``, or none) that ends its row at the first of ``stops`` (OpenAI's
    ``stop``): the text before it is the answer, the stop and what follows are never passed on. A piece that
    may be the start of a stop is held back until the next piece says whether it is one (``flush`` hands the
    rest on when the row ends without one). ``cut`` is the answer's length once a stop was found (None before);
    ``text`` all it was told."""

    wants_text = True

    def __init__(self, stops: tuple[str, ...], inner: TextListener | None = None) -> None:
        self.stops, self.inner = stops, inner
        self.text = ""
        self.passed = 0                  # how much of ``text`` went on to ``inner``
        self.cut: int | None = None

    def _pass(self, end: int) -> bool:
        """Hand ``inner`` the text up to ``end`` not handed on yet (nothing to one that wants no text)."""
        piece, self.passed = self.text[self.passed:end], max(self.passed, end)
        if self.inner is None:
            return True
        return bool(self.inner(piece if getattr(self.inner, "wants_text", True) else ""))

    def __call__(self, delta: str) -> bool:
        if self.cut is not None:
            return False
        start = max(0, len(self.text) - max(map(len, self.stops)) + 1)   # a stop may begin in earlier text
        self.text += delta
        found = [at for at in (self.text.find(stop, start) for stop in self.stops) if at >= 0]
        if found:
            self.cut = min(found)
            self._pass(self.cut)
            return False
        held = max((n for stop in self.stops for n in range(1, len(stop)) if self.text.endswith(stop[:n])), default=0)
        return self._pass(len(self.text) - held)

    def flush(self) -> None:
        """The row ended without a stop: hand on what was held back."""
        if self.cut is None and self.passed < len(self.text) and self.inner is not None:
            self._pass(len(self.text))
