"""LoRA slots applied per row: every linear layer of the base carries one preallocated (A, B) pair per slot.

A forward pass reads which slot each batch row uses (``SlotTable.rows``) and adds that row's
``B @ A @ x * scale``: one plain matmul pair when the whole batch shares a slot, else one matmul pair through
the batch's adapters stacked side by side, each row masked to its own. Slot 0 is all zeros (the bare base), so a row without a specialist costs
nothing special. Slots are allocated at the maximum rank once; loading an adapter copies its weights in
place (zero-padded to the slot's rank), so a new champion never reallocates or reloads the base.
"""
from __future__ import annotations

import json
import mmap
import os
import re
from dataclasses import dataclass, field
from functools import cached_property
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

    rows: tuple[int, ...] = (BASE_SLOT,)   # each row's slot
    uniform: int | None = BASE_SLOT   # the slot every row uses, or None for a mixed batch
    used: tuple[int, ...] = (BASE_SLOT,)
    version: int = 0          # bumped by every set_rows: modules re-gather their rows' weights once per batch
    buffers: int = 0          # bumped when a module's buffers are replaced (.to(), .float()): load plans go stale
    weights: int = 0          # bumped when a slot's weights change (load_slots): stacked adapters go stale
    _masks: dict = field(default_factory=dict, repr=False)

    def set_rows(self, slots: list[int]) -> None:
        distinct = tuple(sorted(set(slots)))
        self.used = distinct
        self.version += 1
        self.rows = tuple(slots)
        self.uniform = distinct[0] if len(distinct) == 1 else None
        self._masks.clear()

    def row_mask(self, used: tuple[int, ...], rank: int, dtype, device):
        """[batch, 1, S*r]: each row's mask over the columns of ``used`` slots' adapters stacked at ``rank`` (1 on
        its own slot's, none for a row whose slot is not in ``used``); made once per batch for every module."""
        key = (used, rank, dtype, device)
        mask = self._masks.get(key)
        if mask is None:
            place = {slot: k for k, slot in enumerate(used)}
            owner = torch.tensor([place.get(slot, -1) for slot in self.rows], dtype=torch.long, device=device)
            columns = torch.arange(len(used), device=device).repeat_interleave(rank)    # [S*r]: its slot
            mask = self._masks[key] = (owner[:, None] == columns[None, :]).to(dtype)[:, None, :]
        return mask


