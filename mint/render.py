"""One renderer: a conversation (messages, tools, a contract harness's system turn) as the model's text and ids.

Training, evaluation, experience, ``mint chat`` and ``mint serve`` all render here, so the model is asked in
the very text it learned from. Two steps, each in one place:

- **the conversation the model is shown** (``conversation``): tools are listed at the end of the system turn in
  one wording (``tool_listing``), a system turn is added where there is none, and tool calls are written into
  the assistant turn as ``<tool_call>{json}</tool_call>`` (``render_message``), the form the agent harness
  parses and TRL's qwen parser reads;
- **its text and token ids** (``Renderer``, one per tokenizer and chat template): ``prompt`` for sampling (the
  base's own template, with the generation prompt), ``training`` for a training row, with the tokens the loss
  falls on marked (assistant turns without ``weight: 0``; the ``{% generation %}`` markers of mint's training
  template, as TRL's ``assistant_only_loss`` reads them). A training row keeps its tools beside its messages
  (TRL's ``tools`` column): mint's training template lists them in the same words (see
  ``mint/templates/chatml_train.jinja``), which the tests hold to the same bytes as ``prompt``.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from typing import Any, Sequence



# --- the conversation the model is shown ---------------------------------------------------

def tool_descriptions(tools: Any) -> list[dict]:
    """BFCL function descriptions ({name, parameters}) of a record's tools, OpenAI- or BFCL-shaped;
    entries without a name are skipped."""
    descriptions = []
    for tool in tools if isinstance(tools, list) else []:
        if not isinstance(tool, dict):
            continue
        function = tool.get("function") if isinstance(tool.get("function"), dict) else tool
        if isinstance(function.get("name"), str):
            descriptions.append({"name": function["name"], "parameters": function.get("parameters")})
    return descriptions


TOOLS_INTRO = "You can call these functions:\n"
TOOLS_ANSWER = '\nAnswer with the call as JSON: {"name": "...", "arguments": {...}}, or a JSON list of such calls.'


def tool_listing(tools: list[dict]) -> str:
    """The tools as the agent harness, mint's training template and the serving runtime show them, at the end
    of the system turn. Keys sorted: JSON key order carries no meaning, and ingested episodes (what training
    shows) store them sorted, so a suite's tools read the same as the logged ones whatever order its file has."""
    listed = json.dumps([t.get("function", t) for t in tools], ensure_ascii=False, sort_keys=True)
    return TOOLS_INTRO + listed + TOOLS_ANSWER


def system_with_tools(system: str | None, tools: list[dict]) -> str:
    """The system turn's text with ``tools`` listed after it (a blank line between), or the listing alone."""
    return (system + "\n\n" if system else "") + tool_listing(tools)


def conversation(messages: Sequence[dict], tools: list[dict] | None = None, *,
                 system: str | None = None) -> list[dict]:
    """The messages the model is shown: ``system`` (a contract harness's system text) as the system turn in
    place of the conversation's own, then ``tools`` listed after the system turn's text (a system turn is
    added where there is none), as mint's training template renders a row with tools; no listing without
    tools."""
    messages = list(messages)
    if system:
        own = 1 if messages and messages[0].get("role") == "system" else 0
        messages = [{"role": "system", "content": system}, *messages[own:]]
    tools = [t for t in tools or [] if isinstance(t, dict)]
    if not tools:
        return messages
    if messages and messages[0].get("role") == "system" and isinstance(messages[0].get("content") or "", str):
        return [{**messages[0], "content": system_with_tools(messages[0].get("content") or "", tools)},
                *messages[1:]]
    return [{"role": "system", "content": tool_listing(tools)}, *messages]


def schema_order(arguments, tool_name: str, tools: list | None):
    """``arguments`` with the tool's required parameters first, in its ``required`` order, then its other
    parameters in schema order, then any the schema does not name; unchanged when it is not a dict or
    the tool is not among ``tools``. (The model sees the tools with their keys sorted, and a call learned in
    sorted order tends to stop before the last required argument.)"""
    schema = next((d["parameters"] for d in tool_descriptions(tools) if d["name"] == tool_name), None)
    if not isinstance(arguments, dict) or schema is None:
        return arguments
    schema = schema if isinstance(schema, dict) else {}
    required = schema.get("required") if isinstance(schema.get("required"), list) else []
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    order: dict[str, int] = {}
    for key in [*required, *properties]:
        if isinstance(key, str):
            order.setdefault(key, len(order))
    return dict(sorted(arguments.items(), key=lambda item: order.get(item[0], len(order))))


