"""Padding-free SFT batches: rows joined into one sequence attend to themselves alone, as each row would alone."""
import pytest
import torch

from mint.base import TINY, load_base
from mint.hardware import EAGER_ATTENTION_MAX_TOKENS
from mint.train import padding_free


def _joined(model, lengths):
    generator = torch.Generator().manual_seed(0)
    rows = [torch.randint(5, model.config.vocab_size - 5, (n,), generator=generator) for n in lengths]
    starts = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    positions = torch.cat([torch.arange(n) for n in lengths])[None]
    return rows, dict(input_ids=torch.cat(rows)[None], position_ids=positions, cu_seq_lens_q=starts,
                      cu_seq_lens_k=starts, use_cache=False)


# the second case has a row past EAGER_ATTENTION_MAX_TOKENS: that row attends through torch's fused kernel
@pytest.mark.parametrize("lengths", [[5, 9, 3, 12], [EAGER_ATTENTION_MAX_TOKENS + 40, 7, 30]])
def test_joined_rows_answer_as_each_row_alone(lengths):
    model = load_base(TINY).model
    rows, joined_inputs = _joined(model, lengths)
    with torch.no_grad():
        alone = [model(input_ids=row[None], use_cache=False).logits[0] for row in rows]
        model.set_attn_implementation(padding_free.register())
        joined = model(**joined_inputs).logits[0]
    start = 0
    for row, length in zip(alone, lengths):
        torch.testing.assert_close(joined[start:start + length], row, rtol=1e-4, atol=1e-5)
        start += length


def test_joined_rows_get_the_gradients_each_row_alone_gives():
    model = load_base(TINY).model
    rows, joined_inputs = _joined(model, [6, 11, 4])
    weight = model.model.layers[0].self_attn.q_proj.weight
    for row in rows:
        model(input_ids=row[None], use_cache=False).logits.sum().backward()
    alone, weight.grad = weight.grad.clone(), None
    model.set_attn_implementation(padding_free.register())
    model(**joined_inputs).logits.sum().backward()
    torch.testing.assert_close(weight.grad, alone, rtol=1e-4, atol=1e-5)


def test_row_lengths_follow_the_collators_row_starts():
    assert padding_free.row_lengths(torch.tensor([0, 3, 10, 12], dtype=torch.int32), 12) == [3, 7, 2]
    assert padding_free.row_lengths(None, 9) == [9]


def test_only_kernels_that_keep_joined_rows_apart_train_padding_free():
    model = load_base(TINY).model
    assert model.config._attn_implementation == "sdpa" and not padding_free.kept_apart(model)
    model.set_attn_implementation(padding_free.register())
    assert padding_free.kept_apart(model)


def test_a_sliding_window_or_capped_scores_keeps_the_models_own_attention():
    model = load_base(TINY).model
    assert padding_free.rows_apart(model)
    config = model.config
    config.layer_types = ["sliding_attention"] + ["full_attention"] * (config.num_hidden_layers - 1)
    assert not padding_free.rows_apart(model)
    config.layer_types = ["full_attention"] * config.num_hidden_layers
    config.attn_logit_softcapping = 50.0
    assert not padding_free.rows_apart(model)
