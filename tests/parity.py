"""The measures of the parity tests: rel-l2 against a reference, and a bar check that also
asks a negative control to miss the bar tenfold (DESIGN.md, "Correctness")."""

from __future__ import annotations

import numpy as np


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
