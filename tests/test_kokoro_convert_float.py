"""dasllama.convert.kokoro's rules for a float ONNX graph's weight-bearing nodes (the ONNX LSTM,
Gemm, a float embedding Gather), checked on small graphs at Kitten-like widths: each graph runs
in onnxruntime, its converted tensors replace the module's in a float GGUF (a random-weight
Kitten-like model from the `kokoro` package's modules, dasllama.convert.kokoro_torch), and the
C++ chain's float lane runs that module on the same input.

Bars: float32 on both sides, different summation orders (onnxruntime's MLAS against cpu/matmul);
measured values in the comments, printed by the tests. Negative controls: the C++ LSTM with its
backward direction left in step order, the Gemm's input rows rotated, the table read one id on;
each must miss its bar by CONTROL_RATIO.
"""

import numpy as np
import pytest

import kokoro_torch_models as km
from requires import require

CONTROL_RATIO = 10
LSTM_BAR = 1e-6     # the C++ float BiLSTM vs onnxruntime's LSTM (measured 2.6e-7)
GEMM_BAR = 1e-6     # the C++ float linear vs onnxruntime's Gemm (measured 1.6e-7)
T = 37              # sequence length of the test inputs


def rel(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def save(graph, path, opset=17):
    import onnx

    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", opset)])
    onnx.checker.check_model(model)
    onnx.save(model, str(path))
    return path


def lstm_graph(rng, path, inputs: int, hidden: int):
    """One bidirectional ONNX LSTM named as the exporter names predictor.shared's."""
    from onnx import TensorProto, helper, numpy_helper

    w = (rng.standard_normal((2, 4 * hidden, inputs)) / np.sqrt(inputs)).astype(np.float32)
    r = (rng.standard_normal((2, 4 * hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (0.3 * rng.standard_normal((2, 8 * hidden))).astype(np.float32)
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], name="/encoder/shared/LSTM",
                            direction="bidirectional", hidden_size=hidden)
    g = helper.make_graph(
        [node], "lstm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["T", 1, inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", 2, 1, hidden])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
         numpy_helper.from_array(b, "B")])
    return save(g, path)


def gemm_graph(rng, path, inputs: int, outputs: int):
    """A Gemm (transB = 1, PyTorch's (out, in) weight) named as predictor.F0.0.norm1.fc's."""
    from onnx import TensorProto, helper, numpy_helper

    w = rng.standard_normal((outputs, inputs)).astype(np.float32)
    b = rng.standard_normal(outputs).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "encoder.predictor.F0.0.norm1.fc.weight",
                                     "encoder.predictor.F0.0.norm1.fc.bias"], ["y"],
                            name="/encoder/F0.0/norm1/fc/Gemm", transB=1)
    g = helper.make_graph(
        [node], "gemm",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", inputs])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", outputs])],
        [numpy_helper.from_array(w, "encoder.predictor.F0.0.norm1.fc.weight"),
         numpy_helper.from_array(b, "encoder.predictor.F0.0.norm1.fc.bias")])
    return save(g, path)


def embedding_graph(rng, path, rows: int, dim: int):
    from onnx import TensorProto, helper, numpy_helper

    table = rng.standard_normal((rows, dim)).astype(np.float32)
    node = helper.make_node("Gather", ["encoder.text_encoder.embedding.weight", "ids"], ["y"],
                            name="/encoder/text_encoder/embedding/Gather")
    g = helper.make_graph(
        [node], "embedding",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["T"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["T", dim])],
        [numpy_helper.from_array(table, "encoder.text_encoder.embedding.weight")])
    return save(g, path)


def read_rules(path) -> dict:
    """The converter's rules over every node of a graph (no model-level settings)."""
    from dasllama.convert.kokoro import _Reader
    from dasllama.convert.onnx_graph import OnnxGraph

    r = _Reader(OnnxGraph(path))
    r.run()
    return r.t.items


def ort(path, **feeds):
    ort_ = require("onnxruntime")
    s = ort_.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)[0]


@pytest.fixture(scope="module")
def kitten(tmp_path_factory):
    """The Kitten-like checkpoint, its converted tensors, metadata and voices."""
    require("onnx")
    require("torch")
    from dasllama.convert.kokoro import read_voices, read_vocab
    from dasllama.convert.kokoro_torch import read_torch_model

    parts = km.build(km.KITTEN_LIKE, seed=99, kitten_decoder=True)
    folder = tmp_path_factory.mktemp("kitten-float")
    ckpt, config, voices = km.save(parts, km.KITTEN_LIKE, folder)
    tensors, meta = read_torch_model(ckpt, config)
    packs = {}
    for p in voices:
        packs.update(read_voices(p))
    return dict(tensors=tensors, meta=meta, packs=packs, vocab=read_vocab(config),
                folder=folder)


