"""The measures of the parity tests: rel-l2 against a reference, a bar check that also asks a
negative control to miss the bar tenfold (DESIGN.md, "Correctness"), and the word error rate
of speech recognition."""

from __future__ import annotations

import numpy as np

# The margin (top-1 minus top-2 logit, llama.cpp's) above which a greedy step is decided, so
# dasllama's choice must equal llama.cpp's there: about twice the largest |margin difference|
# measured between the engines (0.67 on AVX-512 kernels, 0.74 on AVX2; test_llm_greedy).
LLAMA_CPP_NOISE_BOUND = 1.5


def rel_l2(out, ref) -> float:
    """||out - ref|| / ||ref|| in float64."""
    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


def check(name: str, err: float, bar: float, control: float | None = None) -> None:
    """Assert err <= bar and, when given, control >= 10 * bar; print both."""
    line = f"{name}: rel {err:.2e} (bar {bar:.1e})"
    if control is not None:
        line += f", negative control {control:.2e} ({control / bar:.0f}x the bar)"
    print(line)
    assert err <= bar, line
    if control is not None:
        assert control >= 10 * bar, line


def word_error_rate(hyp: str, ref: str) -> float:
    """Word-level Levenshtein distance over the reference's word count."""
    h, r = hyp.split(), ref.split()
    row = list(range(len(h) + 1))
    for i, rw in enumerate(r, 1):
        prev, row[0] = row[0], i
        for j, hw in enumerate(h, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (rw != hw))
    return row[-1] / max(1, len(r))


def assert_same_segments(mine, ref, time_bar: float, logprob_bar: float) -> None:
    """Two transcriptions' segments alike: text, tokens and seeks exactly; start and end
    within ``time_bar`` seconds; average log-probability and no-speech probability within
    ``logprob_bar``; the compression ratio to rounding."""
    import pytest

    assert [s.text for s in mine] == [s.text for s in ref]
    assert [list(s.tokens) for s in mine] == [list(s.tokens) for s in ref]
    for a, b in zip(mine, ref):
        assert a.start == pytest.approx(b.start, abs=time_bar)
        assert a.end == pytest.approx(b.end, abs=time_bar)
        assert a.seek == b.seek
        assert a.avg_logprob == pytest.approx(b.avg_logprob, abs=logprob_bar)
        assert a.no_speech_prob == pytest.approx(b.no_speech_prob, abs=logprob_bar)
        assert a.compression_ratio == pytest.approx(b.compression_ratio, rel=1e-9)
