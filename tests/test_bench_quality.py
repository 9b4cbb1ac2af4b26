"""The TTS quality rig (dasllama bench quality): the text plan it speaks, its WER arithmetic
and normalization, and a short real run on Kokoro's int8 file through onnxruntime, the C++
chain and the NumPy reference, transcribed by dasllama's Whisper."""

import json

import numpy as np
import pytest

from requires import require

from dasllama.errors import TTSInputError


@pytest.fixture(scope="module")
def vocab(real_model):
    folder = real_model("kokoro")
    return json.loads((folder / "vocab.json").read_text())["vocab"]


# --- the text plan ------------------------------------------------------------------------

def test_plan_rows_ids_and_chunking(vocab):
    require("phonemizer")
    from dasllama.text import MAX_PHONEMES, plan

    one = plan("Hello world.", vocab)
    assert len(one) == 1
    assert one[0].ids == [vocab[c] for c in one[0].phonemes]
    assert one[0].style_row == len(one[0].ids) - 1          # hexgrad's n - 1
    long = plan(" ".join(["The committee met to discuss the budget for next year."] * 12),
                vocab)
    assert len(long) > 1
    assert all(len(c.ids) <= MAX_PHONEMES for c in long)
    assert sum(len(c.ids) for c in long) > MAX_PHONEMES
    raw = plan("həlˈoʊ wˈɜːld.", vocab, phonemes=True)
    assert raw[0].phonemes == "həlˈoʊ wˈɜːld."


@pytest.mark.parametrize("text, says", [("", "empty"), ("   \n", "empty"),
                                        ("\u2603\u2603", "no characters"),
                                        ("... \u2014 !", "no characters")])
def test_plan_refuses_text_with_nothing_to_say(vocab, text, says):
    from dasllama.text import plan

    with pytest.raises(TTSInputError, match=says):
        plan(text, vocab, phonemes=True)


def test_plan_refuses_a_non_string(vocab):
    from dasllama.text import plan

    with pytest.raises(TTSInputError, match="string"):
        plan(b"bytes", vocab)


# --- WER ----------------------------------------------------------------------------------

def test_wer_words_spells_out_and_strips():
    from dasllama.bench.quality import wer_words

    assert wer_words("Hello, World!") == "hello world"
    assert wer_words("It's 5 o'clock.") == "it's five o'clock"
    assert wer_words("forty-two") == "forty two"


def test_corpus_wer_counts_errors_over_reference_words():
    require("jiwer")
    from dasllama.bench.quality import corpus_wer

    # hand-counted: one insertion over three words; one substitution over four; both: 2/7
    assert corpus_wer(["the cat sat"], ["the cat sat down"]) == pytest.approx(1 / 3)
    assert corpus_wer(["a b c d"], ["a x c d"]) == pytest.approx(1 / 4)
    assert corpus_wer(["the cat sat", "a b c d"],
                      ["the cat sat down", "a x c d"]) == pytest.approx(2 / 7)
    # numbers meet on words whichever way the ASR writes them
    assert corpus_wer(["He paid $5."], ["he paid five dollars"]) == 0.0
    assert corpus_wer(["the cat"], [""]) == 1.0


# --- a short real run ---------------------------------------------------------------------

def test_a_short_real_run_through_the_command_line(real_model, tmp_path, capsys):
    require("onnxruntime")
    require("jiwer")
    require("phonemizer")
    require("soxr")
    real_model("kokoro")
    real_model("whisper-tiny.en")
    out = tmp_path / "quality-{box}.json"
    from dasllama.cli import main

    assert main(["bench", "quality", "--sentences", "2", "--beam", "1", "--lanes",
                 "onnxruntime,dasllama,reference", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    print(printed)
    written = list(tmp_path.glob("quality-*.json"))
    assert len(written) == 1
    rec = json.loads(written[0].read_text())
    assert rec["schema"] == "dasllama-quality/1" and rec["config"]["n_sentences"] == 2
    assert set(rec["lanes"]) == {"onnxruntime", "dasllama", "reference"}
    for lane in rec["lanes"].values():
        assert len(lane["sentences"]) == 2 and lane["audio_seconds"] > 1.0
        # two short plain sentences: Whisper hears what Kokoro said
        assert lane["wer"] <= 0.2, lane["sentences"]
    assert "vs onnxruntime" in printed


def test_the_asr_does_not_hear_the_text_in_noise(real_model):
    """The negative control: the same transcription of noise scores as errors, so a lane
    that spoke garbage would show."""
    require("jiwer")
    require("soxr")
    from dasllama.asr import ASR
    from dasllama.bench.quality import SENTENCES, corpus_wer, transcribe_corpus

    asr = ASR(real_model("whisper-tiny.en"), compute_type="float32", n_threads=2)
    noise = np.random.default_rng(0).normal(0, 0.1, 3 * 24000).astype(np.float32)
    texts = transcribe_corpus(asr, [noise], beam=1)
    assert corpus_wer(SENTENCES[:1], texts) >= 0.8, texts


# --- the Kokoro speed bench (dasllama bench tts -m kokoro) ---------------------------------

def test_kokoro_tts_bench_short_run(real_model, tmp_path, capsys):
    require("onnxruntime")
    require("phonemizer")
    real_model("kokoro")
    from dasllama.cli import main

    out = tmp_path / "tts-{box}.json"
    assert main(["bench", "tts", "-m", "kokoro", "--sizes", "short", "--reps", "1", "-t", "2",
                 "--pause", "0", "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    rec = json.loads(next(tmp_path.glob("tts-*.json")).read_text())
    from bench_records import check_record

    check_record(rec)
    tests = {(r["engine"], r["test"]) for r in rec["rows"]}
    assert tests == {(e, f"{t}_short") for e in ("dasllama", "kokoro-onnx")
                     for t in ("request_wall", "first_audio", "rtf")}
    v, = rec["validation"]
    assert v["chunks"] == 1 and v["samples"]["dasllama"] > 24000
    # the same ids and style: the two lengths differ by at most a few duration frames
    assert abs(v["samples"]["dasllama"] - v["samples"]["kokoro-onnx"]) <= 4 * 600
    assert "dasllama/kokoro-onnx" in printed


def test_kokoro_tts_bench_refuses_pocket_options(capsys):
    from dasllama.cli import main

    assert main(["bench", "tts", "--voice", "jf_alpha", "--reps", "1"]) != 0
    assert "for Kokoro models" in capsys.readouterr().err
