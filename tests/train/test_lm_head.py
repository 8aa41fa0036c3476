"""SFT's LM head on the trained positions only: the same loss and gradients as TRL's head, a fraction of the rows."""
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
    import trl.kernels

    rows = []
    real = trl.kernels.ChunkedLogProbFunction

    class Counting(real):
        @classmethod
        def apply(cls, hidden, *args):
            rows.append(hidden.shape[0])
            return real.apply(hidden, *args)

    monkeypatch.setattr(trl.kernels, "ChunkedLogProbFunction", Counting)
    model = _tiny_lora()
    assert score_trained_positions(model.get_base_model())
    labels = _batch()["labels"]
    _loss_and_grads(model)
    assert rows == [int((labels[:, 1:] != -100).sum())] and rows[0] < labels[:, 1:].numel()


def test_a_head_with_a_logit_scale_keeps_trls_head():
    model = _tiny_lora()
    base = model.get_base_model()
    base.config.logit_scale = 0.5
    before = base.forward
    assert not score_trained_positions(base) and base.forward == before


@pytest.mark.parametrize("device, every", [("cpu", True), ("cuda", False), ("xpu", False), ("mps", True)])
def test_trl_scores_every_position_except_where_its_triton_kernels_run(device, every):
    assert scores_every_position(torch.device(device)) is every


def test_sft_on_a_cpu_records_the_trained_positions_head(ws, dataset):  # noqa: F811
    from mint.train.run import train

    result = train(ws, specialist="coding", data=dataset, method="sft", base="tiny-random",
                   sets=FAST + ["max_length=128"])
    backend = json.load(open(os.path.join(result.run_dir, "run.json")))["effective"]["backend"]
    assert backend["lm_head"].startswith("trained positions only")
