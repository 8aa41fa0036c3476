"""SFT's LM head on the trained positions only: the same loss and gradients as TRL's head, a fraction of the rows;
on a CPU computed whole-vocabulary, as TRL's kernel computes it in tiles."""
import json
import os

import pytest
import torch

from mint.base import TINY, load_base
from mint.train import lm_head
from mint.train.lm_head import score_trained_positions, scores_every_position
from tests.train.test_train import FAST, dataset, episodes  # noqa: F401  (fixtures)


def _tiny_lora():
    from peft import LoraConfig, get_peft_model
    from trl.trainer.utils import add_fused_lm_head

    model = load_base(TINY).model
    add_fused_lm_head(model, outputs=lm_head.SFT_OUTPUTS)   # what SFTTrainer does
    torch.manual_seed(0)
    return get_peft_model(model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"],
                                            init_lora_weights=False))


def _batch():
    torch.manual_seed(1)
    input_ids = torch.randint(3, 200, (3, 12))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0                          # a padded row
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    labels[:, :6] = -100                               # the prompt: not trained on
    labels[2] = -100                                   # a row with nothing to train on
    return dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels)


def _loss_and_grads(model):
    model.zero_grad()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(**_batch(), fused_lm_head=True)
    loss = -out.log_probs.sum() / out.label_mask.sum()
    loss.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    return out, loss.detach(), grads


def test_the_trained_positions_head_gives_trl_heads_loss_gradients_and_metrics():
    model = _tiny_lora()
    theirs, their_loss, their_grads = _loss_and_grads(model)
    assert score_trained_positions(model.get_base_model())
    ours, our_loss, our_grads = _loss_and_grads(model)
    assert torch.equal(ours.label_mask, theirs.label_mask)
    torch.testing.assert_close(our_loss, their_loss, rtol=1e-5, atol=1e-6)
    for field in ("log_probs", "entropy"):
        torch.testing.assert_close(getattr(ours, field), getattr(theirs, field), rtol=1e-4, atol=1e-5)
    assert torch.equal(ours.is_top1, theirs.is_top1)
    for name, grad in their_grads.items():
        torch.testing.assert_close(our_grads[name], grad, rtol=1e-4, atol=1e-6, msg=name)


def test_the_trained_positions_head_projects_only_the_positions_with_a_label(monkeypatch):
    rows = []
    real = lm_head.TrainedPositionsHead

    class Counting(real):
        @classmethod
        def apply(cls, hidden, *args):
            rows.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(lm_head, "TrainedPositionsHead", Counting)
    model = _tiny_lora()
    assert score_trained_positions(model.get_base_model())
    labels = _batch()["labels"]
    _loss_and_grads(model)
    assert rows == [int((labels[:, 1:] != -100).sum())] and rows[0] < labels[:, 1:].numel()


