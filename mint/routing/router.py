"""The router: which specialist answers a user turn.

Two stages. Rules from ``mint.yaml`` come first where they are certain: a turn that carries tools goes to
the ``tool_use`` specialist, a turn matching the ``patterns`` of one specialist (and no other's) goes there. Otherwise the learned
probe decides: a logistic regression on the frozen base's hidden states at one or more layers, mean-pooled over
the tokens of the last user message inside the prompt the runtime generates from (chat template, history, tool
listing; no second model). Adapters that leave those layers untouched (``lora.from_layer``, by default the
probe's layer) let the mixture route inside the turn's own prefill; otherwise it runs the prompt's first layers
once more on the bare base. Probes saved before that read the last user message alone (``reads: turn``). A turn matching the patterns of several specialists is one of theirs: the probe chooses among those.
Without a ``router`` champion the keyword counts of ``mint.yaml`` decide, and a turn with no keyword goes to
the starter probe, fitted on mint's plain turns for the specialists with their harnesses (chat, agent,
coding, genui, whatever mint.yaml calls them: ``starter_probe``), or else to the first specialist.

A probe is stored as a registry revision of the project's router (the specialist of kind ``router`` in
mint.yaml, by default named ``router``): ``adapter_model.safetensors``
holds its tensors and ``adapter_config.json`` says ``peft_type: MINT_ROUTER_PROBE`` (so the registry's
checks and hashes cover it like any adapter; no PEFT loader will mistake it for a LoRA). A probe trained
with ``tool_turns_of: NAME`` has one more row than labels: the class of NAME's turns that carried tools.
"""
from __future__ import annotations

import functools
import json
import re
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from mint.routing.labels import Labeler
from mint.errors import BadInput
from mint.project import Project
from mint.text import check_unicode

if TYPE_CHECKING:
    import torch

PROBE_TYPE = "MINT_ROUTER_PROBE"
PROMPT, TURN = "prompt", "turn"     # what a probe's features pool (Probe.reads)
MAX_TURN_TOKENS = 256      # a turn's head is enough to route it, and bounds the cost of very long turns
# Below this top probability the probe abstains and the keywords of mint.yaml decide (when any match): a probe
# trained on the logs' phrasing is unsure on turns worded unlike them, where a keyword is the better guess.
PROBE_MIN_CONFIDENCE = 0.6
# Turns that carried tools never reach the probe (the tools rule decides them), yet the tool-use specialist
# learns mostly from them, worded for their tools ("Calculate the magnetic field 10 m from a wire"). On a turn
# without tools and without a word of acting (none of that specialist's keywords or patterns), the probe's class
# of tool-carrying turns counts this much for the specialist (a probe without that class: the specialist's whole
# probability): a factual question worded like a tool call ("What number did Derek Jeter wear?") is chat.
# scripts/bench_router.py, layer 10, SmolLM2: with the class, 0.1 routed 0.931 of the plain sets cross-fitted
# (0 gave 0.938, 0.25 gave 0.927), held-out 0.994 for all three; without it, 0.1 kept held-out at 0.994 where
# 0.25 gave 0.988.
TOOLLESS_TOOL_PRIOR = 0.1
# The probe's L2 penalty. With mint's plain turns in training, 0.001 let the probe fit their wording so closely
# that held-out accuracy fell to 0.988 (below contracts/router.yaml's 0.99); 0.03 kept it at 0.994.
DEFAULT_L2 = 0.03


@dataclass(frozen=True)
class Route:
    specialist: str
    probabilities: dict[str, float]
    decided_by: str               # rules | probe
    revision: str | None          # the router revision whose probe decided (router:v3), else None
    rule: str | None = None       # tools | pattern | keywords | default, when rules decided


def last_user_text(conversation: list[dict]) -> str:
    for message in reversed(conversation):
        if message.get("role") == "user" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


