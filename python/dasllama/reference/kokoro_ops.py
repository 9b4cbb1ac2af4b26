"""The operators of Kokoro's ONNX graph in plain NumPy, with onnxruntime's semantics.

The int8 graph quantizes activations on the fly. To match onnxruntime these follow its rules
exactly (ONNX operator definitions; onnxruntime's CPU kernels for the com.microsoft ones):

- DynamicQuantizeLinear: the range [min(x, 0), max(x, 0)] over the whole tensor, scale =
  (max - min) / 255 (1 when the range is empty), zero point = round(-min / scale) clamped to
  [0, 255], q = clamp(round(x / scale) + zero point, 0, 255); round is half to even; all in
  float32.
- MatMulInteger / ConvInteger: exact integer sums of (qx - zx)(qw - zw) (done here in float64,
  exact for these sizes: |products| <= 255 * 255, sums far below 2**53), cast to float32, times
  the float32 product x_scale * w_scale. A ConvInteger bias is quantized by the graph as
  floor(b / (x_scale * w_scale)) and added to the integer sum before the cast.
- DynamicQuantizeLSTM: each GEMM quantizes its left operand as DynamicQuantizeLinear does: the
  input projection over the whole sequence at once, the recurrent one over h at every step;
  gates in ONNX order (i, o, f, c) with the summed bias Wb + Rb.
"""

from __future__ import annotations

import numpy as np

__all__ = ["dynamic_quantize", "matmul_integer", "conv_integer", "lstm_integer",
           "layer_norm", "instance_norm", "leaky_relu", "sigmoid", "fast_gelu", "softmax",
           "conv1d", "conv_transpose1d", "resize_linear_half_pixel"]

F32 = np.float32
_QMAX = 255   # uint8 activations


# ============================================================================ quantization

def dynamic_quantize(x: np.ndarray) -> tuple[np.ndarray, np.float32, int]:
    """DynamicQuantizeLinear: (q as int values in float64, scale, zero point)."""
    x = np.asarray(x, F32)
    lo = min(F32(x.min()), F32(0)) if x.size else F32(0)
    hi = max(F32(x.max()), F32(0)) if x.size else F32(0)
    scale = F32(1) if hi == lo else F32((hi - lo) / F32(_QMAX))
    zp = int(np.rint(np.clip(F32(0) - lo / scale, 0, _QMAX)))
    q = np.clip(np.rint(x / scale) + zp, 0, _QMAX)
    return q.astype(np.float64), scale, zp


def matmul_integer(x: np.ndarray, w: np.ndarray, w_zp: np.ndarray, w_scale: np.ndarray,
                   bias=None) -> np.ndarray:
    """y = (q(x) - zx) @ (w - w_zp) * (x_scale * w_scale) [+ bias]; x (..., K), w (K, N)
    int8, w_zp and w_scale per column (N,) or (1,)."""
    q, sx, zx = dynamic_quantize(x)
    acc = (q - zx) @ (w.astype(np.float64) - w_zp.astype(np.float64))
    y = acc.astype(F32) * (sx * w_scale.astype(F32))
    if bias is not None:
        y = y + bias.astype(F32)
    return y.astype(F32)


def _conv_taps(x: np.ndarray, w: np.ndarray, stride: int, pad: tuple, dilation: int,
               dtype) -> np.ndarray:
    """Sum over kernel taps of w[:, :, k] @ shifted x: x (Cin, L) -> (Cout, Lout), groups 1."""
    cin, length = x.shape
    cout, _, k = w.shape
    xp = np.zeros((cin, length + pad[0] + pad[1]), dtype)
    xp[:, pad[0]:pad[0] + length] = x
    span = (k - 1) * dilation + 1
    lout = (xp.shape[1] - span) // stride + 1
    y = np.zeros((cout, lout), dtype)
    for t in range(k):
        start = t * dilation
        cols = xp[:, start:start + stride * (lout - 1) + 1:stride]
        y += w[:, :, t].astype(dtype) @ cols
    return y


def conv_integer(x: np.ndarray, w: np.ndarray, w_zp: float, w_scale: float, attrs,
                 bias=None) -> np.ndarray:
    """ConvInteger (+ the graph's integer bias) then the float32 rescale. x (Cin, L) float32,
    w (Cout, Cin, K) int8 with a scalar zero point; attrs [stride, pad_l, pad_r, dilation,
    groups, output_padding]. Padding is with the activation's zero point (q - zx = 0)."""
    stride, pl, pr, dil, groups = (int(a) for a in attrs[:5])
    assert groups == 1, "the family's quantized convolutions are dense"
    q, sx, zx = dynamic_quantize(x)
    s = F32(sx * F32(w_scale))
    acc = _conv_taps(q - zx, w.astype(np.float64) - float(w_zp), stride, (pl, pr), dil,
                     np.float64)
    if bias is not None:
        acc = acc + np.floor(bias.astype(F32) / s).astype(np.float64)[:, None]
    return (acc.astype(F32) * s).astype(F32)


