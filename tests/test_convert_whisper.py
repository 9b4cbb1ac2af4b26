"""dasllama.convert.ct2 (CTranslate2's model.bin) and dasllama.convert.whisper (a CTranslate2
Whisper directory to one GGUF): values carried exactly, the mel filterbank equal to
faster-whisper's, and typed errors that name the file and the field for malformed input."""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from requires import require

from dasllama.convert.ct2 import Ct2FormatError, dequantized, read_ct2_model
from dasllama.convert.whisper import (WhisperDirError, convert_whisper, mel_filters,
                                      read_whisper_dir)
from dasllama.testing.whisper import RANDOM_WHISPER, write_ct2_model, write_random_whisper_dir


@pytest.fixture(scope="module")
def random_dir(tmp_path_factory):
    return write_random_whisper_dir(tmp_path_factory.mktemp("ct2") / "model", seed=1)


def copy_dir(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def gguf_tensors(path):
    import gguf

    r = gguf.GGUFReader(str(path))
    return r, {t.name: np.asarray(t.data, dtype=np.float32) for t in r.tensors}


# ----------------------------------------------------------------------------- the reader

def test_reader_reads_what_the_writer_wrote(tmp_path):
    rng = np.random.default_rng(0)
    values = {"a/f32": rng.standard_normal((3, 4)).astype(np.float32),
              "a/f16": rng.standard_normal(5).astype(np.float16),
              "a/i8": np.array(3, np.int8), "a/i16": np.array([-1, 7], np.int16),
              "q/weight": np.array([[127, -64], [10, 20]], np.int8),
              "q/weight_scale": np.array([127.0, 20.0], np.float32)}
    write_ct2_model(tmp_path / "model.bin", values, {"b/alias": "a/f32"}, spec="TestSpec",
                    revision=9)
    m = read_ct2_model(tmp_path / "model.bin")
    assert (m.binary_version, m.spec, m.spec_revision) == (6, "TestSpec", 9)
    for name, v in values.items():
        assert m.get(name).dtype == v.dtype and np.array_equal(m.get(name), v)
    assert np.array_equal(m.get("b/alias"), values["a/f32"])
    assert m.scalar("a/i8") == 3
    np.testing.assert_array_equal(dequantized(m, "q/weight"),
                                  np.array([[1.0, -64 / 127], [0.5, 1.0]], np.float32))
    with pytest.raises(Ct2FormatError, match="variable 'nope' is missing"):
        m.get("nope")


def _header(version=6):
    return struct.pack("<I", version) + struct.pack("<H", 5) + b"Spec\0" + struct.pack("<I", 1)


@pytest.mark.parametrize("body, message", [
    (b"\x01\x00", "binary_version at byte 0: needs 4 bytes"),
    (struct.pack("<I", 99), "binary_version at byte 0: is 99"),
    (_header() + struct.pack("<I", 1) + struct.pack("<H", 2) + b"x\0" + bytes([1])
     + struct.pack("<I", 4) + bytes([9]) + struct.pack("<I", 16),
     "variable 'x' type at byte .*: is 9"),
    (_header() + struct.pack("<I", 1) + struct.pack("<H", 2) + b"x\0" + bytes([1])
     + struct.pack("<I", 4) + bytes([0]) + struct.pack("<I", 12) + bytes(12),
     "variable 'x' byte count at byte .*: is 12, but shape \\(4,\\) of float32 needs 16"),
    (_header() + struct.pack("<I", 1) + struct.pack("<H", 2) + b"x\0" + bytes([1])
     + struct.pack("<I", 4) + bytes([0]) + struct.pack("<I", 16) + bytes(8),
     "variable 'x' data at byte .*: needs 16 bytes, the file has 8 left"),
    (_header() + struct.pack("<I", 0) + struct.pack("<I", 1) + struct.pack("<H", 2) + b"a\0"
     + struct.pack("<H", 2) + b"b\0", "target of alias 'a' at byte .*: names no variable"),
    (_header() + struct.pack("<I", 0) + struct.pack("<I", 0) + b"junk",
     "end of file at byte .*: 4 bytes follow"),
    (struct.pack("<I", 6) + struct.pack("<H", 4) + b"Spec", "spec name .*does not end with a NUL"),
])
def test_malformed_model_bin_names_the_field(tmp_path, body, message):
    path = tmp_path / "model.bin"
    path.write_bytes(body)
    with pytest.raises(Ct2FormatError, match="model.bin: " + message):
        read_ct2_model(path)


def test_a_truncated_real_size_file_fails_cleanly(tmp_path, random_dir):
    data = (random_dir / "model.bin").read_bytes()
    for cut in (3, 20, len(data) // 2, len(data) - 1):
        (tmp_path / "model.bin").write_bytes(data[:cut])
        with pytest.raises(Ct2FormatError, match="model.bin: .* at byte"):
            read_ct2_model(tmp_path / "model.bin")


# ----------------------------------------------------------------------------- the converter

def test_mel_filters_equal_faster_whisper():
    require("faster_whisper")
    from faster_whisper.feature_extractor import FeatureExtractor

    for n_mels in (80, 128):
        ours = mel_filters(16000, 400, n_mels)
        theirs = FeatureExtractor(feature_size=n_mels).mel_filters
        assert ours.shape == theirs.shape == (n_mels, 201)
        np.testing.assert_allclose(ours, theirs, rtol=1e-6, atol=1e-9)


def test_random_dir_converts_exactly(random_dir, tmp_path):
    out = convert_whisper(random_dir, tmp_path / "r.gguf")
    r, t = gguf_tensors(out)
    m = read_ct2_model(random_dir / "model.bin")
    s = RANDOM_WHISPER
    assert np.array_equal(t["enc.blk.1.attn.qkv.weight"],
                          m.get("encoder/layer_1/self_attention/linear_0/weight"))
    assert np.array_equal(t["dec.blk.0.cross.kv.bias"],
                          m.get("decoder/layer_0/attention/linear_1/bias"))
    assert np.array_equal(t["dec.tok_emb"], m.get("decoder/embeddings/weight"))
    assert t["enc.conv1.weight"].shape == (s["d"], s["n_mels"], 3)
    assert "dec.proj.weight" not in t   # tied: an alias of the embeddings
    np.testing.assert_array_equal(t["mel_filters"], mel_filters(16000, 400, 80))
    f = r.fields
    assert int(f["whisper.n_text_layer"].parts[-1][0]) == s["n_dec"]
    assert bytes(f["general.architecture"].parts[-1]).decode() == "whisper"


def test_real_dir_converts_exactly(real_model, tmp_path):
    folder = real_model("whisper-tiny.en")
    wd = read_whisper_dir(folder)
    assert wd.hparams == dict(n_mels=80, n_audio_ctx=1500, n_audio_state=384, n_audio_head=6,
                              n_audio_layer=4, n_text_ctx=448, n_text_state=384, n_text_head=6,
                              n_text_layer=4, n_vocab=51864)
    assert wd.special["sot"] == 50257 and wd.special["timestamp_begin"] == 50363
    out = convert_whisper(folder, tmp_path / "tiny.gguf")
    _, t = gguf_tensors(out)
    m = wd.model
    for gguf_name, ct2_name in [("dec.blk.3.mlp.fc2.weight", "decoder/layer_3/ffn/linear_1/weight"),
                                ("enc.pos", "encoder/position_encodings/encodings"),
                                ("enc.conv2.weight", "encoder/conv2/weight")]:
        assert np.array_equal(t[gguf_name], m.get(ct2_name).astype(np.float32)), gguf_name


def _edit(folder: Path, name: str, text: str) -> None:
    (folder / name).write_text(text)


@pytest.mark.parametrize("break_it, message", [
    (lambda d: (d / "model.bin").unlink(), "model.bin is missing"),
    (lambda d: (d / "vocabulary.json").unlink(), "no vocabulary"),
    (lambda d: _edit(d, "vocabulary.json", json.dumps(["a", "b"])),
     "the vocabulary has 2 tokens, decoder/embeddings/weight has 1770 rows"),
    (lambda d: _edit(d, "config.json", "{not json"), "config.json: the config is not JSON"),
    (lambda d: _edit(d, "config.json", json.dumps({"suppress_ids": [1, "x"]})),
     "config.json: field 'suppress_ids' is not a list of integers"),
    (lambda d: _edit(d, "config.json", json.dumps({"suppress_ids": [99999]})),
     "config.json: field 'suppress_ids' holds ids outside the vocabulary"),
    (lambda d: _edit(d, "config.json", json.dumps({"alignment_heads": [[7, 0]]})),
     "config.json: field 'alignment_heads' names a layer or head"),
    (lambda d: _edit(d, "preprocessor_config.json", json.dumps({"feature_size": 81})),
     "preprocessor_config.json: field 'feature_size' is 81"),
    (lambda d: _edit(d, "preprocessor_config.json", json.dumps({"feature_size": 128})),
     "expected \\(64, 128, 3\\) for 128 mel bins"),
    (lambda d: _edit(d, "tokenizer.json", json.dumps({"model": {}})),
     "tokenizer.json: field model.merges is missing"),
])
def test_malformed_dir_names_file_and_field(random_dir, tmp_path, break_it, message):
    folder = copy_dir(random_dir, tmp_path / "m")
    break_it(folder)
    with pytest.raises(WhisperDirError, match=message):
        convert_whisper(folder, tmp_path / "out.gguf")
    assert not (tmp_path / "out.gguf").exists()


def test_a_model_bin_of_another_architecture_is_refused(random_dir, tmp_path):
    folder = copy_dir(random_dir, tmp_path / "m")
    m = read_ct2_model(folder / "model.bin")
    values = {k: np.array(v) for k, v in m.variables.items()}
    values["decoder/activation"] = np.array(1, np.int8)   # GELU, tanh form
    write_ct2_model(folder / "model.bin", values, m.aliases)
    with pytest.raises(WhisperDirError, match="'decoder/activation' is 1, expected 3"):
        read_whisper_dir(folder)
    write_ct2_model(folder / "model.bin", values, m.aliases, spec="TransformerSpec")
    with pytest.raises(WhisperDirError, match="spec is 'TransformerSpec'"):
        read_whisper_dir(folder)


def test_cli_converts_and_reports_errors(random_dir, tmp_path):
    out = tmp_path / "cli.gguf"
    done = subprocess.run([sys.executable, "-m", "dasllama.cli", "convert", "whisper",
                           str(random_dir), "-o", str(out), "--lane", "f16"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    _, t = gguf_tensors(out)
    assert t["enc.blk.0.mlp.fc1.weight"].shape == (256, 64)
    done = subprocess.run([sys.executable, "-m", "dasllama.cli", "convert", "whisper",
                           str(tmp_path), "-o", str(out)], capture_output=True, text=True)
    assert done.returncode == 1 and "model.bin is missing" in done.stderr
