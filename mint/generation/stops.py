"""Where a row stops: the one EOS rule, and the answer ends a contract may ask for (``stop_at_answer_end``)."""
from __future__ import annotations

from typing import Callable

from mint.jsontext import json_bracket_end

# a specialist says which kinds of answer end its scorer reads (mint.harness.Specialist.answer_ends)
_CLOSERS = ("}", "]", "`", ">")


def answer_complete(text: str, kinds: tuple[str, ...]) -> bool:
    """Whether ``text`` so far is one whole answer of a kind in ``kinds``, so more tokens cannot improve it:
    a JSON value (the text starts with ``{`` or ``[``), a fenced block (starts with a fence), or
    ``<tool_call>`` blocks followed by something that does not open another. Text before the answer
    (prose first) never counts as complete: the model may still be on its way to it."""
    stripped = text.lstrip()
    if not stripped:
        return False
    if "json" in kinds and stripped[0] in "{[":
        return json_bracket_end(stripped) is not None
    if "fence" in kinds and stripped.startswith("```"):
        opened = stripped.find("\n")   # the fence's own line (```python) ends here; the block closes after it
        return opened != -1 and "```" in stripped[opened:]
    if "tool_call" in kinds and stripped.startswith("<tool_call>"):
        rest = stripped
        while rest.startswith("<tool_call>"):
            end = rest.find("</tool_call>")
            if end == -1:
                return False
            rest = rest[end + len("</tool_call>"):].lstrip()
        # another call may follow; only a character that cannot start one ends the answer
        return bool(rest) and not "<tool_call>".startswith(rest[:len("<tool_call>")])
    return False


def closing_tokens(tokenizer) -> Callable[[int], bool]:
    """Whether a token carries a closing character: only such a token can complete an answer, so the
    (decoding) answer check runs only after one."""
    closing: dict[int, bool] = {}

    def closes(token_id: int) -> bool:
        if token_id not in closing:
            closing[token_id] = any(c in tokenizer.decode([token_id]) for c in _CLOSERS)
        return closing[token_id]

    return closes


def eos_ids(model, tokenizer) -> frozenset[int]:
    """The tokens that end an answer: the base's generation config's EOS tokens and the tokenizer's, both (as
    vLLM stops): a chat template ends a turn with the tokenizer's, a config may name more."""
    configured = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    ids = set(configured if isinstance(configured, (list, tuple)) else [configured] if configured is not None else [])
    if tokenizer.eos_token_id is not None:
        ids.add(tokenizer.eos_token_id)
    return frozenset(ids)
