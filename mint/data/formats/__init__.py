"""Every record shape mint reads, one module per format, each with its sniffing and its normalizing into a
canonical ``Episode`` (``mint.data.schema``); ``--format auto`` sniffs each record.

openai (chat logs and server logs; ``mint``: mint's served-turn log), sharegpt, alpaca, prompt_completion
(and OpenAI evals samples), preference (TRL, HH-RLHF, OpenAI preference fine-tuning, UltraFeedback,
LLaMA-Factory's ranking layout), llamafactory (a folder read through its dataset_info.json) and hf (a saved
Hugging Face dataset, each row sniffed). ``messages`` reads one message in any of their shapes (reasoning
and tool-call parts included); ``fields`` reads what they share.
"""
from __future__ import annotations

from typing import Any, Callable

from mint.data.formats import alpaca, openai, preference, prompt_completion, sharegpt
from mint.data.formats.fields import RecordError, episode
from mint.data.schema import Episode, Message, Preference

FORMATS = ("auto", "openai", "sharegpt", "mint", "hf", "alpaca", "prompt_completion", "preference")

Normalizer = Callable[[dict], "tuple[list[Message], Preference | None]"]
# format -> (how it reads a record's messages, the field its messages are named by in a quarantine reason)
_NORMALIZERS: dict[str, tuple[Normalizer, str]] = {
    "openai": (openai.normalize, "messages"), "mint": (openai.normalize_mint, "messages"),
    "sharegpt": (sharegpt.normalize, "conversations"), "alpaca": (alpaca.normalize, "messages"),
    "prompt_completion": (prompt_completion.normalize, "messages"), "preference": (preference.normalize, "messages"),
}
# The first format whose sniffing matches reads the record: the order settles records with the keys of two.
_SNIFFERS: tuple[tuple[str, Callable[[dict], bool]], ...] = (
    ("preference", preference.sniff_conversations), ("alpaca", alpaca.sniff), ("preference", preference.sniff),
    ("sharegpt", sharegpt.sniff), ("mint", openai.sniff_mint), ("openai", openai.sniff),
    ("prompt_completion", prompt_completion.sniff),
)


def sniff_format(record: dict) -> str:
    for name, matches in _SNIFFERS:
        if matches(record):
            return name
    if "prompt" in record:
        raise RecordError("completion", "missing: a prompt-only record has no answer to learn (give `completion`, "
                          "or `chosen` and `rejected`)")
    if "text" in record:
        raise RecordError("text", "plain text (a pretraining corpus) is not a conversation: mint trains on "
                          "messages with an assistant answer")
    raise RecordError("", "unknown record shape: found keys " + ", ".join(repr(k) for k in list(record)[:8])
                      + "; expected `messages` (OpenAI/mint), `conversations` (ShareGPT), `prompt`+`completion`, "
                      "`instruction`+`output` (Alpaca) or `chosen`+`rejected` (preference)")


def normalize(record: Any, fmt: str = "auto") -> Episode:
    """One log record as a canonical episode, without ``specialist`` (unless the record names its own) and
    ``source``."""
    if not isinstance(record, dict):
        raise RecordError("", f"expected a JSON object, got {type(record).__name__}")
    kind = sniff_format(record) if fmt in ("auto", "hf") else fmt
    read, where = _NORMALIZERS[kind]
    messages, pair = read(record)
    return episode(record, messages, pair, where)
