"""Shared by the Metal checks (tests/test_msl_stamps.py, tests/test_metal_host.py): the clang++
that checks Metal code off Apple platforms, and the build's Metal stamps stamped afresh."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# clang 14 rejects the half type on x86-64; 16 accepts it (_Float16). CI installs clang-16.
CLANG_CANDIDATES = ("clang++-16", "clang++-17", "clang++-18", "clang++-19")


def clang(check: str) -> str:
    """The first clang++ 16 or newer; without one a failure under CI=true, else a skip naming
    the `check` that needs it."""
    for name in CLANG_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    why = f"no clang++ 16 or newer: the {check} needs it (apt install clang-16)"
    if os.environ.get("CI") == "true":
        pytest.fail(why)
    pytest.skip(why)


def stamp_metal(out: Path) -> dict:
    """Run shaders/stamp.py into `out`; {stamp name: (template, .metal path)} of every stamp
    stamps.txt gives a Metal home, checked to be exactly the files written."""
    r = subprocess.run([sys.executable, str(ROOT / "shaders" / "stamp.py"), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    templates = {}
    for line in (ROOT / "shaders" / "stamps.txt").read_text().splitlines():
        parts = line.split("#", 1)[0].split()
        if len(parts) == 4 and "metal" in parts[3].split(","):
            templates[parts[0]] = parts[1]
    files = {f.stem: f for f in (out / "metal").glob("*.metal")}
    assert sorted(files) == sorted(templates)
    return {name: (templates[name], files[name]) for name in sorted(files)}
