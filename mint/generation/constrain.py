"""Constrained decoding: a row whose answer must take a shape (a JSON object, a JSON schema, a call of the
tools offered) decodes only tokens that keep its text inside that shape.

A ``Structure`` is plain data a turn's decoding carries (what the client asked: ``response_format``, or a
``tool_choice`` that names a function or says ``required``). ``constraint_for`` turns it into a ``Constraint``
for one row: a grammar matcher of llguidance (the grammar engine vLLM and SGLang use), which says after every
token which tokens may come next. The engine (``mint.generation.engine``) masks the others out of the row's
logits before it picks (greedy or sampled, the same processors as any row), feeds the matcher the token it
picked, and ends the row once the shape is complete. A row without a constraint is decoded exactly as before.

JSON is written with ``", "`` and ``": "`` and no other whitespace (as ``json.dumps`` writes it, and as the
agent's tool calls are rendered in training), so a model cannot spend its tokens on blank space inside a
value.
"""
from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from mint.errors import BadInput

JSON_OBJECT, JSON_SCHEMA, TOOL_CALL = "json_object", "json_schema", "tool_call"
# compact JSON, one space after , and : (json.dumps's layout): whitespace elsewhere is not allowed
_LAYOUT = {"whitespace_flexible": False, "key_separator": ": ", "item_separator": ", "}


@dataclass(frozen=True)
class Structure:
    """The shape an answer must take: ``kind`` (JSON_OBJECT, JSON_SCHEMA or TOOL_CALL), ``schema`` (the JSON
    schema's text: of the answer, or of the tool call's ``{"name", "arguments"}`` object) and ``name`` (the
    schema's name as the client gave it)."""
    kind: str
    schema: str
    name: str | None = None


def json_structure(schema: dict | None, name: str | None = None) -> Structure:
    """A JSON answer: any object (``schema`` None, ``response_format: json_object``) or one of ``schema``."""
    if schema is None:
        return Structure(JSON_OBJECT, json.dumps({"type": "object"}))
    return Structure(JSON_SCHEMA, json.dumps(schema, sort_keys=False), name)


def tool_call_structure(functions: list[dict]) -> Structure:
    """A call of one of ``functions`` (``{"name", "parameters"}``, as ``mint.render.tool_descriptions`` gives
    them), written as the agent writes one: ``<tool_call>{"name": NAME, "arguments": {...}}</tool_call>``, its
    arguments of that function's parameter schema."""
    calls = [{"type": "object", "properties": {"name": {"const": f["name"]},
                                               "arguments": f.get("parameters") or {"type": "object"}},
              "required": ["name", "arguments"], "additionalProperties": False} for f in functions]
    return Structure(TOOL_CALL, json.dumps(calls[0] if len(calls) == 1 else {"anyOf": calls}))


def grammar(structure: Structure) -> str:
    """The llguidance grammar of ``structure``."""
    import llguidance

    schema = json.loads(structure.schema)
    # a schema may set its own layout and options (llguidance's ``x-guidance``: a harness's compact JSON, its
    # oneOf read as anyOf where the branches exclude each other); the rest is json.dumps's layout
    schema["x-guidance"] = {**_LAYOUT, **(schema.get("x-guidance") or {})}
    if structure.kind == TOOL_CALL:
        return llguidance.LLMatcher.grammar_from_lark(
            f'start: "<tool_call>" call "</tool_call>"\ncall: %json {json.dumps(schema)}')
    return llguidance.LLMatcher.grammar_from_json_schema(schema)


def check_structure(structure: Structure) -> str | None:
    """Why ``structure`` cannot be decoded (a schema llguidance does not take), or None."""
    import llguidance

    try:
        problem = llguidance.LLMatcher.validate_grammar(grammar(structure))
    except (ValueError, TypeError, RuntimeError) as exc:
        problem = str(exc)
    return problem or None


class Constraint:
    """One row's matcher: ``mask`` its logits before each pick, ``accept`` the token picked; ``done`` once the
    shape is complete (nothing but the end may follow)."""

    def __init__(self, matcher, vocab: int) -> None:
        import llguidance.torch

        self.matcher = matcher
        self._bits = llguidance.torch.allocate_token_bitmask(1, vocab)

    def mask(self, logits) -> None:
        """Set the logits of the tokens that cannot come next to -inf (``logits``: one row, in place)."""
        import llguidance.torch

        llguidance.torch.fill_next_token_bitmask(self.matcher, self._bits, 0)
        llguidance.torch.apply_token_bitmask_inplace(logits[None], self._bits.to(logits.device))

    def accept(self, token: int) -> bool:
        """Feed the picked token; False when the matcher refuses it (the row then ends)."""
        return bool(self.matcher.consume_token(token))

    @property
    def done(self) -> bool:
        return bool(self.matcher.is_stopped())


_TOKENIZERS: dict = {}       # (id(tokenizer), vocab, eos) -> llguidance's view of it (about a second to build)
_TOKENIZERS_LOCK = threading.Lock()


def constraint_for(tokenizer, vocab: int, eos: frozenset[int] | set[int], structure: Structure) -> Constraint:
    """A fresh ``Constraint`` of ``structure`` for a row of a model with ``vocab`` logits whose answers end at any
    of ``eos``; BadInput when the structure cannot be decoded."""
    import llguidance
    import llguidance.hf

    key = (id(tokenizer), vocab, tuple(sorted(eos)))
    with _TOKENIZERS_LOCK:
        if key not in _TOKENIZERS:
            _TOKENIZERS[key] = (tokenizer, llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab,
                                                                        eos_token=sorted(eos)))
        info = _TOKENIZERS[key][1]
    matcher = llguidance.LLMatcher(info, grammar(structure))
    if matcher.is_error():
        raise BadInput(f"cannot decode this shape: {matcher.get_error()}", field="response_format")
    return Constraint(matcher, vocab)
