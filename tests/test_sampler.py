"""_core.Sampler: the chain against a NumPy statement of it, empirical frequencies against the
distribution (chi-square), penalties computed by hand, reproducibility, and bad values."""

import math

import numpy as np
import pytest

from dasllama import _core

pytestmark = pytest.mark.skipif(not hasattr(_core, "Sampler"), reason="no _core.Sampler in this build")


def sampler(**kw):
    args = dict(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    args.update(kw)
    return _core.Sampler(**args)


def reference_probs(logits, temperature=1.0, top_k=0, top_p=1.0, min_p=0.0):
    """The chain as documented in sampler.h: top_k -> top_p (softmax at T=1) -> min_p -> T."""
    logits = np.asarray(logits, dtype=np.float64)
    order = list(np.lexsort((np.arange(len(logits)), -logits)))   # largest first, then lower id
    keep = order[:top_k] if top_k > 0 else order
    if top_p < 1.0:
        p = np.exp(logits[keep] - logits[keep[0]])
        p /= p.sum()
        n = int(np.searchsorted(np.cumsum(p), top_p) + 1)
        keep = keep[:min(n, len(keep))]
    if min_p > 0.0:
        keep = [i for i in keep if logits[i] >= logits[keep[0]] + math.log(min_p)]
    out = np.zeros(len(logits))
    w = np.exp((logits[keep] - logits[keep[0]]) / temperature)
    out[keep] = w / w.sum()
    return out


def chi2_bar(df: int) -> float:
    """The 0.999 quantile of chi-square with df degrees of freedom (Wilson-Hilferty)."""
    z = 3.0902
    return df * (1 - 2 / (9 * df) + z * math.sqrt(2 / (9 * df))) ** 3


def chi2(counts, probs) -> float:
    n = counts.sum()
    m = probs > 0
    assert counts[~m].sum() == 0, "a removed token was drawn"
    expected = n * probs[m]
    return float(((counts[m] - expected) ** 2 / expected).sum())


def draw(s, logits, n):
    return np.bincount([s.sample(logits) for _ in range(n)], minlength=len(logits))


LOGITS = np.array([2.0, 1.5, 1.4, 0.3, -0.2, -1.0, 0.9, 1.1, -3.0, 0.0], dtype=np.float32)


def test_empirical_frequencies_follow_softmax_over_temperature():
    t = 0.7
    counts = draw(sampler(temperature=t, seed=7), LOGITS, 20000)
    target = reference_probs(LOGITS, temperature=t)
    stat, bar = chi2(counts, target), chi2_bar(len(LOGITS) - 1)
    # Negative control: the same draws judged against T=1 (temperature ignored).
    wrong = chi2(counts, reference_probs(LOGITS, temperature=1.0))
    print(f"chi2 {stat:.1f} (bar {bar:.1f}); temperature ignored: {wrong:.1f}")
    assert stat < bar
    assert wrong > 10 * bar


@pytest.mark.parametrize("kw", [dict(top_k=4), dict(top_p=0.7), dict(min_p=0.3),
                                dict(top_k=6, top_p=0.8, min_p=0.1, temperature=1.5)])
def test_filtered_frequencies_follow_the_chain(kw):
    counts = draw(sampler(seed=11, **kw), LOGITS, 20000)
    target = reference_probs(LOGITS, **kw)
    stat, bar = chi2(counts, target), chi2_bar(int((target > 0).sum()) - 1)
    print(f"{kw}: chi2 {stat:.1f} (bar {bar:.1f})")
    assert stat < bar


@pytest.mark.parametrize("n_vocab", [10, 1000, 262144])
@pytest.mark.parametrize("kw", [dict(), dict(top_k=40), dict(top_p=0.9), dict(min_p=0.05),
                                dict(top_k=40, top_p=0.95, min_p=0.05, temperature=0.8),
                                dict(top_p=0.5, temperature=2.0)])
def test_probabilities_equal_the_numpy_chain(n_vocab, kw):
    rng = np.random.default_rng(n_vocab)
    logits = (rng.standard_normal(n_vocab) * 3).astype(np.float32)
    got = sampler(**kw).probabilities(logits)
    want = reference_probs(logits, **kw)
    err = np.abs(got - want).max()
    print(f"max |p - p_ref| = {err:.2e} (bar 1e-6), kept {(got > 0).sum()}")
    assert err < 1e-6
    assert ((got > 0) == (want > 0)).all()


def test_temperature_comes_after_top_p():
    # Negative control of the test above: scaling by T before top_p (another plausible order)
    # keeps a different set, far outside the bar.
    logits = (np.random.default_rng(5).standard_normal(1000) * 3).astype(np.float32)
    got = sampler(top_p=0.5, temperature=2.0).probabilities(logits)
    early = reference_probs(logits / 2.0, top_p=0.5)
    err = np.abs(got - early).max()
    print(f"T before top_p: max |p - p| = {err:.2e} (bar 1e-6)")
    assert err > 1e-5


def test_top_k_1_tiny_top_p_and_min_p_1_are_greedy():
    rng = np.random.default_rng(0)
    for seed in range(50):
        logits = rng.standard_normal(300).astype(np.float32)
        best = int(np.argmax(logits))
        assert sampler(temperature=0.0).sample(logits) == best
        assert sampler(top_k=1, seed=seed).sample(logits) == best
        assert sampler(top_p=1e-6, seed=seed).sample(logits) == best
        assert sampler(min_p=1.0, seed=seed).sample(logits) == best
        assert sampler(temperature=1e-30, seed=seed).sample(logits) == best


def test_greedy_breaks_ties_by_lower_id_and_accepts_a_row_of_eval():
    logits = np.array([[0.0, 5.0, 1.0, 5.0]], dtype=np.float32)
    assert sampler(temperature=0).sample(logits) == 1
    with pytest.raises(ValueError, match=r"shape \[n_vocab\] or \[1, n_vocab\], got \[2, 2\]"):
        sampler().sample(np.zeros((2, 2), np.float32))


def test_repetition_penalty_by_hand():
    # 3.0 / 1.5 = 2.0 < 2.5; and -1.0 * 1.5 = -1.5 < -1.2.
    s = sampler(temperature=0, repeat_penalty=1.5)
    logits = np.array([3.0, 2.5, -1.0, -1.2], dtype=np.float32)
    assert s.sample(logits) == 0
    s.accept(0)
    assert s.sample(logits) == 1
    s.accept(1)   # both seen: 2.0 vs 2.5 / 1.5 = 1.67
    assert s.sample(logits) == 0
    s = sampler(temperature=0, repeat_penalty=1.5)
    neg = np.array([-1.0, -1.2], dtype=np.float32)
    s.accept(0)
    assert s.sample(neg) == 1, "a negative logit is multiplied, not divided, by the penalty"
    p = sampler(repeat_penalty=2.0)
    p.accept(0)
    probs = p.probabilities(np.array([2.0, 0.0], dtype=np.float32))   # 2 / 2 = 1 vs 0
    assert abs(probs[0] - 1 / (1 + math.exp(-1))) < 1e-6


def test_presence_and_frequency_penalties_by_hand():
    s = sampler(temperature=0, presence_penalty=0.5, frequency_penalty=0.25)
    logits = np.array([1.0, 0.0], dtype=np.float32)
    s.accept(0)   # 1 - 0.25 - 0.5 = 0.25 > 0
    assert s.sample(logits) == 0
    s.accept(0)   # 1 - 0.5 - 0.5 = 0.0 == 0: tie, lower id
    assert s.sample(logits) == 0
    s.accept(0)   # 1 - 0.75 - 0.5 = -0.25 < 0
    assert s.sample(logits) == 1
    probs = sampler(frequency_penalty=1.0).probabilities(logits)
    assert abs(probs[0] - 1 / (1 + math.exp(-1))) < 1e-6   # no history: no penalty


def test_penalty_window_keeps_the_last_n():
    s = sampler(temperature=0, repeat_penalty=100.0, penalty_last_n=3)
    logits = np.array([2.0, 1.0, 0.5, 0.4, 0.3], dtype=np.float32)
    for t in (0, 1, 2, 3):   # 0 has left the window
        s.accept(t)
    assert s.history_size == 3
    assert s.sample(logits) == 0
    s = sampler(temperature=0, repeat_penalty=100.0, penalty_last_n=0)
    s.accept(0)
    assert s.history_size == 0 and s.sample(logits) == 0
    s = sampler(temperature=0, repeat_penalty=100.0, penalty_last_n=-1)
    for _ in range(1000):
        s.accept(4)
    s.accept(0)
    assert s.history_size == 1001 and s.sample(logits) == 1


def test_same_seed_same_tokens_other_seed_others_reset_replays():
    logits = np.random.default_rng(1).standard_normal(5000).astype(np.float32)

    def run(s, n=200):
        out = []
        for _ in range(n):
            out.append(s.sample(logits))
            s.accept(out[-1])
        return out

    kw = dict(temperature=1.2, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.1, seed=42)
    a = run(_core.Sampler(**kw))
    assert a == run(_core.Sampler(**kw))
    assert a != run(_core.Sampler(**{**kw, "seed": 43}))
    s = _core.Sampler(**kw)
    run(s)
    s.reset()
    assert run(s) == a


@pytest.mark.parametrize("name,value,text", [
    ("temperature", -0.5, "temperature must be a finite value >= 0"),
    ("temperature", float("nan"), "temperature must be a finite value >= 0 (0 = greedy), got nan"),
    ("temperature", float("inf"), "temperature"),
    ("top_k", -1, "top_k must be >= 0 (0 = off), got -1"),
    ("top_p", 0.0, "top_p must be in (0, 1]"),
    ("top_p", 1.5, "top_p must be in (0, 1] (1 = off), got 1.5"),
    ("top_p", float("nan"), "top_p"),
    ("min_p", -0.1, "min_p must be in [0, 1]"),
    ("min_p", 1.1, "min_p"),
    ("repeat_penalty", 0.0, "repeat_penalty must be a finite value > 0 (1 = off), got 0"),
    ("repeat_penalty", -1.0, "repeat_penalty"),
    ("presence_penalty", float("nan"), "presence_penalty must be finite"),
    ("frequency_penalty", float("inf"), "frequency_penalty must be finite"),
    ("penalty_last_n", -2, "penalty_last_n must be >= -1"),
    ("seed", -1, "seed must be in [0, 2^32), got -1"),
    ("seed", 2 ** 32, "seed must be in [0, 2^32)"),
])
def test_bad_values_name_the_parameter(name, value, text):
    with pytest.raises(ValueError) as e:
        _core.Sampler(**{name: value})
    assert text in str(e.value)


def test_bad_logits_and_tokens():
    s = sampler()
    with pytest.raises(ValueError, match=r"logits\[2\] is nan"):
        s.sample(np.array([0.0, 1.0, np.nan], dtype=np.float32))
    with pytest.raises(ValueError, match=r"logits\[0\] is inf"):
        s.sample(np.array([np.inf, 1.0], dtype=np.float32))
    with pytest.raises(ValueError, match="every logit is -inf"):
        s.sample(np.full(3, -np.inf, dtype=np.float32))
    with pytest.raises(ValueError, match="empty"):
        s.sample(np.zeros(0, dtype=np.float32))
    with pytest.raises(ValueError, match="token must be >= 0, got -5"):
        s.accept(-5)
    # -inf marks a token that must never be drawn.
    masked = np.array([5.0, -np.inf, 0.0], dtype=np.float32)
    assert 1 not in {sampler(seed=i, temperature=5.0).sample(masked) for i in range(200)}


def test_history_tokens_outside_the_vocabulary_are_ignored():
    s = sampler(temperature=0, repeat_penalty=2.0)
    s.accept(10 ** 6)
    assert s.sample(np.array([1.0, 0.5], dtype=np.float32)) == 0
