"""A sampled row's draw: torch's multinomial token for token from its own seed, HF's top-p without the sort."""
import numpy as np
import pytest
import torch
from transformers.generation.logits_process import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from mint.generation import sampling

VOCABULARY = 49152      # SmolLM2's: the filter lays a row out as the whole row's vector kernels see it


def filtered_scores(rows: int, seed: int, top_k: int = 50, scale: float = 3.0):
    """A decode step's scores as the engine's processors leave them before top-p: bf16 logits (many ties, as a
    bf16 decode gives), temperature 0.8, top-k."""
    logits = (torch.randn(rows, VOCABULARY, generator=torch.Generator().manual_seed(seed)) * scale).bfloat16().float()
    return TopKLogitsWarper(top_k)(None, TemperatureLogitsWarper(0.8)(None, logits))


@pytest.mark.parametrize("seed", [0, 1, 41, 2**32 + 9, -5])
def test_each_draw_is_torch_multinomials_from_the_same_seed(seed):
    ours, theirs = sampling.SeededDraws(seed), torch.Generator().manual_seed(seed)
    for step in range(12):     # one generator drawn from again and again: its state follows torch's
        probs = torch.softmax(TopPLogitsWarper(0.95)(None, filtered_scores(1, seed % 997 + step)), dim=-1)[0]
        assert ours.draw(probs) == int(torch.multinomial(probs[None], 1, generator=theirs))


def test_a_draw_over_a_flat_distribution_follows_torch_too():
    """Every token possible: the draw reads every token's Exp(1) sample, not a few."""
    ours, theirs = sampling.SeededDraws(3), torch.Generator().manual_seed(3)
    probs = torch.full((5000,), 1 / 5000)
    assert [ours.draw(probs) for _ in range(20)] == \
        [int(torch.multinomial(probs[None], 1, generator=theirs)) for _ in range(20)]


def test_an_exp_sample_of_zero_decides_as_in_torch():
    """u = 0 gives q = 0: a kept token's ratio is inf, a dropped token's nan, and torch's argmax takes the first
    nan; the rare path reads every token as torch does."""
    values = np.array([0.0, 0.5, 0.0, 0.5], dtype=np.float32)
    high = np.array([5, 9, 0, 7], dtype=np.uint64)
    low = np.array([1, 2, 0, 3], dtype=np.uint64)
    assert sampling._argmax_all(values, high, low) == 2           # token 2: probability 0, q 0 -> nan
    values[2] = 0.25
    assert sampling._argmax_all(values, high, low) == 2           # now inf


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("top_p", [0.5, 0.9, 0.95])
def test_top_p_is_hfs_warper_tensor_for_tensor(seed, top_p):
    warper = TopPLogitsWarper(top_p)
    scores = filtered_scores(8, seed, scale=1.0 + seed)     # flat to peaked
    assert torch.equal(sampling.top_p_filtered(warper, scores), warper(None, scores))


def test_top_p_keeps_what_hf_keeps_when_equal_scores_straddle_the_cut(monkeypatch):
    """Four equal top scores and a cut through them: which of the four HF keeps is its sort's doing, so that row
    goes through HF's warper; a row without such a tie does not."""
    scores = torch.full((2, VOCABULARY), float("-inf"))
    scores[0, [10, 200, 3000, 40000]] = 2.0              # four equal: top-p 0.6 keeps some of them
    scores[1, [7, 8, 9]] = torch.tensor([3.0, 1.0, 0.0])
    warper = TopPLogitsWarper(0.6)
    rows_hf_filtered = []
    call = TopPLogitsWarper.__call__
    monkeypatch.setattr(TopPLogitsWarper, "__call__",
                        lambda self, ids, s: rows_hf_filtered.append(s.shape[0]) or call(self, ids, s))
    ours = sampling.top_p_filtered(warper, scores)
    assert rows_hf_filtered == [1]
    monkeypatch.setattr(TopPLogitsWarper, "__call__", call)
    assert torch.equal(ours, warper(None, scores))


@pytest.mark.parametrize("vocabulary", [VOCABULARY, 32000, 151936, 50257])
def test_a_short_aligned_row_sums_as_the_whole_row(vocabulary):
    """HF's sorted row is -inf, then the kept scores: laid out on a shorter row at the same alignment, its softmax
    and cumulative sum are the whole row's bit for bit (unaligned, some differ in the last bit: 5 of 300 here)."""
    for case in range(150):
        generator = torch.Generator().manual_seed(case)
        kept = int(torch.randint(5, 300, (1,), generator=generator))
        values = torch.sort((torch.randn(kept, generator=generator) * 2).bfloat16().float()).values
        rows = []
        for width in (vocabulary, sampling.aligned_width(vocabulary, kept)):
            row = torch.full((1, width), float("-inf"))
            row[0, width - kept:] = values
            rows.append(row.softmax(-1).cumsum(-1)[0, width - kept:])
        assert torch.equal(*rows), case


def test_top_p_keeps_min_tokens_and_rows_of_different_widths():
    warper = TopPLogitsWarper(0.05, min_tokens_to_keep=3)
    scores = torch.cat([filtered_scores(2, 5, top_k=50), filtered_scores(2, 6, top_k=7)])
    assert torch.equal(sampling.top_p_filtered(warper, scores), warper(None, scores))


def test_top_p_over_the_whole_vocabulary_is_hfs_own():
    """No top-k before it: every token is finite, past the fast filter's reach, and HF's warper does it."""
    scores = torch.randn(2, VOCABULARY, generator=torch.Generator().manual_seed(0))
    warper = TopPLogitsWarper(0.9)
    assert torch.equal(sampling.top_p_filtered(warper, scores), warper(None, scores))


def test_the_replica_is_checked_against_torch_before_use(monkeypatch):
    assert sampling.replica_exact()
    sampling.replica_exact.cache_clear()
    monkeypatch.setattr(sampling, "_MASK53", (1 << 52) - 1)     # another torch's uniforms: the check refuses it
    try:
        assert not sampling.replica_exact()
    finally:
        sampling.replica_exact.cache_clear()
