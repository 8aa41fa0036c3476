"""Reliability suite 6, fast form: `mint serve` under load with a promotion in the middle.

The long form is ``python scripts/reliability_server.py`` (1,000 requests, 16 clients); this runs its small
version (a real `mint serve` process on the tiny base), plus one regression test per defect it found.
"""
from __future__ import annotations


import pytest

from mint.project import DEFAULT_PROJECT, Project
from tests.reliability.scripts import load_script

TINY_PROJECT = Project(base="tiny-random", specialists=DEFAULT_PROJECT.specialists)


def test_serve_under_load_loses_nothing_and_never_mixes_revisions():
    load = load_script("server")
    figure = load.run_suite(100, 4, seed=6, sample=24, log=lambda _line: None)
    assert figure.requests == 100
    assert figure.checked >= 5
    # memory: 100 requests are too few to tell a leak from one-off growth; the long form judges it
    assert (figure.server_errors, figure.refused, figure.lost, figure.dup, figure.mismatches) == (0, 0, 0, 0, 0), \
        (figure.line(), figure.notes[:5])


# --- regressions: one per defect the long form found ------------------------------------------------

def test_a_turn_too_long_for_the_base_fails_alone_not_its_batch(ws):
    from mint.errors import BadInput
    from mint.mol.mixture import Mixture, Turn
    from mint.mol.runtime import Decoding
    from mint.serve.local import Batcher

    batcher = Batcher(Mixture.open(ws, TINY_PROJECT), window_ms=0, max_batch=8)
    too_long = Turn([{"role": "user", "content": "word " * 3000}], decoding=Decoding(2))
    futures = [batcher.submit(Turn([{"role": "user", "content": f"hello {i}"}], decoding=Decoding(2)))
               for i in range(3)]
    futures.insert(1, batcher.submit(too_long))
    batcher.start()          # everything was queued before the worker looked: one batch
    with pytest.raises(BadInput, match="takes at most"):
        futures[1].result(timeout=120)
    answers = [f.result(timeout=120) for i, f in enumerate(futures) if i != 1]
    batcher.stop()
    assert batcher.batch_sizes == [4]
    assert len({a.id for a in answers}) == 3
