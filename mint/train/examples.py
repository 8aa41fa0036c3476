"""Training examples from episodes, one builder per method.

sft: the specialist's conversations, the loss on every assistant turn except those disowned (a thumbs-down
     on the last answer without a correction, a turn logged with ``weight: 0``); a correction replaces
     the answer it corrects. Rows carry the episode's tool definitions (``tools``), so the model learns
     its calls seeing the tools that evaluation shows it.
dpo: pairs for the same prompt, an answer rated +1 (chosen) against one rated -1 (rejected), and every
     correction (chosen) against the answer it corrected (rejected).
kto: single answers with their thumbs (+1 desirable, -1 undesirable); corrections are desirable.
grpo: prompts, with the logged answer (or its correction) as the reference the reward may use.

An episode with a preference (a prompt, its chosen and its rejected answer) gives dpo its pair, kto a
desirable and an undesirable answer, sft the chosen answer only (the prompt's turns are context) and grpo
its prompt with the chosen answer as the reference.

Tool calls are written into the assistant text as ``<tool_call>{json}</tool_call>`` (``mint.render``), the form
the agent harness parses, so what the model learns is what the contract scores. Their arguments are written in
the order the tool's schema lists them as required (then its other parameters): the model sees the tools
with their keys sorted, and a call learned in sorted order tends to stop before the last required argument.
"""
from __future__ import annotations

import json
from collections import defaultdict

from mint.errors import BadInput
from mint.render import render_message

METHODS = ("sft", "dpo", "kto", "grpo")
MINIMUM = {"sft": 1, "dpo": 1, "kto": 2, "grpo": 2}
MAX_PAIRS_PER_PROMPT = 4


def _split(episode: dict) -> tuple[list[dict], dict] | None:
    """(the conversation before the last assistant turn, that turn), or None when there is none: the
    turn that feedback (a rating, a correction) is about."""
    messages = [render_message(m, episode.get("tools")) for m in episode["messages"]]
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            if not any(m["role"] == "user" for m in messages[:i]):
                return None
            return messages[:i], messages[i]
    return None


def preference_sides(episode: dict) -> tuple[list[dict], list[dict], list[dict]] | None:
    """(prompt, chosen, rejected) as rendered messages of an episode with a preference, else None."""
    preference = episode.get("preference")
    if not preference:
        return None
    tools = episode.get("tools")
    messages = [render_message(m, tools) for m in episode["messages"]]
    cut = preference["prompt_messages"]
    return messages[:cut], messages[cut:], [render_message(m, tools) for m in preference["rejected"]]


def _answered(episodes):
    """(episode, prompt, last assistant turn, feedback) for every episode that has an answer to learn from;
    preference episodes are built from their two sides instead."""
    for episode in episodes:
        if episode.get("preference"):
            continue
        split = _split(episode)
        if split is not None:
            yield episode, split[0], split[1], episode["feedback"]


def trainable_conversation(episode: dict) -> list[dict] | None:
    """The episode's messages for SFT, every assistant turn trained on except those it disowns.

    Feedback is about the last assistant turn: a correction replaces it, a thumbs-down without one
    disowns it (weight 0). A turn the log marks ``weight: 0``, an empty turn and a turn before any user
    message are shown but not trained on. What follows the last trained turn is dropped; None when no
    turn is left to train on.
    """
    messages = [render_message(m, episode.get("tools")) for m in episode["messages"]]
    feedback = episode.get("feedback") or {}
    last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=None)
    if last is None:
        return None
    if episode.get("preference"):   # the chosen side only: the prompt's turns are context
        for message in messages[:episode["preference"]["prompt_messages"]]:
            if message["role"] == "assistant":
                message["weight"] = 0
    if feedback.get("correction"):
        messages[last] = {"role": "assistant", "content": feedback["correction"]}
    elif feedback.get("rating") is not None and feedback["rating"] < 0:
        messages[last]["weight"] = 0
    seen_user = False
    for message in messages:
        seen_user = seen_user or message["role"] == "user"
        if message["role"] == "assistant" and (not seen_user or not message["content"].strip()):
            message["weight"] = 0
    trained = [i for i, m in enumerate(messages) if m["role"] == "assistant" and m.get("weight") != 0]
    return messages[:trained[-1] + 1] if trained else None


def per_turn_rows(rows: list[dict]) -> list[dict]:
    """SFT rows as one prompt/completion row per trained assistant turn: the form that honours
    ``weight: 0`` under any chat template (the loss falls on the completion only)."""
    out = []
    for row in rows:
        messages = row["messages"]
        for i, message in enumerate(messages):
            if message["role"] == "assistant" and message.get("weight") != 0:
                prompt = [{k: v for k, v in m.items() if k != "weight"} for m in messages[:i]]
                out.append({"prompt": prompt, "completion": [{k: v for k, v in message.items() if k != "weight"}],
                            **({"tools": row["tools"]} if "tools" in row else {})})
    return out


def _tools_column(episode: dict) -> str | None:
    """The episode's tool definitions as TRL's ``tools`` column (JSON text, so rows with different
    schemas fit one table), or None when it has none."""
    tools = [t for t in (episode.get("tools") or []) if isinstance(t, dict)]
    return json.dumps(tools, ensure_ascii=False) if tools else None


