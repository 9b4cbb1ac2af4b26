"""hexgrad's PyTorch Kokoro (the `kokoro` package's modules) converted to a float32 GGUF and run
by the NumPy reference, stage by stage, against the package's own modules on random weights:
at Kokoro-82M's shapes (the published config) and at a Kitten-like small config (ALBERT with its
own embedding size and the tanh GELU, smaller hidden and style widths, a smaller decoder).

Each stage starts from PyTorch's input to that stage, so an error is the stage's own: ALBERT
(d_en), the duration encoder (d), the durations (exact), F0 and N, the text encoder, the decoder,
the harmonic source and its STFT, and the generator (from PyTorch's source spectrum, SineGen's
random phases and noises drawn as zeros). Kokoro-82M also runs the whole chain through KModel.

Bars: float32 arithmetic on both sides, different summation orders (and MLAS-form logistic and
tanh in the reference's LSTMs); each bar is a few times the error measured here (printed), and
each stage has a negative control (one ALBERT layer too few, the other GELU, an LSTM's two
directions swapped, the style halves swapped) that must miss the bar by CONTROL_RATIO.
"""

import numpy as np
import pytest

import kokoro_torch_models as km
from requires import require

CONTROL_RATIO = 10     # a negative control must miss its bar by this factor
ALBERT_BAR = 2e-6      # d_en (measured 2.7e-7 Kitten-like, 7.2e-7 Kokoro-82M)
GELU_BAR = 2e-6        # d_en with the file's activation (the erf GELU: 8.9e-5, 2.4e-4)
STAGE_BAR = 1e-5       # d, F0 / N, the text encoder (measured 2.3e-7 to 3.8e-6)
DECODER_BAR = 1e-5     # the decoder's output (measured 1.7e-6, 2.1e-6)
SOURCE_BAR = 3e-3      # the harmonic source (measured 2.4e-4, 4.9e-4; 1e-3 over 42k samples:
                       # the 9th harmonic's phase reaches ~1.6e4 rad, a float32 step 2e-3 rad)
SPECTRUM_BAR = 2e-6    # the source's STFT magnitude (measured 2.3e-7, 2.8e-7)
PHASE_DEFINED = 1e-3   # a bin's phase is compared where its magnitude exceeds this (of the max)
PHASE_BAR = 1e-3       # radians (measured 1.4e-4, 1.5e-4)
AUDIO_BAR = 1e-5       # the generator's audio from PyTorch's source spectrum (1e-6)
CHAIN_BAR = 1e-5       # KModel's audio from the phoneme ids, F0 voiced (measured 9.1e-7)
PHONEMES = "həlˈoʊ wˈɜːld, ðɪs ɪz ɐ tˈɛst."   # 25 ids with the boundaries
SHORT_PHONEMES = "hˈaɪ ðɛɹ."                      # 11: Kokoro-82M's reference is slow
SPEED = 1.0


def rel(a, b) -> float:
    a = np.asarray(a, np.float64).ravel()
    b = np.asarray(b, np.float64).ravel()
    assert a.shape == b.shape, (a.shape, b.shape)
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


