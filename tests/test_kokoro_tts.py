"""dasllama.kokoro's Python layer: voices and blends, input errors, chunked streaming and word
timestamps from the predicted durations. The chain under the layer here is the NumPy
reference (the C++ chain has its own parity tests), so these tests check what the layer adds:
which ids, style rows and speeds reach the chain, and what comes back out."""

import numpy as np
import pytest

from requires import require

from dasllama.errors import TTSInputError
from dasllama.kokoro_voices import PACK_ROWS, STYLE_WIDTH, parse_blend, resolve_voice
from dasllama.text.words import WordTime, align_words


# --- voices (no model) ----------------------------------------------------------------------

@pytest.fixture()
def packs():
    rng = np.random.default_rng(0)
    return {n: rng.normal(size=(PACK_ROWS, STYLE_WIDTH)).astype(np.float32)
            for n in ("af_bella", "af_sky", "jf_alpha")}


def test_parse_blend():
    assert parse_blend("af_bella") == [("af_bella", 1.0)]
    assert parse_blend("af_bella(2)+af_sky(1)") == [("af_bella", 2.0), ("af_sky", 1.0)]
    assert parse_blend(" a ( 0.5 ) + b ") == [("a", 0.5), ("b", 1.0)]
    with pytest.raises(TTSInputError, match="NAME or NAME"):
        parse_blend("a(2")
    with pytest.raises(TTSInputError, match="NAME or NAME"):
        parse_blend("a++b")


