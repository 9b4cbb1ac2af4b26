"""The Vulkan home: devices, the self-test stamp against NumPy, transfers, re-submission,
profiling, the validation layer and the errors. Runs on lavapipe (Mesa's CPU Vulkan driver)
when it is installed, else on the first device; without any Vulkan device the tests skip,
saying why, except under CI=true, where they fail."""

import json
import os
import struct
import subprocess
import sys

import numpy as np
import pytest

from dasllama import _core, gpu
from dasllama.errors import DeviceError, ShapeError


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def _need(condition: bool, why: str):
    if condition:
        return
    if _in_ci():
        pytest.fail(f"CI needs this: {why}")
    pytest.skip(why)


def _has_lavapipe() -> bool:
    return any("llvmpipe" in d["name"].lower() for d in gpu.devices())


@pytest.fixture(scope="module")
def spec():
    _need(bool(gpu.devices()), f"no Vulkan device: {gpu.unavailable_reason()}")
    _need(_core.vulkan_stamps_built(), _core.vulkan_stamps_missing_reason())
    return "vulkan:llvmpipe" if _has_lavapipe() else "vulkan:0"


@pytest.fixture(scope="module")
def dev(spec):
    with _core.GpuDebug(spec) as g:
        yield g


def _axpy_args(n, a, x_off, y_off) -> bytes:
    return struct.pack("<IfII", n, a, x_off, y_off)


def _rel_l2(out, ref) -> float:
    return float(np.linalg.norm(out - ref) / np.linalg.norm(ref))


# ---------------------------------------------------------------------------------------------
# Devices
# ---------------------------------------------------------------------------------------------

def test_devices_are_described(spec):
    for d in gpu.devices():
        assert d["backend"] == "vulkan" and d["type"] in ("discrete", "integrated", "virtual",
                                                           "cpu", "other")
        assert d["name"] and d["api_version"].count(".") == 2
        assert d["subgroup_size"] >= 1 and d["memory_bytes"] > 0
        assert d["max_push_constant_bytes"] >= 128 and d["max_storage_range"] >= 2**27
    assert gpu.unavailable_reason() == ""
    assert "vulkan:0" in gpu.format_devices()


def test_lavapipe_opens_by_name_only():
    _need(_has_lavapipe(), "lavapipe (mesa-vulkan-drivers) is not installed")
    with _core.GpuDebug("vulkan:LLVMpipe") as g:
        info = g.info
    assert "llvmpipe" in info["name"].lower() and info["type"] == "cpu"
    assert info["subgroup_size"] >= 4 and info["fp16"] and info["storage_16bit"]
    # Plain "vulkan" never picks a CPU-type driver.
    if all(d["type"] == "cpu" for d in gpu.devices()):
        with pytest.raises(DeviceError, match="CPU-type devices are used only when named"):
            _core.GpuDebug("vulkan")
    else:
        with _core.GpuDebug("vulkan") as g:
            assert g.info["type"] != "cpu"


def test_resolve_device(monkeypatch):
    monkeypatch.delenv("DASLLAMA_DEVICE", raising=False)
    assert gpu.resolve_device(None) == "cpu"
    monkeypatch.setenv("DASLLAMA_DEVICE", "Vulkan")
    assert gpu.resolve_device(None) == "vulkan"
    assert gpu.resolve_device("vulkan:NVIDIA H200") == "vulkan:NVIDIA H200"
    assert gpu.resolve_device("vulkan:1") == "vulkan:1"
    monkeypatch.setenv("DASLLAMA_DEVICE", "cuda")
    with pytest.raises(DeviceError, match="DASLLAMA_DEVICE='cuda'"):
        gpu.resolve_device(None)
    with pytest.raises(DeviceError, match="vulkan:NAME"):
        gpu.resolve_device("vulkan:")
    assert gpu.resolve_device("Metal:0") == "metal:0"


@pytest.mark.skipif(sys.platform == "darwin", reason="Apple builds have the Metal home")
def test_metal_off_apple_says_the_build_has_no_metal_home():
    with pytest.raises(DeviceError, match="no Metal home"):
        _core.GpuDebug("metal")


