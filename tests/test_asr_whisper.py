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
# The int8 lane (CTranslate2's int8 numerics: one scale per weight row and per activation
# row, float32 attention) on tiny.en. One scale per row rounds more coarsely than blocks of
# 32 would; CTranslate2's own int8 encoder is as far from its float32 one on this window
# (rel-l2 4.6e-2, measured with ctranslate2 4.8.5).
BAR_INT8_ENC = 6e-2      # encoder output                              [4.6e-2]
BAR_INT8_LOGITS = 1.2e-1  # decoder logits, teacher forced             [9.8e-2]
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
    control = rel(ours, logits_cross_wrong_layer(s.ref, s.ref_enc, tokens))
    # 8-bit rows put the lane at a tenth of the wrong-layer control's distance [9.6e-1], so
    # its margin is 5x the bar, not check()'s 10x
    check("real int8 decoder logits", rel(ours, ref), BAR_INT8_LOGITS)
    assert control >= 5 * BAR_INT8_LOGITS, f"negative control {control:.2e}"
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


# =============================================================================================
# Temperature fallback and sampling on the real model (the rules themselves are compared with
# faster-whisper's function in test_asr_faster_whisper.py)
# =============================================================================================

class RecordingModel:
    """The C++ model with every generate call recorded: the prompt, the temperature, the beam
    size and best_of asked for, and the tokens and average log-probability it gave."""

    def __init__(self, model):
        self._model, self.calls = model, []

    def __getattr__(self, name):
        return getattr(self._model, name)

    def generate(self, prompt, *args):
        out = self._model.generate(prompt, *args)
        tokens = list(out[0])
        self.calls.append({"prompt": list(prompt), "beam_size": args[5], "temperature": args[8],
                           "best_of": args[9], "seed": args[10], "tokens": tokens,
                           "avg_logprob": out[1] / (len(tokens) + 1)})
        return out


@pytest.fixture(scope="module")
def real_asr(real_gguf):
    import dasllama
    return dasllama.ASR(real_gguf, n_threads=2)


def recorded(asr, clip, **options):
    asr.model = RecordingModel(asr.model)
    try:
        segments = list(asr.transcribe(speech(clip), **options)[0])
        return segments, asr.model.calls
    finally:
        asr.model = asr.model._model


def test_fallback_stops_at_zero_when_it_passes(real_asr):
    segments, calls = recorded(real_asr, "us_plain.flac", beam_size=1)
    assert [c["temperature"] for c in calls] == [0.0]
    assert segments and all(s.temperature == 0.0 for s in segments)


def test_fallback_tries_every_temperature_and_keeps_the_likeliest(real_asr):
    """compression_ratio_threshold=0 fails every result (a ratio is always above 0): all six
    temperatures are tried, sampling above 0 with beam size 1 and best_of candidates, and the
    result kept is the one of best average log-probability, with the last temperature."""
    from dasllama.asr import DEFAULT_TEMPERATURES
    segments, calls = recorded(real_asr, "us_plain.flac", beam_size=3, best_of=2,
                               compression_ratio_threshold=0.0)
    assert [c["temperature"] for c in calls] == list(DEFAULT_TEMPERATURES)
    assert [c["beam_size"] for c in calls] == [3, 1, 1, 1, 1, 1]
    assert all(c["best_of"] == 2 for c in calls)
    best = max(calls, key=lambda c: c["avg_logprob"])
    print("avg logprob by temperature:", [(c["temperature"], round(c["avg_logprob"], 3))
                                          for c in calls])
    assert segments and all(s.temperature == 1.0 for s in segments)
    kept = [t for s in segments for t in s.tokens]   # the window's tokens, cut in segments
    assert kept and kept == best["tokens"][:len(kept)]
    assert segments[0].avg_logprob == pytest.approx(best["avg_logprob"], abs=1e-12)


