"""ASR.transcribe(vad_filter=True) against faster-whisper 1.2.1's, on the real tiny.en, float32,
beam 1, temperature 0, the same samples on both sides: the same speech chunks (faster-whisper's
get_speech_timestamps with its own Silero model, the shipped weights here), the same
transcripts and tokens, segment times within 0.02 s after mapping back to the original audio.

Clips: the fixtures, and a composite built here from them with long silences and loud noise
between the speech, so the filter drops audio in several places. Negative control: the same
clip transcribed without the filter gives other segment times.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from requires import require

FIXTURES = Path(__file__).parent / "fixtures" / "asr"
CLIPS = ["us_plain.flac", "long_silences.flac", "over_30s.flac", "composite"]
BAR_TIME = 0.02   # seconds: one timestamp step


def samples(name: str) -> np.ndarray:
    require("soundfile")
    from dasllama import audio

    if name != "composite":
        return audio.load(FIXTURES / name)
    rng = np.random.default_rng(5)
    quiet = np.zeros(3 * 16000 + 77, np.float32)
    noise = (0.2 * rng.standard_normal(2 * 16000)).astype(np.float32)
    return np.concatenate([quiet, audio.load(FIXTURES / "us_plain.flac"), quiet,
                           audio.load(FIXTURES / "gb_fast.flac"), noise, quiet,
                           audio.load(FIXTURES / "long_silences.flac")[:9 * 16000]])


@pytest.fixture(scope="module")
def engines(real_model, tmp_path_factory):
    require("faster_whisper")
    import dasllama
    from dasllama.convert.whisper import convert_whisper
    from faster_whisper import WhisperModel

    folder = real_model("whisper-tiny.en")
    gguf = convert_whisper(folder, tmp_path_factory.mktemp("vadasr") / "tiny.en.gguf")
    return (dasllama.ASR(gguf, n_threads=2),
            WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2))


PARAMS = [None, {"min_silence_duration_ms": 500, "speech_pad_ms": 100}]


@pytest.mark.parametrize("name", CLIPS)
@pytest.mark.parametrize("params", PARAMS, ids=["defaults", "short_silence"])
def test_vad_filter_equals_faster_whisper(engines, name, params):
    from faster_whisper.vad import VadOptions, get_speech_timestamps
    from dasllama.vad import default_vad

    ours, theirs = engines
    a = samples(name)
    chunks = get_speech_timestamps(a, VadOptions(**(params or {})))
    assert default_vad().speech_chunks(a, params) == chunks
    mine, info = ours.transcribe(a, vad_filter=True, vad_parameters=params)
    mine = list(mine)
    ref, ref_info = theirs.transcribe(a, beam_size=1, temperature=0.0, language="en",
                                      vad_filter=True, vad_parameters=params)
    ref = list(ref)
    for s in ref:
        print(f"{name} faster-whisper [{s.start:.2f} -> {s.end:.2f}] {s.text!r}")
    print(f"  chunks {chunks}")
    assert ref
    assert info.duration == pytest.approx(ref_info.duration)
    assert info.duration_after_vad == pytest.approx(ref_info.duration_after_vad)
    assert [s.text for s in mine] == [s.text for s in ref]
    assert [list(s.tokens) for s in mine] == [list(s.tokens) for s in ref]
    for x, y in zip(mine, ref):
        assert x.start == pytest.approx(y.start, abs=BAR_TIME)
        assert x.end == pytest.approx(y.end, abs=BAR_TIME)
    if name == "composite":
        assert len(chunks) >= 3 and info.duration_after_vad < info.duration - 6
        # Control: without the filter the times (and the first start) are not these.
        plain = list(ours.transcribe(a)[0])
        assert [round(s.start, 2) for s in plain] != [round(s.start, 2) for s in ref]


def test_vad_options_object_and_errors(engines):
    from dasllama.asr import ASRError
    from dasllama.vad import VadOptions
    from faster_whisper.vad import VadOptions as FwOptions

    ours, _ = engines
    a = samples("long_silences.flac")
    by_dict = [(s.start, s.end, s.text) for s in
               ours.transcribe(a, vad_filter=True, vad_parameters={"speech_pad_ms": 100})[0]]
    for opts in (VadOptions(speech_pad_ms=100), FwOptions(speech_pad_ms=100)):
        segs, info = ours.transcribe(a, vad_filter=True, vad_parameters=opts)
        assert [(s.start, s.end, s.text) for s in segs] == by_dict
        assert info.vad_options == VadOptions(speech_pad_ms=100)
    with pytest.raises(ASRError, match="min_silence_ms"):
        ours.transcribe(a, vad_filter=True, vad_parameters={"min_silence_ms": 1})
    with pytest.raises(ASRError, match="threshold"):
        ours.transcribe(a, vad_filter=True, vad_parameters={"threshold": 2.0})
    # Silence only: the filter keeps nothing and no segment comes out.
    segs, info = ours.transcribe(np.zeros(5 * 16000, np.float32), vad_filter=True)
    assert list(segs) == [] and info.duration_after_vad == 0.0


def test_cli_vad(real_model, tmp_path, capsys):
    from dasllama import cli
    from dasllama.convert.whisper import convert_whisper

    gguf = convert_whisper(real_model("whisper-tiny.en"), tmp_path / "tiny.en.gguf")
    clip = FIXTURES / "long_silences.flac"
    rc = cli.main(["transcribe", str(clip), "-m", str(gguf), "-f", "srt", "--vad",
                   "--threads", "2"])
    assert rc == 0
    srt = capsys.readouterr().out
    import dasllama
    segs = list(dasllama.ASR(gguf, n_threads=2).transcribe(clip, vad_filter=True)[0])
    assert segs and all(s.text.strip() in srt for s in segs)
    from dasllama.transcribe_cli import format_timestamp
    assert f"{format_timestamp(segs[0].start)} --> {format_timestamp(segs[0].end)}" in srt


@pytest.fixture(scope="module")
def base_engines(real_model, tmp_path_factory):
    require("faster_whisper")
    import dasllama
    from dasllama.convert.whisper import convert_whisper
    from faster_whisper import WhisperModel

    folder = real_model("whisper-base")
    gguf = convert_whisper(folder, tmp_path_factory.mktemp("vadbase") / "base.gguf")
    return (dasllama.ASR(gguf, n_threads=2),
            WhisperModel(str(folder), device="cpu", compute_type="float32", cpu_threads=2))


@pytest.mark.parametrize("name", ["de_plain.flac", "silence"])
def test_vad_filter_multilingual_equals_faster_whisper(base_engines, name):
    """On whisper-base the language is detected on the speech the filter kept (on one frame of
    silence's log-mel when it kept nothing, as faster-whisper does)."""
    ours, theirs = base_engines
    if name == "silence":
        a = np.zeros(3 * 16000, np.float32)
    else:
        speech = samples(name)
        a = np.concatenate([np.zeros(3 * 16000, np.float32), speech,
                            np.zeros(40000, np.float32), speech[:50000]])
    mine, info = ours.transcribe(a, vad_filter=True)
    mine = list(mine)
    ref, ref_info = theirs.transcribe(a, beam_size=1, temperature=0.0, vad_filter=True)
    ref = list(ref)
    print(name, ref_info.language, ref_info.language_probability, [s.text for s in ref])
    assert info.language == ref_info.language
    assert info.language_probability == pytest.approx(ref_info.language_probability, abs=2e-3)
    assert [s.text for s in mine] == [s.text for s in ref]
    for x, y in zip(mine, ref):
        assert x.start == pytest.approx(y.start, abs=BAR_TIME)
        assert x.end == pytest.approx(y.end, abs=BAR_TIME)
    if name == "silence":
        assert mine == [] and info.duration_after_vad == 0.0
    else:
        assert len(ref) >= 2 and info.language == "de"
