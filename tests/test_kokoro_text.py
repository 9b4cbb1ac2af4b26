"""The phoneme TTS text front end: normalization, espeak-ng phonemes, ids, chunking under the
510-phoneme limit and the voice-row rule."""

import pytest

from requires import require

from dasllama.errors import TTSInputError
from dasllama.text import MAX_PHONEMES, normalize, split_phonemes, voice_row
from dasllama.text.normalize import number_words, ordinal_words, year_words
from dasllama.text.phonemize import EspeakPhonemizer, ids_to_phonemes, phoneme_ids


@pytest.mark.parametrize("n, words", [
    (0, "zero"), (7, "seven"), (13, "thirteen"), (40, "forty"), (42, "forty-two"),
    (100, "one hundred"), (342, "three hundred forty-two"), (1000, "one thousand"),
    (1001, "one thousand one"), (2_500_000, "two million five hundred thousand")])
def test_number_words(n, words):
    assert number_words(n) == words


def test_ordinals_and_years():
    assert [ordinal_words(n) for n in (1, 2, 3, 5, 12, 20, 21, 101)] == [
        "first", "second", "third", "fifth", "twelfth", "twentieth", "twenty-first",
        "one hundred first"]
    assert year_words(1984) == "nineteen eighty-four"
    assert year_words(2005) == "two thousand five"
    assert year_words(2024) == "twenty twenty-four"
    assert year_words(1900) == "nineteen hundred"
    assert year_words(1905) == "nineteen oh five"


@pytest.mark.parametrize("text, spoken", [
    ("Dr. Smith met Mr. Jones.", "Doctor Smith met Mister Jones."),
    ("It costs $3.50.", "It costs three dollars and fifty cents."),
    ("It costs $1.", "It costs one dollar."),
    ("£2.01 each", "two pounds and one penny each"),
    ("$2 million", "two million dollars"),
    ("We met on 2024-03-15.", "We met on March fifteenth, twenty twenty-four."),
    ("On March 3rd, 1999 it rained.", "On March third, nineteen ninety-nine it rained."),
    ("At 9:05 and 7:00 PM.", "At nine oh five and seven P M."),
    ("It is 10:00.", "It is ten o'clock."),
    ("Run 10 km in 45min.", "Run ten kilometers in forty-five minutes."),
    ("5 in the box", "five in the box"),                    # 'in' is a word here, not inches
    ("It weighs 1kg.", "It weighs one kilogram."),
    ("42% of 1,234 people", "forty-two percent of one thousand two hundred thirty-four people"),
    ("Pi is 3.14.", "Pi is three point one four."),
    ("the 21st century", "the twenty-first century"),
    ("3-5 days", "three to five days"),
    ("e.g. this, i.e. that", "for example this, that is that"),
    ("call 5551234567890123", "call five five five one two three four five six seven eight nine "
                              "zero one two three"),
    ("  no   numbers here ", "no numbers here"),
])
def test_normalize(text, spoken):
    assert normalize(text) == spoken


def test_split_prefers_sentences_then_clauses_then_words():
    s1, s2 = "a" * 200 + ".", "b" * 200 + "."
    assert split_phonemes(f"{s1} {s2}", limit=300) == [s1, s2]
    c1, c2 = "c" * 200 + ",", "d" * 200 + "."
    assert split_phonemes(f"{c1} {c2}", limit=300) == [c1, c2]      # no sentence end: a comma
    words = " ".join(["word"] * 100)                                 # no punctuation: words
    chunks = split_phonemes(words, limit=50)
    assert all(len(c) <= 50 for c in chunks) and " ".join(chunks) == words
    assert all(not c.startswith(" ") and not c.endswith(" ") for c in chunks)
    long_word = "x" * 120
    assert split_phonemes(long_word, limit=50) == ["x" * 50, "x" * 50, "x" * 20]
    assert split_phonemes("short one.") == ["short one."]
    assert split_phonemes("   ") == []
    with pytest.raises(ValueError, match="limit must be positive"):
        split_phonemes("a", limit=0)


def test_split_keeps_every_phoneme_under_the_model_limit():
    text = " ".join(f"sentence number {i}, with a clause; and more words." for i in range(60))
    chunks = split_phonemes(text)
    assert MAX_PHONEMES == 510 and len(chunks) > 1
    assert all(len(c) <= MAX_PHONEMES for c in chunks)
    assert "".join(chunks).replace(" ", "") == text.replace(" ", "")
    assert all(c.endswith(".") for c in chunks)                    # cut at sentence ends


def test_voice_row_rule():
    assert voice_row(1) == 0 and voice_row(30) == 29 and voice_row(510) == 509
    assert voice_row(600) == 509                                   # clamped to the pack
    with pytest.raises(ValueError, match="at least one phoneme"):
        voice_row(0)


VOCAB = {c: i + 1 for i, c in enumerate("abdehiklmnoprstuwzɐəɛɪɹʊʌðθŋˈˌː ,.!?")}


