"""dasllama convert kokoro: the real int8 graph (`dasllama pull kokoro`) to GGUF, checked
against the ONNX file itself, and the converter's errors on graphs and inputs it does not know."""

import json
import subprocess
import sys

import numpy as np
import pytest

from requires import require


@pytest.fixture(scope="module")
def real(real_model, tmp_path_factory):
    """(folder of the pulled model, converted GGUF path)."""
    require("onnx")
    from dasllama.convert.kokoro import convert_kokoro

    folder = real_model("kokoro")
    out = tmp_path_factory.mktemp("kokoro") / "kokoro.gguf"
    convert_kokoro(folder / "kokoro-v1.0.int8.onnx", folder / "voices_ja.npz", out)
    return folder, out


def _gguf(path):
    gguf = require("gguf")
    r = gguf.GGUFReader(str(path))
    return r, {t.name: t for t in r.tensors}


def test_real_graph_converts_with_its_dimensions(real):
    folder, out = real
    from dasllama.reference.kokoro import ReferenceKokoro

    m = ReferenceKokoro(out)
    meta = m.meta
    assert meta["kokoro.bert.layers"] == 12 and meta["kokoro.bert.heads"] == 12
    assert meta["kokoro.style_split"] == [128, 128]
    assert (meta["kokoro.n_fft"], meta["kokoro.hop"]) == (20, 5)
    assert meta["kokoro.sample_rate"] == 24000 and meta["kokoro.upsample_scale"] == 300
    assert meta["kokoro.harmonics"] == 9 and meta["kokoro.quantized"] is True
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))["vocab"]
    assert m.vocab == vocab
    with np.load(folder / "voices_ja.npz") as z:
        assert sorted(z.files) == m.voices
        np.testing.assert_array_equal(m.voice("jf_alpha"), z["jf_alpha"][:, 0, :])
    # widths come from the tensors
    assert m.w["bert.encoder.embedding_hidden_mapping_in.weight"].shape == (128, 768)
    assert m.w["text_encoder.embedding.weight"].shape == (178, 512)
    assert m.w["decoder.generator.conv_post.weight"].shape == (22, 128, 7)
    assert meta["kokoro.conv.decoder.generator.ups.0"] == [10, 5, 5, 1, 1, 0]


def test_int8_weights_are_the_graphs_integers(real):
    onnx = require("onnx")
    from onnx import numpy_helper

    folder, out = real
    _, t = _gguf(out)
    graph = onnx.load(str(folder / "kokoro-v1.0.int8.onnx")).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    linear = t["bert_encoder.weight"]
    assert linear.tensor_type == 24   # GGML I8
    np.testing.assert_array_equal(np.array(linear.data), inits["onnx::MatMul_6704_quantized"])
    conv = np.array(t["text_encoder.cnn.0.0.weight"].data).astype(np.int16) + 128   # was uint8
    np.testing.assert_array_equal(conv, inits["/encoder/text_encoder/cnn.0/Mul_output_0_quantized"])
    zp = float(np.array(t["text_encoder.cnn.0.0.weight_zp"].data)[0])
    assert zp == 69 - 128   # the graph's zero point 69, shifted alike
    lstm = np.array(t["predictor.lstm.weight_ih"].data)
    assert lstm.shape == (2, 640, 1024) and lstm.dtype == np.int8


def _graph(nodes, inits, inputs=("x",)):
    onnx = require("onnx")
    from onnx import TensorProto, helper, numpy_helper

    g = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 4]) for n in inputs],
        [helper.make_tensor_value_info(nodes[-1].output[0], TensorProto.FLOAT, None)],
        initializer=[numpy_helper.from_array(v, k) for k, v in inits.items()])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def _save(model, tmp_path, name="m.onnx"):
    onnx = require("onnx")
    path = tmp_path / name
    onnx.save(model, str(path))
    return path


def test_unknown_op_fails_naming_the_node(tmp_path):
    from dasllama.convert.kokoro import read_graph
    from dasllama.errors import ConvertError

    onnx = require("onnx")
    node = onnx.helper.make_node("Einsum", ["x", "x"], ["y"], name="/encoder/odd/Einsum",
                                 equation="ij,ij->ij")
    with pytest.raises(ConvertError, match=r"/encoder/odd/Einsum.*Einsum.*not one the"):
        read_graph(_save(_graph([node], {}), tmp_path))


