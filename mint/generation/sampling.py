"""A sampled row's draw, token for token the one HF generate makes, at a fraction of its cost on a CPU.

HF generate samples with ``torch.multinomial(probs, 1)``, and the engine gives each sampled row a generator of its
own seed, so that a row's output is HF generate's alone with that seed (tests/generation/test_engine.py). On a
CPU two parts of that draw cost more than the decode step's matmuls at a wide batch (a py-spy profile of the demo's
experience sampling, 96 rows: 36% of the time in picking tokens, the model's forward 44%):

- ``torch.multinomial`` draws one sample as ``argmax(probs / q)`` with ``q`` an Exp(1) draw for every token of the
  vocabulary, made one at a time from the generator (two Mersenne-Twister words, a ``log1p`` in double each):
  about 1 ms a row a step for SmolLM2's 49,152 tokens. Only the tokens top-k and top-p keep can win the argmax,
  so ``SeededDraws`` makes the same words with numpy's MT19937 (the same generator, seeded the same way) and
  transforms only the kept tokens' words: the same token, the generator in the same state after it.
- HF's ``TopPLogitsWarper`` sorts the whole vocabulary each step, though after top-k only ``top_k`` tokens are
  left: ``top_p_filtered`` takes those alone and lays them out as HF's sorted vector has them, on a shorter
  vector aligned as the whole one (the same softmax and cumulative sum bit for bit). Where tied scores straddle
  the cut, which of them HF keeps depends on its sort's order among equals, so that row is filtered by HF's own
  warper.

Both are checked against torch before they are used (``replica_exact``: a few draws of several seeds compared
with torch's own); where they differ (another torch, another libm), every draw is torch's.
"""
from __future__ import annotations

import functools
import math

# the fast filter runs where a row keeps at most this many tokens after the processors before top-p (top-k's)
TOP_P_FAST_TOKENS = 1024
ALIGN = 512     # elements: a multiple of any vector width times unrolling in torch's CPU softmax and cumsum
_MASK53 = (1 << 53) - 1
_TWO_POW_MINUS_53 = 2.0 ** -53


class SeededDraws:
    """``torch.multinomial(probs[None], 1, generator=torch.Generator().manual_seed(seed))``, draw after draw, for
    1-D float32 ``probs`` on a CPU: numpy's MT19937 seeded as torch seeds its generator (the seed's low 32 bits,
    ``init_genrand``) gives the same words; ``torch.multinomial`` turns word pair i into Exp(1) sample
    ``q_i = -log1p(-u_i)``, ``u_i`` the pair's low 53 bits over 2^53, and picks the first maximum of
    ``probs / q``, where a token of probability 0 never wins unless some ``q_i`` is 0."""

    def __init__(self, seed: int) -> None:
        import numpy as np

        # numpy's stub types get_state() as a dict; by default (legacy=True) it is a tuple
        key, position = np.random.RandomState(seed & 0xFFFFFFFF).get_state()[1:3]  # type: ignore[index]
        self._bits = np.random.MT19937()
        self._bits.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": position}}

    def draw(self, probs) -> int:
        import numpy as np

        values = probs.numpy()
        words = self._bits.random_raw(2 * values.shape[0])
        high, low = words[0::2], words[1::2]
        kept = np.flatnonzero(values > 0)
        if not np.all(low) and np.any(((high[low == 0] << 32) & _MASK53) == 0):
            return _argmax_all(values, high, low)      # some u_i is 0: an inf or nan ratio decides, as in torch
        waits = _exponential(high[kept], low[kept]).astype(np.float32)
        return int(kept[int(np.argmax(values[kept] / waits))])


def _argmax_all(values, high, low) -> int:
    """The draw over every token (a ratio over q = 0 is inf or nan, and torch's argmax takes the first nan)."""
    import torch

    waits = torch.from_numpy(_exponential(high, low)).float()
    return int(torch.argmax(torch.from_numpy(values) / waits))