@dataclass
class AdapterWeights:
    """One PEFT LoRA adapter as plain tensors: module name -> (A [r, in], B [out, r], scale)."""

    modules: dict = field(default_factory=dict)
    rank: int = 0
    layout: object = None     # the AdapterLayout the tensors were placed by (the runtime's checks are cached by it)


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
        self.scale_values = [0.0] * n_slots   # the scale each slot was given (a handoff writes only changed ones)
        self._rows: tuple | None = None   # (table version, the batch's stacked adapters: see _gathered)
        self._stacked: tuple | None = None   # ((table weights, slots, rank), A and scaled B stacked: see _gathered)
        self._views: dict = {}            # (slot, rank) -> views of the buffers (see slot_views)
        self._forward_views: dict = {}    # (slot, rank) -> A and B transposed and the scale (_uniform_views)

    def _gathered(self) -> tuple | None:
        """The batch's adapters side by side: A of every slot in use with a rank, stacked ([in, S*r]), their scaled
        B stacked ([S*r, out]), and each row's mask over those S*r columns (1 on its own slot's). The stacks are
        made again only when the slots in use or their weights change, the mask once per batch for every module
        (``SlotTable.row_mask``): rows join and leave a stream every few steps, and re-stacking every module's
        adapters each time cost more than the steps between. None: no row's slot has a rank."""
        table = self.table
        if self._rows is None or self._rows[0] != table.version:
            used = tuple(s for s in table.used if self.ranks[s] > 0)
            stacked = None
            if used:
                rank = max(self.ranks[s] for s in used)
                key = (table.weights, used, rank)
                if self._stacked is None or self._stacked[0] != key:
                    index = torch.tensor(used, dtype=torch.long, device=self.lora_a.device)
                    a = self.lora_a[:, :rank].index_select(0, index)                       # [S, r, in]
                    b = self.lora_b[:, :, :rank].index_select(0, index) * self.scale.index_select(0, index).view(-1, 1, 1)
                    self._stacked = (key, (a.reshape(-1, a.shape[-1]).T.contiguous(),
                                           b.transpose(1, 2).reshape(-1, b.shape[1]).contiguous()))
                a_t, b_stacked = self._stacked[1]
                stacked = (a_t, b_stacked, table.row_mask(used, rank, a_t.dtype, a_t.device))
            self._rows = (table.version, stacked)
        return self._rows[1]

    def forward(self, x):
        out = self.base(x)
        table = self.table
        if table.uniform is not None:
            rank = self.ranks[table.uniform]
            if rank == 0:
                return out
            # the real rank only: the same arithmetic as PEFT's one-adapter forward (added in place: the same sum),
            # on views made once per (slot, rank): slicing and transposing them anew cost more than the matmuls
            a_t, b_t, scale = self._uniform_views(table.uniform, rank)
            return out.add_((x @ a_t) @ b_t * scale)
        stacked = self._gathered()
        if stacked is None:
            return out
        # every slot's A and B read once a step, not once a row: each row's x goes through all the batch's
        # adapters' A at once (S*r columns, a few), the columns of other slots are zeroed by its mask, and one
        # matmul through the stacked scaled B adds its own. Gathering A and B per row (bmm) read rows x (in + out)
        # x r weights a module, as many bytes a step as the base's weights at batch 24 (a quarter of a mixed
        # decode step's time, SmolLM2 on 2 cores)
        a_t, b_stacked, mask = stacked
        low = (x @ a_t).mul_(mask)
        return out.view(-1, out.shape[-1]).addmm_(low.view(-1, low.shape[-1]), b_stacked).view(out.shape)

    def _uniform_views(self, slot: int, rank: int) -> tuple:
        """A and B of ``slot`` at ``rank``, transposed, and its scale: views of the buffers, made once per (slot,
        rank); ``_apply`` forgets them when the buffers are replaced."""
        views = self._forward_views.get((slot, rank))
        if views is None:
            views = self._forward_views[(slot, rank)] = (self.lora_a[slot, :rank].T, self.lora_b[slot, :, :rank].T,
                                                         self.scale[slot])
        return views

    def slot_views(self, slot: int, rank: int) -> tuple:
        """Views of ``slot`` for an adapter of ``rank``: (A's first rank rows, B's first rank columns, A's and
        B's rest, the scale), made once per (slot, rank); ``_apply`` forgets them when the buffers are replaced."""
        views = self._views.get((slot, rank))
        if views is None:
            a, b, scale = self.lora_a, self.lora_b, self.scale
            views = self._views[(slot, rank)] = (a[slot, :rank], b[slot, :, :rank], a[slot, rank:], b[slot, :, rank:],
                                                 scale[slot:slot + 1])
        return views

    def _apply(self, fn, *args, **kwargs):
        # .to(), .float(), .bfloat16() ... replace the buffers: views and gathered rows of the old ones are stale
        result = super()._apply(fn, *args, **kwargs)
        self._views.clear()
        self._forward_views.clear()
        self._rows = self._stacked = None
        self.table.buffers += 1
        return result

    def clear_slot(self, slot: int) -> None:
        self._rows = self._stacked = None
        with torch.no_grad():
            self.lora_a[slot].zero_()
            self.lora_b[slot].zero_()
            self.scale[slot] = 0
        self.ranks[slot] = 0
        self.scale_values[slot] = 0.0


@dataclass(eq=False)
class LoadPlan:
    """Where one adapter layout's tensors go in one slot, worked out once (``load_plan``) and reused by every
    handoff of that layout into that slot: the A and B views to copy into, in the layout's order, what they
    leave of an earlier larger rank, the scale views, and each module's rank."""

    slot: int
    buffers: int              # the SlotTable's ``buffers`` when made: a plan of replaced buffers is stale
    targets: list
    rests: list
    scales: list
    ranks: list               # (module, rank)
    tables: list


def load_plan(slot: int, modules) -> LoadPlan:
    """The plan for copying adapters into ``slot`` of each (module, rank) of ``modules``, in order."""
    targets: list
    rests: list
    targets, rests, scales, ranks, tables = [], [], [], [], {}
    for module, rank in modules:
        a_view, b_view, a_rest, b_rest, scale_view = module.slot_views(slot, rank)
        targets += (a_view, b_view)
        if a_rest.shape[0]:    # only what the copy leaves of an earlier, larger rank is cleared
            rests += (a_rest, b_rest)
        scales.append(scale_view)
        ranks.append((module, rank))
        tables[id(module.table)] = module.table
    buffers = sum(table.buffers for table in tables.values())
    return LoadPlan(slot, buffers, targets, rests, scales, ranks, list(tables.values()))