def model_with(kitten, replaced: dict, name: str):
    """The C++ model of the Kitten-like file with some tensors replaced."""
    from dasllama import _core
    from dasllama.convert.kokoro import write_kokoro

    tensors = dict(kitten["tensors"])
    for key, value in replaced.items():
        assert key in tensors, key                      # a tensor the model really has
        assert tensors[key][1].shape == value[1].shape, (key, tensors[key][1].shape)
        tensors[key] = value
    out = write_kokoro(tensors, kitten["meta"], kitten["packs"], kitten["vocab"],
                       kitten["folder"] / f"{name}.gguf")
    return _core.KokoroModel(str(out), 2)


def test_onnx_lstm_converts_to_the_float_lane(kitten, tmp_path):
    rng = np.random.default_rng(11)
    inputs, hidden = kitten["tensors"]["predictor.shared.weight_ih"][1].shape[1:]
    hidden //= 4
    path = lstm_graph(rng, tmp_path / "lstm.onnx", inputs, hidden)
    got = read_rules(path)
    assert set(got) == {"predictor.shared.weight_ih", "predictor.shared.weight_hh",
                        "predictor.shared.bias"}
    assert all(t == "F32" for t, _ in got.values())
    cpp = model_with(kitten, got, "lstm")
    x = rng.standard_normal((T, inputs)).astype(np.float32)
    y = ort(path, x=x[:, None, :])                                  # (T, 2, 1, H)
    want = np.concatenate([y[:, 0, 0], y[:, 1, 0]], axis=1)         # [fwd | bwd]
    err = rel(cpp.lstm("predictor.shared", x), want)
    control = rel(cpp.lstm("predictor.shared", x, swap_directions=True), want)
    print(f"ONNX LSTM ({inputs} -> 2 x {hidden}): rel {err:.2e}; control {control:.2f}")
    assert err <= LSTM_BAR
    assert control >= CONTROL_RATIO * LSTM_BAR


def test_gemm_converts_to_a_float_linear(kitten, tmp_path):
    rng = np.random.default_rng(12)
    inputs, outputs = kitten["tensors"]["predictor.F0.0.norm1.fc.weight"][1].shape
    path = gemm_graph(rng, tmp_path / "gemm.onnx", inputs, outputs)
    got = read_rules(path)
    assert set(got) == {"predictor.F0.0.norm1.fc.weight", "predictor.F0.0.norm1.fc.bias"}
    cpp = model_with(kitten, got, "gemm")
    x = rng.standard_normal((T, inputs)).astype(np.float32)
    want = ort(path, x=x)
    err = rel(cpp.linear("predictor.F0.0.norm1.fc", x), want)
    control = rel(cpp.linear("predictor.F0.0.norm1.fc", np.roll(x, 1, axis=0)), want)
    print(f"Gemm ({inputs} -> {outputs}): rel {err:.2e}; control {control:.2f}")
    assert err <= GEMM_BAR
    assert control >= CONTROL_RATIO * GEMM_BAR


def test_float_embedding_gather_converts(kitten, tmp_path):
    """The table is stored as the graph holds it: the rows onnxruntime gathers, exactly."""
    rng = np.random.default_rng(13)
    rows, dim = kitten["tensors"]["text_encoder.embedding.weight"][1].shape
    path = embedding_graph(rng, tmp_path / "emb.onnx", rows, dim)
    got = read_rules(path)
    assert list(got) == ["text_encoder.embedding.weight"]
    ids = rng.integers(0, rows, T).astype(np.int64)
    table = got["text_encoder.embedding.weight"][1]
    assert got["text_encoder.embedding.weight"][0] == "F32"
    want = ort(path, ids=ids)
    assert np.array_equal(table[ids], want)
    assert not np.array_equal(table[(ids + 1) % rows], want)      # control: one id on
    # the C++ chain loads the converted table (its text encoder reads it)
    cpp = model_with(kitten, got, "emb")
    assert cpp.text_encoder(np.array([0, *ids[:5], 0])).shape[0] == 7


def test_an_lstm_with_other_activations_fails_naming_the_node(tmp_path):
    require("onnx")
    import onnx
    from dasllama.convert import ConvertError

    path = lstm_graph(np.random.default_rng(1), tmp_path / "lstm.onnx", 8, 4)
    model = onnx.load(str(path))
    model.graph.node[0].attribute.append(
        onnx.helper.make_attribute("activations", ["Relu", "Tanh", "Tanh"] * 2))
    onnx.save(model, str(path))
    with pytest.raises(ConvertError, match=r"/encoder/shared/LSTM.*activations"):
        read_rules(path)
