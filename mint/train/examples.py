"""Training examples from episodes, one builder per method.

sft: the specialist's episodes rated >= 0 (unrated counts as 0), the user's correction replacing the
     answer where there is one; the loss falls on assistant tokens only.
dpo: pairs for the same prompt, an answer rated +1 (chosen) against one rated -1 (rejected), and every
     correction (chosen) against the answer it corrected (rejected).
kto: single answers with their thumbs (+1 desirable, -1 undesirable); corrections are desirable.
grpo: prompts, with the logged answer (or its correction) as the reference the reward may use.

Tool calls are written into the assistant text as ``<tool_call>{json}</tool_call>``, the same form the
agent harness parses, so what the model learns is what the contract scores.
"""
from __future__ import annotations

import json
from collections import defaultdict

from mint.errors import BadInput

METHODS = ("sft", "dpo", "kto", "grpo")
MINIMUM = {"sft": 1, "dpo": 1, "kto": 2, "grpo": 2}
MAX_PAIRS_PER_PROMPT = 4


def render_message(message: dict) -> dict:
    """A canonical message as plain role/content (tool calls as text), for any ChatML template."""
    content = message.get("content") or ""
    calls = message.get("tool_calls")
    if calls:
        blocks = "".join("<tool_call>" + json.dumps({"name": c["function"]["name"],
                                                     "arguments": c["function"]["arguments"]}, ensure_ascii=False)
                         + "</tool_call>" for c in calls)
        content = (content + "\n" if content else "") + blocks
    return {"role": message["role"], "content": content}


def _split(episode: dict) -> tuple[list[dict], dict] | None:
    """(the conversation before the last assistant turn, that turn), or None when there is none."""
    messages = [render_message(m) for m in episode["messages"]]
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            if not any(m["role"] == "user" for m in messages[:i]):
                return None
            return messages[:i], messages[i]
    return None


def _answered(episodes):
    """(episode, prompt, last assistant turn, feedback) for every episode that has an answer to learn from."""
    for episode in episodes:
        split = _split(episode)
        if split is not None:
            yield episode, split[0], split[1], episode["feedback"]


def _prompt_key(prompt: list[dict]) -> str:
    return json.dumps(prompt, sort_keys=True, ensure_ascii=False)


def build_examples(method: str, episodes, *, dataset: str) -> list[dict]:
    """The rows the method's TRL trainer takes; BadInput when there are too few."""
    if method not in METHODS:
        raise BadInput(f"unknown method {method!r} (expected {', '.join(METHODS)})", field="--method")
    rows: list[dict] = []
    answered = _answered(episodes)
    if method == "sft":
        for _episode, prompt, answer, feedback in answered:
            if feedback["rating"] is not None and feedback["rating"] < 0 and not feedback["correction"]:
                continue
            if feedback["correction"]:
                answer = {"role": "assistant", "content": feedback["correction"]}
            if answer["content"].strip():
                rows.append({"messages": prompt + [answer]})
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
    elif method == "kto":
        for _episode, prompt, answer, feedback in answered:
            if feedback["rating"] in (1, -1):
                rows.append({"prompt": prompt, "completion": [answer], "label": feedback["rating"] == 1})
            if feedback["correction"]:
                rows.append({"prompt": prompt, "completion": [{"role": "assistant", "content": feedback["correction"]}],
                             "label": True})
    else:   # grpo
        for episode, prompt, answer, feedback in answered:
            reference = feedback["correction"] or (answer["content"] if (feedback["rating"] or 0) >= 0 else None)
            rows.append({"prompt": prompt, "reference": reference or "",
                         "tools": json.dumps(episode.get("tools") or [])})
    needed = MINIMUM[method]
    if len(rows) < needed:
        what = {"sft": "episodes rated >= 0 with an assistant answer",
                "dpo": "preference pairs (a +1 and a -1 answer to one prompt, or a correction)",
                "kto": "answers with a thumbs up or down (or a correction)",
                "grpo": "prompts"}[method]
        raise BadInput(f"dataset {dataset} has {len(rows)} usable example(s) for {method}; it needs at least "
                       f"{needed} {what}", field="--data")
    return rows
