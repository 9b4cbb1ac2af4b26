"""The sampler's greedy path (temperature 0) takes one pass over the logits instead of building
the candidate list; it must pick what the chain picks: the arg max of the penalized logits,
lowest id on ties. Compared with probabilities() (the full chain: one-hot at its choice) and with
a numpy penalized arg max, over logits with many ties, -inf entries and every penalty, with a
negative control showing the penalties change the choice in these cases."""

from __future__ import annotations

import numpy as np
import pytest

from dasllama import _core

PENALTIES = [dict(), dict(repeat_penalty=1.3), dict(presence_penalty=0.7),
             dict(frequency_penalty=0.4), dict(repeat_penalty=0.8, presence_penalty=-0.5,
                                                frequency_penalty=0.3, penalty_last_n=5)]


def numpy_greedy(logits, history, repeat_penalty=1.0, presence_penalty=0.0,
                 frequency_penalty=0.0, penalty_last_n=64):
    v = logits.astype(np.float32).copy()
    window = history if penalty_last_n < 0 else history[len(history) - penalty_last_n:] \
        if penalty_last_n else []
    if window and (repeat_penalty != 1 or presence_penalty != 0 or frequency_penalty != 0):
        ids, counts = np.unique(window, return_counts=True)
        for t, c in zip(ids, counts):
            if t >= len(v):
                continue
            x = v[t]
            x = np.float32(x / np.float32(repeat_penalty)) if x > 0 else \
                np.float32(x * np.float32(repeat_penalty))
            v[t] = np.float32(x - np.float32(np.float32(c) * np.float32(frequency_penalty)
                                             + np.float32(presence_penalty)))
    return int(np.argmax(v))      # first maximum: the lowest id


@pytest.mark.parametrize("kw", PENALTIES)
@pytest.mark.parametrize("seed", range(6))
def test_greedy_equals_the_chain_and_numpy(kw, seed):
    rng = np.random.default_rng(seed)
    n = 3000
    logits = np.round(rng.normal(size=n) * 2, 1).astype(np.float32)   # rounding: many ties
    logits[rng.integers(0, n, 50)] = -np.inf
    history = [int(t) for t in np.argsort(-logits)[:4]] + [int(rng.integers(0, n)), 5000]
    s = _core.Sampler(temperature=0.0, seed=1, **kw)
    for t in history:
        s.accept(t)
    token = s.sample(logits)
    assert token == int(np.argmax(s.probabilities(logits)))
    assert token == numpy_greedy(logits, history, **kw)


def test_the_penalties_change_the_greedy_choice():
    # negative control for the cases above: with the best tokens in the history, a penalty
    # moves the choice off the raw arg max
    logits = np.array([0.5, 3.0, 2.9, -1.0], np.float32)
    for kw in PENALTIES[1:4]:
        s = _core.Sampler(temperature=0.0, **kw)
        s.accept(1)
        assert s.sample(logits) == 2, kw
    assert _core.Sampler(temperature=0.0).sample(logits) == 1


def test_greedy_errors_are_the_chain_errors():
    s = _core.Sampler(temperature=0.0)
    with pytest.raises(ValueError, match=r"logits\[2\] is nan"):
        s.sample(np.array([0.0, 1.0, np.nan], np.float32))
    long = np.zeros(100, np.float32)
    long[50], long[37] = np.inf, np.nan
    with pytest.raises(ValueError, match=r"logits\[37\] is nan"):     # the first bad one
        s.sample(long)
    with pytest.raises(ValueError, match="every logit is -inf"):
        s.sample(np.full(4, -np.inf, np.float32))
    # the only finite token is penalized and still chosen over the -inf ones
    p = _core.Sampler(temperature=0.0, presence_penalty=1.0)
    p.accept(1)
    assert p.sample(np.array([-np.inf, 0.5, -np.inf], np.float32)) == 1
