"""dasllama.ASR against faster-whisper 1.2.1 (CTranslate2) on the real tiny.en, float32 on
both sides, greedy (beam 1) and beam search (beam 5, and 3 with other patience and length
penalties) at temperature 0: identical transcripts, identical tokens, and
segment boundaries within 0.02 s, on the fixture clips (tests/fixtures/asr: espeak-ng voices
at several speeds, one with long silences, one over 30 s so that decoding seeks across
windows). Both get the same samples (decoded once by dasllama.audio), so only the models'
arithmetic differs.

Bars: avg_logprob and no_speech_prob are floats computed by two float32 engines; their
differences measured here are below 1e-4 (faster-whisper rounds nothing; the logits differ
in the 7th digit), so 2e-3 absolute leaves room for other CPUs' rounding.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from parity import assert_same_segments, word_error_rate
from requires import require

FIXTURES = Path(__file__).parent / "fixtures" / "asr"
CLIPS = ["us_plain.flac", "gb_fast.flac", "long_silences.flac", "over_30s.flac"]
BAR_LOGPROB = 2e-3   # avg_logprob and no_speech_prob, absolute  [measured below 1e-4]
BAR_TIME = 0.02      # segment start and end, seconds (one timestamp step)


@pytest.fixture(scope="module")
def engines(real_model, tmp_path_factory):
    require("faster_whisper")
    import dasllama
    from dasllama.convert.whisper import convert_whisper
    from faster_whisper import WhisperModel

    folder = real_model("whisper-tiny.en")
    gguf = convert_whisper(folder, tmp_path_factory.mktemp("fw") / "tiny.en.gguf")
    ours = dasllama.ASR(gguf, n_threads=2)
    theirs = WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2)
    return ours, theirs


def samples(name: str):
    require("soundfile")
    from dasllama import audio

    return audio.load(FIXTURES / name)


def run_both(engines, clip: str, beam_size: int = 1, **options):
    ours, theirs = engines
    a = samples(clip)
    mine = list(ours.transcribe(a, beam_size=beam_size, temperature=0.0, **options)[0])
    ref = list(theirs.transcribe(a, beam_size=beam_size, temperature=0.0, language="en",
                                 **options)[0])
    for s in ref:
        print(f"{clip} faster-whisper [{s.start:.2f} -> {s.end:.2f}] {s.text!r}")
    return mine, ref


def same(mine, ref) -> None:
    assert_same_segments(mine, ref, BAR_TIME, BAR_LOGPROB)


@pytest.mark.parametrize("clip", CLIPS)
def test_transcripts_equal_faster_whisper(engines, clip):
    mine, ref = run_both(engines, clip)
    assert ref, f"faster-whisper found no speech in {clip}"
    same(mine, ref)


@pytest.mark.parametrize("clip", ["us_plain.flac", "over_30s.flac"])
def test_without_timestamps_equal_faster_whisper(engines, clip):
    mine, ref = run_both(engines, clip, without_timestamps=True)
    same(mine, ref)


def test_without_previous_text_equal_faster_whisper(engines):
    mine, ref = run_both(engines, "over_30s.flac", condition_on_previous_text=False)
    same(mine, ref)


def test_initial_prompt_equal_faster_whisper(engines):
    mine, ref = run_both(engines, "us_plain.flac", initial_prompt="A fox and a dog.")
    same(mine, ref)


def test_suppressed_tokens_equal_faster_whisper(engines):
    """suppress_tokens=[-1] expands to faster-whisper's list (its non-speech tokens, which it
    finds by encoding symbols, plus the task and special tokens)."""
    require("tokenizers")
    from faster_whisper.tokenizer import Tokenizer
    from faster_whisper.transcribe import get_suppressed_tokens

    ours, theirs = engines
    tok = Tokenizer(theirs.hf_tokenizer, False, task="transcribe", language="en")
    assert ours.suppressed_tokens([-1]) == list(get_suppressed_tokens(tok, [-1]))
    assert ours.suppressed_tokens([13, 11]) == list(get_suppressed_tokens(tok, [13, 11]))


@pytest.mark.parametrize("clip", CLIPS)
def test_beam_search_transcripts_equal_faster_whisper(engines, clip):
    """beam_size 5 (patience 1, length_penalty 1: faster-whisper's defaults)."""
    mine, ref = run_both(engines, clip, beam_size=5)
    assert ref
    same(mine, ref)


@pytest.mark.parametrize("options", [dict(patience=2.0), dict(length_penalty=0.5),
                                     dict(without_timestamps=True)])
def test_beam_search_options_equal_faster_whisper(engines, options):
    mine, ref = run_both(engines, "us_plain.flac", beam_size=3, **options)
    same(mine, ref)


def test_long_clip_seeks_into_a_second_window(engines):
    mine, ref = run_both(engines, "over_30s.flac")
    same(mine, ref)
    assert mine[0].seek == 0 and mine[-1].seek > 0   # the test covers seeking


@pytest.mark.parametrize("options", [dict(prefix="Please remember"),
                                     dict(prefix="Please remember", without_timestamps=True),
                                     dict(suppress_blank=False),
                                     dict(max_initial_timestamp=0.2),
                                     dict(suppress_tokens=[])])
def test_decoding_options_equal_faster_whisper(engines, options):
    mine, ref = run_both(engines, "gb_fast.flac", **options)
    same(mine, ref)


def test_silence_and_noise_equal_faster_whisper(engines):
    """Silence and faint noise give no segments on both (the no-speech skip); with the skip
    off, both give the same output, whatever it is."""
    import numpy as np

    ours, theirs = engines
    rng = np.random.default_rng(0)
    for clip in (np.zeros(16000 * 5, np.float32),
                 (0.01 * rng.standard_normal(16000 * 5)).astype(np.float32)):
        mine = list(ours.transcribe(clip, temperature=0.0)[0])
        ref = list(theirs.transcribe(clip, beam_size=1, temperature=0.0, language="en")[0])
        assert mine == [] and ref == []
        mine = list(ours.transcribe(clip, temperature=0.0, no_speech_threshold=None)[0])
        ref = list(theirs.transcribe(clip, beam_size=1, temperature=0.0, language="en",
                                     no_speech_threshold=None)[0])
        print("no skip:", [s.text for s in ref])
        same(mine, ref)


# The int8 lane (CTranslate2's int8 numerics) against the float32 lane: measured here,
# identical words on three clips, WER 0.077 on us_plain (one word). The bar allows one word in twenty to differ on other CPUs
# (8-bit rounding moves logits by ~1e-2, enough to flip a near-tie).
BAR_INT8_WER = 0.05


def test_int8_lane_words_match_the_float32_lane(engines, real_model, tmp_path):
    import dasllama

    ours, _ = engines
    int8 = dasllama.ASR(ours.path, n_threads=2, compute_type="int8")
    assert int8.compute_type == "int8" and ours.compute_type == "f32"
    total_words, total_errors = 0, 0.0
    for clip in CLIPS:
        a = samples(clip)
        ref = " ".join(s.text for s in ours.transcribe(a, temperature=0.0)[0])
        hyp = " ".join(s.text for s in int8.transcribe(a, temperature=0.0)[0])
        wer = word_error_rate(hyp, ref)
        print(f"{clip}: int8 vs f32 WER {wer:.3f}")
        total_words += len(ref.split())
        total_errors += wer * len(ref.split())
    assert total_errors / total_words <= BAR_INT8_WER
    # control: the measure sees a dropped word
    assert word_error_rate("a b d", "a b c d") == 0.25


# =============================================================================================
# The temperature fallback
# =============================================================================================

@pytest.mark.parametrize("clip", ["us_plain.flac", "gb_fast.flac", "long_silences.flac"])
def test_default_temperatures_equal_faster_whisper_where_zero_passes(engines, clip):
    """With both engines' default temperature tuple (0, 0.2, ..., 1.0) and thresholds, a clip
    whose every window passes at temperature 0 on faster-whisper is decoded at 0 by both, so
    the transcripts are the parity lane's, exactly."""
    ours, theirs = engines
    a = samples(clip)
    mine = list(ours.transcribe(a, beam_size=1)[0])
    ref = list(theirs.transcribe(a, beam_size=1, language="en")[0])
    print(clip, [(s.temperature, round(s.avg_logprob, 3), round(s.compression_ratio, 3))
                 for s in ref])
    assert ref and all(s.temperature == 0.0 for s in ref), "the clip must pass at 0"
    same(mine, ref)
    assert [s.temperature for s in mine] == [s.temperature for s in ref]


@pytest.mark.parametrize("text", ["", "a", " The quick brown fox jumps over the lazy dog.",
                                  "la la la la la la la la la la la la la la la la la",
                                  "Ünïcödé → テキスト ✓ " * 7, "0123456789" * 30])
def test_compression_ratio_equals_faster_whisper(text):
    require("faster_whisper")
    from dasllama.asr import compression_ratio
    from faster_whisper.transcribe import get_compression_ratio

    assert compression_ratio(text) == get_compression_ratio(text)
    # control: the ratio sees repetition
    assert compression_ratio("la " * 40) > 2.4 > compression_ratio(" The quick brown fox.")


# Synthetic decodings for the rule comparison: per temperature, (text, sum_logprob, tokens,
# no_speech_prob). "rep" is repetitive (compression ratio far above 2.4).
_TEXTS = {"ok": " The meeting continues after a short pause.", "rep": " go" * 60,
          "ok2": " Please bring your umbrella tomorrow."}
_CASES = {
    "zero passes": {0.0: ("ok", -2.0, 8, 0.1)},
    "repetitive, then unlikely, then passes": {
        0.0: ("rep", -3.0, 8, 0.1), 0.2: ("ok", -20.0, 8, 0.1), 0.4: ("ok2", -4.0, 8, 0.1)},
    "every one repetitive": {t: ("rep", s, 8, 0.1) for t, s in
                             zip((0.0, 0.2, 0.4, 0.6, 0.8, 1.0), (-5, -3, -4, -3, -9, -7))},
    "the likeliest is repetitive": {
        0.0: ("rep", -1.0, 8, 0.1), 0.2: ("ok", -30.0, 8, 0.1), 0.4: ("ok2", -20.0, 8, 0.1),
        0.6: ("rep", -2.0, 8, 0.1), 0.8: ("ok", -25.0, 8, 0.1), 1.0: ("ok2", -40.0, 8, 0.1)},
    "unlikely but silent": {0.0: ("rep", -30.0, 8, 0.9)},
    "unlikely, not silent enough": {
        **{t: ("ok", -30.0, 8, 0.5) for t in (0.0, 0.2, 0.4, 0.6, 0.8)},
        1.0: ("ok2", -27.0, 8, 0.5)},
}
_THRESHOLDS = [dict(), dict(compression_ratio_threshold=None),
               dict(log_prob_threshold=None), dict(no_speech_threshold=None),
               dict(compression_ratio_threshold=None, log_prob_threshold=None)]


@pytest.mark.parametrize("thresholds", _THRESHOLDS, ids=lambda d: ",".join(d) or "defaults")
@pytest.mark.parametrize("case", list(_CASES))
def test_fallback_rules_equal_faster_whisper(case, thresholds):
    """dasllama.asr.decode_with_fallback against faster-whisper 1.2.1's own
    generate_with_fallback, both over the same synthetic decodings (faster-whisper's model
    replaced by a table): the same temperatures tried, the same result kept with the same
    temperature, average log-probability and compression ratio."""
    require("faster_whisper")
    import logging
    from types import SimpleNamespace

    from dasllama.asr import DEFAULT_TEMPERATURES, TranscriptionOptions, compression_ratio
    from dasllama.asr import decode_with_fallback
    from faster_whisper.transcribe import TranscriptionOptions as FwOptions
    from faster_whisper.transcribe import WhisperModel

    table = _CASES[case]
    temps = list(DEFAULT_TEMPERATURES)
    opts = {**dict(compression_ratio_threshold=2.4, log_prob_threshold=-1.0,
                   no_speech_threshold=0.6), **thresholds}
    names = list(_TEXTS)

    def row(t):      # a temperature the table does not name decodes as its last one
        return table.get(t, table[max(k for k in table if k <= t)])

    def tokens_of(t):
        text, _, n, _ = row(t)
        return [names.index(text)] * n

    tried_fw = []

    def fw_generate(encoder_output, prompts, **kw):
        t = kw.get("sampling_temperature", 0.0)
        tried_fw.append(t)
        _, sum_lp, n, ns = row(t)
        score = sum_lp / (n ** kw["length_penalty"])
        return [SimpleNamespace(sequences_ids=[tokens_of(t)], scores=[score],
                                no_speech_prob=ns)]

    fw_self = SimpleNamespace(model=SimpleNamespace(generate=fw_generate), max_length=448,
                              time_precision=0.02, logger=logging.getLogger("fw-test"))
    names_of = {i: _TEXTS[n] for i, n in enumerate(names)}
    tokenizer = SimpleNamespace(decode=lambda ids: names_of[ids[0]])
    fw_options = FwOptions(
        beam_size=5, best_of=5, patience=1.0, length_penalty=1.0, repetition_penalty=1.0,
        no_repeat_ngram_size=0, condition_on_previous_text=True,
        prompt_reset_on_temperature=0.5, temperatures=temps, initial_prompt=None, prefix=None,
        suppress_blank=True, suppress_tokens=[-1], without_timestamps=False,
        max_initial_timestamp=1.0, word_timestamps=False, prepend_punctuations="",
        append_punctuations="", multilingual=False, max_new_tokens=None, clip_timestamps="0",
        hallucination_silence_threshold=None, hotwords=None, **opts)
    ref = WhisperModel.generate_with_fallback(fw_self, None, [1], tokenizer, fw_options)

    tried = []

    def decode(i, t):
        tried.append(t)
        text, sum_lp, n, ns = row(t)
        return (tokens_of(t), sum_lp / (n + 1), ns, t, compression_ratio(_TEXTS[text].strip()))

    got = decode_with_fallback(decode, TranscriptionOptions(temperatures=tuple(temps), **opts))
    print(case, thresholds, "tried", tried, "kept", got, "fw", ref[1:])
    result, avg, temperature, ratio = ref
    assert tried == tried_fw
    assert got[0] == result.sequences_ids[0]
    assert got[1] == pytest.approx(avg, rel=1e-12)
    assert got[3] == temperature and got[4] == ratio
    if case == "unlikely but silent" and not thresholds:
        # control: a fallback without the silence exception would try every temperature here
        tried.clear()
        decode_with_fallback(decode, TranscriptionOptions(
            temperatures=tuple(temps), **{**opts, "no_speech_threshold": None}))
        assert tried == temps != tried_fw
