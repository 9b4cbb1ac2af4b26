"""The C++ Whisper chain (csrc/asr/whisper, _core.WhisperModel) against the NumPy reference
(dasllama.reference.whisper), stage by stage: log-mel, encoder output, decoder logits with
the reference's encoder output (teacher forcing), and greedy tokens.

Two models: a random-weight one (dasllama.testing.whisper, float32, small widths, Whisper's
audio sizes) for speed, and the real tiny.en (`dasllama pull whisper-tiny.en`, float16
weights). rel = ||ours - ref|| / ||ref||; tokens are exact.

Bars: the reference computes in float64, the C++ chain in float32 (float32 DFT by matmul,
float32 matmuls over the same weights), so the errors are float32 rounding. Measured here
(2 threads, x86-64 AVX2): mel 1.1e-6 real speech / 5e-8 random noise, encoder 7.0e-7 /
1.5e-7, logits 6.7e-7 / 1.6e-7. Each bar is a few times the larger measured error; each
negative control is a plausible bug whose error must pass its bar at least tenfold.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from parity import check, rel_l2 as rel
from requires import require

from dasllama import _core
from dasllama.convert.whisper import convert_whisper
from dasllama.reference.whisper import ReferenceWhisper

BAR_MEL = 4e-6       # log-mel of a clip                         [1.1e-6 real, 5e-8 random]
BAR_ENC = 2e-6       # encoder output of a window               [7.0e-7 real, 1.6e-7 random]
BAR_LOGITS = 2e-6    # decoder logits, teacher forced           [6.7e-7 real, 1.6e-7 random]
# The int8 lane (Q8_0 weights, 8-bit activations: rounding of ~0.4% per product) on tiny.en.
BAR_INT8_ENC = 6e-2      # encoder output                              [2.5e-2]
BAR_INT8_LOGITS = 8e-2   # decoder logits, teacher forced              [3.4e-2]
FIXTURES = Path(__file__).parent / "fixtures" / "asr"


# =============================================================================================
# Fixtures
# =============================================================================================

@pytest.fixture(scope="module")
def random_gguf(tmp_path_factory):
    from dasllama.testing.whisper import write_random_whisper_dir

    folder = write_random_whisper_dir(tmp_path_factory.mktemp("rw") / "model", seed=3)
    return convert_whisper(folder, folder.parent / "random-whisper.gguf")


@pytest.fixture(scope="module")
def real_gguf(real_model, tmp_path_factory):
    folder = real_model("whisper-tiny.en")
    return convert_whisper(folder, tmp_path_factory.mktemp("tiny") / "tiny.en.gguf")


def speech(name: str = "us_plain.flac") -> np.ndarray:
    require("soundfile")
    from dasllama import audio

    return audio.load(FIXTURES / name)


class Stages:
    """One model under both chains, with the reference's outputs cached per stage."""

    def __init__(self, path: Path, samples: np.ndarray):
        self.ours = _core.WhisperModel(str(path), 2)
        self.ref = ReferenceWhisper(path)
        self.samples = samples
        self.ref_mel = self.ref.log_mel(samples)
        self.window = self.ref.window(self.ref_mel)
        self.ref_enc = self.ref.encode(self.window)
        self.sot = self.ours.config["tokens"]["sot"]


@pytest.fixture(scope="module")
def random_stages(random_gguf):
    rng = np.random.default_rng(7)
    noise = (0.1 * rng.standard_normal(16000 * 4)).astype(np.float32)
    return Stages(random_gguf, noise)


@pytest.fixture(scope="module")
def real_stages(real_gguf):
    return Stages(real_gguf, speech())


def stages_of(request, which: str) -> Stages:
    return request.getfixturevalue(f"{which}_stages")


# =============================================================================================
# Controls: the reference with a plausible bug
# =============================================================================================

class ShiftedPositions(ReferenceWhisper):
    """The encoder's sinusoidal positions off by one row."""

    def w(self, name):
        out = super().w(name)
        return np.roll(out, 1, axis=0) if name == "enc.pos" else out


class NoPositions(ReferenceWhisper):
    """The encoder without its positions (a dropped term)."""

    def w(self, name):
        out = super().w(name)
        return 0 * out if name == "enc.pos" else out


def logits_cross_wrong_layer(ref: ReferenceWhisper, enc, tokens):
    """Decoder logits with each layer attending to the next layer's cross keys and values."""
    cross = ref.cross_kv(enc)
    return ref.decoder_step(tokens, [], cross[1:] + cross[:1])


# =============================================================================================
# Stages
# =============================================================================================