def plan_is_current(plan: LoadPlan) -> bool:
    return plan.buffers == sum(table.buffers for table in plan.tables)


def load_slots(plan: LoadPlan, sources: list, scales: list[float]) -> None:
    """Copy ``sources`` (A, B of each module of ``plan``, in order) into the plan's slot with the modules' ``scales``,
    zero-padded to the slot's rank: a few batched kernels for all the modules (one tensor op per module and part
    cost more than the copies themselves: ~2/3 of a 120-module handoff). Each copy converts its dtype where the
    slot's differs."""
    if not plan.targets:
        return
    slot = plan.slot
    # a retrained champion mostly keeps its scales (alpha / rank): one tensor op per changed scale costs more
    # than comparing them all
    changed = [(view, scale) for (module, _rank), view, scale in zip(plan.ranks, plan.scales, scales)
               if module.scale_values[slot] != scale]
    with torch.no_grad():
        torch._foreach_copy_(plan.targets, sources)
        if plan.rests:
            torch._foreach_zero_(plan.rests)
        if changed:
            views = [view for view, _scale in changed]
            torch._foreach_zero_(views)
            torch._foreach_add_(views, [scale for _view, scale in changed])
    for (module, rank), scale in zip(plan.ranks, scales):
        module.ranks[slot] = rank
        module.scale_values[slot] = scale
    for table in plan.tables:
        table.version += 1      # every module's rows gathered for a batch (see _gathered) are stale now
        table.weights += 1      # and so are their stacked adapters


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


# safetensors' element types that a LoRA adapter is saved in, and torch's name for each
_SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}


@dataclass(frozen=True)
class TensorSpan:
    """Where one tensor lies in a safetensors file's data (byte offsets past the header)."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    begin: int
    end: int

    @cached_property
    def strides(self) -> tuple[int, ...]:
        """A contiguous tensor's strides for this shape, in elements."""
        strides, step = [], 1
        for n in reversed(self.shape):
            strides.append(step)
            step *= max(n, 1)
        return tuple(reversed(strides))


@dataclass(frozen=True, eq=False)   # hashed by identity: the runtime keys its checks by the layout
class AdapterLayout:
    """An adapter's tensors as its safetensors header and its config place them, checked once: module name ->
    (A's span, B's span, scale). Adapters with the same header and LoRA settings share one layout, so a
    handoff of a retrained champion (same modules, same shapes) skips every per-module check but the file's."""

    modules: dict
    rank: int
    data_bytes: int          # how many bytes of data the spans need past the header


def _config_key(config: dict) -> tuple:
    """What of an adapter config the scales depend on."""
    return (config.get("lora_alpha"), bool(config.get("use_rslora")),
            json.dumps(config.get("alpha_pattern") or {}, sort_keys=True))