def test_no_loader_means_no_devices_and_a_reason():
    code = ("import json; from dasllama import gpu; "
            "print(json.dumps([gpu.devices(), gpu.unavailable_reason()]))")
    env = dict(os.environ, DASLLAMA_VULKAN_LOADER="libvulkan-missing.so.1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True).stdout
    found, reason = json.loads(out)
    assert found == []
    assert reason.startswith("no Vulkan loader (libvulkan-missing.so.1): "), reason


# ---------------------------------------------------------------------------------------------
# The self-test stamp against NumPy
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n,x_off,y_off", [(1, 0, 0), (63, 5, 0), (1001, 3, 7), (4097, 0, 11)])
def test_axpy_matches_numpy(dev, n, x_off, y_off):
    rng = np.random.default_rng(n)
    a = 1.75
    x = rng.standard_normal(x_off + n + 2).astype(np.float32)
    # y outside the written range stays NaN: the kernel must not touch it.
    y = np.full(y_off + n + 9, np.nan, np.float32)
    y[y_off:y_off + n] = rng.standard_normal(n).astype(np.float32)
    x_out, y_out = dev.run("gk_selftest_axpy", [x, y], _axpy_args(n, a, x_off, y_off),
                           ((n + 63) // 64,))
    assert x_out.dtype == np.float32 and x_out.shape == x.shape and np.array_equal(x_out, x)
    assert np.isnan(y_out[:y_off]).all() and np.isnan(y_out[y_off + n:]).all()
    got = y_out[y_off:y_off + n].astype(np.float64)
    ref = a * x[x_off:x_off + n].astype(np.float64) + y[y_off:y_off + n]
    err = _rel_l2(got, ref)
    wrong = _rel_l2(got, (a + 0.25) * x[x_off:x_off + n].astype(np.float64) + y[y_off:y_off + n])
    bar = 2e-7  # measured up to 4e-8: one float32 rounding (fma) or two (mul, add)
    print(f"n={n}: rel-l2 {err:.2e} (bar {bar:.0e}); with a wrong `a`: {wrong:.2e}")
    assert err < bar
    assert wrong > 10 * bar


def test_dispatches_chain_with_barriers_and_resubmission(dev):
    n = 777
    x = np.arange(n, dtype=np.float32) / 64
    y = np.ones(n, np.float32)
    step = ("gk_selftest_axpy", [0, 1], _axpy_args(n, 0.5, 0, 0), ((n + 63) // 64,))
    # Three dispatches with barriers, the recording submitted four times: y += 12 * 0.5 * x.
    _, y_out = dev.run_many([x, y], [step] * 3, repeat=4)
    np.testing.assert_allclose(y_out, y + 6.0 * x, rtol=1e-6)
    _, once = dev.run_many([x, y], [step] * 3)
    assert not np.allclose(once, y_out)  # repeat really re-ran the recording


def test_profile_has_one_time_per_dispatch(dev):
    if not dev.info["timestamps"]:
        pytest.skip(f"{dev.info['name']} has no timestamps on its compute queue")
    n = 513
    x = np.ones(n, np.float32)
    y = np.zeros(n, np.float32)
    steps = [("gk_selftest_axpy", [0, 1], _axpy_args(n, 1.0, 0, 0), 9)] * 3
    dev.profile = True
    try:
        dev.run_many([x, y], steps)
        prof = dev.last_profile
    finally:
        dev.profile = False
    assert [p[0] for p in prof] == ["gk_selftest_axpy"] * 3
    assert all(p[1] >= 0.0 for p in prof)


# ---------------------------------------------------------------------------------------------
# Transfers
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("nbytes", [1, 3, 4097, (3 << 20) + 1, (65 << 20) + 3])
def test_round_trip_of_odd_sizes(dev, nbytes):
    # The largest crosses the 64 MiB staging buffer, so it moves in pieces.
    data = np.random.default_rng(nbytes).integers(0, 256, nbytes, dtype=np.uint8)
    (back,) = dev.run_many([data], [])
    assert back.dtype == np.uint8 and np.array_equal(back, data)


def test_round_trip_keeps_dtype_and_shape(dev):
    arrays = [np.arange(15, dtype=np.int16).reshape(3, 5), np.linspace(0, 1, 7),
              np.zeros((0, 4), np.float32), np.asfortranarray(np.eye(3, dtype=np.float32))]
    back = dev.run_many(arrays, [])
    for a, b in zip(arrays, back):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b)


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def test_bad_spec_names_the_devices(spec):
    with pytest.raises(DeviceError, match=r"no Vulkan device matches 'vulkan:no-such-gpu'.*vulkan:0"):
        _core.GpuDebug("vulkan:no-such-gpu")
    with pytest.raises(DeviceError, match=r"'vulkan:99'; devices: vulkan:0"):
        _core.GpuDebug("vulkan:99")
    with pytest.raises(DeviceError, match="unknown device 'cuda'"):
        _core.GpuDebug("cuda")


def test_bad_dispatches_are_refused(dev):
    x = np.zeros(8, np.float32)
    with pytest.raises(DeviceError, match="unknown stamp 'no_such_stamp'.*gk_selftest_axpy"):
        dev.run("no_such_stamp", [x, x], b"", 1)
    with pytest.raises(ShapeError, match="takes 16 bytes of arguments, got 12"):
        dev.run("gk_selftest_axpy", [x, x], b"\0" * 12, 1)
    with pytest.raises(ShapeError, match="binds 2 buffers, got 1"):
        dev.run("gk_selftest_axpy", [x], _axpy_args(8, 1.0, 0, 0), 1)
    with pytest.raises(DeviceError, match="workgroups in dimension x"):
        dev.run("gk_selftest_axpy", [x, x], _axpy_args(8, 1.0, 0, 0), 2**31)


def test_buffer_over_the_binding_range_is_refused_at_dispatch(dev):
    limit = dev.info["max_storage_range"]
    if limit > 2**30:
        pytest.skip(f"{dev.info['name']} binds {limit} bytes; allocating more here is too much")
    big = np.zeros(limit // 4 + 16, np.float32)
    with pytest.raises(DeviceError, match="storage-binding range"):
        dev.run("gk_selftest_axpy", [big, np.zeros(4, np.float32)], _axpy_args(4, 1.0, 0, 0), 1)


# ---------------------------------------------------------------------------------------------
# The validation layer, in a fresh process (it is switched on before the first device call)
# ---------------------------------------------------------------------------------------------

_VALIDATED_RUN = """
import json, struct, sys
import numpy as np
from dasllama import _core
with _core.GpuDebug(sys.argv[1]) as g:
    n = 333
    x = np.arange(n, dtype=np.float32); y = np.ones(n + 4, np.float32)
    step = ("gk_selftest_axpy", [0, 1], struct.pack("<IfII", n, 2.0, 0, 4), 6)
    _, y2 = g.run_many([x, y], [step, step], repeat=2)
    assert np.array_equal(y2[4:], 1 + 8 * x), "wrong result under validation"
    g.run_many([np.arange(5000, dtype=np.uint8), np.zeros((3, 7), np.float64)], [])
    if g.info["timestamps"]:
        g.profile = True
        g.run_many([x, y], [step])
print(json.dumps(_core.gpu_validation()))
"""


def test_validation_layer_reports_nothing(spec):
    env = dict(os.environ, DASLLAMA_VULKAN_VALIDATION="1")
    r = subprocess.run([sys.executable, "-c", _VALIDATED_RUN, spec], env=env,
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    report = json.loads(r.stdout.strip().splitlines()[-1])
    assert report["requested"]
    _need(report["enabled"], f"validation layer unavailable: {report['reason']}")
    print(f"validation: {len(report['errors'])} errors, {len(report['warnings'])} warnings")
    for w in report["warnings"]:
        print("warning:", w[:300])
    assert report["errors"] == []


def test_devices_command_prints_a_table_or_the_reason(capsys):
    import argparse

    parser = argparse.ArgumentParser(prog="dasllama")
    gpu.add_devices_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["devices"])
    assert args.run(args) == 0
    out = capsys.readouterr().out
    if gpu.devices():
        assert out.splitlines()[0].split()[:3] == ["spec", "name", "type"]
        assert all(f"vulkan:{d['index']}" in out for d in gpu.devices())
    else:
        assert out.startswith("no GPU devices: ")
