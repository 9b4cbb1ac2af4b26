"""Every Metal stamp, flattened by shaders/stamp.py, checked by clang++ for syntax and types.

Metal Shading Language cannot be compiled off Apple platforms. This test checks each generated
stamp with clang++ 16 against a stand-in for <metal_stdlib> (tests/msl_shim/): it catches a
template that does not expand to valid C++-like MSL, wrong types and undeclared names, but not
Metal-only semantics. The Metal home is checked here, not run.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHIM = ROOT / "tests" / "msl_shim"
# clang 14 rejects the half type on x86-64; 16 accepts it (_Float16).
CLANG_CANDIDATES = ("clang++-16", "clang++-17", "clang++-18", "clang++-19")


def _clang():
    for name in CLANG_CANDIDATES:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.fixture(scope="module")
def metal_stamps(tmp_path_factory):
    out = tmp_path_factory.mktemp("stamps")
    r = subprocess.run([sys.executable, str(ROOT / "shaders" / "stamp.py"), "--out", str(out)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    files = sorted((out / "metal").glob("*.metal"))
    names = [line.split()[0] for line in (ROOT / "shaders" / "stamps.txt").read_text().splitlines()
             if line.split("#", 1)[0].strip() and "metal" in line.split()[3]]
    assert [f.stem for f in files] == sorted(names)
    return files


def _check(clang, path):
    return subprocess.run([clang, "-std=c++17", "-fsyntax-only", "-Wno-unknown-attributes",
                           "-I", str(SHIM), "-x", "c++", str(path)], capture_output=True, text=True)


def test_every_metal_stamp_passes_the_syntax_check(metal_stamps):
    clang = _clang()
    if clang is None:
        if os.environ.get("CI") == "true":
            pytest.fail("clang++-16 is needed for the Metal stamp check (apt install clang-16)")
        pytest.skip("no clang++ 16 or newer: the Metal stamp check needs it (apt install clang-16)")
    failures = []
    for path in metal_stamps:
        r = _check(clang, path)
        if r.returncode != 0:
            failures.append(f"{path.name}:\n{r.stderr[:2000]}")
    assert not failures, "\n".join(failures)
    print(f"{len(metal_stamps)} Metal stamps pass clang's syntax and type check")


def test_the_check_rejects_a_broken_stamp(metal_stamps, tmp_path):
    # Negative control: the same text with an undeclared name must fail, so a pass means something.
    clang = _clang()
    if clang is None:
        pytest.skip("no clang++ 16 or newer (see above)")
    text = metal_stamps[0].read_text()
    broken = re.sub(r"\bargs\.", "argz.", text, count=1)
    assert broken != text
    bad = tmp_path / "broken.metal"
    bad.write_text(broken)
    assert _check(clang, bad).returncode != 0