def test_ids_for_raw_phonemes():
    ids = phoneme_ids("həlˈoʊç!", VOCAB)                          # ç is not in VOCAB
    assert len(ids) == 7 and ids[0] == VOCAB["h"] and ids[-1] == VOCAB["!"]
    assert ids_to_phonemes(ids, VOCAB) == "həlˈoʊ!"                # dropped, the rest kept
    with pytest.raises(TTSInputError, match=r"\['ç'\] are not in the model's vocabulary"):
        phoneme_ids("çh", VOCAB, strict=True)


def test_espeak_cleanup_rules():
    p = EspeakPhonemizer("en-us", vocab=None)
    assert p.clean("rɛd") == "ɹɛd"                        # r -> ɹ
    assert p.clean("lox ɬ tʲ") == "lok l tj"                # x -> k, ɬ -> l, ʲ -> j
    assert p.clean("tuːhˈʌndɹɪd") == "tuː hˈʌndɹɪd"          # a space before hundred
    assert p.clean("dˈɑːɡ z.") == "dˈɑːɡz."                  # a detached plural z joins
    assert p.clean("nˈaɪnti") == "nˈaɪndi"                   # American ninety
    assert EspeakPhonemizer("en-gb").clean("nˈaɪnti") == "nˈaɪnti"
    assert EspeakPhonemizer("en-us", vocab=VOCAB).clean("ça va") == "a a"   # outside: dropped
    with pytest.raises(TTSInputError, match="'fr-fr' is not supported; accepted: en-us, en-gb"):
        EspeakPhonemizer("fr-fr")


def test_espeak_phonemes_from_the_packaged_library():
    require("espeakng_loader")
    require("phonemizer")
    p = EspeakPhonemizer("en-us")
    out = p("Hello world, this is a test.")
    assert "ˈ" in out and out.endswith(".") and "," in out        # stress and punctuation kept
    assert out.count(" ") == 5                                     # six words
    assert p("   ") == ""
    numbers = p(normalize("I have 2 dogs."))
    assert "tˈuː" in numbers                                       # "two", spoken


def _first_plan(text, first_limit, limit=MAX_PHONEMES):
    from dasllama.text import plan

    return [c.phonemes for c in plan(text, VOCAB, phonemes=True, limit=limit,
                                     first_limit=first_limit)]


def test_first_chunk_takes_whole_sentences_that_fit():
    s1, s2, s3 = "ab ab.", "de de de.", "hi " * 30 + "hi."
    got = _first_plan(f"{s1} {s2} {s3}", first_limit=20)
    assert got[0] == f"{s1} {s2}" and " ".join(got[1:]) == s3   # s3 ramps up after it
    assert _first_plan(f"{s1} {s2} {s3}", first_limit=None) == [f"{s1} {s2} {s3}"]


def test_first_chunk_cut_at_the_last_clause_mark_within_the_limit():
    head = "ab ab ab ab, de de de, "                  # clause marks at 11 and 21 phonemes
    sentence = head + "hi " * 20 + "hi."
    got = _first_plan(f"{sentence} ok ok ok.", first_limit=25)
    assert got[0] == "ab ab ab ab, de de de,"           # the later mark, under 25
    assert " ".join(got) == f"{sentence} ok ok ok."
    assert got[1].startswith("hi hi") and got[-1].endswith("ok ok ok.")


def test_chunks_after_a_short_first_one_grow_by_the_ramp_up_to_the_limit():
    from dasllama.text.plan import CHUNK_RAMP

    sentences = ["abde " * k + "ok." for k in (3, 9, 14, 20, 30, 12, 25, 40, 8, 33)] * 4
    text = " ".join(sentences)
    got = _first_plan(text, first_limit=25, limit=200)
    assert len(got[0]) <= 25 and " ".join(got) == text          # nothing lost or repeated
    lengths = [len(c) for c in got]
    ramp = lengths[:next(i for i, n in enumerate(lengths) if n > 150) + 1]
    for before, after in zip(ramp, ramp[1:]):
        assert after <= CHUNK_RAMP * before                      # ready before `before` ends
    for k in range(1, len(lengths)):   # and for the whole stream: made before the audio runs out
        assert sum(lengths[1:k + 1]) <= CHUNK_RAMP * sum(lengths[:k])
    assert max(len(c) for c in got) > 150 and all(len(c) <= 200 for c in got)
    # without a short first chunk nothing ramps: the chunks are the limit's from the start
    plain = _first_plan(text, first_limit=None, limit=200)
    assert len(plain[0]) > 100 and " ".join(plain) == text


def test_first_chunk_cut_at_a_word_boundary_without_a_clause_mark():
    sentence = "abde " * 20 + "ok."
    got = _first_plan(f"{sentence} hi hi.", first_limit=25)
    assert got[0] == "abde abde abde abde abde"         # 24 phonemes: the last word that fits
    assert len(got[0]) <= 25 and " ".join(got) == f"{sentence} hi hi."


def test_first_chunk_rule_leaves_single_sentences_and_short_tails_whole():
    one = "abde " * 20 + "ok."                          # one sentence, one chunk: never cut
    assert _first_plan(one, first_limit=25) == [one]
    tail = "abde abde abde abde abde hi."               # a cut would leave under 12 phonemes
    assert _first_plan(f"{tail} ok.", first_limit=25) == [f"{tail} ok."]
    with pytest.raises(TTSInputError, match="first_limit"):
        _first_plan(one, first_limit=0)