class Model:
    """The package's modules, the converted file's reference, and PyTorch's stage outputs."""

    def __init__(self, name, cfg, parts, ref, folder, phonemes):
        torch = require("torch")
        self.name, self.cfg, self.parts, self.ref, self.folder = name, cfg, parts, ref, folder
        vocab = km.vocab()
        self.phonemes = [vocab[c] for c in phonemes if c in vocab]
        self.ids = np.array([0, *self.phonemes, 0], np.int64)
        self.style = ref.voice("voice0")[len(self.phonemes) - 1]
        self.split = ref.style_split[0]
        self.s_dec, self.s_pred = self.style[:self.split], self.style[self.split:]
        self.swapped = np.concatenate([self.s_pred, self.s_dec])   # the style halves swapped
        t = torch.from_numpy
        p = parts
        ids = t(self.ids)[None]
        n = ids.shape[1]
        lengths = torch.tensor([n])
        mask = torch.zeros(1, n, dtype=torch.bool)
        s_pred, s_dec = t(self.s_pred)[None], t(self.s_dec)[None]
        o = {}
        with torch.no_grad():
            bert = p["bert"](ids, attention_mask=torch.ones_like(ids))
            o["d_en"] = p["bert_encoder"](bert)[0]                              # (T, hid)
            d = p["predictor"].text_encoder(o["d_en"].T[None], s_pred, lengths, mask)
            o["d"] = d[0]                                                      # (T, hid+sty)
            x, _ = p["predictor"].lstm(d)
            total = torch.sigmoid(p["predictor"].duration_proj(x)).sum(axis=-1) / SPEED
            o["durations"] = torch.round(total).clamp(min=1).long()[0]
            aln = torch.from_numpy(ref_alignment(o["durations"].numpy()))[None]
            o["en"] = (d.transpose(-1, -2) @ aln)[0]
            f0, nn_ = p["predictor"].F0Ntrain(o["en"][None], s_pred)
            o["f0"], o["n"] = f0[0], nn_[0]
            o["t_en"] = p["text_encoder"](ids, lengths, mask)[0]                 # (hid, T)
            o["asr"] = o["t_en"] @ aln[0]
            o["decoded"] = _decoder_body(p["decoder"], o["asr"][None], f0, nn_, s_dec)[0]
        self.o = {k: v.numpy() for k, v in o.items()}
        # the generator is fed a voiced-and-unvoiced F0 curve (random weights' F0 is near
        # zero: all unvoiced, a source without harmonics)
        frames = self.o["f0"].shape[0]
        curve = 120 + 40 * np.sin(np.arange(frames) / 3.0)
        curve[frames // 3:frames // 3 + 3] = 0.0
        self.gen_f0 = curve.astype(np.float32)
        self.o.update(self.source_of(self.gen_f0))

    def generator_audio(self) -> np.ndarray:
        """PyTorch's generator on the decoder's output and gen_f0 (noise pinned)."""
        torch = require("torch")
        t = torch.from_numpy
        with torch.no_grad(), km.pinned_source(torch):
            return self.parts["decoder"].generator(
                t(self.o["decoded"])[None], t(self.s_dec)[None], t(self.gen_f0)[None]
            ).reshape(-1).numpy()

    def source_of(self, f0: np.ndarray) -> dict:
        """The generator's harmonic source for an F0 curve as PyTorch computes it (noise
        pinned): the source, its STFT magnitude and phase, and har = [magnitude; phase]."""
        torch = require("torch")
        g = self.parts["decoder"].generator
        with torch.no_grad(), km.pinned_source(torch):
            f0_up = g.f0_upsamp(torch.from_numpy(f0)[None, None]).transpose(1, 2)
            source, _, _ = g.m_source(f0_up)
            source = source.transpose(1, 2).squeeze(1)
            spec, phase = g.stft.transform(source)
        return {"source": source[0].numpy(), "spec": spec[0].numpy(),
                "phase": phase[0].numpy(), "har": torch.cat([spec, phase], dim=1)[0].numpy()}


def ref_alignment(durations):
    from dasllama.reference.kokoro import alignment

    return alignment(durations)


def _decoder_body(dec, asr, f0_curve, n, s):
    """Decoder.forward up to the generator (the package's code path, step by step)."""
    import torch

    f0 = dec.F0_conv(f0_curve.unsqueeze(1))
    n = dec.N_conv(n.unsqueeze(1))
    x = dec.encode(torch.cat([asr, f0, n], axis=1), s)
    asr_res = dec.asr_res(asr)
    res = True
    for block in dec.decode:
        if res:
            x = torch.cat([x, asr_res, f0, n], axis=1)
        x = block(x, s)
        if block.upsample_type != "none":
            res = False
    return x


def _make(name, tmp_path_factory):
    from dasllama.convert.kokoro_torch import convert_kokoro_torch
    from dasllama.reference.kokoro import ReferenceKokoro

    cfg = km.KOKORO_82M if name == "kokoro-82m" else km.KITTEN_LIKE
    parts = km.build(cfg, seed=1234, kitten_decoder=(name == "kitten-like"))
    folder = tmp_path_factory.mktemp(name)
    ckpt, config, voices = km.save(parts, cfg, folder)
    out = convert_kokoro_torch(ckpt, config, voices, folder / "model.gguf")
    return Model(name, cfg, parts, ReferenceKokoro(out), folder,
                 SHORT_PHONEMES if name == "kokoro-82m" else PHONEMES)


@pytest.fixture(scope="module")
def kitten(tmp_path_factory):
    return _make("kitten-like", tmp_path_factory)


@pytest.fixture(scope="module")
def kokoro82m(tmp_path_factory):
    return _make("kokoro-82m", tmp_path_factory)


def _swap_directions(ref, name):
    """The reference with one LSTM's forward and backward weights exchanged."""
    w = ref.w
    return km.with_weights(ref, **{f"{name}.{k}": np.ascontiguousarray(w[f"{name}.{k}"][::-1])
                                   for k in ("weight_ih", "weight_hh", "bias")})


# ------------------------------------------------------------------------------------ stages
# Each check returns (what, error, bar, control error): the control must miss the bar by
# CONTROL_RATIO. The Kitten-like model runs each as its own test; Kokoro-82M runs them all in
# one test (its reference is slow), with the whole chain.

def check_albert(m):
    err = rel(m.ref.albert(m.ids), m.o["d_en"])
    layers = m.ref.meta["kokoro.bert.layers"]
    short = km.with_weights(m.ref, meta={"kokoro.bert.layers": layers - 1}).albert(m.ids)
    return "d_en (control: one layer too few)", err, ALBERT_BAR, rel(short, m.o["d_en"])


def check_albert_activation(m):
    assert m.ref.meta["kokoro.bert.activation"] == "gelu_new"   # both configs' hidden_act
    other = km.with_weights(m.ref, meta={"kokoro.bert.activation": "gelu"}).albert(m.ids)
    return ("d_en with gelu_new (control: the erf GELU)", rel(m.ref.albert(m.ids), m.o["d_en"]),
            GELU_BAR, rel(other, m.o["d_en"]))


def check_albert_erf_gelu(m):
    """A model whose config names the erf GELU ("gelu"): the package's ALBERT layer with that
    activation against the reference told so by the file (the converter maps the name;
    test_kokoro_torch_convert checks the mapping)."""
    torch = require("torch")
    from transformers.activations import ACT2FN

    layer = m.parts["bert"].encoder.albert_layer_groups[0].albert_layers[0]
    tanh_form = layer.activation
    layer.activation = ACT2FN["gelu"]
    try:
        ids = torch.from_numpy(m.ids)[None]
        with torch.no_grad():
            want = m.parts["bert_encoder"](m.parts["bert"](
                ids, attention_mask=torch.ones_like(ids)))[0].numpy()
    finally:
        layer.activation = tanh_form
    erf = km.with_weights(m.ref, meta={"kokoro.bert.activation": "gelu"})
    return ("d_en with the erf GELU (control: the tanh form)", rel(erf.albert(m.ids), want),
            GELU_BAR, rel(m.ref.albert(m.ids), want))


def check_duration_encoder(m):
    err = rel(m.ref.duration_encoder(m.o["d_en"], m.s_pred), m.o["d"])
    swapped = _swap_directions(m.ref, "predictor.text_encoder.lstms.0")
    control = rel(swapped.duration_encoder(m.o["d_en"], m.s_pred), m.o["d"])
    return "d (control: first LSTM's directions swapped)", err, STAGE_BAR, control


def check_durations(m):
    got = m.ref.durations(m.o["d"], SPEED)
    want = m.o["durations"]
    other = m.ref.durations(m.ref.duration_encoder(m.o["d_en"], m.s_dec[:len(m.s_pred)]), SPEED)
    print(f"{m.name}: durations {want.tolist()}; {int((got != want).sum())} differ; with the "
          f"other style half {int((other != want).sum())} differ")
    assert not np.array_equal(other, want)
    return "durations, count differing (exact)", int((got != want).sum()), 0, None


def check_f0_energy(m):
    f0, n = m.ref.f0_energy(m.o["en"], m.s_pred)
    cf0, _ = m.ref.f0_energy(m.o["en"], m.s_dec[:len(m.s_pred)])
    return ("F0 and N (control: the other style half)",
            max(rel(f0, m.o["f0"]), rel(n, m.o["n"])), STAGE_BAR, rel(cf0, m.o["f0"]))


def check_text_encoder(m):
    err = rel(m.ref.text_encoder(m.ids).T, m.o["t_en"])
    swapped = _swap_directions(m.ref, "text_encoder.lstm")
    return ("text encoder (control: LSTM directions swapped)", err, STAGE_BAR,
            rel(swapped.text_encoder(m.ids).T, m.o["t_en"]))


def check_decoder(m):
    err = rel(m.ref.decoder(m.o["asr"], m.o["f0"], m.o["n"], m.s_dec), m.o["decoded"])
    control = rel(m.ref.decoder(m.o["asr"], m.o["f0"], m.o["n"], m.s_pred[:len(m.s_dec)]),
                  m.o["decoded"])
    return "decoder (control: the other style half)", err, DECODER_BAR, control


def check_source(m):
    err = rel(m.ref.harmonic_source(m.gen_f0), m.o["source"])
    late = rel(m.ref.harmonic_source(np.roll(m.gen_f0, 1)), m.o["source"])
    return "harmonic source (control: F0 a frame late)", err, SOURCE_BAR, late


def check_spectrum(m):
    spec = m.ref.stft(m.o["source"])
    bins = spec.shape[0] // 2
    defined = m.o["spec"] > PHASE_DEFINED * m.o["spec"].max()   # elsewhere the phase is noise
    phase = np.abs(np.angle(np.exp(1j * (spec[bins:] - m.o["phase"]))))[defined]
    print(f"{m.name}: STFT phase max diff {phase.max():.1e} rad over {defined.mean():.0%} of "
          "the bins")
    assert phase.max() <= PHASE_BAR
    return "source STFT magnitude", rel(spec[:bins], m.o["spec"]), SPECTRUM_BAR, None


def check_generator(m):
    want = m.generator_audio()
    audio = m.ref.generator(m.o["decoded"], m.s_dec, m.gen_f0, m.o["har"])
    control = m.ref.generator(m.o["decoded"], m.s_pred[:len(m.s_dec)], m.gen_f0, m.o["har"])
    return ("generator audio from PyTorch's source spectrum (control: the other style half)",
            rel(audio, want), AUDIO_BAR, rel(control, want))


def check_chain(m):
    """The whole chain: KModel (loading the saved checkpoint) against the reference's
    synthesize from the same phoneme ids, style row and speed. KModel takes the style's
    halves at 128, which is Kokoro-82M's style width."""
    torch = require("torch")
    _, _, model = km.kokoro_modules()
    kmodel = model.KModel(repo_id="hexgrad/Kokoro-82M", config=dict(m.cfg, vocab=km.vocab()),
                          model=str(m.folder / "model.pth")).eval()
    # both sides' F0 raised by km.VOICED_F0 (its last projection's bias), so the source is
    # voiced: an unvoiced one leaves the generator ill-conditioned
    bias = "predictor.F0_proj.bias"
    with torch.no_grad():
        kmodel.predictor.F0_proj.bias += km.VOICED_F0
    ref = km.with_weights(m.ref, **{bias: m.ref.w[bias] + np.float32(km.VOICED_F0)})
    # the source spectrum from PyTorch for the F0 KModel's generator is given: the source's
    # phases integrate F0 over every sample, so F0's last bits move the STFT phases
    seen = {}
    hook = kmodel.decoder.generator.register_forward_pre_hook(
        lambda _, args: seen.update(f0=args[2].detach().numpy().ravel().copy()))
    ids = torch.from_numpy(m.ids)[None]
    try:
        with torch.no_grad(), km.pinned_source(torch):
            audio, dur = kmodel.forward_with_tokens(ids, torch.from_numpy(m.style)[None], SPEED)
    finally:
        hook.remove()
    har = m.source_of(seen["f0"])["har"]
    out = ref.synthesize(m.phonemes, m.style, SPEED, har=har)
    assert np.array_equal(out.durations, dur.numpy())
    control = ref.synthesize(m.phonemes, m.swapped, SPEED, durations=out.durations, har=har)
    return ("KModel audio (control: style halves swapped)", rel(out.audio, audio.numpy()),
            CHAIN_BAR, rel(control.audio, audio.numpy()))


def _assert(m, result):
    what, err, bar, control = result
    print(f"{m.name}: {what}: {err:.2g} (bar {bar:g})"
          + ("" if control is None else f"; control {control:.2e}"))
    assert err <= bar, what
    if control is not None:
        assert control >= CONTROL_RATIO * bar, what


KITTEN_CHECKS = (check_albert, check_albert_activation, check_albert_erf_gelu,
                 check_duration_encoder,
                 check_durations, check_f0_energy, check_text_encoder, check_decoder,
                 check_source, check_spectrum, check_generator)


@pytest.mark.parametrize("check", KITTEN_CHECKS, ids=lambda c: c.__name__[len("check_"):])
def test_kitten_like_stage(kitten, check):
    _assert(kitten, check(kitten))


def test_kokoro_82m_every_stage_and_the_whole_chain(kokoro82m):
    """Kokoro-82M's shapes: every stage as above but the generator alone (the whole chain
    covers it), then KModel end to end."""
    failures = []
    for check in KITTEN_CHECKS[:-1] + (check_chain,):
        try:
            _assert(kokoro82m, check(kokoro82m))
        except AssertionError as e:
            failures.append(f"{check.__name__}: {e}")
    assert not failures, failures
