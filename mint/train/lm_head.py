"""SFT's LM head on the trained positions only, where TRL's fused head scores every position.

TRL's SFTTrainer replaces the model's forward with a fused LM head (``trl.trainer.utils.add_fused_lm_head``) that
projects the hidden states through the vocabulary in tiles. On a device with Triton (CUDA, XPU) it scores only the
positions whose next-token label is set; elsewhere (a CPU) it scores every position, prompt and padding included,
and then zeroes the ones it did not need. With mint's assistant-only loss most positions are prompt (a system
prompt, tool schemas): on the demo's GenUI data 44% of the positions, on the agent's more than half, and on a CPU
that projection through 49,152 vocabulary rows was most of a training step (docs/benchmarks.md, "Training").

``score_trained_positions`` puts back a forward that hands TRL's own kernel (``trl.kernels.ChunkedLogProbFunction``,
the one its head calls) the trained positions alone, as TRL does on a GPU: each trained position's log-probability,
entropy and top-1 flag come out of the same arithmetic, so the loss and the gradients are the same; the positions
left out are zero, as TRL leaves them.
"""
from __future__ import annotations

import types

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
        per_token = ChunkedLogProbFunction.apply(hidden.to(head.weight.device)[mask], head.weight, head.bias,
                                                 targets[mask], 1.0, chunk, None, 1.0, SFT_OUTPUTS)
        # masked_scatter keeps a batch without a trained position connected to the model (a zero gradient)
        log_probs, entropy, _sq, _mean, is_top1 = (None if x is None else x.new_zeros(mask.shape).masked_scatter(mask, x)
                                                   for x in per_token)
        count = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        return FusedCausalLMOutput(loss=-log_probs.sum() / count, log_probs=log_probs, entropy=entropy,
                                   is_top1=is_top1, label_mask=mask)

    model.forward = types.MethodType(forward, model)
    return True
