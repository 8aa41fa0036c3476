"""OpenAI chat logs (``{"messages": [...], "tools": [...]}``), server logs (``{"request": {"messages"},
"response": {"choices": [{"message"}]}}``) and mint's own served-turn logs (messages with ``feedback`` and
``served_by``). A ``chosen``/``rejected`` pair beside the messages is LLaMA-Factory's ranking layout."""
from __future__ import annotations

from mint.data.formats import preference
from mint.data.formats.fields import RecordError
from mint.data.formats.messages import message_list, system
from mint.data.schema import Message, Preference


def sniff_mint(record: dict) -> bool:
    return "messages" in record and (isinstance(record.get("feedback"), dict) or "served_by" in record)


def sniff(record: dict) -> bool:
    return "messages" in record or "request" in record


def normalize(record: dict) -> tuple[list[Message], Preference | None]:
    return preference.with_ranking(record, _messages(record))


def normalize_mint(record: dict) -> tuple[list[Message], Preference | None]:
    return _messages(record), None


def _messages(record: dict) -> list[Message]:
    raw = record.get("messages")
    if raw is None and isinstance(record.get("request"), dict):
        raw = record["request"].get("messages")
        if isinstance(raw, list):
            raw = [*raw, _response_message(record)]
    if raw is None:
        raise RecordError("messages", "missing")
    if not isinstance(raw, list):
        raise RecordError("messages", f"expected a list, got {type(raw).__name__}")
    text = system(record)
    own_system = raw and isinstance(raw[0], dict) and raw[0].get("role") in ("system", "developer")
    messages = [Message("system", text)] if text and not own_system else []
    return messages + message_list(raw, "messages")


def _response_message(record: dict) -> dict:
    """The answer of a server log, with its finish_reason; a failed or missing answer is a RecordError
    (a user-only episode would teach nothing and look like an unanswered turn)."""
    response = record.get("response")
    error = record.get("error") or (response.get("error") if isinstance(response, dict) else None)
    if error:
        detail = error.get("message", error) if isinstance(error, dict) else error
        raise RecordError("response", f"the request failed: {str(detail)[:200]}")
    if not isinstance(response, dict):
        raise RecordError("response", "missing: the request got no answer")
    choices = response.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict) \
            or not isinstance(choices[0].get("message"), dict):
        raise RecordError("response.choices", "no answer (expected choices[0].message)")
    answer = dict(choices[0]["message"])
    if isinstance(choices[0].get("finish_reason"), str):
        answer.setdefault("finish_reason", choices[0]["finish_reason"])
    return answer
