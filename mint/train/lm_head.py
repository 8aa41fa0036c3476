"""SFT's LM head on the trained positions only, where TRL's fused head scores every position.

TRL's SFTTrainer replaces the model's forward with a fused LM head (``trl.trainer.utils.add_fused_lm_head``) that
projects the hidden states through the vocabulary in tiles. On a device with Triton (CUDA, XPU) it scores only the
positions whose next-token label is set; elsewhere (a CPU) it scores every position, prompt and padding included,
and then zeroes the ones it did not need. With mint's assistant-only loss most positions are prompt (a system
prompt, tool schemas): on the demo's GenUI data 44% of the positions, on the agent's more than half, and on a CPU
that projection through 49,152 vocabulary rows was most of a training step (docs/benchmarks.md, "Training").

``score_trained_positions`` puts back a forward that scores the trained positions alone, as TRL does on a GPU, and
leaves the others zero, as TRL leaves them. On a CPU it scores them with ``TrainedPositionsHead``: TRL's arithmetic
(a product at the autocast precision, log-sum-exp, entropy and top-1 in fp32, the gradient's product accumulated in
fp32), the whole vocabulary at once instead of TRL's tiles with a dozen tensor passes each: the head's forward and
backward about twice as fast (scripts/bench_train.py, (c)). Elsewhere, or where the head itself trains, TRL's own kernel
(``trl.kernels.ChunkedLogProbFunction``, the one its head calls) gets the trained positions.
"""
from __future__ import annotations

import contextlib
import types

import torch

# the per-token fields SFTTrainer asks TRL's head for (its loss, entropy and mean_token_accuracy metrics)
SFT_OUTPUTS = ("log_probs", "entropy", "is_top1")
# what TRL's head does besides a plain projection; a model with any of these keeps TRL's head as it is
_HEAD_EXTRAS = ("final_logit_softcapping", "logit_scale", "output_multiplier", "lm_head_multiplier",
                "logits_scaling", "output_router_logits")


def scores_every_position(device) -> bool:
    """Whether TRL's fused head projects every position on ``device``: everywhere but where its Triton kernels
    run (CUDA, XPU) and it keeps the trained positions only."""
    return getattr(device, "type", str(device)) not in ("cuda", "xpu")


def plain_head(model) -> bool:
    """A causal LM whose head is a projection and nothing more (no logit scale or softcap, no MoE router loss,
    one text config): what ``score_trained_positions`` reproduces exactly."""
    config = model.config
    text_config = config.get_text_config()
    return text_config is config and not any(getattr(text_config, name, None) for name in _HEAD_EXTRAS)


def score_trained_positions(model) -> bool:
    """Give ``model`` (the causal LM under the PEFT wrapper, after SFTTrainer added TRL's fused head) a fused head
    that scores the trained positions only; True when it did, False where the model's head is not a plain
    projection (TRL's head is kept, see ``plain_head``)."""
    if not plain_head(model):
        return False
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer.utils import FusedCausalLMOutput

    trl_forward = model.forward
    chunk = 32768   # TRL's vocabulary tile (trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE)
    cast = WeightCast()

    def forward(self, *args, fused_lm_head=False, labels=None, shift_labels=None, num_items_in_batch=None,
                **kwargs):
        if not fused_lm_head or shift_labels is not None:
            return trl_forward(*args, fused_lm_head=fused_lm_head, labels=labels, shift_labels=shift_labels,
                               num_items_in_batch=num_items_in_batch, **kwargs)
        kwargs["use_cache"] = False
        hidden = self.base_model(*args, **kwargs).last_hidden_state[:, :-1]
        head = self.get_output_embeddings()
        targets = labels[:, 1:].to(head.weight.device)
        mask = targets != -100
        trained = hidden.to(head.weight.device)[mask]
        dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else trained.dtype
        if own_head_fits(head, trained, dtype):
            log_probs, entropy, is_top1 = TrainedPositionsHead.apply(trained, *cast(head.weight, dtype), targets[mask])
            per_token = (log_probs, entropy, None, None, is_top1)
        else:
            per_token = ChunkedLogProbFunction.apply(trained, head.weight, head.bias, targets[mask], 1.0, chunk,
                                                     None, 1.0, SFT_OUTPUTS)
        # masked_scatter keeps a batch without a trained position connected to the model (a zero gradient)
        log_probs, entropy, _sq, _mean, is_top1 = (None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x)
                                                   for x in per_token)
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(loss=-log_probs.sum() / count, log_probs=log_probs, entropy=entropy,
                                   is_top1=is_top1, label_mask=mask)

    model.forward = types.MethodType(forward, model)
    return True


def own_head_fits(head, trained, dtype) -> bool:
    """Where ``TrainedPositionsHead`` stands in for TRL's kernel: a CPU, a frozen head without bias (a LoRA's), at fp32
    or bf16."""
    return (trained.device.type == "cpu" and head.bias is None and not head.weight.requires_grad
            and dtype in (torch.float32, torch.bfloat16))


class WeightCast:
    """The frozen head's weight at the compute precision, and those values in fp32 (the gradient's product), cast
    once: autocast would cast its 28M values again at every forward and backward (20 ms each on 2 cores for
    SmolLM2's 49,152 x 576)."""

    def __init__(self):
        self._key = None
        self._casts = None

    def __call__(self, weight, dtype) -> tuple:
        key = (weight.data_ptr(), weight._version, dtype)
        if key != self._key:
            cast = weight.detach().to(dtype)
            self._key, self._casts = key, (cast, cast.float())
        return self._casts