def _prompt_key(prompt: list[dict]) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def build_examples(method: str, episodes, *, dataset: str) -> list[dict]:
    """The rows the method's TRL trainer takes; BadInput when there are too few."""
    rows = method_rows(method, episodes)
    needed = MINIMUM[method]
    if len(rows) < needed:
        what = {"sft": "episodes rated >= 0 with an assistant answer",
                "dpo": "preference pairs (chosen/rejected records, a +1 and a -1 answer to one prompt, or a "
                       "correction)",
                "kto": "answers with a thumbs up or down (or a correction, or a chosen/rejected pair)",
                "grpo": "prompts"}[method]
        raise BadInput(f"dataset {dataset} has {len(rows)} usable example(s) for {method}; it needs at least "
                       f"{needed} {what}", field="--data")
    return rows


def left_out(method: str, episodes) -> dict[str, int]:
    """Why episodes give the method no example, by reason (what ``mint train --dry-run`` shows)."""
    episodes = list(episodes)
    reasons: dict[str, int] = {}

    def count(why: str) -> None:
        reasons[why] = reasons.get(why, 0) + 1

    ratings: dict[str, set] = defaultdict(set)   # prompt -> the ratings of its answers, for dpo's pairs
    for episode, prompt, _answer, feedback in _answered(episodes):
        if feedback["rating"] in (1, -1):
            ratings[_prompt_key(prompt)].add(feedback["rating"])
    for episode in episodes:
        feedback = episode.get("feedback") or {}
        split = _split(episode) if not episode.get("preference") else None
        if method == "sft":
            if trainable_conversation(episode) is None:
                count("no answer left to train on (rated down without a correction, or weight 0)")
        elif episode.get("preference"):
            continue   # a pair for dpo, two labelled answers for kto, a prompt for grpo
        elif split is None:
            count("no assistant answer after a user turn")
        elif method == "dpo" and not feedback.get("correction"):
            if feedback.get("rating") not in (1, -1):
                count("no preference: unrated, without chosen/rejected or a correction")
            elif len(ratings[_prompt_key(split[0])]) < 2:
                count("rated, but no answer to the same prompt is rated the other way")
        elif method == "kto" and feedback.get("rating") not in (1, -1) and not feedback.get("correction"):
            count("unrated: kto needs a thumbs up or down, a correction or a chosen/rejected pair")
    return reasons


def method_rows(method: str, episodes) -> list[dict]:
    """The rows the method's TRL trainer takes, however few."""
    if method not in METHODS:
        raise BadInput(f"unknown method {method!r} (expected {', '.join(METHODS)})", field="--method")
    rows: list[dict] = []
    episodes = list(episodes) if method != "sft" else episodes
    answered = _answered(episodes)
    sides = [s for s in (preference_sides(e) for e in episodes) if s is not None] if method != "sft" else []
    if method == "sft":
        for episode in episodes:
            messages = trainable_conversation(episode)
            if messages is not None:
                rows.append({"messages": messages, "tools": _tools_column(episode)})
        if not any(row["tools"] for row in rows):
            rows = [{"messages": row["messages"]} for row in rows]
    elif method == "dpo":
        by_prompt: dict[str, dict] = defaultdict(lambda: {"good": [], "bad": [], "prompt": None})
        for _episode, prompt, answer, feedback in answered:
            if feedback["correction"] and feedback["correction"].strip() != answer["content"].strip():
                rows.append({"prompt": prompt, "chosen": [{"role": "assistant", "content": feedback["correction"]}],
                             "rejected": [answer]})
            group = by_prompt[_prompt_key(prompt)]
            group["prompt"] = prompt
            if feedback["rating"] == 1:
                group["good"].append(answer)
            elif feedback["rating"] == -1:
                group["bad"].append(answer)
        for group in by_prompt.values():
            pairs = [(g, b) for g in group["good"] for b in group["bad"] if g["content"] != b["content"]]
            for good, bad in pairs[:MAX_PAIRS_PER_PROMPT]:
                rows.append({"prompt": group["prompt"], "chosen": [good], "rejected": [bad]})
        for prompt, chosen, rejected in sides:
            rows.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    elif method == "kto":
        for _episode, prompt, answer, feedback in answered:
            if feedback["rating"] in (1, -1):
                rows.append({"prompt": prompt, "completion": [answer], "label": feedback["rating"] == 1})
            if feedback["correction"]:
                rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": feedback["correction"]}],
                             "label": True})
        for prompt, chosen, rejected in sides:
            rows.append({"prompt": prompt, "completion": chosen, "label": True})
            rows.append({"prompt": prompt, "completion": rejected, "label": False})
    else:   # grpo
        for episode, prompt, answer, feedback in answered:
            reference = feedback["correction"] or (answer["content"] if (feedback["rating"] or 0) >= 0 else None)
            rows.append({"prompt": prompt, "reference": reference or "",
                         "tools": json.dumps(episode.get("tools") or [])})
        for episode, (prompt, chosen, _rejected) in zip([e for e in episodes if e.get("preference")], sides):
            answers = [m["content"] for m in chosen if m["role"] == "assistant"]
            rows.append({"prompt": prompt, "reference": answers[-1] if answers else "",
                         "tools": json.dumps(episode.get("tools") or [])})
    return rows
