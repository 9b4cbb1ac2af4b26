"""Silero VAD v6 (16 kHz) in plain NumPy: the reference for the C++ chain (csrc/asr/vad).

::

    from dasllama.reference.silero_vad import ReferenceSileroVad
    ref = ReferenceSileroVad("silero_vad_v6.gguf")
    probs = ref.probabilities(audio)        # one float per 512 samples of 16 kHz audio

The model (Silero Team, silero-vad; the definition here is its ONNX graph, read node by node)
gives one speech probability per window of 512 samples (32 ms). Each step reads 576 samples:
the previous window's last 64 (zeros before the first window) and the window itself.

1. Front end. The 576 samples are extended on the right by a reflection of 64 samples
   (torch's ``reflect`` padding, which does not repeat the edge sample) to 640 and convolved
   with a fixed basis of 258 filters of 256 samples at a stride of 128: four frames. Rows
   0..128 of the basis are the real parts and rows 129..257 the imaginary parts of a windowed
   256-point rfft (129 bins); the feature is the magnitude sqrt(re^2 + im^2): [129, 4].
2. Encoder. Four 1-D convolutions with kernel 3 and zero padding 1, each followed by ReLU:
   129 -> 128 (stride 1), 128 -> 64 (stride 2), 64 -> 64 (stride 2), 64 -> 128 (stride 1).
   The four frames become one vector of 128.
3. Decoder. An LSTM cell (gates i, f, g, o in PyTorch's order) steps once on that vector from
   the state (h, c) the previous window left; then ReLU(h), a 1x1 convolution to one value and
   a sigmoid give the probability. The state carries h before the ReLU.

A clip is cut into windows of 512 samples; the last partial window is padded with zeros.

The weights are read from the GGUF that dasllama.convert.silero_vad writes, through
:mod:`dasllama.reference.gguf_file` (the ``gguf`` package, not dasllama's reader). Arithmetic is float64 here; the result is float32.
"""

from __future__ import annotations

import os
from typing import Dict, Tuple, Union

import numpy as np

from . import gguf_file

__all__ = ["ReferenceSileroVad", "load_weights"]

WINDOW = 512
CONTEXT = 64
REFLECT_PAD = 64
N_FFT = 256
HOP = 128
HIDDEN = 128


def load_weights(path: Union[str, os.PathLike]) -> Dict[str, np.ndarray]:
    """The file's tensors as float64 arrays in NumPy order, by name (read through
    :mod:`.gguf_file`: the gguf package, not dasllama's reader)."""
    with gguf_file.open(path) as f:
        return {name: f.tensor(name).astype(np.float64) for name in f.tensors}


def conv1d(x: np.ndarray, weight: np.ndarray, bias, stride: int, pad: int) -> np.ndarray:
    """torch.nn.functional.conv1d of x [C_in, T] with weight [C_out, C_in, K]: [C_out, T']."""
    c_in, T = x.shape
    k = weight.shape[2]
    xp = np.pad(x, ((0, 0), (pad, pad)))
    n_out = (T + 2 * pad - k) // stride + 1
    out = np.zeros((weight.shape[0], n_out))
    for t in range(n_out):
        patch = xp[:, t * stride:t * stride + k]               # [C_in, K]
        out[:, t] = np.tensordot(weight, patch, axes=([1, 2], [0, 1]))
    if bias is not None:
        out += bias[:, None]
    return out


def sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def lstm_cell(x, h, c, w_ih, w_hh, b_ih, b_hh) -> Tuple[np.ndarray, np.ndarray]:
    """One step of torch.nn.LSTMCell: gate blocks i, f, g, o of HIDDEN rows each."""
    z = w_ih @ x + b_ih + w_hh @ h + b_hh
    i, f, g, o = np.split(z, 4)
    c = sigmoid(f) * c + sigmoid(i) * np.tanh(g)
    h = sigmoid(o) * np.tanh(c)
    return h, c


class ReferenceSileroVad:
    """The model of one GGUF file; ``step`` is one window, ``probabilities`` a whole clip."""

    def __init__(self, path: Union[str, os.PathLike]):
        self.w = load_weights(path)
        self.reset()

    def reset(self) -> None:
        """Zero context and state: the start of a clip."""
        self.context = np.zeros(CONTEXT)
        self.h = np.zeros(HIDDEN)
        self.c = np.zeros(HIDDEN)

    def features(self, samples: np.ndarray) -> np.ndarray:
        """576 samples -> the magnitude spectrum [129, 4]."""
        x = np.asarray(samples, dtype=np.float64)
        x = np.concatenate([x, x[-2:-2 - REFLECT_PAD:-1]])    # reflect: edge not repeated
        basis = self.w["stft.basis"][:, None, :]              # [258, 1, 256]
        spec = conv1d(x[None, :], basis, None, stride=HOP, pad=0)
        bins = N_FFT // 2 + 1
        return np.sqrt(spec[:bins] ** 2 + spec[bins:] ** 2)

    def encode(self, feats: np.ndarray) -> np.ndarray:
        """[129, 4] -> [128]."""
        x = feats
        for i, stride in enumerate((1, 2, 2, 1)):
            x = conv1d(x, self.w[f"enc.{i}.weight"], self.w[f"enc.{i}.bias"], stride, pad=1)
            x = np.maximum(x, 0.0)
        assert x.shape == (128, 1), x.shape
        return x[:, 0]

    def step(self, window: np.ndarray) -> float:
        """One window of 512 samples -> its speech probability; the state moves on."""
        window = np.asarray(window, dtype=np.float64)
        assert window.shape == (WINDOW,), window.shape
        samples = np.concatenate([self.context, window])
        self.context = samples[-CONTEXT:]
        enc = self.encode(self.features(samples))
        w = self.w
        self.h, self.c = lstm_cell(enc, self.h, self.c, w["lstm.weight_ih"], w["lstm.weight_hh"],
                                   w["lstm.bias_ih"], w["lstm.bias_hh"])
        z = w["out.weight"][0] @ np.maximum(self.h, 0.0) + w["out.bias"][0]
        return float(sigmoid(z))

    def probabilities(self, audio: np.ndarray) -> np.ndarray:
        """A whole clip from a fresh state: ceil(n / 512) float32 probabilities."""
        audio = np.asarray(audio, dtype=np.float64).reshape(-1)
        n_windows = -(-audio.size // WINDOW)
        padded = np.zeros(n_windows * WINDOW)
        padded[:audio.size] = audio
        self.reset()
        return np.array([self.step(padded[i * WINDOW:(i + 1) * WINDOW])
                         for i in range(n_windows)], dtype=np.float32)