@pytest.mark.parametrize("which", ["random", "real"])
def test_log_mel_matches_reference(request, which):
    s = stages_of(request, which)
    mel = s.ours.log_mel(s.samples)
    assert mel.shape == s.ref_mel.shape == (80, s.samples.size // 160 + 1)
    shifted = np.roll(s.ref_mel, 1, axis=0)   # control: mel bins shifted by one
    check(f"{which} log-mel", rel(mel, s.ref_mel), BAR_MEL, rel(mel, shifted))


@pytest.mark.parametrize("which", ["random", "real"])
def test_encoder_matches_reference(request, which):
    s = stages_of(request, which)
    enc = s.ours.encode(s.window)
    assert enc.shape == (1500, s.ours.config["n_audio_state"])
    control = ShiftedPositions(s.ref.path).encode(s.window)
    check(f"{which} encoder", rel(enc, s.ref_enc), BAR_ENC, rel(enc, control))


@pytest.mark.parametrize("which", ["random", "real"])
def test_decoder_logits_match_reference(request, which):
    s = stages_of(request, which)
    ts = s.ours.config["tokens"]["timestamp_begin"]
    tokens = [s.sot, ts] + list(range(40, 52)) + [ts + 25]
    s.ours.set_window(s.ref_enc)
    ours = s.ours.decoder_logits(tokens)
    ref = s.ref.decoder_logits(s.ref_enc, tokens)
    assert ours.shape == ref.shape == (len(tokens), s.ours.config["n_vocab"])
    control = logits_cross_wrong_layer(s.ref, s.ref_enc, tokens)
    check(f"{which} decoder logits", rel(ours, ref), BAR_LOGITS, rel(ours, control))


def test_int8_lane_stays_near_the_reference(real_stages):
    s = real_stages
    int8 = _core.WhisperModel(str(s.ref.path), 2, "int8")
    enc = int8.encode(s.window)
    control = NoPositions(s.ref.path).encode(s.window)
    check("real int8 encoder", rel(enc, s.ref_enc), BAR_INT8_ENC, rel(enc, control))
    tokens = [s.sot, s.ours.config["tokens"]["timestamp_begin"]] + list(range(40, 52))
    int8.set_window(s.ref_enc)
    ours = int8.decoder_logits(tokens)
    ref = s.ref.decoder_logits(s.ref_enc, tokens)
    control = logits_cross_wrong_layer(s.ref, s.ref_enc, tokens)
    check("real int8 decoder logits", rel(ours, ref), BAR_INT8_LOGITS, rel(ours, control))
    with pytest.raises(Exception, match="compute type 'int4' is not one of"):
        _core.WhisperModel(str(s.ref.path), 1, "int4")


def test_decoder_cache_steps_equal_one_pass(random_stages):
    """Logits of tokens fed one at a time through the cache equal a one-pass run's rows: the
    self-attention cache and the once-per-window cross cache are reused, not recomputed."""
    s = random_stages
    tokens = [s.sot, 300, 12, 44, 310]
    s.ours.set_window(s.ref_enc)
    whole = s.ours.decoder_logits(tokens)
    cache: list = []
    cross = s.ref.cross_kv(s.ref_enc)
    steps = np.concatenate([s.ref.decoder_step([t], cache, cross) for t in tokens])
    check("stepwise reference vs one-pass C++", rel(whole, steps), BAR_LOGITS,
          rel(whole, np.roll(steps, 1, axis=0)))


@pytest.mark.parametrize("which", ["random", "real"])
def test_greedy_tokens_equal_reference(request, which):
    s = stages_of(request, which)
    cfg = s.ours.config
    suppress = cfg["suppress_ids"]
    max_length = 60 if which == "random" else 448
    ts = cfg["tokens"]["timestamp_begin"]
    s.ours.set_window(s.ref_enc)
    for prompt, prefix in (([s.sot], []), ([s.sot, cfg["tokens"]["no_timestamps"]], []),
                           ([s.sot], [ts, 40, 41]), ([s.sot, cfg["tokens"]["no_timestamps"]],
                                                     [44])):
        tokens, sum_logprob, no_speech = s.ours.generate(prompt, suppress, True, 50, max_length,
                                                         prefix)
        ref_tokens, info = s.ref.greedy(s.ref_enc, prompt, suppress_tokens=suppress,
                                        max_length=max_length, prefix=prefix)
        assert list(tokens[:len(prefix)]) == prefix
        print(f"{which} {prompt} + {prefix}: {len(tokens)} tokens, sum logprob {sum_logprob:.5f} "
              f"(reference {info.sum_logprob:.5f}), no-speech {no_speech:.3e}")
        assert list(tokens) == ref_tokens
        assert sum_logprob == pytest.approx(info.sum_logprob, rel=1e-4, abs=1e-4)
        assert no_speech == pytest.approx(info.no_speech_prob, rel=1e-3, abs=1e-7)


@pytest.mark.parametrize("which", ["random", "real"])
def test_beam_tokens_equal_reference(request, which):
    s = stages_of(request, which)
    cfg = s.ours.config
    suppress = cfg["suppress_ids"]
    max_length = 60 if which == "random" else 448
    s.ours.set_window(s.ref_enc)
    cases = [([s.sot], 5, 1.0, 1.0)]
    if which == "random":
        cases += [([s.sot, cfg["tokens"]["no_timestamps"]], 3, 2.0, 0.5), ([s.sot], 2, 1.0, 1.0)]
    for prompt, beam, patience, penalty in cases:
        tokens, sum_logprob, _ = s.ours.generate(prompt, suppress, True, 50, max_length, [],
                                                 beam, patience, penalty)
        ref_tokens, info = s.ref.beam(s.ref_enc, prompt, beam_size=beam, patience=patience,
                                      length_penalty=penalty, suppress_tokens=suppress,
                                      max_length=max_length)
        greedy, _, _ = s.ours.generate(prompt, suppress, True, 50, max_length)
        print(f"{which} beam {beam} patience {patience} penalty {penalty}: {len(tokens)} "
              f"tokens, sum logprob {sum_logprob:.5f} (reference {info.sum_logprob:.5f}); "
              f"greedy differs: {list(greedy) != list(tokens)}")
        assert list(tokens) == ref_tokens
        assert sum_logprob == pytest.approx(info.sum_logprob, rel=1e-4, abs=1e-4)


def test_real_greedy_output_follows_the_timestamp_rules(real_stages):
    """On speech the output opens with a timestamp no later than 1.0 s, timestamps come in
    pairs except the last, and never decrease."""
    s = real_stages
    cfg = s.ours.config
    ts = cfg["tokens"]["timestamp_begin"]
    s.ours.set_window(s.ref_enc)
    tokens, _, _ = s.ours.generate([s.sot], cfg["suppress_ids"], True, 50, 448)
    assert ts <= tokens[0] <= ts + 50
    stamps = [t for t in tokens if t >= ts]
    assert stamps == sorted(stamps) and len(stamps) >= 2
    text = [t for t in tokens if t < ts]
    assert text and not any(t in cfg["suppress_ids"] for t in text)


# =============================================================================================
# Bad input
# =============================================================================================

def test_bad_shapes_and_tokens_raise_typed_errors(random_stages):
    from dasllama.errors import ShapeError

    m = random_stages.ours
    with pytest.raises(ShapeError, match=r"encode: window: expected float32 \[80, 3000\]"):
        m.encode(np.zeros((80, 2999), np.float32))
    with pytest.raises(ShapeError, match="log_mel: audio must be 1-D"):
        m.log_mel(np.zeros((2, 100), np.float32))
    m.set_window(random_stages.ref_enc)
    with pytest.raises(ShapeError, match="token id 99999 is outside the vocabulary"):
        m.decoder_logits([random_stages.sot, 99999])
    with pytest.raises(ShapeError, match="no <\\|startoftranscript\\|>"):
        m.generate([5, 6], [], True, 50, 0)
    with pytest.raises(ShapeError, match="pass the text context of 448"):
        m.decoder_logits([random_stages.sot] * 449)


def test_a_file_that_is_not_whisper_is_refused(tmp_path, random_gguf, monkeypatch):
    import dasllama.convert.whisper as cw
    from dasllama.errors import GGUFError

    bad = tmp_path / "x.gguf"
    bad.write_bytes(b"not a gguf at all")
    with pytest.raises(GGUFError):
        _core.WhisperModel(str(bad), 1)
    # A Whisper GGUF without one tensor: the error names the file and the tensor.
    full = cw._tensor_map
    monkeypatch.setattr(cw, "_tensor_map", lambda wd: [
        t for t in full(wd) if t[0] != "enc.blk.1.mlp.fc2.bias"])
    cut = cw.convert_whisper(random_gguf.parent / "model", tmp_path / "cut.gguf")
    with pytest.raises(GGUFError, match="cut.gguf: tensor 'enc.blk.1.mlp.fc2.bias' is missing"):
        _core.WhisperModel(str(cut), 1)
