"""dasllama.convert.silero_vad and the weights file it wrote (python/dasllama/data).

The shipped file was converted from silero-vad 6.0.0's silero_vad.onnx (sha256 recorded in
its metadata and in data/README.md). faster-whisper 1.2.1 ships the same weights in another
graph form (assets/silero_vad_v6.onnx: initializers and an ONNX LSTM node, gates in ONNX's
order): converting it again must give the shipped tensors exactly, and the same metadata but
for the two provenance keys. The silero-vad package of the test extra (6.2.3, a retrained model
in the If-per-sample-rate form) must convert too. Graphs the converter does not know fail
with SileroGraphError naming the node.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from requires import require

ROOT = Path(__file__).resolve().parents[1]
SOURCE_SHA256 = "597d30b3ec076608d059477bb14cfeffdf951bf5cae370d38f65d33bbfe82004"
PROVENANCE = {"general.source", "silero_vad.source_sha256"}


def fw_asset() -> Path:
    fw = require("faster_whisper")
    return Path(fw.__file__).parent / "assets" / "silero_vad_v6.onnx"


def read(path):
    require("gguf")
    from gguf import GGUFReader

    r = GGUFReader(str(path))
    meta = {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}
    tensors = {t.name: (t.tensor_type.name, np.array(t.data)) for t in r.tensors}
    return meta, tensors


def test_shipped_file_equals_faster_whisper_weights(tmp_path):
    require("onnx")
    from dasllama.convert.silero_vad import TENSOR_NAMES, convert_silero_vad
    from dasllama.vad import SHIPPED_MODEL

    out = convert_silero_vad(fw_asset(), tmp_path / "fw.gguf")
    meta, tensors = read(out)
    shipped_meta, shipped = read(SHIPPED_MODEL)
    assert list(shipped) == TENSOR_NAMES == list(tensors)
    for name in TENSOR_NAMES:
        assert shipped[name][0] == tensors[name][0] == "F32"
        np.testing.assert_array_equal(shipped[name][1], tensors[name][1], err_msg=name)
    assert {k: v for k, v in meta.items() if k not in PROVENANCE} == \
        {k: v for k, v in shipped_meta.items() if k not in PROVENANCE}
    assert shipped_meta["silero_vad.source_sha256"] == SOURCE_SHA256
    assert shipped_meta["general.license"] == "MIT"
    assert "silero-vad 6.0.0" in shipped_meta["general.source"]


def test_lstm_gate_order_is_torch_order(tmp_path):
    """faster-whisper's LSTM node holds ONNX's gate order (i, o, f, c); the file holds
    PyTorch's (i, f, g, o): the blocks must have moved (the control for the reordering)."""
    onnx = require("onnx")
    from onnx import numpy_helper
    from dasllama.vad import SHIPPED_MODEL

    graph = onnx.load(str(fw_asset())).graph
    lstm = next(n for n in graph.node if n.op_type == "LSTM")
    inits = {t.name: numpy_helper.to_array(t) for t in graph.initializer}
    w_onnx = inits[lstm.input[1]][0]
    _, shipped = read(SHIPPED_MODEL)
    w = shipped["lstm.weight_ih"][1]
    i, o, f, c = np.split(w_onnx, 4)
    np.testing.assert_array_equal(w, np.concatenate([i, f, c, o]))
    assert not np.array_equal(w, w_onnx)


def test_package_onnx_converts(tmp_path):
    require("onnx")
    require("silero_vad")
    from dasllama.convert.silero_vad import convert_silero_vad, package_onnx_path

    out = convert_silero_vad(None, tmp_path / "pkg.gguf")
    meta, tensors = read(out)
    import hashlib
    assert meta["silero_vad.source_sha256"] == \
        hashlib.sha256(package_onnx_path().read_bytes()).hexdigest()
    # Twice: the same bytes (the writer is deterministic).
    again = convert_silero_vad(None, tmp_path / "again.gguf")
    assert out.read_bytes() == again.read_bytes()


def _fw_model():
    onnx = require("onnx")
    return onnx, onnx.load(str(fw_asset()))