def render_message(message: dict, tools: list | None = None) -> dict:
    """A canonical message as plain role/content (tool calls as text, arguments in the order of the
    tool's schema in ``tools``), for any ChatML template; a turn marked ``weight: 0`` (shown to the model,
    not trained on) keeps that mark, and an assistant turn its ``reasoning``."""
    content = message.get("content") or ""
    calls = message.get("tool_calls")
    if calls:
        blocks = "".join("<tool_call>" + json.dumps(
            {"name": c["function"]["name"],
             "arguments": schema_order(c["function"]["arguments"], c["function"]["name"], tools)},
            ensure_ascii=False) + "</tool_call>" for c in calls)
        content = (content + "\n" if content else "") + blocks
    rendered = {"role": message["role"], "content": content}
    if message.get("reasoning") and message["role"] == "assistant":
        # the assistant's reasoning, apart from its answer: a training row keeps it for the chat template to
        # render where it can (mint.train.run.reasoning_for_template)
        rendered["reasoning"] = message["reasoning"]
    if message.get("weight") == 0:
        rendered["weight"] = 0
    return rendered


# --- text and token ids -----------------------------------------------------------------------

def _jinja_string(text: str) -> str:
    """``text`` as the inside of a single-quoted Jinja string literal."""
    return text.replace("\\", "\\\\").replace("\n", "\\n").replace("'", "\\'")


def training_chat_template() -> str:
    """SmolLM2's ChatML with ``{% generation %}`` around assistant turns (for assistant-only loss), listing
    tools in ``tool_listing``'s words."""
    template = resources.files("mint").joinpath("templates/chatml_train.jinja").read_text(encoding="utf-8").strip()
    return (template.replace("@TOOLS_INTRO@", _jinja_string(TOOLS_INTRO))
            .replace("@TOOLS_ANSWER@", _jinja_string(TOOLS_ANSWER)))



@dataclass(frozen=True)
class Rendered:
    """A conversation as the model reads it; ``trainable`` (training only) is 1 for each token the loss
    falls on."""

    text: str
    ids: list[int]
    trainable: list[int] | None = None


class Renderer:
    """Renders conversations with one tokenizer and chat template (``template`` None: the tokenizer's own)."""

    def __init__(self, tokenizer, template: str | None = None) -> None:
        self.tokenizer = tokenizer
        self.template = template

    @classmethod
    def for_training(cls, tokenizer) -> Renderer:
        """With mint's training template: the base's ChatML with the assistant turns marked for the loss."""
        return cls(tokenizer, training_chat_template())

    def prompt_texts(self, conversations: Sequence[Sequence[dict]]) -> list[str]:
        """Each conversation (as ``conversation`` shows it) as the model is asked it: the chat template with the
        generation prompt."""
        return [self.tokenizer.apply_chat_template(list(c), add_generation_prompt=True, tokenize=False,
                                                   chat_template=self.template) for c in conversations]

    def prompts(self, conversations: Sequence[Sequence[dict]]) -> list[Rendered]:
        """``prompt_texts`` with their token ids (tokenized in one call: the template already wrote the special
        tokens)."""
        texts = self.prompt_texts(conversations)
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"] if texts else []
        return [Rendered(text, list(row)) for text, row in zip(texts, ids)]

    def prompt(self, messages: Sequence[dict], tools: list[dict] | None = None, *,
               system: str | None = None) -> Rendered:
        """One conversation, with its tools and a harness's system text, as the model is asked it."""
        return self.prompts([conversation(messages, tools, system=system)])[0]

    def training(self, messages: Sequence[dict], tools: list[dict] | None = None) -> Rendered:
        """A training row (rendered messages, with its tools column) as the trainer reads it, the tokens of its
        assistant turns without ``weight: 0`` marked trainable. Needs a template with ``{% generation %}``
        markers (``for_training``)."""
        options = {"tools": tools or None, "chat_template": self.template}
        text = self.tokenizer.apply_chat_template(list(messages), tokenize=False, **options)
        out = self.tokenizer.apply_chat_template(list(messages), tokenize=True, return_dict=True,
                                                 return_assistant_tokens_mask=True, **options)
        return Rendered(text, list(out["input_ids"]), list(out["assistant_masks"]))