# positions scored at once: the [positions, vocabulary] fp32 scores of one tile (SmolLM2: 25 MB at 128), which the
# tile's half a dozen passes read again; each position's figures are its own, so the tile changes none of them. At
# 240 and 480 positions the head's forward and backward took 215 and 468 ms in tiles of 128 against 263 and 577 in
# tiles of 512, 243 and 524 in 64 (AMD EPYC avx512_bf16, 2 cores; the same values, bit for bit)
TILE_POSITIONS = 128


@contextlib.contextmanager
def _fp32_products_in_bf16():
    """oneDNN computes fp32 matrix products from bf16 inputs, accumulating in fp32: the gradient's product of TRL's
    kernel (bf16 operands, an fp32 sum) at bf16's speed (19 ms against 67 for SmolLM2's head at 240 positions)."""
    matmul = torch.backends.mkldnn.matmul
    before = matmul.fp32_precision
    matmul.fp32_precision = "bf16"
    try:
        yield
    finally:
        matmul.fp32_precision = before


class TrainedPositionsHead(torch.autograd.Function):
    """Each position's log-probability of its target under ``hidden @ weight.T``, the distribution's entropy and
    whether the target is its first maximum: TRL's ``ChunkedLogProbFunction`` (outputs log_probs, entropy, is_top1)
    for a CPU. ``weight`` comes at the compute precision (and ``full``, its values in fp32); the product is rounded
    to it, as TRL's tiles are, and the rest is fp32. The backward recomputes the scores and returns the gradient of
    ``hidden`` only (the head is frozen)."""

    @staticmethod
    def forward(ctx, hidden, weight, full, targets):
        ctx.set_materialize_grads(False)
        count = hidden.shape[0]
        log_probs, entropy, log_z = (hidden.new_empty(count, dtype=torch.float32) for _ in range(3))
        is_top1 = torch.empty(count, dtype=torch.bool, device=hidden.device)
        with torch.autocast("cpu", enabled=False):
            TrainedPositionsHead._score(hidden, weight, targets, log_probs, entropy, log_z, is_top1)
        ctx.save_for_backward(hidden, weight, full, targets, log_z, entropy)
        ctx.mark_non_differentiable(is_top1)
        return log_probs, entropy, is_top1

    @staticmethod
    def _score(hidden, weight, targets, log_probs, entropy, log_z, is_top1):
        for start in range(0, len(targets), TILE_POSITIONS):
            end = min(start + TILE_POSITIONS, len(targets))
            scores = torch.mm(hidden[start:end].to(weight.dtype), weight.t())
            is_top1[start:end] = scores.argmax(-1) == targets[start:end]
            scores = scores.float()
            peak = scores.amax(-1, keepdim=True)
            exp = scores.sub(peak).exp_()
            total = exp.sum(-1)
            log_z[start:end] = peak.squeeze(-1) + total.log()
            entropy[start:end] = log_z[start:end] - torch.linalg.vecdot(exp, scores) / total
            log_probs[start:end] = scores.gather(-1, targets[start:end].unsqueeze(-1)).squeeze(-1) - log_z[start:end]

    @staticmethod
    def backward(ctx, grad_log_probs, grad_entropy, _grad_top1):
        hidden, weight, full, targets, log_z, entropy = ctx.saved_tensors
        if grad_log_probs is None and grad_entropy is None:
            return None, None, None, None
        grad = torch.empty(hidden.shape, dtype=torch.float32, device=hidden.device)
        # TRL keeps the gradient's tile at the compute precision and sums its product in fp32: so does this, and
        # oneDNN computes that product from the (exact) bf16 values at bf16's speed
        products = _fp32_products_in_bf16() if weight.dtype == torch.bfloat16 else contextlib.nullcontext()
        with products, torch.autocast("cpu", enabled=False):     # the precisions are the ones named here
            for start in range(0, hidden.shape[0], TILE_POSITIONS):
                end = min(start + TILE_POSITIONS, hidden.shape[0])
                log_p = torch.mm(hidden[start:end].to(weight.dtype), weight.t()).float().sub_(log_z[start:end, None])
                p = log_p.exp()
                if grad_entropy is not None:
                    # d entropy / dz_j = -p_j (log p_j + entropy)
                    g = p * log_p.add_(entropy[start:end, None]).mul_(-grad_entropy[start:end, None])
                    if grad_log_probs is not None:
                        g.addcmul_(p, grad_log_probs[start:end, None], value=-1.0)
                else:
                    g = p.mul_(-grad_log_probs[start:end, None])
                if grad_log_probs is not None:
                    # d log p_target / dz_j = 1[j = target] - p_j
                    g.scatter_add_(-1, targets[start:end, None], grad_log_probs[start:end, None])
                if weight.dtype != torch.float32:
                    # TRL's tile is rounded to the compute precision; oneDNN would round only the products
                    # large enough for its bf16 path
                    g = g.to(weight.dtype).float()
                grad[start:end] = torch.mm(g, full)
        return grad.to(hidden.dtype), None, None, None