class Rules:
    """The routing rules of ``mint.yaml``: tools and patterns are certain; keywords only bootstrap."""

    def __init__(self, project: Project) -> None:
        self.names = project.names
        self.tool_specialist = project.tool_specialist
        self.patterns = [(re.compile(p, re.IGNORECASE), s.name) for s in project.specialists for p in s.patterns]
        self.labeler = Labeler(project)

    def _certain(self, name: str, rule: str) -> Route:
        return Route(name, {n: float(n == name) for n in self.names}, "rules", None, rule)

    def matched(self, text: str) -> set[str]:
        """The specialists whose patterns ``text`` matches."""
        return {name for pattern, name in self.patterns if pattern.search(text)}

    def certain(self, text: str, has_tools: bool) -> Route | None:
        if has_tools and self.tool_specialist:
            return self._certain(self.tool_specialist, "tools")
        # certain only when one specialist's patterns match: a turn that matches two is left to the probe
        matched = self.matched(text)
        if len(matched) == 1:
            return self._certain(matched.pop(), "pattern")
        return None

    def acting(self, text: str) -> bool:
        """Whether ``text`` has a word of the tool-use specialist: one of its patterns, or its keywords win."""
        if self.tool_specialist is None:
            return False
        keywords = self.keywords(text)
        return self.tool_specialist in self.matched(text) or \
            (keywords.rule == "keywords" and keywords.specialist == self.tool_specialist)

    def keywords(self, text: str) -> Route:
        label, _decisive = self.labeler.keywords(text)   # any keyword is a better guess than none here
        if label is None:
            return self._certain(self.names[0], "default")
        return self._certain(label, "keywords")


# --- the probe ------------------------------------------------------------------------

@dataclass
class Probe:
    labels: tuple[str, ...]
    layer: int                    # hidden states after this many decoder layers (the deepest the probe reads)
    weight: torch.Tensor          # [labels, features]
    bias: torch.Tensor            # [labels]
    mean: torch.Tensor            # [features]: features are standardized before the linear layer
    std: torch.Tensor
    shallower: tuple[int, ...] = ()   # earlier layers whose pooled states come first in the features (same pass)
    # the specialist whose turns that carried tools have a class of their own, the last row of weight and bias
    # (see fit_probe); None: one row per label
    tool_turns_of: str | None = None
    # what the features pool: the last user message's tokens inside the templated prompt (PROMPT), or that
    # message alone, without template or history (TURN: probes saved before prompt features)
    reads: str = "turn"

    @property
    def feature_layers(self):
        """What ``probe_features`` takes for this probe: one layer, or the layers whose states it concatenates."""
        return (*self.shallower, self.layer) if self.shallower else self.layer

    def probabilities(self, features, tool_turn_scale=1.0):
        """[turns, labels] probabilities. A probe with a class of tool-carrying turns adds that class's
        probability to its specialist's, times ``tool_turn_scale`` (a number, or one per turn), and
        renormalizes."""
        import torch

        logits = ((features - self.mean) / self.std) @ self.weight.T + self.bias
        probabilities = torch.softmax(logits, dim=-1)
        if self.tool_turns_of is None:
            return probabilities
        merged = probabilities[:, :-1].clone()
        merged[:, self.labels.index(self.tool_turns_of)] += torch.as_tensor(tool_turn_scale) * probabilities[:, -1]
        return merged / merged.sum(-1, keepdim=True)

    def save(self, directory: Path, *, base: str) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight.contiguous(), "bias": self.bias.contiguous(),
                   "mean": self.mean.contiguous(), "std": self.std.contiguous()},
                  str(directory / "adapter_model.safetensors"))
        config = {"peft_type": PROBE_TYPE, "labels": list(self.labels), "layer": self.layer, "base": base}
        if self.shallower:
            config["shallower_layers"] = list(self.shallower)
        if self.tool_turns_of is not None:
            config["tool_turns_of"] = self.tool_turns_of
        config["reads"] = self.reads
        (directory / "adapter_config.json").write_text(json.dumps(config, indent=2) + "\n")

    @classmethod
    def load(cls, directory: Path) -> "Probe":
        from safetensors.torch import load_file

        where = str(directory / "adapter_config.json")
        try:
            config = json.loads((directory / "adapter_config.json").read_text())
            tensors = load_file(str(directory / "adapter_model.safetensors"))
        except (OSError, ValueError) as exc:
            raise BadInput(f"not a router probe: {exc}", file=str(directory)) from None
        if not isinstance(config, dict) or config.get("peft_type") != PROBE_TYPE:
            raise BadInput(f"not a router probe (peft_type is not {PROBE_TYPE})", file=where, field="peft_type")
        labels, layer = config.get("labels"), config.get("layer")
        if not isinstance(labels, list) or not labels or not all(isinstance(x, str) for x in labels):
            raise BadInput("expected a list of specialist names", file=where, field="labels")
        if not isinstance(layer, int) or isinstance(layer, bool) or layer < 1:
            raise BadInput("expected a layer number (1 or more)", file=where, field="layer")
        shallower = config.get("shallower_layers", [])
        if not isinstance(shallower, list) or not all(isinstance(x, int) and not isinstance(x, bool) and 1 <= x < layer
                                                      for x in shallower) or shallower != sorted(set(shallower)):
            raise BadInput(f"expected increasing layer numbers below layer {layer}", file=where,
                           field="shallower_layers")
        tool_turns_of = config.get("tool_turns_of")
        if tool_turns_of is not None and tool_turns_of not in labels:
            raise BadInput(f"expected one of the labels {labels}", file=where, field="tool_turns_of")
        reads = config.get("reads", TURN)
        if reads not in (TURN, PROMPT):
            raise BadInput(f"expected {PROMPT!r} or {TURN!r}, got {reads!r}", file=where, field="reads")
        missing = {"weight", "bias", "mean", "std"} - set(tensors)
        if missing:
            raise BadInput(f"missing tensors {sorted(missing)}", file=str(directory / "adapter_model.safetensors"))
        probe = cls(tuple(labels), layer, tensors["weight"], tensors["bias"], tensors["mean"], tensors["std"],
                    tuple(shallower), tool_turns_of, reads)
        rows = len(labels) + (tool_turns_of is not None)
        if tuple(probe.weight.shape) != (rows, probe.mean.shape[0]) or tuple(probe.bias.shape) != (rows,):
            raise BadInput("tensor shapes do not match the labels", file=str(directory / "adapter_model.safetensors"))
        return probe