def test_a_silent_looking_window_is_not_retried(real_asr):
    """no_speech_threshold=0 makes every window look silent and log_prob_threshold=0 makes
    every result unlikely: the silence exception keeps the first result (no retry), and the
    no-speech skip then drops the window. Without the no-speech threshold (the control) the
    same unlikely results are retried at every temperature."""
    segments, calls = recorded(real_asr, "gb_fast.flac", best_of=1, no_speech_threshold=0.0,
                               log_prob_threshold=0.0)
    assert [c["temperature"] for c in calls] == [0.0] and segments == []
    segments, calls = recorded(real_asr, "gb_fast.flac", best_of=1, no_speech_threshold=None,
                               log_prob_threshold=0.0)
    assert len(calls) == 6 and segments


@pytest.mark.parametrize("reset_above, reset", [(0.5, True), (1.0, False)])
def test_a_hot_window_resets_the_next_prompt(real_asr, reset_above, reset):
    """Every window fails (compression threshold 0) and ends at temperature 1.0: above
    prompt_reset_on_temperature=0.5 the second window's prompt has no earlier text; at 1.0
    (not above) it keeps the first window's text after <|startofprev|>."""
    segments, calls = recorded(real_asr, "over_30s.flac", best_of=1,
                               compression_ratio_threshold=0.0,
                               prompt_reset_on_temperature=reset_above)
    first = [c for c in calls if c["prompt"][0] != real_asr.tokens["sot_prev"]]
    later = [c for c in calls if c not in first]
    assert len(calls) == 12 and segments[-1].seek > 0      # two windows, six tries each
    if reset:
        assert later == [] and all(c["prompt"] == calls[0]["prompt"] for c in calls)
    else:
        assert len(later) == 6 and all(c["prompt"][0] == real_asr.tokens["sot_prev"]
                                       for c in later)


def test_seeded_sampling_is_reproducible_and_seeds_differ(real_asr):
    """Sampling on one window: the same seed gives the same tokens; other seeds give other
    tokens; at a temperature near 0 sampling is greedy decoding (the control that the draw
    follows the softmax), while at 1.5 it is not."""
    m = real_asr.model
    cfg = real_asr.config
    window = np.zeros((cfg["n_mels"], cfg["n_frames"]), np.float32)
    x = speech("us_plain.flac")
    n = x.size // cfg["hop_length"]
    window[:, :n] = m.log_mel(x)[:, :n]
    m.encode(window)
    prompt = [real_asr.tokens["sot"]]
    suppress = real_asr.suppressed_tokens([-1])

    def sample(t, seed, best_of=1):
        tokens, sum_logprob, _ = m.generate(prompt, suppress, True, 50, cfg["n_text_ctx"], [],
                                            1, 1.0, 1.0, t, best_of, seed)
        return list(tokens), sum_logprob

    greedy, greedy_lp = m.generate(prompt, suppress, True, 50, cfg["n_text_ctx"])[:2]
    assert sample(0.8, 7) == sample(0.8, 7)
    assert sample(0.8, 7, best_of=3) == sample(0.8, 7, best_of=3)
    draws = {tuple(sample(0.8, seed)[0]) for seed in range(6)}
    print("distinct samples of 6 seeds at 0.8:", len(draws))
    assert len(draws) >= 3
    cold, cold_lp = sample(1e-4, 3)
    assert cold == list(greedy) and cold_lp == pytest.approx(greedy_lp, abs=1e-9)
    assert sample(1.5, 3)[0] != list(greedy)
    with pytest.raises(Exception, match="best_of 0 < 1"):
        sample(0.5, 1, best_of=0)


@pytest.mark.parametrize("options, message", [
    (dict(temperature=-0.2), "temperature -0.2"), (dict(temperature=float("nan")), "temperature"),
    (dict(temperature=[]), "temperature"), (dict(temperature="hot"), "temperature 'hot'"),
    (dict(temperature=[0.0, -1.0]), "temperature"), (dict(best_of=0), "best_of 0"),
    (dict(seed=-1), "seed -1")])
def test_bad_fallback_options_are_named(real_asr, options, message):
    from dasllama.asr import ASRError
    with pytest.raises(ASRError, match=message):
        real_asr.transcribe(np.zeros(16000, np.float32), **options)
