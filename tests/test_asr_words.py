"""Word timestamps (ASR.transcribe(word_timestamps=True)) against faster-whisper 1.2.1, and the
C++ alignment pass (csrc/asr/whisper/alignment) against its NumPy reference
(dasllama.reference.whisper_align).

faster-whisper runs the same model folders (tiny.en, base) in float32 on the same samples
(decoded once by dasllama.audio). Bars, from the differences measured here:

- words: the strings equal faster-whisper's exactly (measured: equal on every clip, greedy and
  beam 5, both models, with the VAD filter and with other punctuation sets).
- start and end: within BAR_TIME = 0.02 s, one encoder frame (a near-tie in the DTW between
  two float32 engines moves a boundary by a frame), and at least FRACTION_EXACT of the words
  exactly equal (measured: one boundary a frame off on over_30s with tiny.en, so 2 of its 88
  words, all others exact; base: all exact).
- probability: within BAR_PROB = 1e-3 (measured <= 6.1e-5; the text-token softmax of two
  float32 engines whose logits differ in the 5th digit).

The C++ alignment against the reference on the same encoder output: the DTW path exactly equal
(measured: equal), the aligned matrix within rel-l2 BAR_MATRIX (measured 1.5e-7),
the token probabilities within 1e-4. Negative controls: other heads, and the audio reversed in
time, move the path.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from requires import require

FIXTURES = Path(__file__).parent / "fixtures" / "asr"
CLIPS = ["us_plain.flac", "gb_fast.flac", "long_silences.flac", "over_30s.flac"]
BAR_TIME = 0.02 + 1e-9   # seconds: one encoder frame  [measured: 0.02 on 2 words, else 0]
FRACTION_EXACT = 0.95    # words whose start and end equal exactly  [measured: 86/88, else all]
BAR_PROB = 1e-3          # word probability, absolute  [measured <= 6.1e-5]
BAR_MATRIX = 1e-4        # C++ vs NumPy aligned matrix, rel-l2 (float32 vs float64)
BAR_TOKEN_PROB = 1e-4    # C++ vs NumPy text-token probabilities, absolute


# ------------------------------------------------------------------ engines

def _engines(real_model, tmp_path_factory, name: str):
    require("faster_whisper")
    import dasllama
    from dasllama.convert.whisper import convert_whisper
    from faster_whisper import WhisperModel

    folder = real_model(name)
    gguf = convert_whisper(folder, tmp_path_factory.mktemp("words") / f"{name}.gguf")
    ours = dasllama.ASR(gguf, n_threads=2)
    theirs = WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2)
    return ours, theirs, gguf


@pytest.fixture(scope="module")
def tiny(real_model, tmp_path_factory):
    return _engines(real_model, tmp_path_factory, "whisper-tiny.en")


@pytest.fixture(scope="module")
def base(real_model, tmp_path_factory):
    return _engines(real_model, tmp_path_factory, "whisper-base")


def samples(name: str):
    require("soundfile")
    from dasllama import audio

    return audio.load(FIXTURES / name)


def run_both(engines, clip: str, **options):
    ours, theirs, _ = engines
    a = samples(clip)
    options = dict(dict(beam_size=1, temperature=0.0, language="en"), **options)
    mine = list(ours.transcribe(a, word_timestamps=True, **options)[0])
    ref = list(theirs.transcribe(a, word_timestamps=True, **options)[0])
    return mine, ref


def assert_same_words(mine, ref) -> None:
    """Same segments (text, seek; times within the bar), same words, times and probabilities
    within the bars."""
    assert [s.text for s in mine] == [s.text for s in ref]
    assert [s.seek for s in mine] == [s.seek for s in ref]
    for a, b in zip(mine, ref):
        assert abs(a.start - b.start) <= BAR_TIME and abs(a.end - b.end) <= BAR_TIME, (a, b)
    ours = [w for s in mine for w in s.words]
    theirs = [w for s in ref for w in s.words]
    assert theirs, "faster-whisper gave no words"
    assert [w.word for w in ours] == [w.word for w in theirs]
    exact, worst_time, worst_prob = 0, 0.0, 0.0
    for a, b in zip(ours, theirs):
        d = max(abs(a.start - b.start), abs(a.end - b.end))
        worst_time = max(worst_time, d)
        worst_prob = max(worst_prob, abs(a.probability - b.probability))
        exact += d == 0
    print(f"{len(ours)} words: {exact} exact, time diff <= {worst_time:.3f} s, "
          f"probability diff <= {worst_prob:.2e}")
    assert worst_time <= BAR_TIME
    assert exact >= FRACTION_EXACT * len(ours)
    assert worst_prob <= BAR_PROB
    for s in mine:   # a segment with words spans them, as faster-whisper's do
        assert all(isinstance(w.start, float) and w.start <= w.end for w in s.words)


# ------------------------------------------------------------------ against faster-whisper

@pytest.mark.parametrize("clip", CLIPS)
def test_words_equal_faster_whisper_tiny(tiny, clip):
    assert_same_words(*run_both(tiny, clip))


@pytest.mark.parametrize("clip", ["us_plain.flac", "over_30s.flac"])
def test_words_equal_faster_whisper_base(base, clip):
    assert_same_words(*run_both(base, clip))


def test_words_with_beam_search_equal_faster_whisper(tiny):
    assert_same_words(*run_both(tiny, "gb_fast.flac", beam_size=5))


def test_words_with_the_vad_filter_equal_faster_whisper(tiny):
    """Word times mapped back from the speech chunks (each word inside its middle's chunk)."""
    mine, ref = run_both(tiny, "long_silences.flac", vad_filter=True)
    assert_same_words(mine, ref)


def test_punctuation_options_equal_faster_whisper(tiny):
    """Other punctuation sets change the words (the control: the default's differ) and equal
    faster-whisper's with the same sets."""
    options = dict(prepend_punctuations="", append_punctuations=".")
    mine, ref = run_both(tiny, "us_plain.flac", **options)
    assert_same_words(mine, ref)
    default, _ = run_both(tiny, "us_plain.flac")
    assert [w.word for s in mine for w in s.words] != [w.word for s in default for w in s.words]
    assert any(w.word == "," for s in mine for w in s.words)   # "," stays a word of its own


def test_hallucination_silence_threshold_equals_faster_whisper(tiny):
    """A clip of faint noise, then speech, with the no-speech skip off: the same segments and
    words as faster-whisper's with the option on and off (on these clips neither engine finds a
    hallucination to skip; the skipping rules are checked by hand below)."""
    rng = np.random.default_rng(3)
    speech = samples("us_plain.flac")
    noise = (rng.standard_normal(16000 * 8) * 0.003).astype(np.float32)
    clip = np.concatenate([noise, speech, noise])
    ours, theirs, _ = tiny
    for threshold in (None, 1.0):
        options = dict(beam_size=1, temperature=0.0, language="en", word_timestamps=True,
                       no_speech_threshold=None, hallucination_silence_threshold=threshold)
        mine = list(ours.transcribe(clip, **options)[0])
        ref = list(theirs.transcribe(clip, **options)[0])
        assert_same_words(mine, ref)


def _word(start, end, probability):
    return dict(word=" w", start=start, end=end, probability=probability)


def test_seeking_by_words_by_hand():
    """faster-whisper's seek rules after a window with words, values worked out by hand: a
    speech-like word (p 0.9, 0.5 s) scores 0; a word of p 0.01 lasting 0.05 s scores
    1 + 0.083 * 15 > 1, so a segment of it alone looks hallucinated."""
    from dasllama.asr_words import is_segment_anomaly, seek_by_words

    ts = 50363
    tokens = [ts, 1, ts + 5, ts + 5]   # ends on a timestamp pair: not a lone timestamp
    speech = dict(start=0.0, end=2.0, words=[_word(0.0, 0.5, 0.9), _word(1.5, 2.0, 0.9)])
    ghost = dict(start=10.0, end=10.5, words=[_word(10.0, 10.05, 0.01)])
    assert not is_segment_anomaly(speech) and is_segment_anomaly(ghost)
    common = dict(previous_seek=0, time_offset=0.0, segment_size=3000, per_frame=0.01,
                  n_window=3000, last_speech=0.0)
    # no threshold: the next window starts at the last word's end (10.05 s -> frame 1005)
    assert seek_by_words(tokens, ts, [speech, ghost], 3000, content_frames=5000,
                         threshold=None, **common) == (1005, [speech, ghost], False)
    # ... unless the output ended on a lone timestamp: the seek stays
    lone = [ts, 1, 2, ts + 5]
    assert seek_by_words(lone, ts, [speech, ghost], 3000, content_frames=5000,
                         threshold=None, **common)[0] == 3000
    # a hallucination between 8 s of silence and the window's end: cut, seek to its start
    assert seek_by_words(tokens, ts, [speech, ghost], 3000, content_frames=5000,
                         threshold=2.0, **common) == (1000, [speech], False)
    # ... and to the clip's end when less than the threshold of audio follows it
    assert seek_by_words(tokens, ts, [speech, ghost], 3000, content_frames=1100,
                         threshold=2.0, **common) == (1100, [speech], False)
    # a window that starts with a hallucination 10 s in: skip the silence, emit nothing
    assert seek_by_words(tokens, ts, [ghost], 3000, content_frames=5000, threshold=2.0,
                         **common) == (1000, [ghost], True)
    # speech alone: nothing skipped
    assert seek_by_words(tokens, ts, [speech], 3000, content_frames=5000, threshold=2.0,
                         **common) == (200, [speech], False)


BAR_INT8_TIME = 0.1    # s, int8 lane vs float32: 5 encoder frames  [measured: 0.06]


def test_int8_lane_words_follow_the_float32_lane(tiny):
    """The int8 lane's words equal the float32 lane's (measured: equal on gb_fast and
    long_silences; us_plain differs by one word, which tests/test_asr_faster_whisper.py's
    word error rate covers), their times within BAR_INT8_TIME: 8-bit activations move
    attention weights, so a boundary may move by a frame or two."""
    import dasllama

    ours, _, gguf = tiny
    int8 = dasllama.ASR(gguf, compute_type="int8", n_threads=2)
    for clip in ["gb_fast.flac", "long_silences.flac"]:
        a = samples(clip)
        f32 = [w for s in ours.transcribe(a, temperature=0.0, word_timestamps=True)[0]
               for w in s.words]
        q8 = [w for s in int8.transcribe(a, temperature=0.0, word_timestamps=True)[0]
              for w in s.words]
        assert f32 and [w.word for w in q8] == [w.word for w in f32]
        worst = max(max(abs(x.start - y.start), abs(x.end - y.end)) for x, y in zip(q8, f32))
        print(f"{clip}: int8 word times within {worst:.3f} s of float32's")
        assert worst <= BAR_INT8_TIME


def test_words_off_runs_no_alignment(tiny):
    """Word timestamps off: no words and no alignment pass (the stats' align clock stays)."""
    ours, _, _ = tiny
    before = ours.stats["align_seconds"]
    segments = list(ours.transcribe(samples("us_plain.flac"), temperature=0.0)[0])
    assert segments and all(s.words is None for s in segments)
    assert ours.stats["align_seconds"] == before
    list(ours.transcribe(samples("us_plain.flac"), temperature=0.0, word_timestamps=True)[0])
    assert ours.stats["align_seconds"] > before


# ------------------------------------------------------------------ C++ vs the NumPy reference

@pytest.fixture(scope="module")
def window(tiny):
    """(ours, reference model, encoder output, sot, text tokens, frames) of us_plain's window."""
    require("gguf")
    from dasllama.reference.whisper import ReferenceWhisper

    ours, _, gguf = tiny
    a = samples("us_plain.flac")
    segments = list(ours.transcribe(a, temperature=0.0)[0])
    eot = ours.tokens["eot"]
    text = [t for s in segments if s.seek == 0 for t in s.tokens if t < eot]
    mel = ours.model.log_mel(a)
    frames = min(3000, mel.shape[1] - 1)
    win = np.zeros((mel.shape[0], 3000), np.float32)
    win[:, :frames] = mel[:, :frames]
    enc = ours.model.encode(win)
    return ours, ReferenceWhisper(gguf), enc, [ours.tokens["sot"]], text, frames


def _rel_l2(a, b) -> float:
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def test_cpp_alignment_equals_the_reference(window):
    from dasllama.reference import whisper_align as ref_align

    ours, m, enc, sot, text, frames = window
    got = ours.model.align(sot, text, frames)
    ti, tm, probs = ref_align.align(m, enc, sot, text, frames)
    assert np.array_equal(got["text_indices"], ti) and np.array_equal(got["time_indices"], tm)
    assert np.abs(got["text_token_probs"] - probs).max() <= BAR_TOKEN_PROB
    flat = m.meta_ints("whisper.alignment_heads")
    heads = list(zip(flat[0::2], flat[1::2]))
    tokens = sot + [m.tok["no_timestamps"]] + text + [m.tok["eot"]]
    _, scores = ref_align.cross_scores(m, enc, tokens, heads)
    matrix = ref_align.alignment_matrix([scores[h] for h in heads], frames // 2)
    want = matrix[len(sot):len(sot) + len(text) + 1]
    err = _rel_l2(got["matrix"], want)
    print(f"aligned matrix rel-l2 {err:.2e}")
    assert got["matrix"].shape == want.shape and err <= BAR_MATRIX
    # negative controls: other heads, and the audio reversed in time
    other = ours.model.align(sot, text, frames, heads=[0, 0, 0, 1])
    assert _rel_l2(other["matrix"], want) > 100 * BAR_MATRIX
    assert not np.array_equal(other["time_indices"], tm)
    reversed_enc = np.ascontiguousarray(enc[:frames // 2][::-1])
    flipped = np.concatenate([reversed_enc, enc[frames // 2:]])
    ours.model.set_window(flipped)
    try:
        moved = ours.model.align(sot, text, frames)
    finally:
        ours.model.set_window(enc)
    assert not np.array_equal(moved["time_indices"], tm)


def test_dtw_and_median_filter_equal_the_reference():
    """Random matrices and integer ones (many ties: the tie order decides the path)."""
    from dasllama import _core
    from dasllama.reference import whisper_align as ref_align

    rng = np.random.default_rng(0)
    for shape in [(1, 1), (1, 9), (6, 1), (7, 40), (20, 33)]:
        for x in (rng.standard_normal(shape), rng.integers(0, 2, shape)):
            x = x.astype(np.float32)
            got = _core.WhisperModel.negative_dtw(x)
            assert [tuple(p) for p in got] == ref_align.negative_dtw(x)
    x = rng.standard_normal((5, 30)).astype(np.float32)
    for width in (1, 3, 7):
        assert np.array_equal(_core.WhisperModel.median_filter(x, width),
                              ref_align.median_filter(x, width))
    short = x[:, :3]
    assert np.array_equal(_core.WhisperModel.median_filter(short, 7), short)   # n <= width // 2
    # control: edges repeated instead of reflected give other values at the edges
    padded = np.pad(x, ((0, 0), (3, 3)), mode="edge")
    repeated = np.stack([np.median(padded[:, j:j + 7], axis=1) for j in range(30)], axis=1)
    assert not np.array_equal(_core.WhisperModel.median_filter(x, 7), repeated)
    # the path: monotonic, from (0, 0) to the last row and column
    path = _core.WhisperModel.negative_dtw(rng.standard_normal((9, 50)).astype(np.float32))
    assert tuple(path[0]) == (0, 0) and tuple(path[-1]) == (8, 49)
    assert np.all(np.diff(path, axis=0) >= 0)


def test_random_model_alignment_equals_the_reference(tmp_path):
    """The same on a random-weight model (another shape: 2 text layers, multilingual)."""
    require("gguf")
    from dasllama import _core
    from dasllama.convert.whisper import convert_whisper
    from dasllama.reference import whisper_align as ref_align
    from dasllama.reference.whisper import ReferenceWhisper
    from dasllama.testing.whisper import write_random_whisper_dir

    gguf = convert_whisper(write_random_whisper_dir(tmp_path / "rw", seed=2), tmp_path / "r.gguf")
    model = _core.WhisperModel(str(gguf), 1, "f32")
    c = model.config
    rng = np.random.default_rng(1)
    enc = rng.standard_normal((c["n_audio_ctx"], c["n_audio_state"])).astype(np.float32)
    model.set_window(enc)
    text = [int(t) for t in rng.integers(0, c["tokens"]["eot"], 12)]
    sot = [c["tokens"]["sot"]]
    frames = 2 * c["n_audio_ctx"] - 37
    got = model.align(sot, text, frames)
    ti, tm, probs = ref_align.align(ReferenceWhisper(gguf), enc, sot, text, frames)
    assert np.array_equal(got["text_indices"], ti) and np.array_equal(got["time_indices"], tm)
    assert np.abs(got["text_token_probs"] - probs).max() <= BAR_TOKEN_PROB


# ------------------------------------------------------------------ words from tokens

def test_word_splitting_equals_faster_whisper(base):
    """Space-prefixed pieces joined into words (English), and the character split of
    languages written without spaces, on the multilingual tokenizer."""
    require("faster_whisper")
    from dasllama.asr_words import split_to_word_tokens
    from faster_whisper.tokenizer import Tokenizer

    ours, theirs, _ = base
    eot = ours.tokens["eot"]
    for language, text in [("en", " Hello, world! It's 3.5 km (roughly)."),
                           ("fr", " L'été «déjà» fini—vraiment?"),
                           ("zh", " 今天天气很好，我们去公园吧。"),
                           ("ja", " 東京は晴れです、ね。")]:
        tokens = ours.encode_text(text) + [eot]
        mine = split_to_word_tokens(ours.decode_tokens, tokens, eot, language)
        ref = Tokenizer(theirs.hf_tokenizer, True, task="transcribe",
                        language=language).split_to_word_tokens(tokens)
        assert mine == ref, language
    # control: the character split is not the word split on English
    en = ours.encode_text(" Hello, world! It's roughly.") + [eot]
    assert split_to_word_tokens(ours.decode_tokens, en, eot, "zh") != \
        split_to_word_tokens(ours.decode_tokens, en, eot, "en")


def test_merge_punctuations_equals_faster_whisper():
    require("faster_whisper")
    from dasllama.asr_words import (DEFAULT_APPEND_PUNCTUATIONS, DEFAULT_PREPEND_PUNCTUATIONS,
                                    merge_punctuations)
    from faster_whisper.transcribe import merge_punctuations as theirs

    words = [" \"", "Hi", ",", " (", "there", ")", ".", " -", " ok", "?", "\"", " ¿", "no"]

    def alignment():
        return [dict(word=w, tokens=[i]) for i, w in enumerate(words)]

    for pre, app in [(DEFAULT_PREPEND_PUNCTUATIONS, DEFAULT_APPEND_PUNCTUATIONS), ("", ""),
                     ("(", ".,")]:
        a, b = alignment(), alignment()
        merge_punctuations(a, pre, app)
        theirs(b, pre, app)
        assert a == b, (pre, app)
    merged = alignment()
    merge_punctuations(merged, DEFAULT_PREPEND_PUNCTUATIONS, DEFAULT_APPEND_PUNCTUATIONS)
    assert merged != alignment()   # control: the defaults do merge


# ------------------------------------------------------------------ failure modes

def test_a_model_without_alignment_heads_is_a_clear_error(tmp_path):
    """CTranslate2 needs the field (faster-whisper raises without it; its converter writes the
    last half of the layers' heads when a source lacks them). A model without heads: word
    timestamps are an ASRError naming them; transcribing without words still works."""
    from dasllama import _core
    from dasllama.asr import ASR, ASRError
    from dasllama.convert.whisper import convert_whisper
    from dasllama.errors import DasllamaError
    from dasllama.testing.whisper import write_random_whisper_dir

    folder = write_random_whisper_dir(tmp_path / "rw", seed=4)
    config = json.loads((folder / "config.json").read_text())
    del config["alignment_heads"]
    (folder / "config.json").write_text(json.dumps(config))
    gguf = convert_whisper(folder, tmp_path / "noheads.gguf")
    asr = ASR(gguf, n_threads=1)
    audio = np.zeros(16000, np.float32)
    with pytest.raises(ASRError, match="no alignment heads"):
        asr.transcribe(audio, word_timestamps=True)
    list(asr.transcribe(audio, temperature=0.0)[0])
    model = _core.WhisperModel(str(gguf), 1, "f32")
    model.set_window(np.zeros((model.config["n_audio_ctx"], model.config["n_audio_state"]),
                              np.float32))
    with pytest.raises(DasllamaError, match="no alignment heads"):
        model.align([model.config["tokens"]["sot"]], [1, 2], 3000)


def test_bad_alignment_arguments_are_typed_errors(tmp_path):
    from dasllama import _core
    from dasllama.asr import ASR, ASRError
    from dasllama.convert.whisper import convert_whisper
    from dasllama.errors import DasllamaError
    from dasllama.testing.whisper import write_random_whisper_dir

    gguf = convert_whisper(write_random_whisper_dir(tmp_path / "rw", seed=6), tmp_path / "r.gguf")
    model = _core.WhisperModel(str(gguf), 1, "f32")
    c = model.config
    model.set_window(np.zeros((c["n_audio_ctx"], c["n_audio_state"]), np.float32))
    sot, eot = [c["tokens"]["sot"]], c["tokens"]["eot"]
    for kwargs, message in [
        (dict(text_tokens=[1, eot]), f"text token {eot} is not a text token"),
        (dict(heads=[c["n_text_layer"], 0]), "alignment head"),
        (dict(heads=[0]), "pairs"),
        (dict(median_filter_width=4), "median_filter_width 4"),
        (dict(num_frames=-2), "num_frames -2"),
        (dict(text_tokens=[1] * (c["n_text_ctx"] + 1)), "text context"),
    ]:
        args = dict(sot_sequence=sot, text_tokens=[1, 2], num_frames=3000)
        args.update(kwargs)
        with pytest.raises(DasllamaError, match=message):
            model.align(**args)
    assert model.align(sot, [], 3000)["text_indices"].size == 0   # no text: nothing to align
    one = model.align(sot, [1, 2], 1)   # no whole encoder frame of audio: all at 0
    assert list(one["time_indices"]) == [0, 0, 0]
    with pytest.raises(DasllamaError, match="negative_dtw"):
        _core.WhisperModel.negative_dtw(np.zeros(3, np.float32))
    asr = ASR(gguf, n_threads=1)
    for kwargs, message in [(dict(hallucination_silence_threshold=-1.0), "hallucination"),
                            (dict(prepend_punctuations=3), "prepend_punctuations 3")]:
        with pytest.raises(ASRError, match=message):
            asr.transcribe(np.zeros(16000, np.float32), word_timestamps=True, **kwargs)


# ------------------------------------------------------------------ the CLI

def test_cli_word_timestamps_write_words(tiny, tmp_path, capsys):
    from dasllama.cli import main

    ours, _, gguf = tiny
    clip = FIXTURES / "us_plain.flac"
    assert main(["transcribe", str(clip), "-m", str(gguf), "-f", "json", "--word-timestamps",
                 "--threads", "2"]) == 0
    body = json.loads(capsys.readouterr().out)
    words = [w for s in body["segments"] for w in s["words"]]
    want = [w for s in ours.transcribe(str(clip), word_timestamps=True)[0] for w in s.words]
    assert [(w["word"], w["start"], w["end"]) for w in words] == \
        [(w.word, w.start, w.end) for w in want]
    assert main(["transcribe", str(clip), "-m", str(gguf), "-f", "json", "--threads", "2"]) == 0
    assert all(s["words"] is None for s in json.loads(capsys.readouterr().out)["segments"])