def test_unknown_initializer_fails_naming_it(tmp_path):
    from dasllama.convert.kokoro import read_graph
    from dasllama.errors import ConvertError

    onnx = require("onnx")
    node = onnx.helper.make_node("Add", ["x", "mystery"], ["y"], name="/encoder/thing/Add")
    model = _graph([node], {"mystery": np.ones((1, 100), np.float32)})
    with pytest.raises(ConvertError, match=r"'mystery' of shape \[1, 100\]"):
        read_graph(_save(model, tmp_path))


def test_integer_matmul_without_a_weight_fails(tmp_path):
    from dasllama.convert.kokoro import read_graph
    from dasllama.errors import ConvertError

    onnx = require("onnx")
    node = onnx.helper.make_node("MatMulInteger", ["x", "x"], ["y"], name="/encoder/a/MatMul_quant")
    with pytest.raises(ConvertError, match=r"/encoder/a/MatMul_quant.*not a weight"):
        read_graph(_save(_graph([node], {}), tmp_path))


def test_a_graph_without_albert_fails(tmp_path):
    from dasllama.convert.kokoro import read_graph
    from dasllama.errors import ConvertError

    onnx = require("onnx")
    node = onnx.helper.make_node("Sigmoid", ["x"], ["y"], name="/encoder/predictor/Sigmoid")
    with pytest.raises(ConvertError, match="no ALBERT attention"):
        read_graph(_save(_graph([node], {}), tmp_path))


def test_not_an_onnx_file(tmp_path):
    from dasllama.convert.kokoro import read_graph
    from dasllama.errors import ConvertError

    require("onnx")
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x00not protobuf" * 10)
    with pytest.raises(ConvertError, match="bad.onnx: not a readable ONNX model"):
        read_graph(bad)


def test_bad_voices_and_vocab_fail_naming_them(real, tmp_path):
    from dasllama.convert.kokoro import convert_kokoro, read_vocab, read_voices
    from dasllama.errors import ConvertError

    folder, _ = real
    narrow = tmp_path / "narrow.npz"
    np.savez(narrow, xx_narrow=np.zeros((510, 1, 100), np.float32))
    with pytest.raises(ConvertError, match="voice 'xx_narrow' rows of 100 values; the graph's "
                                           "style is 256"):
        convert_kokoro(folder / "kokoro-v1.0.int8.onnx", narrow, tmp_path / "o.gguf",
                       vocab=folder / "vocab.json")
    flat = tmp_path / "flat.npz"
    np.savez(flat, v=np.zeros((5,), np.float32))
    with pytest.raises(ConvertError, match=r"voice 'v' has shape \[5\]"):
        read_voices(flat)
    with pytest.raises(ConvertError, match="must be .npz"):
        read_voices(tmp_path / "voices.txt")
    vocab = tmp_path / "vocab.json"
    vocab.write_text('{"vocab": {"ab": 3}}')
    with pytest.raises(ConvertError, match="'ab': 3 is not one symbol"):
        read_vocab(vocab)
    vocab.write_text('{"tokens": []}')
    with pytest.raises(ConvertError, match="no 'vocab' object"):
        read_vocab(vocab)


def test_cli_converts_and_reports_errors(real, tmp_path):
    folder, out = real
    made = tmp_path / "cli.gguf"
    done = subprocess.run([sys.executable, "-m", "dasllama.cli", "convert", "kokoro",
                           str(folder / "kokoro-v1.0.int8.onnx"), "--voices",
                           str(folder / "voices_ja.npz"), "-o", str(made)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert made.read_bytes() == out.read_bytes()
    done = subprocess.run([sys.executable, "-m", "dasllama.cli", "convert", "kokoro",
                           str(tmp_path / "none.onnx"), "--voices", str(folder / "voices_ja.npz"),
                           "-o", str(made)], capture_output=True, text=True)
    assert done.returncode != 0 and "none.onnx" in done.stderr