def test_blends_are_normalized_weighted_means(packs):
    a, b = packs["af_bella"].astype(np.float64), packs["af_sky"].astype(np.float64)
    np.testing.assert_allclose(resolve_voice("af_bella(2)+af_sky(1)", packs),
                               (2 * a + b) / 3, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(resolve_voice([("af_bella", 1), ("af_sky", 3)], packs),
                               (a + 3 * b) / 4, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(resolve_voice("jf_alpha", packs), packs["jf_alpha"])
    # the control: an unnormalized sum is not what comes out
    assert not np.allclose(resolve_voice("af_bella(2)+af_sky(1)", packs), 2 * a + b)


def test_style_arrays(packs):
    row = np.arange(STYLE_WIDTH, dtype=np.float32)
    out = resolve_voice(row, packs)
    assert out.shape == (PACK_ROWS, STYLE_WIDTH) and np.array_equal(out[0], row)
    assert np.array_equal(out[-1], row)
    kokoro_layout = packs["af_sky"][:, None, :]
    np.testing.assert_array_equal(resolve_voice(kokoro_layout, packs), packs["af_sky"])
    with pytest.raises(TTSInputError, match=r"shape \(3, 4\)"):
        resolve_voice(np.zeros((3, 4), np.float32), packs)
    with pytest.raises(TTSInputError, match="NaN"):
        resolve_voice(np.full(STYLE_WIDTH, np.nan, np.float32), packs)


def test_packs_of_another_width(packs):
    narrow = {"kitten_a": np.ones((400, 128), np.float32), "kitten_b": np.zeros((400, 128),
                                                                                np.float32)}
    out = resolve_voice("kitten_a+kitten_b", narrow)
    assert out.shape == (400, 128) and np.allclose(out, 0.5)
    assert resolve_voice(np.ones(128, np.float32), narrow).shape == (400, 128)
    with pytest.raises(TTSInputError, match=r"\(128,\) or \(400, 128\)"):
        resolve_voice(np.ones(256, np.float32), narrow)


@pytest.mark.parametrize("voice, says", [
    ("nobody", "unknown voice 'nobody'; known voices: af_bella, af_sky, jf_alpha"),
    ("af_bella(0)", "weights must be positive"),
    ([("af_bella", "2")], "not a \\(name, weight\\) pair"),
    ([], "give a name"),
    (3, "give a name"),
])
def test_bad_voices_name_what_is_accepted(packs, voice, says):
    with pytest.raises(TTSInputError, match=says):
        resolve_voice(voice, packs)


# --- word alignment (no model) --------------------------------------------------------------

def test_align_words_by_hand():
    words = [("Hello", "həlˈoʊ"), ("world.", "wˈɜːld")]
    chunk = "həlˈoʊ wˈɜːld."
    # frames: boundary 2, h ə l ˈ o ʊ = 1 each, space 3, w ˈ ɜ ː l d = 2 each, '.' 4, boundary 1
    d = np.array([2, 1, 1, 1, 1, 1, 1, 3, 2, 2, 2, 2, 2, 2, 4, 1])
    out = align_words(words, [chunk], [d], frame_seconds=0.025)
    # Hello: frames 2..8; world: 11..23 (after the space's 3 frames)
    assert out == [WordTime("Hello", 0.05, 0.2), WordTime("world.", 0.275, 0.575)]


def test_align_words_splits_joined_function_words_and_spans_chunks():
    words = [("in", "ɪn"), ("the", "ðə"), ("morning.", "mˈɔːɹnɪŋ")]
    chunks = ["ɪnðə", "mˈɔːɹnɪŋ."]
    d1 = np.array([1, 1, 1, 1, 1, 1])            # boundary, ɪ n ð ə, boundary: 6 frames
    d2 = np.array([1] + [2] * 8 + [3, 1])        # boundary, 8 phonemes x 2, '.', boundary
    out = align_words(words, chunks, [d1, d2], frame_seconds=1.0)
    assert out == [WordTime("in", 1.0, 3.0), WordTime("the", 3.0, 5.0),
                   WordTime("morning.", 7.0, 23.0)]
    with pytest.raises(ValueError, match="durations"):
        align_words(words, chunks, [d1[:-1], d2], frame_seconds=1.0)


def test_align_words_gives_an_unmatched_run_to_the_word_that_got_nothing():
    # espeak says "a" alone as ˈeɪ, in the sentence as ɐ: the ɐ is a's, not is's
    words = [("is", "ɪz"), ("a", "ˈeɪ"), ("test", "tˈɛst")]
    out = align_words(words, ["ɪz ɐ tˈɛst"], [np.ones(12, np.int64)], frame_seconds=1.0)
    assert out == [WordTime("is", 1.0, 3.0), WordTime("a", 4.0, 5.0),
                   WordTime("test", 6.0, 11.0)]


# --- the layer over a real chain ------------------------------------------------------------

class _ReferenceChain:
    """The NumPy reference behind KokoroTTS's chain interface, recording its calls."""

    def __init__(self, path):
        from dasllama.reference.kokoro import ReferenceKokoro

        self.ref = ReferenceKokoro(path)
        self.calls = []

    def synthesize(self, ids, style, speed):
        self.calls.append((list(ids), np.array(style), speed))
        out = self.ref.synthesize(ids, style, speed)
        return {"audio": out.audio, "durations": out.durations}


@pytest.fixture(scope="module")
def tts(real_model):
    require("phonemizer")
    real_model("kokoro")
    from dasllama.kokoro import KokoroTTS, resolve_model

    path = resolve_model("kokoro")
    return KokoroTTS(path, _chain=_ReferenceChain(path))


def test_speak_passes_the_plan_and_reports_words(tts):
    chain = tts.model
    chain.calls.clear()
    audio, sr = tts.speak("Hello world, this is a test.", voice="jf_alpha", speed=1.0)
    assert sr == 24000
    (ids, style, speed), = chain.calls
    chunk, = tts.plan("Hello world, this is a test.")
    assert ids == chunk.ids and speed == 1.0
    np.testing.assert_array_equal(style, tts._packs["jf_alpha"][len(ids) - 1])
    d = tts.stats["durations"][0]
    assert len(d) == len(ids) + 2 and len(audio) == 600 * int(d.sum())
    words = tts.stats["words"]
    assert [w.word for w in words] == ["Hello", "world,", "this", "is", "a", "test."]
    assert all(a.end <= b.start + 1e-9 for a, b in zip(words, words[1:]))
    assert all(w.end > w.start for w in words)
    assert words[-1].end <= len(audio) / sr


def test_input_errors_name_what_is_accepted(tts):
    with pytest.raises(TTSInputError, match=r"speed 5 is outside \[0.25, 4.0\]"):
        list(tts.stream("Hello.", speed=5))
    with pytest.raises(TTSInputError, match="empty"):
        tts.speak("   ")
    with pytest.raises(TTSInputError, match="unknown voice 'af_nobody'; known voices: jf_"):
        tts.speak("Hello.", voice="af_nobody")
    with pytest.raises(TTSInputError, match="voice name"):
        tts.register_voice("a+b", "jf_alpha")
