"""Kokoro's C++ front half (csrc/tts/kokoro: ALBERT, the prosody predictor, the text encoder and
their int8 and float helpers) against the NumPy reference (dasllama.reference.kokoro) on the
real converted int8 model, stage by stage from the same inputs.

What is exact and why. Every integer op (DynamicQuantizeLinear, MatMulInteger, ConvInteger, the
integer LSTM) sums integers exactly, so any summation order gives the reference's bits; the
float helpers are written with the reference's roundings (MLAS's logistic and tanh, FastGelu,
LayerNorm's lane sums, the instance norm's pairwise means). So everything from ALBERT's output
on (the duration encoder, the durations, the alignment, F0 and N, the text encoder) must equal
the reference bit for bit, and is asserted equal. ALBERT's attention is not: the reference takes
q k^T and p v from BLAS and exp from NumPy, whose last bits C++ does not reproduce; where a value
sits on a quantization step, that bit moves it to the next step (the same effect the onnxruntime
comparison in test_kokoro_parity.py describes). Each ALBERT layer is therefore compared from the
reference's input to that layer, against a bar.

Bars (set from the measured error, printed by the tests):
- one ALBERT layer: rel-l2 <= 2e-2 (measured 0 to 4e-3 over 12 layers of two sentences); the
  negative control (one layer too few) must miss it tenfold (measured >= 0.45).
- everything else: exact. Negative controls: style halves swapped, one LSTM direction left in
  step order, ids shifted by one, rows rotated by one.
"""

import numpy as np
import pytest

from requires import require

SENTENCES = (
    'hˈaɪ.',
    'həlˈoʊ wˈɜːld, ðɪs ɪz ɐ tˈɛst.',
    'ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ.',
)
LAYER_BAR = 2e-2        # one ALBERT layer from the reference's input (rel-l2)
CONTROL_RATIO = 10      # a negative control must miss its bar by this factor
VOICE = "jf_alpha"
LAYER = "bert.encoder.albert_layer_groups.0.albert_layers.0"