def lstm_integer(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray,
                 w_scale: np.ndarray, w_zp: np.ndarray, r_scale: np.ndarray,
                 r_zp: np.ndarray) -> np.ndarray:
    """A bidirectional DynamicQuantizeLSTM over x (T, In): returns (T, 2H), forward then
    backward. w (2, In, 4H), r (2, H, 4H) int8; b (2, 8H) = [Wb | Rb]; gates i, o, f, c."""
    steps = x.shape[0]
    hidden = r.shape[1]
    outs = []
    for d in range(2):
        seq = x if d == 0 else x[::-1]
        bias = (b[d, :4 * hidden] + b[d, 4 * hidden:]).astype(F32)
        xw = matmul_integer(seq, w[d], w_zp[d:d + 1], w_scale[d:d + 1])       # (T, 4H)
        h = np.zeros(hidden, F32)
        c = np.zeros(hidden, F32)
        hs = np.zeros((steps, hidden), F32)
        for t in range(steps):
            hr = matmul_integer(h[None, :], r[d], r_zp[d:d + 1], r_scale[d:d + 1])[0]
            g = (xw[t] + hr) + bias
            i = sigmoid(g[:hidden])
            o = sigmoid(g[hidden:2 * hidden])
            f = sigmoid(g[2 * hidden:3 * hidden])
            cand = np.tanh(g[3 * hidden:]).astype(F32)
            c = (f * c + i * cand).astype(F32)
            h = (o * np.tanh(c)).astype(F32)
            hs[t] = h
        outs.append(hs if d == 0 else hs[::-1])
    return np.concatenate(outs, axis=1)


# ============================================================================ float ops

def sigmoid(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, F32)
    return (F32(1) / (F32(1) + np.exp(-x))).astype(F32)


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    return np.where(x >= 0, x, x * F32(slope)).astype(F32)


def fast_gelu(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """com.microsoft FastGelu: the tanh approximation of GELU of x + bias."""
    x = (x + bias).astype(F32)
    inner = F32(0.7978845608028654) * (x + F32(0.044715) * x * x * x)
    return (F32(0.5) * x * (F32(1) + np.tanh(inner))).astype(F32)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(F32)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNormalization over the last axis as onnxruntime's CPU kernel computes it (and
    SkipLayerNormalization, on x = input + skip): float32 running sums of x and x * x in index
    order, var = E[x^2] - E[x]^2, y = (x - mean) / sqrt(var + eps) * weight + bias."""
    x = np.asarray(x, F32)
    n = F32(x.shape[-1])
    total = np.cumsum(x, axis=-1, dtype=F32)[..., -1:]            # sequential, as the loop
    squares = np.cumsum(x * x, axis=-1, dtype=F32)[..., -1:]
    mean = total / n
    denom = np.sqrt(squares / n - mean * mean + F32(eps)).astype(F32)
    return ((x - mean) / denom * weight.astype(F32) + bias.astype(F32)).astype(F32)


def instance_norm(x: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    """The graph's instance norm of x (C, L) over time, as ReduceMean / Sub / Mul /
    ReduceMean / Add / Sqrt / Div in float32."""
    mean = x.mean(axis=1, keepdims=True, dtype=np.float64).astype(F32)
    d = (x - mean).astype(F32)
    var = (d * d).mean(axis=1, keepdims=True, dtype=np.float64).astype(F32)
    return (d / np.sqrt(var + F32(eps))).astype(F32)


def conv1d(x: np.ndarray, w: np.ndarray, bias, attrs) -> np.ndarray:
    """A float Conv (groups 1): x (Cin, L), w (Cout, Cin, K)."""
    stride, pl, pr, dil, groups = (int(a) for a in attrs[:5])
    assert groups == 1
    y = _conv_taps(x.astype(F32), w.astype(F32), stride, (pl, pr), dil, F32)
    if bias is not None:
        y = y + bias.astype(F32)[:, None]
    return y.astype(F32)


def conv_transpose1d(x: np.ndarray, w: np.ndarray, bias, attrs) -> np.ndarray:
    """A float ConvTranspose: x (Cin, N), w (Cin, Cout / groups, K); groups 1 or depthwise
    (groups = Cin = Cout). Output length s (N - 1) + op + K - pad_l - pad_r."""
    stride, pl, pr, dil, groups = (int(a) for a in attrs[:5])
    opad = int(attrs[5]) if len(attrs) > 5 else 0
    cin, n = x.shape
    k = w.shape[2]
    assert dil == 1
    full = stride * (n - 1) + k + opad
    if groups == 1:
        cout = w.shape[1]
        y = np.zeros((cout, full), F32)
        for t in range(k):
            y[:, t:t + stride * (n - 1) + 1:stride] += w[:, :, t].T.astype(F32) @ x
    else:
        assert groups == cin and w.shape[1] == 1
        y = np.zeros((cin, full), F32)
        for t in range(k):
            y[:, t:t + stride * (n - 1) + 1:stride] += w[:, 0, t][:, None] * x
    y = y[:, pl:full - pr]
    if bias is not None:
        y = y + bias.astype(F32)[:, None]
    return y.astype(F32)


def resize_linear_half_pixel(x: np.ndarray, scale: float, out_len: int) -> np.ndarray:
    """Resize (linear, half_pixel) along the last axis as onnxruntime maps coordinates:
    x_in = (i + 0.5) / scale - 0.5 in float32, clamped to the input; x (C, L)."""
    length = x.shape[-1]
    i = np.arange(out_len, dtype=F32)
    pos = (i + F32(0.5)) / F32(scale) - F32(0.5)
    pos = np.clip(pos, 0, length - 1).astype(F32)
    lo = np.floor(pos).astype(np.int64)
    hi = np.minimum(lo + 1, length - 1)
    frac = (pos - lo).astype(F32)
    return (x[..., lo] * (F32(1) - frac) + x[..., hi] * frac).astype(F32)