class _Stop(Exception):
    pass


def turn_features(model, tokenizer, texts: Sequence[str], layer: int | Sequence[int], batch_size: int = 16):
    """Mean-pooled hidden states after ``layer`` decoder layers for each text alone (at most MAX_TURN_TOKENS
    tokens, no chat template): what a probe that ``reads: turn`` takes. For several layers, their pooled states
    side by side in the order given (a probe's ``feature_layers``).

    The forward pass stops at the deepest layer: the rest of the model and the LM head never run. The caller
    makes sure no LoRA slot is active (the runtime holds its lock and selects the base slot).
    """
    layers = [layer] if isinstance(layer, int) else list(layer)
    return _side_by_side(turn_features_by_layer(model, tokenizer, texts, layers, batch_size), layers)


def turn_features_by_layer(model, tokenizer, texts: Sequence[str], layers: Sequence[int], batch_size: int = 16):
    """``{layer: turn_features(..., layer)}`` for several layers from one forward pass that stops at the last."""
    all_ids = [tokenizer(t if t.strip() else " ", add_special_tokens=False)["input_ids"][:MAX_TURN_TOKENS] or
               [tokenizer.eos_token_id] for t in texts]
    return pooled_states(model, tokenizer.pad_token_id, all_ids, [(0, len(ids)) for ids in all_ids], layers,
                         batch_size)


