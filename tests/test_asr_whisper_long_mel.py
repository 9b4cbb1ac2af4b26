"""The C++ log-mel of a clip longer than one stretch of the front end's working buffers
(csrc/asr/whisper/mel.h, kChunkFrames = 3000 frames) against the NumPy reference's one pass
over the whole clip.

The clip puts digital silence in the first stretch and the loudest part in the second, so the
clamp to (the clip's maximum - 8) must reach back across stretches: the negative control is
the plausible bug of clamping each stretch to its own maximum. The bar is test_asr_whisper's
log-mel bar (float32 DFT by matmul against the float64 reference).
"""

from __future__ import annotations

import numpy as np
import pytest
from parity import check, rel_l2 as rel

from dasllama import _core
from dasllama.convert.whisper import convert_whisper
from dasllama.reference import whisper as refw

BAR_MEL = 4e-6
STRETCH = 3000           # frames per stretch of the C++ front end (mel.h's kChunkFrames)
RATE, HOP = 16000, 160


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    from dasllama.testing.whisper import write_random_whisper_dir

    folder = write_random_whisper_dir(tmp_path_factory.mktemp("rw") / "model", seed=5)
    return convert_whisper(folder, folder.parent / "random-whisper.gguf")


def long_clip() -> np.ndarray:
    """65 s: 10 s of faint noise and 20 s of zeros (stretch 1), 30 s of loud noise (stretch 2),
    5 s of zeros (the partial last stretch)."""
    rng = np.random.default_rng(11)
    parts = [0.01 * rng.standard_normal(10 * RATE), np.zeros(20 * RATE),
             0.3 * rng.standard_normal(30 * RATE), np.zeros(5 * RATE)]
    return np.concatenate(parts).astype(np.float32)


def clamped_per_stretch(ref: refw.ReferenceWhisper, samples: np.ndarray) -> np.ndarray:
    """The control: the reference's log-mel with each stretch clamped to its own maximum."""
    saved = refw.DYNAMIC_RANGE
    refw.DYNAMIC_RANGE = np.inf          # the unclamped values, mapped by (x + 4) / 4
    try:
        raw = ref.log_mel(samples)
    finally:
        refw.DYNAMIC_RANGE = saved
    out = raw.copy()
    for f0 in range(0, raw.shape[1], STRETCH):
        part = out[:, f0:f0 + STRETCH]
        np.maximum(part, part.max() - saved / 4.0, out=part)
    return out


def test_long_clip_log_mel_matches_one_pass_reference(model_path):
    samples = long_clip()
    ours = _core.WhisperModel(str(model_path), 2).log_mel(samples)
    ref = refw.ReferenceWhisper(model_path)
    want = ref.log_mel(samples)
    assert ours.shape == want.shape == (80, samples.size // HOP + 1)
    assert want.shape[1] > 2 * STRETCH          # three stretches, the last one partial
    control = clamped_per_stretch(ref, samples)
    check("65 s log-mel, three stretches", rel(ours, want), BAR_MEL, rel(ours, control))


def test_clips_around_a_stretch_edge_match_the_reference(model_path):
    """Clips whose frame count ends just before, at and after a stretch boundary."""
    model = _core.WhisperModel(str(model_path), 2)
    ref = refw.ReferenceWhisper(model_path)
    rng = np.random.default_rng(12)
    for frames in (STRETCH - 1, STRETCH, STRETCH + 1):
        samples = (0.1 * rng.standard_normal((frames - 1) * HOP + 37)).astype(np.float32)
        ours = model.log_mel(samples)
        want = ref.log_mel(samples)
        assert ours.shape == want.shape == (80, frames)
        shifted = np.roll(want, 1, axis=1)     # control: frames one hop late
        check(f"log-mel of {frames} frames", rel(ours, want), BAR_MEL, rel(ours, shifted))
