"""The router: which specialist answers a user turn.

Two stages. Rules from ``mint.yaml`` come first where they are certain: a turn that carries tools goes to
the ``tool_use`` specialist, a turn matching a specialist's ``patterns`` goes there. Otherwise the learned
probe decides: a logistic regression on the frozen base's hidden states at one layer, mean-pooled over the
turn's tokens (no second model; the runtime computes them with every slot off, stopping at that layer).
Without a probe (no ``router`` champion yet) the keyword counts of ``mint.yaml`` decide, and a turn with no
keyword goes to the first specialist.

A probe is stored as a registry revision of the specialist ``router``: ``adapter_model.safetensors``
holds its tensors and ``adapter_config.json`` says ``peft_type: MINT_ROUTER_PROBE`` (so the registry's
checks and hashes cover it like any adapter; no PEFT loader will mistake it for a LoRA).
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from mint.data.labels import UNLABELED, Labeler
from mint.errors import BadInput
from mint.project import Project

ROUTER = "router"
PROBE_TYPE = "MINT_ROUTER_PROBE"
MAX_TURN_TOKENS = 256      # a turn's head is enough to route it, and bounds the cost of very long turns


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
        self.tool_specialist = next((s.name for s in project.specialists if s.tool_use), None)
        self.patterns = [(re.compile(p, re.IGNORECASE), s.name) for s in project.specialists for p in s.patterns]
        self.labeler = Labeler(project)

    def _certain(self, name: str, rule: str) -> Route:
        return Route(name, {n: float(n == name) for n in self.names}, "rules", None, rule)

    def certain(self, text: str, has_tools: bool) -> Route | None:
        if has_tools and self.tool_specialist:
            return self._certain(self.tool_specialist, "tools")
        for pattern, name in self.patterns:
            if pattern.search(text):
                return self._certain(name, "pattern")
        return None

    def keywords(self, text: str) -> Route:
        label, _how = self.labeler.label(None, [{"role": "user", "content": text}], [])
        if label == UNLABELED:
            return self._certain(self.names[0], "default")
        return self._certain(label, "keywords")


# --- the probe ------------------------------------------------------------------------

@dataclass
class Probe:
    labels: tuple[str, ...]
    layer: int                    # hidden states after this many decoder layers
    weight: object                # [labels, hidden]
    bias: object                  # [labels]
    mean: object                  # [hidden]: features are standardized before the linear layer
    std: object

    def probabilities(self, features):
        import torch

        logits = ((features - self.mean) / self.std) @ self.weight.T + self.bias
        return torch.softmax(logits, dim=-1)

    def save(self, directory: Path, *, base: str) -> None:
        from safetensors.torch import save_file

        directory.mkdir(parents=True, exist_ok=True)
        save_file({"weight": self.weight.contiguous(), "bias": self.bias.contiguous(),
                   "mean": self.mean.contiguous(), "std": self.std.contiguous()},
                  str(directory / "adapter_model.safetensors"))
        (directory / "adapter_config.json").write_text(json.dumps(
            {"peft_type": PROBE_TYPE, "labels": list(self.labels), "layer": self.layer, "base": base},
            indent=2) + "\n")

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
        missing = {"weight", "bias", "mean", "std"} - set(tensors)
        if missing:
            raise BadInput(f"missing tensors {sorted(missing)}", file=str(directory / "adapter_model.safetensors"))
        probe = cls(tuple(labels), layer, tensors["weight"], tensors["bias"], tensors["mean"], tensors["std"])
        if tuple(probe.weight.shape) != (len(labels), probe.mean.shape[0]) or probe.bias.shape[0] != len(labels):
            raise BadInput("tensor shapes do not match the labels", file=str(directory / "adapter_model.safetensors"))
        return probe


def default_layer(model) -> int:
    """The middle decoder layer: its pooled states separate topics well and cost half a prefill."""
    return max(1, _decoder_layers(model).__len__() // 2)


def _decoder_layers(model):
    layers = getattr(model.get_decoder(), "layers", None)
    if layers is None:
        raise BadInput(f"{type(model).__name__} has no decoder `layers`: the router probe cannot read it")
    return layers


class _Stop(Exception):
    pass


def turn_features(model, tokenizer, texts: Sequence[str], layer: int, batch_size: int = 16):
    """Mean-pooled hidden states after ``layer`` decoder layers for each text (at most MAX_TURN_TOKENS tokens).

    The forward pass stops at that layer: the rest of the model and the LM head never run. The caller makes
    sure no LoRA slot is active (the runtime holds its lock and selects the base slot).
    """
    import torch

    layers = _decoder_layers(model)
    if layer > len(layers):
        raise BadInput(f"layer {layer} is beyond the base's {len(layers)} layers", field="layer")
    captured = {}

    def capture(_module, _inputs, output):
        captured["hidden"] = output[0] if isinstance(output, tuple) else output
        raise _Stop

    all_ids = [tokenizer(t if t.strip() else " ", add_special_tokens=False)["input_ids"][:MAX_TURN_TOKENS] or
               [tokenizer.eos_token_id] for t in texts]
    # shortest first: a batch pads to its longest turn, and turns of similar length waste little on padding
    # (the demo's logs: 27k tokens instead of 71k); the features go back in the caller's order below
    order = sorted(range(len(all_ids)), key=lambda i: len(all_ids[i]))
    handle = layers[layer - 1].register_forward_hook(capture)
    pooled = []
    try:
        for start in range(0, len(order), batch_size):
            ids = [all_ids[i] for i in order[start:start + batch_size]]
            width = max(len(i) for i in ids)
            pad = tokenizer.pad_token_id
            input_ids = torch.tensor([[pad] * (width - len(i)) + i for i in ids])
            mask = torch.tensor([[0] * (width - len(i)) + [1] * len(i) for i in ids])
            with torch.inference_mode():
                try:
                    model(input_ids=input_ids, attention_mask=mask, use_cache=False)
                except _Stop:
                    pass
            hidden = captured.pop("hidden").float()
            weights = mask.unsqueeze(-1).float()
            pooled.append((hidden * weights).sum(1) / weights.sum(1))
    finally:
        handle.remove()
    features = torch.cat(pooled)
    restored = torch.empty_like(features)
    restored[torch.tensor(order)] = features
    return restored


def fit_probe(features, labels: Sequence[str], names: Sequence[str], layer: int, *, l2: float = 1e-3) -> Probe:
    """Class-balanced L2 logistic regression on standardized features (full-batch L-BFGS, deterministic)."""
    import torch

    index = {name: i for i, name in enumerate(names)}
    y = torch.tensor([index[label] for label in labels])
    mean = features.mean(0)
    std = features.std(0).clamp_min(1e-6)
    x = (features - mean) / std
    counts = torch.bincount(y, minlength=len(names)).float()
    class_weight = torch.where(counts > 0, counts.sum() / (len(names) * counts.clamp_min(1)), torch.zeros(()))
    weight = torch.zeros(len(names), x.shape[1], requires_grad=True)
    bias = torch.zeros(len(names), requires_grad=True)
    optimizer = torch.optim.LBFGS([weight, bias], lr=1.0, max_iter=300, history_size=20,
                                  line_search_fn="strong_wolfe")

    def closure():
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ weight.T + bias, y, weight=class_weight) \
            + l2 * weight.pow(2).sum()
        loss.backward()
        return loss

    with torch.enable_grad():
        optimizer.step(closure)
    return Probe(tuple(names), layer, weight.detach(), bias.detach(), mean, std)


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
    """Rules, then the probe (when there is one), then keywords."""

    def __init__(self, project: Project, probe: Probe | None = None, revision: str | None = None) -> None:
        self.rules = Rules(project)
        self.names = project.names
        self.probe, self.revision = probe, revision
        if probe is not None:
            unknown = [label for label in probe.labels if label not in self.names]
            if unknown:
                raise BadInput(f"router {revision or ''} routes to {unknown}, which mint.yaml does not define",
                               field="specialists")

    def route(self, conversations: Sequence[list[dict]], has_tools: Sequence[bool], features_fn) -> list[Route]:
        """One route per conversation; ``features_fn(texts, layer)`` computes the probe's features."""
        texts = [last_user_text(c) for c in conversations]
        routes: list[Route | None] = [self.rules.certain(t, tools) for t, tools in zip(texts, has_tools)]
        undecided = [i for i, r in enumerate(routes) if r is None]
        if undecided and self.probe is not None:
            probabilities = self.probe.probabilities(features_fn([texts[i] for i in undecided], self.probe.layer))
            for i, row in zip(undecided, probabilities.tolist()):
                chosen = {label: round(p, 6) for label, p in zip(self.probe.labels, row)}
                full = {name: chosen.get(name, 0.0) for name in self.names}
                routes[i] = Route(max(chosen, key=chosen.get), full, "probe", self.revision)
        return [r if r is not None else self.rules.keywords(t) for r, t in zip(routes, texts)]


def champion_router(ws, project: Project) -> tuple[Router, str | None]:
    """The router with the registry's router champion (rules only when there is none), and the probe's base."""
    from mint.registry import store
    from mint.registry.artifacts import load_revision

    if not store.db_path(ws).exists():
        return Router(project), None
    conn = store.open_store(ws, create=False)
    try:
        target = store.alias_target(conn, ROUTER, "champion")
    finally:
        conn.close()
    if target is None:
        return Router(project), None
    revision, directory = load_revision(ws, target)
    return Router(project, Probe.load(directory), revision.ref), revision.base


def route_text(ws, text: str, *, project: Project, tools: bool = False, base: str | None = None) -> Route:
    """Where ``text`` (one user turn) goes: the rules, else the router champion's probe on the base."""
    if not isinstance(text, str) or not text.strip():
        raise BadInput("the turn is empty", field="TEXT")
    router, probe_base = champion_router(ws, project)
    loaded = []

    def features(texts, layer):
        from mint.base import load_base

        if not loaded:
            loaded.append(load_base(base or probe_base or project.base))
        return turn_features(loaded[0].model, loaded[0].tokenizer, texts, layer)

    return router.route([[{"role": "user", "content": text}]], [tools], features)[0]
