"""LoRA slots applied per row: every linear layer of the base carries one preallocated (A, B) pair per slot.

A forward pass reads which slot each batch row uses (``SlotTable.rows``) and adds that row's
``B @ A @ x * scale``: one plain matmul pair when the whole batch shares a slot, else one gathered
batched matmul pair per module. Slot 0 is all zeros (the bare base), so a row without a specialist costs
nothing special. Slots are allocated at the maximum rank once; loading an adapter copies its weights in
place (zero-padded to the slot's rank), so a new champion never reallocates or reloads the base.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

from mint.errors import BadInput

BASE_SLOT = 0
# PEFT settings that change the math this runtime applies; any of them set is refused
_UNSUPPORTED = ("use_dora", "fan_in_fan_out", "lora_bias", "modules_to_save", "layer_replication",
                "target_parameters", "trainable_token_indices", "use_bdlora", "use_qalora")
_PEFT_KEY = re.compile(r"^base_model\.model\.(?P<module>.+)\.lora_(?P<part>[AB])(?:\.[^.]+)?\.weight$")


@dataclass
class SlotTable:
    """Which slot each row of the current batch reads (a LongTensor of shape [batch]); shared by all modules."""

    rows: object = None
    uniform: int | None = BASE_SLOT   # the slot every row uses, or None for a mixed batch
    used: tuple[int, ...] = (BASE_SLOT,)
    version: int = 0          # bumped by every set_rows: modules re-gather their rows' weights once per batch

    def set_rows(self, slots: list[int]) -> None:
        distinct = tuple(sorted(set(slots)))
        self.used = distinct
        self.version += 1
        if len(distinct) == 1:
            self.uniform, self.rows = distinct[0], None
        else:
            self.uniform, self.rows = None, torch.tensor(slots, dtype=torch.long)


@dataclass
class AdapterWeights:
    """One PEFT LoRA adapter as plain tensors: module name -> (A [r, in], B [out, r], scale)."""

    modules: dict = field(default_factory=dict)
    rank: int = 0


class SlottedLoRALinear(nn.Module):
    """Wraps a frozen ``nn.Linear``: ``forward(x) = base(x) + scale[slot] * B[slot] @ A[slot] @ x`` per row."""

    def __init__(self, base: nn.Linear, n_slots: int, max_rank: int, table: SlotTable) -> None:
        super().__init__()
        self.base = base
        self.table = table
        dtype, device = base.weight.dtype, base.weight.device
        self.register_buffer("lora_a", torch.zeros(n_slots, max_rank, base.in_features, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("lora_b", torch.zeros(n_slots, base.out_features, max_rank, dtype=dtype, device=device),
                             persistent=False)
        self.register_buffer("scale", torch.zeros(n_slots, dtype=dtype, device=device), persistent=False)
        self.ranks = [0] * n_slots     # the real rank in each slot (0: nothing loaded here)
        self._rows: tuple | None = None   # (table version, A per row, B^T per row, scale per row)

    def _gathered(self, rank: int) -> tuple:
        """Each row's A^T and scaled B^T, gathered once per batch (the rows keep their slots for the whole
        generate)."""
        table = self.table
        if self._rows is None or self._rows[0] != table.version:
            a = self.lora_a[:, :rank].index_select(0, table.rows)                         # [batch, r, in]
            scale = self.scale.index_select(0, table.rows).view(-1, 1, 1)
            b = self.lora_b[:, :, :rank].index_select(0, table.rows) * scale              # [batch, out, r]
            self._rows = (table.version, a.transpose(1, 2).contiguous(), b.transpose(1, 2).contiguous())
        return self._rows[1:]

    def forward(self, x):
        out = self.base(x)
        table = self.table
        if table.uniform is not None:
            rank = self.ranks[table.uniform]
            if rank == 0:
                return out
            # the real rank only: the same arithmetic as PEFT's one-adapter forward (added in place: the same sum)
            a, b = self.lora_a[table.uniform, :rank], self.lora_b[table.uniform, :, :rank]
            return out.add_((x @ a.T) @ b.T * self.scale[table.uniform])
        rank = max(self.ranks[s] for s in table.used)
        if rank == 0:
            return out
        a_t, b_t = self._gathered(rank)
        # two kernels a module, the scale folded into the gathered B and the sum made in place: a mixed
        # batch's LoRA cost ~20% less than bmm, bmm, scale, add (a decode step at batch 8, one thread)
        return out.baddbmm_(torch.bmm(x, a_t), b_t)

    def load_slot(self, slot: int, a, b, scale: float) -> None:
        rank = a.shape[0]
        self._rows = None
        with torch.no_grad():
            slot_a, slot_b = self.lora_a[slot], self.lora_b[slot]
            slot_a[:rank].copy_(a)
            slot_b[:, :rank].copy_(b)
            if rank < slot_a.shape[0]:   # only what the copy left of an earlier, larger rank is cleared
                slot_a[rank:].zero_()
                slot_b[:, rank:].zero_()
            self.scale[slot].fill_(scale)
        self.ranks[slot] = rank

    def clear_slot(self, slot: int) -> None:
        self._rows = None
        with torch.no_grad():
            self.lora_a[slot].zero_()
            self.lora_b[slot].zero_()
            self.scale[slot] = 0
        self.ranks[slot] = 0


def install_slots(model, n_slots: int, max_rank: int, table: SlotTable) -> dict:
    """Replace every ``nn.Linear`` inside the decoder layers with a slotted one; name -> module."""
    installed = {}
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and ".layers." in f".{name}"]
    for name, module in targets:
        parent_name, _, child = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        slotted = SlottedLoRALinear(module, n_slots, max_rank, table)
        setattr(parent, child, slotted)
        installed[name] = slotted
    if not installed:
        raise BadInput("the base has no linear layers under `layers.`: the mixture runtime cannot attach LoRA there")
    return installed


def read_adapter(directory: Path, config: dict) -> AdapterWeights:
    """The LoRA tensors of a PEFT directory (safetensors only), checked for settings this runtime cannot apply."""
    from safetensors.torch import load_file

    where = str(directory / "adapter_config.json")
    if config.get("peft_type") != "LORA":
        raise BadInput(f"peft_type {config.get('peft_type')!r} is not LORA; the mixture runtime serves LoRA only",
                       file=where, field="peft_type")
    for key in _UNSUPPORTED:
        if config.get(key) not in (None, False, [], {}):
            raise BadInput(f"{config[key]!r} is not supported by the mixture runtime", file=where, field=key)
    if config.get("bias", "none") != "none":
        raise BadInput(f"{config['bias']!r} is not supported by the mixture runtime (expected none)",
                       file=where, field="bias")
    alpha = config.get("lora_alpha")
    if not isinstance(alpha, (int, float)) or isinstance(alpha, bool):
        raise BadInput("expected a number", file=where, field="lora_alpha")
    alpha_pattern = config.get("alpha_pattern") or {}
    rslora = bool(config.get("use_rslora"))
    tensors = load_file(str(directory / "adapter_model.safetensors"))
    parts: dict[str, dict[str, object]] = {}
    for key, tensor in tensors.items():
        match = _PEFT_KEY.match(key)
        if not match:
            raise BadInput(f"unexpected tensor {key!r} (a LoRA adapter holds lora_A/lora_B weights only)",
                           file=str(directory / "adapter_model.safetensors"))
        parts.setdefault(match["module"], {})[match["part"]] = tensor
    weights = AdapterWeights()
    for module, pair in sorted(parts.items()):
        if set(pair) != {"A", "B"}:
            raise BadInput(f"{module} has lora_{'A' if 'A' not in pair else 'B'} missing",
                           file=str(directory / "adapter_model.safetensors"))
        a, b = pair["A"], pair["B"]
        rank = a.shape[0]
        if a.dim() != 2 or b.dim() != 2 or b.shape[1] != rank:
            raise BadInput(f"{module}: lora_A {tuple(a.shape)} and lora_B {tuple(b.shape)} do not fit together",
                           file=str(directory / "adapter_model.safetensors"))
        module_alpha = next((v for pattern, v in alpha_pattern.items()
                             if re.search(rf"(^|\.){pattern}$", module)), alpha)
        scale = module_alpha / (rank ** 0.5 if rslora else rank)
        weights.modules[module] = (a, b, float(scale))
        weights.rank = max(weights.rank, rank)
    if not weights.modules:
        raise BadInput("the adapter holds no LoRA weights", file=str(directory / "adapter_model.safetensors"))
    return weights
