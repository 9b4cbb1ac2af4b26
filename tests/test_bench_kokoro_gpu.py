"""The Kokoro GPU bench's model skeleton (python/dasllama/bench/tts_kokoro_gpu.py): the decoder's
int8 data zeroed and its histograms kept, then drawn back from them on the other machine; every
other tensor untouched. And the peer's pinned duration head (kokoro package, when installed)."""

from __future__ import annotations

import numpy as np
import pytest

from requires import require

gguf = require("gguf")


def _write(path):
    rng = np.random.default_rng(3)
    w = gguf.GGUFWriter(str(path), "kokoro")
    w.add_uint32("kokoro.test", 1)
    tensors = {
        # int8 under the random prefixes: a skewed spread, so a uniform fill would be seen
        "decoder.decode.0.conv1.weight": np.clip(rng.normal(0, 9, (64, 48)), -128, 127)
        .astype(np.int8),
        "decoder.generator.conv_post.weight": np.clip(rng.normal(4, 20, (33, 40)), -128, 127)
        .astype(np.int8),
        # kept as they are: int8 elsewhere, float under the prefixes
        "predictor.lstm.weight": rng.integers(-128, 128, (32, 16)).astype(np.int8),
        "decoder.decode.0.conv1.scale": rng.normal(size=(64,)).astype(np.float32),
    }
    for name, t in tensors.items():
        w.add_tensor(name, t)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


def _read(path) -> dict:
    return {t.name: np.array(t.data) for t in gguf.GGUFReader(str(path)).tensors}


def test_skeleton_zeroes_the_decoder_int8_and_fill_draws_it_back(tmp_path):
    from dasllama.bench.tts_kokoro_gpu import fill_skeleton, write_skeleton

    src, skel, hist, full = (tmp_path / n for n in ("m.gguf", "s.gguf", "h.npz", "f.gguf"))
    orig = _write(src)
    zeroed = write_skeleton(src, skel, hist)
    drawn = ["decoder.decode.0.conv1.weight", "decoder.generator.conv_post.weight"]
    assert zeroed == sum(orig[n].size for n in drawn)
    s = _read(skel)
    for n in drawn:
        assert not s[n].any()
    for n in ("predictor.lstm.weight", "decoder.decode.0.conv1.scale"):
        np.testing.assert_array_equal(s[n].reshape(orig[n].shape), orig[n])
    h = dict(np.load(hist))
    assert sorted(h) == sorted(drawn)
    np.testing.assert_array_equal(
        h[drawn[0]], np.bincount(orig[drawn[0]].ravel().astype(np.int16) + 128, minlength=256))

    assert fill_skeleton(skel, hist, full, seed=1) == zeroed
    f = _read(full)
    for n in drawn:
        got = f[n].view(np.int8).reshape(orig[n].shape)
        assert not np.array_equal(got, orig[n])          # random structure, not the original
        # ... with the original's spread: mean and std within a few standard errors
        assert abs(got.mean() - orig[n].mean()) < 4 * orig[n].std() / np.sqrt(got.size) + 0.5
        assert abs(got.std() - orig[n].std()) < 0.1 * orig[n].std()
    # the control: the two tensors' spreads differ, so drawing one from the other's would fail
    assert abs(orig[drawn[0]].std() - orig[drawn[1]].std()) > 0.1 * orig[drawn[1]].std()
    for n in ("predictor.lstm.weight", "decoder.decode.0.conv1.scale"):
        np.testing.assert_array_equal(f[n].reshape(orig[n].shape), orig[n])
    # the same seed, the same file
    fill_skeleton(skel, hist, tmp_path / "g.gguf", seed=1)
    assert (tmp_path / "g.gguf").read_bytes() == full.read_bytes()


def test_fill_names_a_missing_histogram(tmp_path):
    from dasllama.bench.llm import BenchError
    from dasllama.bench.tts_kokoro_gpu import fill_skeleton, write_skeleton

    src, skel, hist = tmp_path / "m.gguf", tmp_path / "s.gguf", tmp_path / "h.npz"
    _write(src)
    write_skeleton(src, skel, hist)
    np.savez(hist, **{"decoder.decode.0.conv1.weight": np.ones(256)})
    with pytest.raises(BenchError, match="decoder.generator.conv_post.weight"):
        fill_skeleton(skel, hist, tmp_path / "f.gguf")


def test_peer_duration_pin_gives_k_frames_per_id(tmp_path):
    from kokoro_torch_models import kokoro_modules

    torch = require("torch")
    kokoro_modules()     # the package without its G2P (skips, or fails under CI, when absent)
    from dasllama.bench.tts_kokoro_gpu import KOKORO_82M, _Peer

    small = dict(KOKORO_82M, plbert=dict(KOKORO_82M["plbert"], num_hidden_layers=1))
    vocab = {chr(97 + i): i + 1 for i in range(26)}
    import dasllama.bench.tts_kokoro_gpu as bench
    old = bench.KOKORO_82M
    bench.KOKORO_82M = small
    try:
        peer = _Peer(vocab, "cpu", tmp_path)
    finally:
        bench.KOKORO_82M = old
    chunk = {"ids": [3, 5, 7, 9], "style": [0.1] * 256}
    for k in (2, 5):
        peer.pin_durations(k)
        ids = torch.tensor([[0, *chunk["ids"], 0]])
        _, dur = peer.model.forward_with_tokens(ids, torch.tensor([chunk["style"]]), 1.0)
        assert dur.tolist() == [k] * 6
        (audio,) = list(peer.chunks([chunk]))
        assert audio.size == 6 * k * 600
