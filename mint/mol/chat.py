"""One chat turn. Until the router and registry exist it is answered by the bare base."""
from __future__ import annotations

import time
from dataclasses import dataclass

from mint.base import load_base
from mint.errors import BadInput


@dataclass
class ChatReply:
    base: str
    served_by: str
    prompt: str
    reply: str
    new_tokens: int
    seconds: float
    load_seconds: float


def chat_once(prompt: str, *, base: str, system: str | None = None, max_new_tokens: int = 64) -> ChatReply:
    """Greedy reply of ``base`` to one user message."""
    if not prompt.strip():
        raise BadInput("the prompt is empty", field="PROMPT")
    if max_new_tokens < 1:
        raise BadInput("must be at least 1", field="--max-new-tokens")
    import torch

    loaded = load_base(base)
    tokenizer, model = loaded.tokenizer, loaded.model
    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    started = time.perf_counter()
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    with torch.inference_mode():
        output = model.generate(**inputs, max_new_tokens=max_new_tokens, do_sample=False,
                                pad_token_id=tokenizer.pad_token_id)
    new = output[0, inputs["input_ids"].shape[1]:]
    text = tokenizer.decode(new, skip_special_tokens=True).strip()
    return ChatReply(base=base, served_by="base", prompt=prompt, reply=text, new_tokens=int(new.numel()),
                     seconds=time.perf_counter() - started, load_seconds=loaded.seconds)
