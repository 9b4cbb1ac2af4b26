"""``dasllama transcribe``: formats, output folders, errors; on the real tiny.en its text equals
dasllama.ASR's."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from requires import require

from dasllama import cli
from dasllama.transcribe_cli import format_timestamp

FIXTURES = Path(__file__).parent / "fixtures" / "asr"


def test_timestamps_format_like_subtitles():
    assert format_timestamp(0) == "00:00:00,000"
    assert format_timestamp(3661.2346) == "01:01:01,235"
    assert format_timestamp(61.5, ".", False) == "01:01.500"
    assert format_timestamp(-1) == "00:00:00,000"


@pytest.fixture(scope="module")
def random_model(tmp_path_factory):
    from dasllama.convert.whisper import convert_whisper
    from dasllama.testing.whisper import write_random_whisper_dir

    folder = write_random_whisper_dir(tmp_path_factory.mktemp("cli") / "rw", seed=2)
    return convert_whisper(folder, folder.parent / "rw.gguf")


@pytest.fixture(scope="module")
def noise_wav(tmp_path_factory):
    require("soundfile")
    from dasllama import audio

    rng = np.random.default_rng(3)
    path = tmp_path_factory.mktemp("wav") / "noise.wav"
    audio.write(path, 0.05 * rng.standard_normal(16000 * 2), 16000)
    return path


@pytest.mark.parametrize("fmt", ["txt", "srt", "vtt", "json"])
def test_formats_go_to_a_folder(random_model, noise_wav, tmp_path, fmt, capsys):
    out = tmp_path / "out"
    rc = cli.main(["transcribe", str(noise_wav), "-m", str(random_model), "-f", fmt,
                   "-o", str(out), "--threads", "1"])
    assert rc == 0
    text = (out / f"noise.{fmt}").read_text(encoding="utf-8")
    if fmt == "json":
        body = json.loads(text)
        assert body["duration"] == 2.0 and isinstance(body["segments"], list)
    elif fmt == "vtt":
        assert text.startswith("WEBVTT\n")
    assert f"noise.{fmt}" in capsys.readouterr().err


def test_errors_exit_with_a_message(random_model, tmp_path, capsys):
    rc = cli.main(["transcribe", str(tmp_path / "missing.wav"), "-m", str(random_model)])
    assert rc == 1 and "no such file" in capsys.readouterr().err
    (tmp_path / "bad.wav").write_bytes(b"not audio")
    rc = cli.main(["transcribe", str(tmp_path / "bad.wav"), "-m", str(random_model)])
    assert rc == 1 and "cannot be decoded" in capsys.readouterr().err


def test_real_model_text_equals_the_api(real_model, tmp_path, capsys):
    import dasllama
    from dasllama.convert.whisper import convert_whisper

    gguf = convert_whisper(real_model("whisper-tiny.en"), tmp_path / "tiny.gguf")
    clip = FIXTURES / "gb_fast.flac"
    rc = cli.main(["transcribe", str(clip), "-m", str(gguf), "--threads", "2"])
    assert rc == 0
    lines = capsys.readouterr().out.splitlines()
    expected = [s.text.strip() for s in dasllama.ASR(gguf, n_threads=2).transcribe(clip)[0]]
    assert lines == expected and len(lines) == 2
    rc = cli.main(["transcribe", str(clip), "-m", str(gguf), "-f", "srt", "--threads", "2"])
    srt = capsys.readouterr().out
    assert srt.startswith("1\n00:00:00,000 --> 00:00:01,800\nPlease remember")