def read_adapter(directory: Path, config: dict, layouts: dict | None = None) -> AdapterWeights:
    """The LoRA tensors of a PEFT directory (safetensors only), checked for settings this runtime cannot apply.

    The file is mapped once and each tensor is a view of it (no tensor is converted or copied here: the
    slot's copy does both in one step, see ``load_slots``). ``layouts``, where given, caches each header's checked
    layout (see ``AdapterLayout``) from one call to the next."""
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
    path = directory / "adapter_model.safetensors"
    data, header = _read_safetensors(path)
    layout_key = (header, _config_key(config))
    layout = layouts.get(layout_key) if layouts is not None else None
    if layout is None:
        layout = _layout(path, header, config)
        if layouts is not None:
            if len(layouts) >= 32:      # a long-running server sees few distinct layouts; never an unbounded cache
                layouts.clear()
            layouts[layout_key] = layout
    if len(data) - 8 - len(header) < layout.data_bytes:
        raise BadInput(f"the file ends before its tensors do ({len(data)} bytes)", file=str(path))
    start = 8 + len(header)
    flats: dict = {}      # dtype -> the whole data as one tensor of it: a view of it costs a third of a frombuffer

    def tensor(span: TensorSpan):
        size = span.dtype.itemsize
        if span.begin % size:       # not on an element boundary of the flat tensor (the format allows it)
            return torch.frombuffer(data, dtype=span.dtype, count=(span.end - span.begin) // size,
                                    offset=start + span.begin).view(span.shape)
        flat = flats.get(span.dtype)
        if flat is None:
            flat = flats[span.dtype] = torch.frombuffer(data, dtype=span.dtype, offset=start,
                                                        count=(len(data) - start) // size)
        return flat.as_strided(span.shape, span.strides, span.begin // size)

    weights = AdapterWeights(rank=layout.rank, layout=layout)
    for module, (a, b, scale) in layout.modules.items():
        weights.modules[module] = (tensor(a), tensor(b), scale)
    return weights


def _read_safetensors(path: Path) -> tuple[mmap.mmap | bytes, bytes]:
    """The file mapped into memory (copy-on-write, so tensors may view it in place; a handoff's copy into the
    slots is then the only pass over the data, as in safetensors' own loading) and its JSON header's bytes."""
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_COPY) if size >= 8 else b""
    except (OSError, ValueError) as exc:
        raise BadInput(f"cannot read: {exc}", file=str(path)) from None
    length = int.from_bytes(data[:8], "little") if len(data) >= 8 else -1
    if not 0 < length <= len(data) - 8:
        raise BadInput("not a safetensors file (its header length does not fit the file)", file=str(path))
    return data, bytes(data[8:8 + length])


def _layout(path: Path, header: bytes, config: dict) -> AdapterLayout:
    """Check a safetensors header as a PEFT LoRA adapter's and place each module's A and B and scale."""
    where = str(path)
    try:
        entries = json.loads(header)
    except ValueError as exc:
        raise BadInput(f"not a safetensors file (its header is not JSON: {exc})", file=where) from None
    if not isinstance(entries, dict):
        raise BadInput("not a safetensors file (its header is not a JSON object)", file=where)
    parts: dict[str, dict[str, TensorSpan]] = {}
    data_bytes = 0
    for key, entry in entries.items():
        if key == "__metadata__":
            continue
        span = _span(key, entry, where)
        data_bytes = max(data_bytes, span.end)
        match = _PEFT_KEY.match(key)
        if not match:
            raise BadInput(f"unexpected tensor {key!r} (a LoRA adapter holds lora_A/lora_B weights only)",
                           file=where)
        parts.setdefault(match["module"], {})[match["part"]] = span
    alpha, rslora = config["lora_alpha"], bool(config.get("use_rslora"))
    alpha_pattern = config.get("alpha_pattern") or {}
    modules, rank_max = {}, 0
    for module, pair in sorted(parts.items()):
        if set(pair) != {"A", "B"}:
            raise BadInput(f"{module} has lora_{'A' if 'A' not in pair else 'B'} missing", file=where)
        a, b = pair["A"], pair["B"]
        if len(a.shape) != 2 or len(b.shape) != 2 or b.shape[1] != a.shape[0] or a.shape[0] < 1:
            raise BadInput(f"{module}: lora_A {a.shape} and lora_B {b.shape} do not fit together", file=where)
        rank = a.shape[0]
        module_alpha = next((v for pattern, v in alpha_pattern.items()
                             if re.search(rf"(^|\.){pattern}$", module)), alpha)
        modules[module] = (a, b, float(module_alpha / (rank ** 0.5 if rslora else rank)))
        rank_max = max(rank_max, rank)
    if not modules:
        raise BadInput("the adapter holds no LoRA weights", file=where)
    return AdapterLayout(modules, rank_max, data_bytes)


def _span(key: str, entry, where: str) -> TensorSpan:
    """One header entry ({"dtype", "shape", "data_offsets"}) as a span, its size checked against its shape."""
    try:
        dtype = _SAFETENSORS_DTYPES[entry["dtype"]]
        shape = tuple(int(n) for n in entry["shape"])
        begin, end = (int(n) for n in entry["data_offsets"])
    except (KeyError, TypeError, ValueError):
        raise BadInput(f"tensor {key!r}: expected dtype (one of {', '.join(_SAFETENSORS_DTYPES)}), shape and "
                       f"data_offsets in the header", file=where) from None
    count = 1
    for n in shape:
        count *= n
    if min(shape, default=0) < 0 or not 0 <= begin <= end or end - begin != count * dtype.itemsize:
        raise BadInput(f"tensor {key!r}: its data_offsets {[begin, end]} do not hold a {entry['dtype']} "
                       f"tensor of shape {list(shape)}", file=where)
    return TensorSpan(dtype, shape, begin, end)


def slot_table(model) -> SlotTable | None:
    """The slot table ``model``'s slotted layers read (None for a model without LoRA slots)."""
    return next((module.table for module in model.modules() if isinstance(module, SlottedLoRALinear)), None)