def prompt_features(model, tokenizer, conversations: Sequence[list[dict]], layer: int | Sequence[int],
                    batch_size: int = 16):
    """Hidden states after ``layer`` decoder layers, mean-pooled over the last user message's tokens inside
    each conversation's prompt (``prompt_tokens``): what a probe that ``reads: prompt`` takes, and what the
    mixture pools from a turn's own prefill when the adapters leave those layers untouched."""
    layers = [layer] if isinstance(layer, int) else list(layer)
    return _side_by_side(prompt_features_by_layer(model, tokenizer, conversations, layers, batch_size), layers)


def prompt_features_by_layer(model, tokenizer, conversations: Sequence[list[dict]], layers: Sequence[int],
                             batch_size: int = 16):
    """``{layer: prompt_features(..., layer)}`` for several layers from one forward pass."""
    encoded = [prompt_tokens(tokenizer, conversation) for conversation in conversations]
    # checked before any pass: attention over a prompt far past the context would take minutes, and the
    # generation would refuse it anyway
    limit = getattr(model.config, "max_position_embeddings", None)
    longest = max((len(ids) for ids, _span in encoded), default=0)
    if limit and longest > limit:
        raise BadInput(f"the conversation is {longest} tokens; base takes at most {limit} in all", field="messages")
    return pooled_states(model, tokenizer.pad_token_id, [ids for ids, _ in encoded], [span for _, span in encoded],
                         layers, batch_size)


def probe_features(model, tokenizer, conversations: Sequence[list[dict]], layer: int | Sequence[int], reads: str):
    """A probe's features for ``conversations`` on the bare ``model``: see ``Probe.reads``."""
    if reads == PROMPT:
        return prompt_features(model, tokenizer, conversations, layer)
    return turn_features(model, tokenizer, [last_user_text(c) for c in conversations], layer)


def _side_by_side(by_layer: dict, layers: list[int]):
    import torch

    return by_layer[layers[0]] if len(layers) == 1 else torch.cat([by_layer[n] for n in layers], dim=-1)


_MARK = "\ue000mint\ue001"     # private-use characters: no real turn holds them


def prompt_tokens(tokenizer, conversation: list[dict]) -> tuple[list[int], tuple[int, int]]:
    """The token ids the runtime generates from for ``conversation`` (its chat template with the generation
    prompt), and the [start, end) token positions of the last user message's text within them (the last
    token when that message is empty or the template does not show it verbatim)."""
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False)
    last = max((i for i, m in enumerate(conversation) if m.get("role") == "user"
                and isinstance(m.get("content"), str)), default=None)
    chars = None
    if last is not None and conversation[last]["content"]:
        content = conversation[last]["content"]
        marked = [*conversation[:last], {**conversation[last], "content": _MARK}, *conversation[last + 1:]]
        marked_text = tokenizer.apply_chat_template(marked, add_generation_prompt=True, tokenize=False)
        at = marked_text.find(_MARK)
        if at >= 0 and marked_text[:at] + content + marked_text[at + len(_MARK):] == text:
            chars = (at, at + len(content))
    try:
        encoded = tokenizer(text, add_special_tokens=False, return_offsets_mapping=chars is not None)
    except NotImplementedError:      # a slow tokenizer has no offsets: count the tokens before and through it
        encoded = tokenizer(text, add_special_tokens=False)
        ids = encoded["input_ids"]
        before = len(tokenizer(text[:chars[0]], add_special_tokens=False)["input_ids"])
        through = len(tokenizer(text[:chars[1]], add_special_tokens=False)["input_ids"])
        return ids, (before, through) if before < through <= len(ids) else (len(ids) - 1, len(ids))
    ids = encoded["input_ids"]
    if not ids:
        raise BadInput("the conversation's prompt has no tokens", field="messages")
    if chars is not None:
        inside = [i for i, (a, b) in enumerate(encoded["offset_mapping"]) if b > chars[0] and a < chars[1]]
        if inside:
            return ids, (inside[0], inside[-1] + 1)
    return ids, (len(ids) - 1, len(ids))


def position_ids(mask):
    """Position ids for a left-padded batch, as ``model.generate`` makes them (each row counts from its first
    real token): the probe's pass and the generation's prefill compute the same states."""
    positions = mask.long().cumsum(-1) - 1
    return positions.masked_fill_(mask == 0, 1)