def _heads_outputs(head, hidden, weight, targets, *, autocast, entropy_grad):
    """log_probs, entropy, is_top1 and the hidden states' gradient under a loss that uses the entropy or not."""
    hidden = hidden.clone().requires_grad_(True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        log_probs, entropy, is_top1 = head(hidden, weight, targets)
    loss = -log_probs.sum() / len(targets) + (0.1 * entropy.sum() if entropy_grad else 0)
    loss.backward()
    return log_probs.detach(), entropy.detach(), is_top1, hidden.grad


def _trl_head(hidden, weight, targets):
    from trl.kernels import ChunkedLogProbFunction

    log_probs, entropy, _sq, _mean, is_top1 = ChunkedLogProbFunction.apply(
        hidden, weight, None, targets, 1.0, 96, None, 1.0, lm_head.SFT_OUTPUTS)   # 96: three vocabulary tiles
    return log_probs, entropy, is_top1


def _our_head(hidden, weight, targets):
    dtype = torch.get_autocast_dtype("cpu") if torch.is_autocast_enabled("cpu") else hidden.dtype
    return lm_head.TrainedPositionsHead.apply(hidden, *lm_head.WeightCast()(weight, dtype), targets)


@pytest.mark.parametrize("autocast", [True, False], ids=["bf16", "fp32"])
@pytest.mark.parametrize("entropy_grad", [False, True], ids=["loss", "loss+entropy"])
def test_the_cpu_head_computes_trls_kernel_in_tiles_of_positions(monkeypatch, autocast, entropy_grad):
    monkeypatch.setattr(lm_head, "TILE_POSITIONS", 7)     # 40 positions: six tiles, the last one short
    torch.manual_seed(0)
    weight = torch.randn(257, 32) * 0.5
    weight[100] = weight[40]        # two vocabulary rows alike: a target after its twin is never the first maximum
    hidden = torch.randn(40, 32)
    targets = torch.randint(0, 257, (40,))
    targets[:5] = 100
    hidden[:5] = weight[40] * 4     # positions whose two equal maxima are 40 and 100
    theirs = _heads_outputs(_trl_head, hidden, weight, targets, autocast=autocast, entropy_grad=entropy_grad)
    ours = _heads_outputs(_our_head, hidden, weight, targets, autocast=autocast, entropy_grad=entropy_grad)
    assert not theirs[2][:5].any() and torch.equal(ours[2], theirs[2])
    torch.testing.assert_close(ours[0], theirs[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(ours[1], theirs[1], rtol=1e-5, atol=1e-5)
    # the same arithmetic in another order: an element of the gradient's bf16 tile may round to the next value
    torch.testing.assert_close(ours[3], theirs[3], rtol=1e-4, atol=1e-5 if autocast and entropy_grad else 1e-6)


@pytest.mark.parametrize("autocast", [True, False], ids=["bf16", "fp32"])
def test_the_cpu_heads_tiles_change_no_figure(monkeypatch, autocast):
    torch.manual_seed(1)
    weight, hidden, targets = torch.randn(4099, 96) * 0.3, torch.randn(300, 96), torch.randint(0, 4099, (300,))
    outputs = []
    for tile in (512, 128, 37):
        monkeypatch.setattr(lm_head, "TILE_POSITIONS", tile)
        outputs.append(_heads_outputs(_our_head, hidden, weight, targets, autocast=autocast, entropy_grad=True))
    # log-probabilities, entropy, first-maximum flags and the gradient: each position's own, whatever its tile
    assert all(torch.equal(a, b) for other in outputs[1:] for a, b in zip(outputs[0], other))


def test_a_head_that_trains_keeps_trls_kernel(monkeypatch):
    model = _tiny_lora()
    base = model.get_base_model()
    base.get_output_embeddings().weight.requires_grad_(True)
    assert score_trained_positions(base)
    monkeypatch.setattr(lm_head.TrainedPositionsHead, "apply", None)     # would fail if called
    out, _loss, _grads = _loss_and_grads(model)
    assert base.get_output_embeddings().weight.grad is not None and out.log_probs.abs().sum() > 0


def test_a_head_with_a_logit_scale_keeps_trls_head():
    model = _tiny_lora()
    base = model.get_base_model()
    base.config.logit_scale = 0.5
    before = base.forward
    assert not score_trained_positions(base) and base.forward == before


@pytest.mark.parametrize("device, every", [("cpu", True), ("cuda", False), ("xpu", False), ("mps", True)])
def test_trl_scores_every_position_except_where_its_triton_kernels_run(device, every):
    assert scores_every_position(torch.device(device)) is every


def test_sft_on_a_cpu_records_the_trained_positions_head_and_its_attention(ws, dataset):  # noqa: F811
    from mint.train.run import train

    result = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random",
                   sets=FAST + ["max_length=128"])
    backend = json.load(open(os.path.join(result.run_dir, "run.json")))["effective"]["backend"]
    assert backend["lm_head"].startswith("trained positions only")
    assert backend["attention"]["value"] == "eager" and "128 tokens" in backend["attention"]["reason"]