def test_unknown_graphs_are_named(tmp_path):
    from dasllama.convert.silero_vad import SileroGraphError, read_silero_onnx

    (tmp_path / "junk.onnx").write_bytes(b"\x08\x07not a model at all" * 10)
    with pytest.raises(SileroGraphError, match="junk.onnx: not an ONNX model"):
        read_silero_onnx(tmp_path / "junk.onnx")

    onnx, m = _fw_model()
    conv = [n for n in m.graph.node if n.op_type == "Conv"][2]
    for a in conv.attribute:
        if a.name == "strides":
            a.ints[:] = [1]
    onnx.save(m, str(tmp_path / "stride.onnx"))
    with pytest.raises(SileroGraphError, match=rf"Conv node '{conv.name}'.*enc.1"):
        read_silero_onnx(tmp_path / "stride.onnx")

    onnx, m = _fw_model()
    lstm = next(n for n in m.graph.node if n.op_type == "LSTM")
    for a in lstm.attribute:
        if a.name == "hidden_size":
            a.i = 64
    onnx.save(m, str(tmp_path / "hidden.onnx"))
    with pytest.raises(SileroGraphError, match=rf"LSTM node '{lstm.name}': hidden_size 64"):
        read_silero_onnx(tmp_path / "hidden.onnx")

    onnx, m = _fw_model()
    drop = [n for n in m.graph.node if n.op_type == "Conv"][-1]
    m.graph.node.remove(drop)
    onnx.save(m, str(tmp_path / "fewer.onnx"))
    with pytest.raises(SileroGraphError, match="5 Conv nodes, expected 6"):
        read_silero_onnx(tmp_path / "fewer.onnx")

    onnx, m = _fw_model()
    conv = [n for n in m.graph.node if n.op_type == "Conv"][1]
    name = conv.input[1]
    init = next(t for t in m.graph.initializer if t.name == name)
    m.graph.initializer.remove(init)
    m.graph.input.append(onnx.helper.make_tensor_value_info(name, onnx.TensorProto.FLOAT,
                                                            [128, 129, 3]))
    onnx.save(m, str(tmp_path / "input.onnx"))
    with pytest.raises(SileroGraphError, match=rf"input '{name}' is not a constant tensor"):
        read_silero_onnx(tmp_path / "input.onnx")


def test_package_graph_with_other_rate_is_named(tmp_path):
    onnx = require("onnx")
    require("silero_vad")
    from onnx import numpy_helper
    from dasllama.convert.silero_vad import SileroGraphError, package_onnx_path, \
        read_silero_onnx

    m = onnx.load(str(package_onnx_path()))
    const = next(n for n in m.graph.node if n.op_type == "Constant")
    const.attribute[0].t.CopyFrom(numpy_helper.from_array(np.array(8000, np.int64)))
    onnx.save(m, str(tmp_path / "rate.onnx"))
    with pytest.raises(SileroGraphError, match="tests sr == 8000, expected 16000"):
        read_silero_onnx(tmp_path / "rate.onnx")


def test_command_line(tmp_path):
    require("onnx")
    out = tmp_path / "cli.gguf"
    r = subprocess.run([sys.executable, "-m", "dasllama.convert.silero_vad", str(fw_asset()),
                        "-o", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert out.is_file() and r.stdout.strip() == str(out)
    r = subprocess.run([sys.executable, "-m", "dasllama.convert.silero_vad",
                        str(tmp_path / "none.onnx"), "-o", str(out)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "none.onnx" in r.stderr


def test_wheel_ships_the_weights():
    """The wheel takes python/dasllama whole (scikit-build-core's wheel.packages) minus
    wheel.exclude and git-ignored files: the weights must be in neither."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        tomllib = require("tomli")
    import fnmatch

    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["scikit-build"]
    assert "python/dasllama" in cfg["wheel"]["packages"]
    rel = "python/dasllama/data/silero_vad_v6.gguf"
    assert (ROOT / rel).is_file()
    for pattern in cfg["wheel"].get("exclude", []):
        assert not fnmatch.fnmatch("dasllama/data/silero_vad_v6.gguf", pattern), pattern
    if (ROOT / ".git").exists():
        r = subprocess.run(["git", "check-ignore", "-q", rel], cwd=ROOT)
        assert r.returncode == 1, f"{rel} is git-ignored: the wheel would leave it out"