def rel(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def models(real_model, tmp_path_factory):
    """(C++ model, reference, converted path) on the pulled real model."""
    require("onnx")
    require("gguf")
    from dasllama import _core
    from dasllama.convert.kokoro import convert_kokoro
    from dasllama.reference.kokoro import ReferenceKokoro

    folder = real_model("kokoro")
    out = convert_kokoro(folder / "kokoro-v1.0.int8.onnx", folder / "voices_ja.npz",
                         tmp_path_factory.mktemp("kokoro") / "kokoro.gguf")
    return _core.KokoroModel(str(out), 2), ReferenceKokoro(out), out


@pytest.fixture(scope="module")
def stages(models):
    """stages(i): sentence i's ids, style and the reference's stages from the C++ d_en."""
    from dasllama.reference.kokoro import alignment

    cpp, ref, _ = models
    cache = {}

    def get(index: int) -> dict:
        if index not in cache:
            ids = [ref.vocab[c] for c in SENTENCES[index] if c in ref.vocab]
            style = ref.voice(VOICE)[len(ids) - 1]
            s_pred = style[ref.style_split[0]:]
            full = np.array([0, *ids, 0], np.int64)
            d_en = cpp.albert(full)
            d = ref.duration_encoder(d_en, s_pred)
            dur = ref.durations(d, 1.0)
            aln = alignment(dur)
            en = (d.T @ aln).astype(np.float32)
            cache[index] = dict(ids=np.array(ids, np.int64), full=full, style=style,
                                s_pred=s_pred, d_en=d_en, d=d, durations=dur, en=en)
        return cache[index]

    return get


# ============================================================================ int8 ops

def test_int8_kernels_sum_exactly_at_every_level():
    from dasllama import _core

    rng = np.random.default_rng(0)
    levels = _core.kokoro_int8_levels()
    assert levels[-1] == "generic"
    # the last three reach the AMX level's tiles: full 32 x 32 steps, a padded 16-31 row tail,
    # a single column block, and rows under 16 left to the AVX-512 kernel
    for m, n, k in ((1, 1, 1), (3, 5, 63), (9, 13, 200), (4, 16, 2560), (2, 7, 65),
                    (64, 64, 768), (53, 45, 300), (41, 16, 130)):
        a = rng.integers(0, 256, (m, k), dtype=np.uint8)
        b = rng.integers(-128, 128, (n, k), dtype=np.int8)
        a[0, :] = 255                      # the extremes: 255 x -128 must not saturate
        b[0, :] = -128
        want = a.astype(np.int64) @ b.astype(np.int64).T
        for level in levels:
            got = _core.kokoro_int8_gemm(a, b, level)
            assert np.array_equal(got, want), (level, m, n, k)
        # negative control: a rotated row of b is a different product
        if n > 1:
            assert not np.array_equal(_core.kokoro_int8_gemm(a, np.roll(b, 1, axis=0),
                                                             levels[0]), want)
    print(f"levels {levels}: exact")


def test_dynamic_quantize_follows_onnx_rule():
    from dasllama import _core
    from dasllama.reference.kokoro_ops import dynamic_quantize

    rng = np.random.default_rng(1)
    cases = [rng.standard_normal(1000).astype(np.float32) * 3,
             np.abs(rng.standard_normal(100)).astype(np.float32),     # range starts at 0
             -np.abs(rng.standard_normal(100)).astype(np.float32),    # range ends at 0
             np.zeros(10, np.float32),                                  # empty range: scale 1
             np.arange(0, 255.5, 0.5, dtype=np.float32)]               # scale 1, ties at .5
    for x in cases:
        q, scale, zp = _core.kokoro_dynamic_quantize(x)
        rq, rscale, rzp = dynamic_quantize(x)
        assert np.array_equal(q, rq.astype(np.uint8)) and scale == rscale and zp == rzp
    # negative control: rounding half away from zero differs on the ties
    ties = cases[-1]
    q, _, _ = _core.kokoro_dynamic_quantize(ties)
    assert not np.array_equal(q, np.floor(ties + 0.5).clip(0, 255).astype(np.uint8))


def test_linears_and_convolutions_are_exact(models):
    cpp, ref, _ = models
    rng = np.random.default_rng(2)
    for name, width in ((f"{LAYER}.attention.query", 768), ("bert_encoder", 768),
                        ("predictor.duration_proj.linear_layer", 512),
                        ("predictor.F0.0.norm1.fc", 128)):
        x = rng.standard_normal((23, width)).astype(np.float32)
        want = ref.linear(x, name)
        assert np.array_equal(cpp.linear(name, x), want), name
        assert not np.array_equal(cpp.linear(name, np.roll(x, 1, axis=0)), want)   # control
    for name, cin in (("text_encoder.cnn.0.0", 512), ("predictor.F0.0.conv1", 512),
                      ("predictor.F0.1.conv1x1", 512), ("predictor.N_proj", 256)):
        x = rng.standard_normal((cin, 41)).astype(np.float32)
        want = ref.qconv(x, name)
        assert np.array_equal(cpp.qconv(name, x), want), name
        assert not np.array_equal(cpp.qconv(name, np.roll(x, 1, axis=1)), want)     # control


def test_integer_lstm_is_exact(models):
    cpp, ref, _ = models
    rng = np.random.default_rng(3)
    for name, width in (("text_encoder.lstm", 512), ("predictor.shared", 640)):
        x = rng.standard_normal((29, width)).astype(np.float32)
        want = ref.lstm(x, name)
        assert np.array_equal(cpp.lstm(name, x), want), name
        control = rel(cpp.lstm(name, x, swap_directions=True), want)
        print(f"{name}: exact; backward direction left in step order: rel {control:.2f}")
        assert control >= 0.1


# ============================================================================ float helpers

def test_float_helpers_round_as_the_reference():
    from dasllama import _core
    from dasllama.reference import kokoro_ops as ops

    rng = np.random.default_rng(4)
    x = np.concatenate([rng.standard_normal(20000) * 6, [-30, -18, -9, 0, 9, 18, 30]]
                       ).astype(np.float32)
    for level in _core.kokoro_activation_levels():
        assert np.array_equal(_core.kokoro_logistic(x, level), ops.sigmoid(x)), level
        assert np.array_equal(_core.kokoro_tanh(x, level), ops.tanh(x)), level
    assert not np.array_equal(np.tanh(x), ops.tanh(x))   # control: libm's tanh differs
    for n in (128, 512, 768, 13, 5321):   # 13, 5321: rows not a multiple of the lanes
        a = (rng.standard_normal((6, n)) * 2 + 0.5).astype(np.float32)
        w = rng.standard_normal(n).astype(np.float32)
        b = rng.standard_normal(n).astype(np.float32)
        assert np.array_equal(_core.kokoro_layer_norm(a, w, b, 1e-5),
                              ops.layer_norm(a, w, b, 1e-5)), n
        assert np.array_equal(_core.kokoro_instance_norm(a), ops.instance_norm(a)), n
        assert np.array_equal(_core.kokoro_fast_gelu(a, b), ops.fast_gelu(a, b)), n
        # softmax's exp is NumPy's in the reference, expf here: last bits only
        assert rel(_core.kokoro_softmax(a), ops.softmax(a)) <= 1e-6
    # control: LayerNorm with a two-pass variance in double is not the kernel's rounding
    a = (rng.standard_normal((64, 768)) * 3 + 1).astype(np.float32)
    w, b = np.ones(768, np.float32), np.zeros(768, np.float32)
    mu = a.astype(np.float64).mean(1, keepdims=True)
    two_pass = ((a - mu) / np.sqrt(((a - mu) ** 2).mean(1, keepdims=True) + 1e-5)).astype(
        np.float32)
    assert not np.array_equal(_core.kokoro_layer_norm(a, w, b, 1e-5), two_pass)


# ============================================================================ 1. ALBERT

@pytest.mark.parametrize("index", (1, 2))
def test_albert_layers_from_the_reference_inputs(models, index):
    cpp, ref, _ = models
    ids = [ref.vocab[c] for c in SENTENCES[index] if c in ref.vocab]
    full = np.array([0, *ids, 0], np.int64)
    t = len(full)
    e = (ref.embed(full, "bert.embeddings.word_embeddings")
         + ref.embed(np.zeros(t, np.int64), "bert.embeddings.token_type_embeddings"))
    e = (e + ref.embed(np.arange(t), "bert.embeddings.position_embeddings")).astype(np.float32)
    h = ref.linear(ref.ln(e, "bert.embeddings.LayerNorm"),
                   "bert.encoder.embedding_hidden_mapping_in")
    assert np.array_equal(cpp.albert_embed(full), h)    # embeddings and mapping: integer, exact
    errors, controls = [], []
    for _ in range(ref.meta["kokoro.bert.layers"]):
        want = ref.albert_layer(h)
        errors.append(rel(cpp.albert_layer(h), want))
        controls.append(rel(h, want))                    # one layer too few
        h = want
    assert np.array_equal(cpp.linear("bert_encoder", h), ref.linear(h, "bert_encoder"))
    print(f"{t} ids: layer errors {['%.1e' % x for x in errors]}; control min "
          f"{min(controls):.2f}")
    assert max(errors) <= LAYER_BAR
    assert min(controls) >= CONTROL_RATIO * LAYER_BAR


# ============================================================================ 2-5. prosody, text

@pytest.mark.parametrize("index", range(len(SENTENCES)))
def test_duration_encoder_and_durations_exact(models, stages, index):
    cpp, ref, _ = models
    s = stages(index)
    d = cpp.duration_encoder(s["d_en"], s["s_pred"])
    assert np.array_equal(d, s["d"])
    durations, totals = cpp.durations(s["d"], 1.0)
    assert np.array_equal(durations, s["durations"])
    fast, _ = cpp.durations(s["d"], 1.3)                 # speed divides before rounding
    assert np.array_equal(fast, ref.durations(s["d"], 1.3))
    # negative control: the style halves swapped (the decoder half read as the predictor's)
    swapped = s["style"][:ref.style_split[0]]
    control = rel(cpp.duration_encoder(s["d_en"], swapped), s["d"])
    print(f"{len(s['full'])} ids: d and durations exact ({int(durations.sum())} frames); "
          f"style halves swapped: d rel {control:.2f}")
    assert control >= 0.1


@pytest.mark.parametrize("index", (0, 1))
def test_f0_energy_exact(models, stages, index):
    cpp, ref, _ = models
    s = stages(index)
    f0, n = cpp.f0_energy(s["en"], s["s_pred"])
    rf0, rn = ref.f0_energy(s["en"], s["s_pred"])
    assert f0.shape == (2 * s["en"].shape[1],)
    assert np.array_equal(f0, rf0) and np.array_equal(n, rn)
    cf0, cn = cpp.f0_energy(s["en"], s["s_pred"], swap_lstm=True)   # negative control
    print(f"{s['en'].shape[1]} frames: F0 and N exact; backward LSTM in step order: F0 rel "
          f"{rel(cf0, rf0):.2f}, N rel {rel(cn, rn):.2f}")
    assert min(rel(cf0, rf0), rel(cn, rn)) >= 0.01


@pytest.mark.parametrize("index", range(len(SENTENCES)))
def test_text_encoder_exact(models, stages, index):
    cpp, ref, _ = models
    s = stages(index)
    want = ref.text_encoder(s["full"])
    assert np.array_equal(cpp.text_encoder(s["full"]), want)
    shifted = np.roll(s["full"], 1)                              # negative control
    assert rel(cpp.text_encoder(shifted), want) >= 0.1


@pytest.mark.parametrize("index", (1,))
def test_predict_chains_the_stages(models, stages, index):
    from dasllama.reference.kokoro import alignment

    cpp, ref, _ = models
    s = stages(index)
    p = cpp.predict(s["ids"], s["style"], 1.0, d_en=s["d_en"])
    assert np.array_equal(p["d"], s["d"]) and np.array_equal(p["durations"], s["durations"])
    assert p["frames"] == int(s["durations"].sum())
    asr = (ref.text_encoder(s["full"]).T @ alignment(s["durations"])).astype(np.float32)
    assert np.array_equal(p["asr"], asr)
    f0, n = ref.f0_energy(s["en"], s["s_pred"])
    assert np.array_equal(p["f0"], f0) and np.array_equal(p["n"], n)
    # the whole front half from ids alone: ALBERT is the C++ one, so the same d_en
    whole = cpp.predict(s["ids"], s["style"], 1.0)
    assert np.array_equal(whole["d_en"], s["d_en"])
    assert np.array_equal(whole["durations"], s["durations"])
    # given durations are used as given
    given = np.maximum(s["durations"] - 1, 1)
    q = cpp.predict(s["ids"], s["style"], 1.0, durations=given, d_en=s["d_en"])
    assert q["frames"] == int(given.sum()) and q["asr"].shape == (512, int(given.sum()))


# ============================================================================ bad input

@pytest.mark.parametrize("what", ("tensor", "key"))
def test_missing_tensor_or_key_is_a_typed_error_naming_it(real_model, tmp_path, monkeypatch,
                                                          what):
    require("onnx")
    import dasllama.convert.kokoro as conv
    from dasllama import _core
    from dasllama.errors import GGUFError

    name = "predictor.lstm.weight_hh" if what == "tensor" else \
        "kokoro.eps.predictor.text_encoder.lstms.3"
    original = conv.read_graph

    def read_graph(path):
        tensors, meta = original(path)
        (tensors if what == "tensor" else meta).pop(name)
        return tensors, meta

    monkeypatch.setattr(conv, "read_graph", read_graph)
    folder = real_model("kokoro")
    out = conv.convert_kokoro(folder / "kokoro-v1.0.int8.onnx", folder / "voices_ja.npz",
                              tmp_path / "broken.gguf")
    with pytest.raises(GGUFError, match=name.replace(".", r"\.")):
        _core.KokoroModel(str(out), 1)


def test_bad_calls_raise_typed_errors(models):
    from dasllama.errors import GGUFError, ShapeError

    cpp, _, _ = models
    with pytest.raises(GGUFError, match="no voice 'nobody'.*jf_alpha"):
        cpp.voice("nobody")
    with pytest.raises(ShapeError, match="id 9999"):
        cpp.text_encoder(np.array([0, 9999, 0]))
    with pytest.raises(ShapeError, match="at most 512"):
        cpp.albert(np.zeros(600, np.int64))
    with pytest.raises(ShapeError, match="speed 0.0"):
        cpp.durations(np.zeros((3, 640), np.float32), 0.0)
    with pytest.raises(ShapeError, match="NaN or infinity"):
        cpp.durations(np.full((3, 640), np.nan, np.float32), 1.0)
    with pytest.raises(ShapeError, match="NaN or infinity"):
        cpp.predict(np.array([5, 6]), np.full(256, np.inf, np.float32), 1.0)
    with pytest.raises(ShapeError, match="negative duration"):
        cpp.predict(np.array([5, 6]), cpp.voice(VOICE)[1], 1.0, durations=np.array([1, -2, 3, 1]))
    with pytest.raises(ShapeError, match="more than"):
        cpp.predict(np.array([5, 6]), cpp.voice(VOICE)[1], 1.0,
                    durations=np.array([1, 10 ** 6, 3, 1]))
    with pytest.raises(ShapeError, match="style"):
        cpp.predict(np.array([5, 6]), np.zeros(100, np.float32), 1.0)
