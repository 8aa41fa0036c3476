"""The LoRA slots of one model: adapters checked and copied into preallocated slots, one slot per batch row.

``AdapterSlots.install`` puts a slotted layer (``mint.generation.lora``) in place of every linear layer of the
decoder; ``load`` checks a PEFT LoRA directory against the slots' rank and the base's layers and copies it into a
slot in place (a new adapter never reallocates or reloads the base); ``clear`` empties a slot. The checks of an
adapter's layout and where its tensors go are made once per layout, so the handoff of a retrained adapter (same
modules, same shapes) costs its copy.
"""
from __future__ import annotations

from pathlib import Path
from typing import Sequence

from mint.errors import BadInput, Refused

DEFAULT_MAX_RANK = 16


class AdapterSlots:
    """``n_slots`` LoRA slots of rank ``max_rank`` in every linear layer of ``model``'s decoder, besides slot 0
    (the bare base)."""

    def __init__(self, model, n_slots: int, max_rank: int = DEFAULT_MAX_RANK, *, base_name: str = "the base") -> None:
        from mint.generation.lora import SlotTable, install_slots

        if max_rank < 1:
            raise BadInput("must be at least 1", field="--max-rank")
        self.model, self.max_rank, self.base_name = model, max_rank, base_name
        self.table = SlotTable()
        self.modules = install_slots(model, n_slots + 1, max_rank, self.table)
        self.layer_of = {name: layer_index(name) for name in self.modules}
        self._layouts: dict = {}        # (safetensors header, LoRA settings) -> its checked AdapterLayout
        self._targets: dict = {}        # AdapterLayout -> (the slotted modules it fills, those it leaves empty)
        self._plans: dict = {}          # (AdapterLayout, slot index) -> its LoadPlan (see mint.generation.lora)

    def check(self, directory: Path, name: str):
        """The LoRA weights at ``directory``, checked against the slots' rank and the base's layers, and where
        they go (checked once per layout: see ``mint.generation.lora.AdapterLayout``)."""
        from mint.generation.lora import read_adapter
        from mint.registry.artifacts import check_adapter_dir

        weights = read_adapter(directory, check_adapter_dir(directory), self._layouts)
        if weights.rank > self.max_rank:
            raise Refused(f"{name} has LoRA rank {weights.rank}, above the runtime's slot rank {self.max_rank}; "
                          f"start the runtime with --max-rank {weights.rank} or more")
        placement = self._targets.get(weights.layout)
        if placement is None:
            if len(self._targets) >= 32:
                self._targets.clear()
            placement = self._targets[weights.layout] = self._targets_of(weights.layout, name, directory)
        return weights, placement

    def _targets_of(self, layout, name: str, directory: Path) -> tuple[list, list]:
        """The slotted modules a layout's modules go into (in its order), and those it leaves empty; BadInput
        when a module is not a linear layer of the base or its shape is not the base's."""
        targets = []
        for module, (a, b, _scale) in layout.modules.items():
            target = self.modules.get(module)
            if target is None:
                raise BadInput(f"{name} adapts {module}, which is not a linear layer of base "
                               f"{self.base_name}", file=str(directory))
            if a.shape[1] != target.base.in_features or b.shape[0] != target.base.out_features:
                raise BadInput(f"{name}: {module} is {target.base.in_features}->{target.base.out_features} in base "
                               f"{self.base_name}, but the adapter's LoRA is {a.shape[1]}->{b.shape[0]}",
                               file=str(directory))
            targets.append(target)
        untouched = [module for module_name, module in self.modules.items() if module_name not in layout.modules]
        return targets, untouched

    def copy_into(self, index: int, weights, placement: tuple[list, list]) -> None:
        """Copy checked ``weights`` (see ``check``) into slot ``index``; the modules they leave are cleared."""
        from mint.generation.lora import load_plan, load_slots, plan_is_current

        targets, untouched = placement
        loaded = list(weights.modules.values())
        plan = self._plans.get((weights.layout, index))
        if plan is None or not plan_is_current(plan):
            if len(self._plans) >= 64:
                self._plans.clear()
            plan = self._plans[(weights.layout, index)] = load_plan(
                index, [(target, a.shape[0]) for target, (a, _b, _scale) in zip(targets, loaded)])
        load_slots(plan, [tensor for a, b, _scale in loaded for tensor in (a, b)], [scale for *_, scale in loaded])
        for module in untouched:
            if module.ranks[index]:
                module.clear_slot(index)

    def load(self, index: int, directory: Path, name: str | None = None) -> int:
        """Check the PEFT LoRA at ``directory`` and copy it into slot ``index``; its rank. Every check happens
        before any copy, so a refused adapter leaves the slot as it was."""
        weights, placement = self.check(Path(directory), name or str(directory))
        self.copy_into(index, weights, placement)
        return weights.rank

    def clear(self, index: int) -> None:
        for module in self.modules.values():
            module.clear_slot(index)

    def shared_layers(self, indexes: Sequence[int]) -> int:
        """How many decoder layers, from the first, no adapter in the slots ``indexes`` changes: there every slot
        computes the bare base's states (all of them when no adapter is loaded)."""
        from mint.base import decoder_layers

        changed = [self.layer_of[name] for name, module in self.modules.items()
                   if any(module.ranks[index] for index in indexes)]
        changed = [layer for layer in changed if layer is not None]
        return min(changed, default=len(decoder_layers(self.model)))


def layer_index(module_name: str) -> int | None:
    """The decoder layer a module belongs to (``model.layers.12.mlp.up_proj`` -> 12)."""
    import re

    found = re.search(r"(?:^|\.)layers\.(\d+)\.", module_name)
    return int(found[1]) if found else None


def attach_adapters(model, directories: Sequence[Path], *, base_name: str = "the base",
                    names: Sequence[str] | None = None) -> list[int]:
    """Slots for ``directories`` installed in ``model`` (at the largest rank among them) and each adapter copied
    into its own; their slot indexes, in order (none installed for no adapters)."""
    from mint.generation.lora import read_adapter
    from mint.registry.artifacts import check_adapter_dir

    if not directories:
        return []
    ranks = [read_adapter(Path(d), check_adapter_dir(Path(d))).rank for d in directories]
    slots = AdapterSlots(model, len(directories), max(ranks), base_name=base_name)
    names = list(names) if names is not None else [str(d) for d in directories]
    for index, (directory, name) in enumerate(zip(directories, names), start=1):
        slots.load(index, Path(directory), name)
    return list(range(1, len(directories) + 1))