def pool_span(hidden, spans: Sequence[tuple[int, int]], offsets: Sequence[int]):
    """[rows, hidden] float means of ``hidden[row, offset + start : offset + end]`` for each row."""
    import torch

    weights = torch.zeros(hidden.shape[0], hidden.shape[1], 1)
    for row, ((start, end), offset) in enumerate(zip(spans, offsets)):
        weights[row, offset + start:offset + end] = 1.0
    return (hidden.float() * weights).sum(1) / weights.sum(1)


def pooled_states(model, pad_id: int, sequences: Sequence[list[int]], spans: Sequence[tuple[int, int]],
                  layers: Sequence[int], batch_size: int = 16):
    """``{layer: [sequences, hidden]}``: each sequence's hidden states after ``layer`` decoder layers, mean-pooled
    over its span; left-padded batches of similar lengths, one forward pass each that stops at the deepest layer.
    Each sequence is cut where its span ends: in a causal model no state of the span sees a later token, and the
    tokens after it (a prompt's end of turn and generation prompt, 6 of a SmolLM2 prompt's median 43) cost a pass
    for nothing."""
    import torch

    from mint.base import decoder_layers as layers_of_base

    sequences = [sequence[:end] for sequence, (_start, end) in zip(sequences, spans)]

    decoder_layers = layers_of_base(model)
    wanted = sorted(set(layers))
    if not wanted or wanted[0] < 1 or wanted[-1] > len(decoder_layers):
        raise BadInput(f"layers {wanted} are not all within the base's {len(decoder_layers)} layers", field="layer")
    captured = {}

    def capture(layer):
        def hook(_module, _inputs, output):
            captured[layer] = output[0] if isinstance(output, tuple) else output
            if layer == wanted[-1]:
                raise _Stop
        return hook

    # batches of similar lengths waste little on padding (on mixed data, less than half the tokens)
    order = sorted(range(len(sequences)), key=lambda i: len(sequences[i]))
    handles = [decoder_layers[layer - 1].register_forward_hook(capture(layer)) for layer in wanted]
    pooled: dict[int, list] = {layer: [] for layer in wanted}
    try:
        for start in range(0, len(sequences), batch_size):
            batch = order[start:start + batch_size]
            ids = [sequences[i] for i in batch]
            width = max(len(i) for i in ids)
            input_ids = torch.tensor([[pad_id] * (width - len(i)) + i for i in ids])
            mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
            with torch.inference_mode():
                try:
                    model(input_ids=input_ids, attention_mask=mask, position_ids=position_ids(mask), use_cache=False)
                except _Stop:
                    pass
            for layer in wanted:
                pooled[layer].append(pool_span(captured.pop(layer), [spans[i] for i in batch],
                                               [width - len(i) for i in ids]))
    finally:
        for handle in handles:
            handle.remove()
    position = torch.empty(len(order), dtype=torch.long)
    position[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return {layer: torch.cat(chunks)[position] if chunks else torch.zeros(0, model.config.hidden_size)
            for layer, chunks in pooled.items()}


def fit_probe(features, labels: Sequence[str], names: Sequence[str], layer: int, *, l2: float = DEFAULT_L2,
              shallower: tuple[int, ...] = (), example_weights: Sequence[float] | None = None,
              tools: Sequence[bool] | None = None, tool_specialist: str | None = None, reads: str = "turn") -> Probe:
    """Class-balanced L2 logistic regression on standardized features (full-batch L-BFGS, deterministic).

    ``features`` are ``probe_features`` at ``(*shallower, layer)`` of what ``reads`` names; ``example_weights`` (default 1) say how much
    each example counts within its class (every class weighs the same in the loss). With ``tools`` (whether
    each example's turn carried tools), the ``tool_specialist``'s examples that carried tools are a class of
    their own: they are worded for the tools they came with ("Calculate the magnetic field 10 m from a wire"),
    and the router, which only asks the probe about turns without tools, leaves that class mostly out instead
    of sending look-alike questions to the tool specialist."""
    import torch

    index = {name: i for i, name in enumerate(names)}
    y = torch.tensor([index[label] for label in labels])
    split = tools is not None and tool_specialist in index and any(
        carried and label == tool_specialist for carried, label in zip(tools, labels))
    if split:
        y = torch.where(torch.tensor([bool(t) for t in tools]) & (y == index[tool_specialist]), len(names), y)
    classes = len(names) + split
    mean = features.mean(0)
    std = features.std(0).clamp_min(1e-6)
    x = (features - mean) / std
    weights = torch.ones(len(y)) if example_weights is None else torch.tensor(example_weights, dtype=torch.float)
    mass = torch.zeros(classes).index_add_(0, y, weights)
    class_weight = torch.where(mass > 0, mass.sum() / (classes * mass.clamp_min(1e-12)), torch.zeros(()))
    sample_weight = weights * class_weight[y]
    weight = torch.zeros(classes, x.shape[1], requires_grad=True)
    bias = torch.zeros(classes, requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=300, history_size=20,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        # the weighted mean, as cross_entropy(weight=class_weight) computes it when every example weighs 1
        loss = (torch.nn.functional.cross_entropy(x @ weight.T + bias, y, reduction="none") * sample_weight).sum() \
            / sample_weight.sum() + l2 * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return Probe(tuple(names), layer, weight.detach(), bias.detach(), mean, std, tuple(shallower),
                 tool_specialist if split else None, reads)


@dataclass(frozen=True)
class RouterScore:
    examples: int
    accuracy: float
    recall: dict[str, float]
    confusion: dict[str, dict[str, int]]      # true -> predicted -> count
    share: dict[str, float]                   # the true distribution of the examples


def score_routes(truth: Sequence[str], predicted: Sequence[str], names: Sequence[str]) -> RouterScore:
    confusion = {t: {p: 0 for p in names} for t in names}
    for t, p in zip(truth, predicted):
        confusion.setdefault(t, {n: 0 for n in names})[p] = confusion.get(t, {}).get(p, 0) + 1
    total = len(truth)
    recall = {t: (row.get(t, 0) / sum(row.values())) for t, row in confusion.items() if sum(row.values())}
    correct = sum(t == p for t, p in zip(truth, predicted))
    share = {t: sum(row.values()) / total for t, row in confusion.items()} if total else {}
    return RouterScore(total, correct / total if total else 0.0, recall, confusion, share)


class Router:
    """Rules, then the probe (when there is one; keywords where it is unsure), then keywords."""

    def __init__(self, project: Project, probe: Probe | None = None, revision: str | None = None, *,
                 keywords_first: bool = False) -> None:
        self.rules = Rules(project)
        self.names = project.names
        self.probe, self.revision = probe, revision
        self.keywords_first = keywords_first      # the keywords of mint.yaml decide before the probe
        if probe is not None:
            unknown = [label for label in probe.labels if label not in self.names]
            if unknown:
                raise BadInput(f"router {revision or ''} routes to {unknown}, which mint.yaml does not define",
                               field="specialists")

    def route(self, conversations: Sequence[list[dict]], has_tools: Sequence[bool], features_fn) -> list[Route]:
        """One route per conversation; ``features_fn(conversations, probe.feature_layers, probe.reads)`` computes
        the probe's features of those it asks about (``probe_features`` on the bare base)."""
        texts = [last_user_text(c) for c in conversations]
        routes: list[Route | None] = [self.rules.certain(t, tools) for t, tools in zip(texts, has_tools)]
        if self.keywords_first:
            routes = [r or (k if (k := self.rules.keywords(t)).rule == "keywords" else None)
                      for r, t in zip(routes, texts)]
        undecided = [i for i, r in enumerate(routes) if r is None]
        if undecided and self.probe is not None:
            tool = self.rules.tool_specialist
            # a turn without tools and without a word of acting is unlike those that carried tools
            alike = [has_tools[i] or self.rules.acting(texts[i]) for i in undecided]
            probabilities = self.probe.probabilities(
                features_fn([conversations[i] for i in undecided], self.probe.feature_layers, self.probe.reads),
                [1.0 if a else TOOLLESS_TOOL_PRIOR for a in alike])
            for i, like_tool_turns, row in zip(undecided, alike, probabilities.tolist()):
                chosen = {label: round(p, 6) for label, p in zip(self.probe.labels, row)}
                # the patterns of several specialists matched: the turn is one of theirs, the probe says which
                among = self.rules.matched(texts[i]) & set(chosen)
                if len(among) > 1:
                    chosen = _normalized({label: p if label in among else 0.0 for label, p in chosen.items()})
                if self.probe.tool_turns_of is None and tool in chosen and not like_tool_turns:
                    # a probe without a class of tool-carrying turns: its tool specialist learnt mostly from them
                    chosen = _normalized({**chosen, tool: chosen[tool] * TOOLLESS_TOOL_PRIOR})
                if max(chosen.values()) < PROBE_MIN_CONFIDENCE:
                    fallback = self.rules.keywords(texts[i])
                    if fallback.rule == "keywords":
                        routes[i] = fallback
                        continue
                full = {name: chosen.get(name, 0.0) for name in self.names}
                routes[i] = Route(max(chosen, key=chosen.get), full, "probe", self.revision)
        return [r if r is not None else self.rules.keywords(t) for r, t in zip(routes, texts)]


def _normalized(probabilities: dict[str, float]) -> dict[str, float]:
    total = sum(probabilities.values()) or 1.0
    return {label: round(p / total, 6) for label, p in probabilities.items()}


def champion_router(ws, project: Project) -> tuple[Router, str | None]:
    """The router with the registry's router champion (rules only when there is none), and the probe's base."""
    from mint.registry import store
    from mint.registry.artifacts import load_revision

    if not store.exists(ws):
        return Router(project), None
    conn = store.open_store(ws, create=False)
    try:
        target = store.alias_target(conn, project.router, "champion")
    finally:
        conn.close()
    if target is None:
        return Router(project), None
    revision, directory = load_revision(ws, target)
    return Router(project, Probe.load(directory), revision.ref), revision.base


def route_text(ws, text: str, *, project: Project, tools: bool = False, base: str | None = None) -> Route:
    """Where ``text`` (one user turn) goes: the rules, else the router champion's probe on the base (without a
    champion, the starter probe: starter_probe)."""
    if not isinstance(text, str) or not text.strip():
        raise BadInput("the turn is empty", field="TEXT")
    check_unicode(text, "TEXT")
    return route_conversations(ws, [[{"role": "user", "content": text}]], [tools], project=project, base=base)[0]


def route_conversations(ws, conversations: Sequence[list[dict]], tools: Sequence[bool], *, project: Project,
                        base: str | None = None) -> list[Route]:
    """Where each conversation goes, as the mixture routes it: the rules, else the router champion's probe on
    the base (without a champion, the starter probe). The base is loaded only when the rules leave a turn to a
    probe."""
    router, probe_base = champion_router(ws, project)
    loaded: list = []

    def base_model():
        from mint.base import load_base

        if not loaded:
            loaded.append(load_base(base or probe_base or project.base))
        return loaded[0]

    def features(conversations, layer, reads):
        return probe_features(base_model().model, base_model().tokenizer, conversations, layer, reads)

    routes = router.route(list(conversations), list(tools), features)
    defaults = [i for i, route in enumerate(routes) if route.rule == "default"]
    if defaults and has_starter(project):     # no probe, no rule or keyword named a specialist
        starter = starter_router(project, router, base_model().model, features)
        for i, route in zip(defaults, starter.route([conversations[i] for i in defaults],
                                                    [tools[i] for i in defaults], features)):
            routes[i] = route
    return routes


def starter_router(project: Project, router: Router, model, features_fn) -> Router:
    """``router`` with the starter probe on ``model`` when it has no probe of its own and the project's
    specialists have plain turns; else ``router``."""
    if router.probe is not None:
        return router
    probe = starter_probe(model, project, features_fn)
    # mint.yaml's keywords, the project's own bootstrap, still decide where they match; the starter probe
    # takes the turns that name none, which keywords alone send to the first specialist
    return router if probe is None else Router(project, probe, STARTER, keywords_first=True)


# --- the starter probe: a project's router before it has a champion -------------------------------------

PLAIN_TURNS = Path(__file__).parent / "plain_turns"
STARTER = "starter"      # the revision a route decided by the starter probe reports
_starters: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()     # model -> {(name, harness)...: Probe}


@functools.lru_cache(maxsize=1)
def _all_plain_turns() -> tuple[tuple[str, str], ...]:
    """(harness, turn) of every file in PLAIN_TURNS, read once per process (package data)."""
    turns = []
    for path in sorted(PLAIN_TURNS.glob("*.jsonl")):
        with open(path, encoding="utf-8") as f:
            for line in f:
                if line.strip():
                    record = json.loads(line)
                    turns.append((record["specialist"], record["messages"][-1]["content"]))
    return tuple(turns)


def one_turn(text: str) -> list[dict]:
    """A turn the probe learns from, as the conversation it reads: the user's message alone, in the base's
    chat template (its default system turn, if any). Served turns carry their history and system turn; on
    SmolLM2 another system turn, or a tool listing, left held-out and everyday routing within 0.01."""
    return [{"role": "user", "content": text}]


def plain_turns(project: Project, heldout_texts: list[str]) -> list[tuple[str, str]]:
    """(specialist, turn) of mint's plain turns (``plain_turns/``: 414 requests typed the way people type them,
    "whats big O of binary search", "wake me at 6:30 tomorrow"), less any turn that appears in ``heldout_texts``.
    Each file labels its turns with the harness they are requests for (chat, agent, coding, genui); a turn goes
    to the project's specialist with that harness (mint.yaml's ``harness:``, whatever it calls the specialist),
    and is left out where the project has none."""
    held = set(heldout_texts)
    turns = []
    for harness, text in _all_plain_turns():
        specialist = project.specialist_with_harness(harness)
        if specialist is not None and text not in held:
            turns.append((specialist, text))
    return turns


def starter_probe(model, project: Project, features_fn) -> Probe | None:
    """The probe of a project that has no router champion yet: fitted on mint's plain turns alone, for its
    specialists with their harnesses (None unless two or more have some). ``features_fn(conversations,
    layers, reads)`` is ``probe_features`` on ``model`` with no adapter active. About 2 s on SmolLM2, once per model and process.

    Without it a new project routes by keywords, and turns in everyday words ("how do i undo my last commit")
    name none: on the unseen everyday sets (tests/routing/data/everyday_turns_{3,4}.jsonl, SmolLM2) the rules
    route 0.558 and 0.717, the rules with the starter probe after the keywords 0.908 and 0.917 (held-out: 0.994
    and 0.970)."""
    from mint.base import probe_layers

    if not has_starter(project):
        return None
    fitted = _starters.setdefault(model, {})
    # the probe depends on the names and on the harness each has (which plain turns it learns)
    key = tuple((name, project.harness_of(name)) for name in project.names)
    if key not in fitted:
        turns = plain_turns(project, [])
        layers = probe_layers(model)
        features = features_fn([one_turn(text) for _, text in turns], layers[0] if len(layers) == 1 else layers,
                               PROMPT)
        fitted[key] = fit_probe(features, [specialist for specialist, _ in turns], project.names,
                                layers[-1], shallower=layers[:-1], reads=PROMPT)
    return fitted[key]


def has_starter(project: Project) -> bool:
    """Whether ``project`` gets a starter probe: two or more of its specialists have plain turns."""
    return len({specialist for specialist, _ in plain_turns(project, [])}) >= 2
