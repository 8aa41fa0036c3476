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
