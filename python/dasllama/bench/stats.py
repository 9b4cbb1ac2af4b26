"""Summary statistics of benchmark repetitions.

The spread is the sample standard deviation (n - 1 in the denominator, as llama-bench), zero for
a single sample; the coefficient of variation is sd / mean. Ratios between engines are taken
from medians, which one disturbed repetition cannot move much.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Sequence

__all__ = ["Summary", "summarize", "ratio"]


@dataclass(frozen=True)
class Summary:
    n: int
    mean: float
    sd: float
    median: float
    min: float
    max: float
    cv: float     # sd / mean; nan when the mean is zero

    def as_dict(self) -> dict:
        return asdict(self)


def summarize(samples: Sequence[float]) -> Summary:
    """Mean, sample sd, median, min, max and coefficient of variation of ``samples``."""
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    if n == 0:
        raise ValueError("summarize() needs at least one sample, got none")
    if any(math.isnan(x) for x in xs):
        raise ValueError(f"summarize() got NaN among its {n} samples")
    mean = math.fsum(xs) / n
    sd = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    mid = n // 2
    median = xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2
    cv = sd / mean if mean != 0 else math.nan
    return Summary(n=n, mean=mean, sd=sd, median=median, min=xs[0], max=xs[-1], cv=cv)


def ratio(ours: Summary, theirs: Summary) -> float:
    """ours / theirs from medians (throughputs: above 1 means ours is faster)."""
    if theirs.median == 0:
        return math.nan
    return ours.median / theirs.median
