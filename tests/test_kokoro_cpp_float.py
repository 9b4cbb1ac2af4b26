"""The C++ Kokoro chain's float lane (csrc/tts/kokoro/weight_ops.h: each linear, convolution,
LSTM and embedding runs float32 when its tensor is F32) against the NumPy reference on float32
GGUFs that dasllama.convert.kokoro_torch writes from random-weight models built with the
`kokoro` package's modules: a Kitten-like config (ALBERT with its own embedding size, the tanh
GELU, small widths, a smaller decoder) and Kokoro-82M's published config.

Each C++ stage starts from the reference's input to it, so an error is the stage's own. Both
sides are float32 with different summation orders (cpu/matmul's tiles against NumPy's BLAS),
so nothing is bit-exact except the durations, which are rounded from sums and compared exact.
Bars are a few times the largest error measured here (printed by each test); each stage has a
negative control (one ALBERT layer too few, the style halves swapped, one LSTM direction left
in step order, ids shifted by one, the other GELU) that must miss its bar by CONTROL_RATIO.
"""

import numpy as np
import pytest

import kokoro_torch_models as km
from requires import require

CONTROL_RATIO = 10     # a negative control must miss its bar by this factor
# Bars (measured Kitten-like / Kokoro-82M in the comments; each test prints its own):
OP_BAR = 1e-6          # one linear / convolution / LSTM from the same input (<= 2.9e-7 / 4.0e-7)
ALBERT_BAR = 2e-6      # d_en (3.1e-7 / 7.4e-7, either GELU)
STAGE_BAR = 1e-5       # d, F0 / N, the text encoder, the decoder (<= 1.4e-6 / 4.3e-6: F0)
AUDIO_BAR = 3e-6       # the generator from the reference's source spectrum (6.5e-7 / 6.6e-7)
CHAIN_BAR = 3e-5       # the whole chain from the phoneme ids, durations exact (6.9e-6 / 7.7e-6)
SPECTRUM_BAR = 5e-7    # the source's STFT magnitude (7.2e-8 / 9.3e-8)
PHASE_DEFINED = 1e-3   # a bin's phase is compared where its magnitude exceeds this (of the max)
PHASE_BAR = 2e-4       # radians, there (4.0e-5 / 3.9e-5)
PHONEMES = "həlˈoʊ wˈɜːld, ðɪs ɪz ɐ tˈɛst."   # 25 ids with the boundaries
SHORT_PHONEMES = "hˈaɪ ðɛɹ."                      # 11: Kokoro-82M's reference is slow


