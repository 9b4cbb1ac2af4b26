"""Mimi decoding beside the frame loop on the CPU (knob cpu.pocket.codec_overlap): the audio and
its pieces equal the serial chain's bit for bit.

Mode 0 decodes a call's frames after the frame loop; mode 1 posts each frame's decoding to a
pool worker as the frame is made (the call's last frame decoded on the whole pool); mode 2
keeps a worker for the codec and the frame loop on the calling thread. The decoder gives the
same samples for any split of the frames into calls and any thread count, so the three must
agree exactly, with the same pieces (a stream's order and sizes). Random-weight model of
dasllama.testing.pocket, f32 and q8_0 lanes, 2 threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from requires import require as _require

KNOB = "cpu.pocket.codec_overlap"
MODES = (0, 1, 2)
TEXT = "The quick brown fox jumps over the lazy dog near the quiet river."


@pytest.fixture(scope="module")
def fx():
    _require("torch")
    _require("pocket_tts")
    _require("tokenizers")
    from dasllama.testing.pocket import shared_fixture
    return shared_fixture(("f32", "q8_0"))


@pytest.fixture(autouse=True)
def _knob_back():
    from dasllama import _core
    yield
    _core.tuning_reset(KNOB)


def _stream(tts, mode, **kw):
    """The pieces of one stream in `mode`, and the core's stage counters over it."""
    from dasllama import _core
    _core.tuning_set(KNOB, mode)
    pieces = list(tts.stream(TEXT, None, kw.pop("temperature", 0.3), kw.pop("seed", 3), **kw))
    return pieces, tts.stats["stages"]


def _same_pieces(a, b) -> bool:
    return len(a) == len(b) and all(x.shape == y.shape and np.array_equal(x, y)
                                    for x, y in zip(a, b))


@pytest.mark.parametrize("lane", ["f32", "q8_0"])
def test_overlapped_audio_equals_serial(fx, lane):
    """40 frames pinned (EOS off) and a free-running stream ended by the EOS head: every mode
    gives the serial chain's pieces exactly, and the counters show where Mimi ran."""
    from dasllama.tts import TTS
    with TTS(fx.gguf_path(lane), n_threads=2) as tts:
        for kw in ({"max_frames": 40, "eos": False}, {"eos_threshold": -1.0, "seed": 5}):
            got = {m: _stream(tts, m, **dict(kw)) for m in MODES}
            serial, stages = got[0]
            frames = stages["frames"]
            assert frames >= 7 and sum(len(p) for p in serial) == frames * int(tts.config["frame_size"])
            a = np.concatenate(serial)
            assert np.all(np.isfinite(a)) and np.abs(a).max() > 0
            assert stages["frames_overlapped"] == 0
            for m in (1, 2):
                pieces, st = got[m]
                assert st["frames"] == frames
                assert _same_pieces(pieces, serial), f"mode {m} differs from the serial chain"
            # Mode 1 decodes each call's last frame on the whole pool; mode 2 every frame on
            # the codec's worker (unless the next frame's EOS ended the call).
            calls = len(serial)
            assert frames - calls <= got[1][1]["frames_overlapped"] <= frames - 1
            assert got[2][1]["frames_overlapped"] == frames
            # Pool jobs: the codec's worker decodes without any (its pool is its own thread),
            # so mode 1 keeps the frame loop's and the call's last frame's; mode 2, whose
            # frame loop keeps to the calling thread too, none.
            assert got[2][1]["step_jobs"] == 0
            assert 0 < got[1][1]["step_jobs"] < stages["step_jobs"]


def test_negative_controls(fx):
    """The comparison is not blind: a codec fed two frames out of order, or a stream of another
    seed, gives other audio than the serial chain."""
    from dasllama.tts import TTS
    with TTS(fx.gguf_path("f32"), n_threads=2) as tts:
        serial, _ = _stream(tts, 0, max_frames=12, eos=False)
        lat = tts.model.record()["latents"]
        assert lat.shape[0] == 12
        mimi_in = tts.model.denormalize(lat)
        fade = tts.sample_rate // 200
        decoded = tts.model.mimi_decode(mimi_in, [1] * 12)
        a = np.concatenate(serial)
        # The chunk's fade-in aside, decoding the record's latents frame by frame gives the
        # stream's samples exactly: the control below changes only the order.
        assert np.array_equal(decoded[fade:], a[fade:])
        swapped = mimi_in.copy()
        swapped[[4, 5]] = swapped[[5, 4]]
        reordered = tts.model.mimi_decode(swapped, [1] * 12)
        assert not np.array_equal(reordered[fade:], a[fade:])
        other, _ = _stream(tts, 1, max_frames=12, eos=False, seed=4)
        assert not _same_pieces(other, serial)


def test_one_thread_runs_serially(fx):
    """A pool of one thread has no worker: every mode decodes after the frames, and the audio
    equals the two-thread chain's."""
    from dasllama.tts import TTS
    with TTS(fx.gguf_path("f32"), n_threads=2) as tts:
        two, _ = _stream(tts, 1, max_frames=13, eos=False)
    with TTS(fx.gguf_path("f32"), n_threads=1) as tts:
        for m in MODES:
            one, st = _stream(tts, m, max_frames=13, eos=False)
            assert st["frames_overlapped"] == 0
            assert _same_pieces(one, two)


def test_error_mid_call_ends_the_chunk(fx):
    """Noise rows that run out inside a call: the typed error names them, the posted decodes
    are waited for (no crash, no hang), and the model goes on serving afterwards."""
    from dasllama.errors import DasllamaError
    from dasllama.tts import TTS
    rows = np.random.default_rng(0).standard_normal((4, 32)).astype(np.float32)
    with TTS(fx.gguf_path("f32"), n_threads=2) as tts:
        want, _ = _stream(tts, 0, max_frames=9, eos=False)
        for m in MODES:
            with pytest.raises(DasllamaError, match="noise"):
                _stream(tts, m, max_frames=9, eos=False, noise=rows)
            again, _ = _stream(tts, m, max_frames=9, eos=False)
            assert _same_pieces(again, want)