def _exponential(high, low):
    """torch's Exp(1) samples from word pairs: ``-log1p(-u)`` in double, ``u`` the pair's low 53 bits over 2^53
    (glibc's ``log1p``, one at a time: numpy's vectorised one can differ in the last bit)."""
    import numpy as np

    units = (((high << 32) | low) & _MASK53).astype(np.float64) * _TWO_POW_MINUS_53
    return np.array([-1.0 * math.log1p(-u) for u in units.tolist()], dtype=np.float64)


def top_p_filtered(warper, scores):
    """HF's ``TopPLogitsWarper`` on ``scores`` [rows, vocabulary], the same tensor it returns, from each row's
    finite tokens alone (what top-k left); the warper itself where a row keeps many tokens, or, for that row,
    where equal scores straddle its cut."""
    import torch

    kept = int((scores > float("-inf")).sum(-1).max()) if scores.dim() == 2 else 0
    if not 0 < kept <= TOP_P_FAST_TOKENS:
        return warper(None, scores)
    vocabulary = scores.shape[-1]
    values, tokens = torch.topk(scores, kept, dim=-1)               # descending; a short row ends in -inf
    values, tokens = values.flip(-1), tokens.flip(-1)
    # HF sorts the whole row ascending: -inf first, then these values. Its softmax and cumulative sum are taken
    # here on the same values in the same places modulo ALIGN (every lane and unrolled block of the vector
    # kernels sees what it would), so they come out the same, bit for bit, on a shorter row
    width = aligned_width(vocabulary, kept)
    arranged = scores.new_full((scores.shape[0], width), float("-inf"))
    arranged[:, width - kept:] = values
    removed = arranged.softmax(dim=-1).cumsum(dim=-1) <= (1 - warper.top_p)
    removed[..., -warper.min_tokens_to_keep:] = False
    removed = removed[:, width - kept:]
    cut = removed.sum(-1)       # a run of True, then False: the cumulative sum only grows
    inside = (cut > 0) & (cut < kept)
    before = values.gather(-1, (cut - 1).clamp(min=0)[:, None])[:, 0]
    after = values.gather(-1, cut.clamp(max=kept - 1)[:, None])[:, 0]
    straddled = inside & (before == after) & (before > float("-inf"))
    filtered = scores.masked_fill(torch.zeros_like(scores, dtype=torch.bool).scatter(-1, tokens, removed),
                                  warper.filter_value)
    for row in straddled.nonzero().flatten().tolist():    # which of the equal scores HF keeps is its sort's
        filtered[row] = warper(None, scores[row:row + 1])[0]
    return filtered


def aligned_width(vocabulary: int, kept: int) -> int:
    """The shortest row of at least ``kept`` elements whose last ``kept`` sit where the last ``kept`` of a
    ``vocabulary``-long row do, modulo ``ALIGN``."""
    return vocabulary - ALIGN * ((vocabulary - kept) // ALIGN)


def replicates_on(device) -> bool:
    """Whether the engine draws and filters with this module on ``device``: a CPU where ``replica_exact``."""
    import torch

    return torch.device(device).type == "cpu" and replica_exact()


@functools.lru_cache(maxsize=1)
def replica_exact() -> bool:
    """Whether ``SeededDraws`` and ``top_p_filtered`` give torch's and HF's results here, checked on a few seeds,
    draws and vocabularies (once a process)."""
    import torch
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    try:
        for seed in (0, 7, 2**32 + 3, 123456789):
            ours, torch_generator = SeededDraws(seed), torch.Generator().manual_seed(seed)
            scores = torch.randn(3, 4099, generator=torch.Generator().manual_seed(seed % 1000)).bfloat16().float()
            scores = TopKLogitsWarper(40)(None, scores * 2.5)
            top_p = TopPLogitsWarper(0.9)
            filtered = top_p_filtered(top_p, scores)
            if not torch.equal(filtered, top_p(None, scores)):
                return False
            for probs in torch.softmax(filtered, dim=-1):
                if ours.draw(probs) != int(torch.multinomial(probs[None], 1, generator=torch_generator)):
                    return False
        return True
    except Exception:  # noqa: BLE001 - any failure of the replica means torch's own draw is used
        return False