def rel(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


class FloatModel:
    """A float32 GGUF converted from random weights, opened by the C++ chain and the reference,
    with the reference's stage outputs for one sentence."""

    def __init__(self, name, tmp_path_factory):
        require("torch")
        require("gguf")
        from dasllama import _core
        from dasllama.convert.kokoro_torch import convert_kokoro_torch
        from dasllama.reference.kokoro import ReferenceKokoro, alignment

        cfg = km.KOKORO_82M if name == "kokoro-82m" else km.KITTEN_LIKE
        parts = km.build(cfg, seed=1234, kitten_decoder=(name == "kitten-like"))
        folder = tmp_path_factory.mktemp(name)
        ckpt, config, voices = km.save(parts, cfg, folder)
        self.checkpoint, self.config, self.voice_files = ckpt, config, voices
        self.path = convert_kokoro_torch(ckpt, config, voices, folder / "model.gguf")
        self.name = name
        self.cpp = _core.KokoroModel(str(self.path), 2)
        self.ref = ref = ReferenceKokoro(self.path)
        vocab = km.vocab()
        text = SHORT_PHONEMES if name == "kokoro-82m" else PHONEMES
        self.text = text
        self.phonemes = np.array([vocab[c] for c in text if c in vocab], np.int64)
        self.ids = np.array([0, *self.phonemes, 0], np.int64)
        self.style = ref.voice("voice0")[len(self.phonemes) - 1]
        split = ref.style_split[0]
        self.s_dec, self.s_pred = self.style[:split], self.style[split:]
        self.d_en = ref.albert(self.ids)
        self.d = ref.duration_encoder(self.d_en, self.s_pred)
        self.durations = ref.durations(self.d, 1.0)
        aln = alignment(self.durations)
        self.en = (self.d.T @ aln).astype(np.float32)
        self.f0, self.n = ref.f0_energy(self.en, self.s_pred)
        self.asr = (ref.text_encoder(self.ids).T @ aln).astype(np.float32)
        self.decoded = ref.decoder(self.asr, self.f0, self.n, self.s_dec)
        # the generator is fed a voiced-and-unvoiced F0 curve (random weights' F0 is near
        # zero: all unvoiced, a source without harmonics)
        frames = self.f0.shape[0]
        curve = 120 + 40 * np.sin(np.arange(frames) / 3.0)
        curve[frames // 3:frames // 3 + 3] = 0.0
        self.gen_f0 = curve.astype(np.float32)
        self.har = ref.stft(ref.harmonic_source(self.gen_f0))


@pytest.fixture(scope="module", params=("kitten-like", "kokoro-82m"))
def model(request, tmp_path_factory):
    return FloatModel(request.param, tmp_path_factory)


def report(m, what, err, bar, control):
    print(f"{m.name}: {what}: rel {err:.2e} (bar {bar:.0e}); control {control:.2e}")
    assert err <= bar, (what, err)
    assert control >= CONTROL_RATIO * bar, (what, control)


# ============================================================================ the file's lane

def test_the_file_is_the_float_lane(model):
    cfg = model.cpp.config
    assert cfg["quantized"] is False
    assert cfg["bert_activation"] == "gelu_new"          # both configs' hidden_act
    assert model.ref.w["bert_encoder.weight"].dtype == np.float32


# ============================================================================ single ops

def test_linears_convolutions_and_lstms(model):
    rng = np.random.default_rng(2)
    ref, cpp = model.ref, model.cpp
    layer = "bert.encoder.albert_layer_groups.0.albert_layers.0"
    linears = (f"{layer}.attention.query", "bert_encoder",
               "predictor.duration_proj.linear_layer", "predictor.F0.0.norm1.fc")
    for name in linears:
        width = ref.w[f"{name}.weight"].shape[0]
        x = rng.standard_normal((23, width)).astype(np.float32)
        want = ref.linear(x, name)
        report(model, f"linear {name}", rel(cpp.linear(name, x), want), OP_BAR,
               rel(cpp.linear(name, np.roll(x, 1, axis=0)), want))
    for name in ("text_encoder.cnn.0.0", "predictor.F0.0.conv1", "predictor.F0.1.conv1x1",
                 "predictor.N_proj", "decoder.F0_conv", "decoder.generator.noise_convs.0",
                 "decoder.generator.resblocks.1.convs1.2"):        # stride 2, stride 6, dilated
        cin = ref.w[f"{name}.weight"].shape[1]
        x = rng.standard_normal((cin, 131)).astype(np.float32)
        want = ref.qconv(x, name)
        report(model, f"conv {name}", rel(cpp.qconv(name, x), want), OP_BAR,
               rel(cpp.qconv(name, np.roll(x, 1, axis=1)), want))
    for name in ("text_encoder.lstm", "predictor.shared"):
        x = rng.standard_normal((29, ref.w[f"{name}.weight_ih"].shape[1])).astype(np.float32)
        want = ref.lstm(x, name)
        report(model, f"lstm {name}", rel(cpp.lstm(name, x), want), OP_BAR,
               rel(cpp.lstm(name, x, swap_directions=True), want))


# ============================================================================ stages 1-5

def test_albert(model):
    layers = model.ref.meta["kokoro.bert.layers"]
    report(model, "d_en (control: one layer too few)", rel(model.cpp.albert(model.ids),
                                                           model.d_en),
           ALBERT_BAR, rel(model.cpp.albert(model.ids, layers - 1), model.d_en))


def test_albert_erf_gelu_follows_the_file(model, tmp_path):
    """A file that names the erf GELU: the C++ ALBERT switches with it (against the reference
    told the same), and the tanh form is then the control."""
    from dasllama import _core
    from dasllama.reference.kokoro import ReferenceKokoro

    path = rewrite_activation(model, tmp_path / "erf.gguf", "gelu")
    cpp = _core.KokoroModel(str(path), 2)
    assert cpp.config["bert_activation"] == "gelu"
    want = ReferenceKokoro(path).albert(model.ids)
    report(model, "d_en with the erf GELU (control: the tanh form)", rel(cpp.albert(model.ids),
                                                                          want),
           ALBERT_BAR, rel(model.cpp.albert(model.ids), want))


def test_an_unknown_activation_is_a_typed_error(model, tmp_path):
    from dasllama import _core
    from dasllama.errors import GGUFError

    path = rewrite_activation(model, tmp_path / "bad.gguf", "relu")
    with pytest.raises(GGUFError, match="kokoro.bert.activation is 'relu'"):
        _core.KokoroModel(str(path), 1)


def test_duration_encoder_and_durations(model):
    cpp = model.cpp
    d = cpp.duration_encoder(model.d_en, model.s_pred)
    report(model, "d (control: the style halves swapped)", rel(d, model.d), STAGE_BAR,
           rel(cpp.duration_encoder(model.d_en, model.s_dec), model.d))
    durations, _ = cpp.durations(model.d, 1.0)
    assert np.array_equal(durations, model.durations)
    fast, _ = cpp.durations(model.d, 1.3)
    assert np.array_equal(fast, model.ref.durations(model.d, 1.3))
    # negative control: the durations of the swapped-style d are not these
    swapped = cpp.duration_encoder(model.d_en, model.s_dec)
    assert not np.array_equal(cpp.durations(swapped, 1.0)[0], model.durations)
    print(f"{model.name}: durations exact ({int(durations.sum())} frames)")


def test_f0_energy(model):
    f0, n = model.cpp.f0_energy(model.en, model.s_pred)
    cf0, cn = model.cpp.f0_energy(model.en, model.s_pred, swap_lstm=True)
    report(model, "F0 (control: backward LSTM in step order)", rel(f0, model.f0), STAGE_BAR,
           rel(cf0, model.f0))
    report(model, "N (control: backward LSTM in step order)", rel(n, model.n), STAGE_BAR,
           rel(cn, model.n))


def test_text_encoder(model):
    want = model.ref.text_encoder(model.ids)
    report(model, "text encoder (control: ids shifted by one)",
           rel(model.cpp.text_encoder(model.ids), want), STAGE_BAR,
           rel(model.cpp.text_encoder(np.roll(model.ids, 1)), want))


# ============================================================================ stages 6-7

def test_decoder(model):
    got = model.cpp.decoder(model.asr, model.f0, model.n, model.s_dec)
    control = model.cpp.decoder(model.asr, model.f0, model.n, model.s_pred)
    report(model, "decoder (control: the style halves swapped)", rel(got, model.decoded),
           STAGE_BAR, rel(control, model.decoded))


def test_generator_from_the_reference_spectrum(model):
    want = model.ref.generator(model.decoded, model.s_dec, model.gen_f0, model.har)
    got = model.cpp.generator(model.decoded, model.s_dec, model.gen_f0, har=model.har)
    control = model.cpp.generator(model.decoded, model.s_pred, model.gen_f0, har=model.har)
    report(model, "generator audio (control: the style halves swapped)", rel(got, want),
           AUDIO_BAR, rel(control, want))


def test_istft_divides_by_the_window_envelope(model):
    """The float file's exact inverse (no exported window sum): the overlap-added squared
    window divides; the exporter's form (times n_fft / hop, no envelope) is the control."""
    rng = np.random.default_rng(5)
    bins = model.ref.meta["kokoro.n_fft"] // 2 + 1
    spec = np.exp(rng.standard_normal((bins, 40))).astype(np.float32)
    phase = rng.uniform(-3, 3, (bins, 40)).astype(np.float32)
    want = model.ref.istft(spec, phase)
    got = model.cpp.istft(spec, phase)
    scale = model.ref.meta["kokoro.n_fft"] / model.ref.meta["kokoro.hop"]
    report(model, "iSTFT (control: the exporter's scale instead of the envelope)",
           rel(got, want), OP_BAR, rel(got * scale, want))


# ============================================================================ the whole chain

def test_source_spectrum(model):
    """The harmonic source's STFT on a voiced-and-unvoiced curve (lane-independent float code,
    checked here on the float file's settings): magnitudes against a bar, phases where the
    bin's magnitude is defined (a ~0 bin's phase is rounding noise)."""
    bins = model.har.shape[0] // 2
    got = model.cpp.source_spectrum(model.gen_f0)
    late = model.cpp.source_spectrum(np.roll(model.gen_f0, 1))        # one frame late
    mag, want = got[:bins], model.har[:bins]
    report(model, "source spectrum magnitude (control: F0 one frame late)", rel(mag, want),
           SPECTRUM_BAR, rel(late[:bins], want))
    defined = want > PHASE_DEFINED * want.max()
    dphase = np.angle(np.exp(1j * (got[bins:] - model.har[bins:])))[defined]
    print(f"{model.name}: phase where defined: max |d| {np.abs(dphase).max():.2e} rad")
    assert np.abs(dphase).max() <= PHASE_BAR


def test_the_chain_from_phoneme_ids(model):
    """ids -> audio, everything the chain's own but the source spectrum, which is the
    reference's for the voiced F0 curve (the chain's frame count): the random model's own F0
    is near zero, an unvoiced source that leaves the generator ill-conditioned
    (kokoro_torch_models.VOICED_F0), and the generator reads F0 only through the source."""
    ref = model.ref
    har = model.har
    got = model.cpp.synthesize(model.phonemes, model.style, 1.0, har=har)
    want = ref.synthesize(model.phonemes, model.style, 1.0, har=har)
    assert np.array_equal(got["durations"], want.durations)
    assert np.array_equal(got["durations"], model.durations)
    swapped = np.concatenate([model.s_pred, model.s_dec])
    control = model.cpp.synthesize(model.phonemes, swapped, 1.0, durations=want.durations,
                                   har=har)
    report(model, "audio from the ids (control: the style halves swapped)",
           rel(got["audio"], want.audio), CHAIN_BAR, rel(control["audio"], want.audio))


def test_tts_speaks_the_float_file(model):
    """dasllama.TTS opens the float GGUF and speaks phonemes with it: the reference's
    durations (exact), 600 samples per frame, and the chain's own samples."""
    import dasllama

    with dasllama.TTS(str(model.path)) as tts:
        assert "voice0" in tts.voices
        audio, rate = tts.speak(model.text, "voice0", phonemes=True)
        durations = np.concatenate(tts.stats["durations"])
    assert rate == 24000
    assert np.array_equal(durations, model.durations)
    assert audio.shape == (600 * int(model.durations.sum()),)
    assert audio.dtype == np.float32 and np.isfinite(audio).all()
    assert float(np.abs(audio).max()) > 1e-3
    own = model.cpp.synthesize(model.phonemes, model.style, 1.0)["audio"]
    assert rel(audio, own) <= OP_BAR


# ============================================================================ helpers (and bad files)

def rewrite_activation(m, dst, activation: str):
    """The model's checkpoint converted again with kokoro.bert.activation set to `activation`
    (the converter itself maps only the names it knows)."""
    from dasllama.convert.kokoro import read_voices, read_vocab, write_kokoro
    from dasllama.convert.kokoro_torch import read_torch_model

    tensors, meta = read_torch_model(m.checkpoint, m.config)
    meta["kokoro.bert.activation"] = ("str", activation)
    packs = {}
    for p in m.voice_files:
        packs.update(read_voices(p))
    return write_kokoro(tensors, meta, packs, read_vocab(m.config), dst, name="kokoro")


def test_a_weight_of_another_type_is_a_typed_error_naming_it(model, tmp_path):
    """No converter writes F16 weights: a file with one is refused by name and type, not read
    as floats."""
    from dasllama import _core
    from dasllama.convert.kokoro import read_voices, read_vocab, write_kokoro
    from dasllama.convert.kokoro_torch import read_torch_model
    from dasllama.errors import FormatError

    tensors, meta = read_torch_model(model.checkpoint, model.config)
    tensors["bert_encoder.weight"] = ("F16", tensors["bert_encoder.weight"][1].astype(np.float16))
    packs = {}
    for p in model.voice_files:
        packs.update(read_voices(p))
    out = write_kokoro(tensors, meta, packs, read_vocab(model.config), tmp_path / "f16.gguf")
    with pytest.raises(FormatError, match=r"'bert_encoder\.weight' is F16"):
        _core.KokoroModel(str(out), 1)
