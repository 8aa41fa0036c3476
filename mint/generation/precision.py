"""The precision a contract decodes at: fp32 (the model as loaded), or a bf16 or int8 copy of it.

``auto`` is not resolved here: a contract resolves it once per base, host and contract by measurement
(mint.contract.precision, which times and compares the two with ``compare_precisions``), so a candidate and
its baseline always decode at one precision and no evaluation pays for a parity check
(``mint.generation.engine.compare_precisions`` measures the two). A copy carries the
model's LoRA slots (see ``mint.generation.lora``): bf16 casts them too, int8 quantizes the base's Linear layers
and keeps the slots' adapters in fp32 beside them.
"""
from __future__ import annotations

import copy
import weakref

PRECISIONS = ("fp32", "bf16", "int8", "auto")
# prompts compare_precisions decodes at both precisions
PARITY_PROMPTS = 4

_precision_copies: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # model -> {precision: (state, copy)}


def resolve_precision(requested: str, device: str = "cpu") -> tuple[str, str]:
    """(fp32, bf16 or int8, why) for a contract's ``decoding.precision`` once ``auto`` is resolved."""
    if requested == "auto":
        raise ValueError("precision auto is resolved per contract (mint.contract.precision), not per generation")
    if requested == "fp32":
        return "fp32", "fp32, as the settings ask"
    if requested == "bf16":
        return "bf16", "bf16 (a bf16 copy of the model), as the settings ask"
    if requested == "int8":
        if device.startswith("cuda"):   # torch's dynamic quantization runs on CPUs only
            return "fp32", "int8 is asked for, which mint runs on CPUs only; fp32 on a GPU"
        import torch

        engines = torch.backends.quantized.supported_engines
        if not {"x86", "fbgemm", "qnnpack"} & set(engines):
            return "fp32", f"int8 is asked for, but this torch has no quantized CPU kernels ({engines}); fp32"
        return "int8", "int8 (dynamic quantization of Linear layers), as the settings ask"
    raise ValueError(f"precision: expected one of {', '.join(PRECISIONS)}, got {requested!r}")


def weights_state(model) -> tuple:
    """Changes when the model's weights or its LoRA slots do (in place too: a tensor's version counter), so a
    cached copy is never stale."""
    return (tuple((id(p), p._version) for p in model.parameters()),
            tuple((id(b), b._version) for b in model.buffers()))


def precision_copy(model, precision: str):
    """A bf16 or int8 copy of ``model``, made once per state of its weights (the original stays untouched).
    int8: every Linear layer (the LM head too; a LoRA slot's base layer, not its adapters) is dynamically
    quantized (int8 weights, activations quantized per call)."""
    import torch

    state = weights_state(model)
    copies = _precision_copies.setdefault(model, {})
    if precision not in copies or copies[precision][0] != state:
        copies.pop(precision, None)   # free the stale copy before making the new one
        clone = copy.deepcopy(model)
        if precision == "bf16":
            clone = clone.to(torch.bfloat16)
        elif precision == "int8":
            clone = torch.ao.quantization.quantize_dynamic(clone, {torch.nn.Linear}, dtype=torch.qint8)
        else:
            raise ValueError(f"no {precision} copy: expected bf16 or int8")
        copies[precision] = (state, clone.eval())
    return copies[precision][1]
