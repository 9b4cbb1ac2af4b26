"""Every Metal stamp, flattened by shaders/stamp.py, checked by clang++ for syntax and types.

Metal Shading Language cannot be compiled off Apple platforms. This test checks each generated
stamp with clang++ 16 against a stand-in for <metal_stdlib> (tests/msl_shim/): it catches a
template that does not expand to valid C++-like MSL, wrong types and undeclared names, but not
Metal-only semantics. The Metal home is checked here, not run.
"""

import re
import subprocess

import pytest
from metal_check import ROOT, stamp_metal
from metal_check import clang as find_clang

SHIM = ROOT / "tests" / "msl_shim"


@pytest.fixture(scope="module")
def metal_stamps(tmp_path_factory):
    return [path for _, path in stamp_metal(tmp_path_factory.mktemp("stamps")).values()]


def _check(clang, path):
    return subprocess.run([clang, "-std=c++17", "-fsyntax-only", "-Wno-unknown-attributes",
                           "-I", str(SHIM), "-x", "c++", str(path)], capture_output=True, text=True)


def test_every_metal_stamp_passes_the_syntax_check(metal_stamps):
    clang = find_clang("Metal stamp check")
    failures = []
    for path in metal_stamps:
        r = _check(clang, path)
        if r.returncode != 0:
            failures.append(f"{path.name}:\n{r.stderr[:2000]}")
    assert not failures, "\n".join(failures)
    print(f"{len(metal_stamps)} Metal stamps pass clang's syntax and type check")


def test_the_check_rejects_a_broken_stamp(metal_stamps, tmp_path):
    # Negative control: the same text with an undeclared name must fail, so a pass means something.
    clang = find_clang("Metal stamp check")
    text = metal_stamps[0].read_text()
    broken = re.sub(r"\bargs\.", "argz.", text, count=1)
    assert broken != text
    bad = tmp_path / "broken.metal"
    bad.write_text(broken)
    assert _check(clang, bad).returncode != 0
