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

A float32 file (hexgrad's PyTorch checkpoint converted) uses the float forms of the same ops
(matmul_float, conv1d, lstm_float: the same recurrence as lstm_integer with float GEMMs).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["dynamic_quantize", "matmul_integer", "conv_integer", "lstm_integer", "lstm_float",
           "matmul_float", "layer_norm", "instance_norm", "leaky_relu", "sigmoid", "tanh",
           "fast_gelu", "gelu_erf", "softmax",
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


def _bilstm(x: np.ndarray, project_in, project_h, bias: np.ndarray, hidden: int) -> np.ndarray:
    """The bidirectional recurrence both lanes share: x (T, In) -> (T, 2H), forward then
    backward. project_in(d, seq) (T, 4H) and project_h(d, h) (4H,) are the lane's GEMMs for
    direction d; bias (2, 8H) = [Wb | Rb]; gates in the layout's order i, o, f, c."""
    steps = x.shape[0]
    outs = []
    for d in range(2):
        seq = x if d == 0 else x[::-1]
        b = (bias[d, :4 * hidden] + bias[d, 4 * hidden:]).astype(F32)
        xw = project_in(d, seq)                                                # (T, 4H)
        h = np.zeros(hidden, F32)
        c = np.zeros(hidden, F32)
        hs = np.zeros((steps, hidden), F32)
        for t in range(steps):
            g = (xw[t] + project_h(d, h)) + b
            i = sigmoid(g[:hidden])
            o = sigmoid(g[hidden:2 * hidden])
            f = sigmoid(g[2 * hidden:3 * hidden])
            cand = tanh(g[3 * hidden:])
            c = ((c * f).astype(F32) + (i * cand).astype(F32)).astype(F32)
            h = (tanh(c) * o).astype(F32)
            hs[t] = h
        outs.append(hs if d == 0 else hs[::-1])
    return np.concatenate(outs, axis=1)


def lstm_integer(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray,
                 w_scale: np.ndarray, w_zp: np.ndarray, r_scale: np.ndarray,
                 r_zp: np.ndarray) -> np.ndarray:
    """A bidirectional DynamicQuantizeLSTM over x (T, In): returns (T, 2H), forward then
    backward. w (2, In, 4H), r (2, H, 4H) int8; b (2, 8H) = [Wb | Rb]; gates i, o, f, c."""
    return _bilstm(
        x, lambda d, seq: matmul_integer(seq, w[d], w_zp[d:d + 1], w_scale[d:d + 1]),
        lambda d, h: matmul_integer(h[None, :], r[d], r_zp[d:d + 1], r_scale[d:d + 1])[0],
        b, r.shape[1])


def lstm_float(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A bidirectional float LSTM over x (T, In): w (2, In, 4H), r (2, H, 4H) float32, b and
    the gate order as :func:`lstm_integer`."""
    return _bilstm(x, lambda d, seq: matmul_float(seq, w[d]),
                   lambda d, h: (h @ r[d].astype(F32)).astype(F32), b, r.shape[1])


def matmul_float(x: np.ndarray, w: np.ndarray, bias=None) -> np.ndarray:
    """y = x @ w [+ bias] in float32; x (..., K), w (K, N)."""
    y = np.asarray(x, F32) @ w.astype(F32)
    if bias is not None:
        y = y + bias.astype(F32)
    return y.astype(F32)


# ============================================================================ float ops

def _fma(a, b, c) -> np.ndarray:
    """float32 fused multiply-add: the product of two float32 values is exact in float64,
    so one rounding to float32 remains (a double rounding of the sum is possible, rarely)."""
    return (np.asarray(a, np.float64) * np.asarray(b, np.float64)
            + np.asarray(c, np.float64)).astype(F32)


def _rational(x2: np.ndarray, coefs) -> np.ndarray:
    """Horner's rule in x^2 with a fused multiply-add per step, as MLAS's kernels do."""
    acc = _fma(x2, F32(coefs[0]), F32(coefs[1]))
    for c in coefs[2:]:
        acc = _fma(acc, x2, F32(c))
    return acc


# onnxruntime's logistic and tanh (MLAS, on x86-64 with FMA): the rational approximations in
# x^2 that Eigen uses, on inputs clamped to [-18, 18] and [-9, 9]. Reproduced because the
# LSTMs' hidden states are quantized at every step, where a last-bit difference can move a
# value to the next quantization step.
_LOGISTIC_P = (4.37031012579801e-11, 1.15627324459942e-07, 6.08574864600143e-05,
               8.51377133304701e-03, 2.48287947061529e-01)
_LOGISTIC_Q = (6.10247389755681e-13, 5.76102136993427e-09, 6.29106785017040e-06,
               1.70198817374094e-03, 1.16817656904453e-01, 9.93151921023180e-01)
_TANH_P = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)
_TANH_Q = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """onnxruntime's Sigmoid (MlasComputeLogistic)."""
    x = np.clip(np.asarray(x, F32), F32(-18), F32(18))
    x2 = (x * x).astype(F32)
    p = (_rational(x2, _LOGISTIC_P) * x).astype(F32)
    q = _rational(x2, _LOGISTIC_Q)
    return np.clip(p / q + F32(0.5), F32(0), F32(1)).astype(F32)


def tanh(x: np.ndarray) -> np.ndarray:
    """onnxruntime's Tanh (MlasComputeTanh)."""
    x = np.clip(np.asarray(x, F32), F32(-9), F32(9))
    x2 = (x * x).astype(F32)
    p = (_rational(x2, _TANH_P) * x).astype(F32)
    return (p / _rational(x2, _TANH_Q)).astype(F32)


def leaky_relu(x: np.ndarray, slope: float) -> np.ndarray:
    return np.where(x >= 0, x, x * F32(slope)).astype(F32)


def fast_gelu(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """com.microsoft FastGelu as onnxruntime computes it: v = x + bias, then
    v * 0.5 * (1 + tanh(v * (sqrt(2/pi) + 0.044715 sqrt(2/pi) v^2))) with MLAS's tanh."""
    v = (x + bias).astype(F32)
    inner = (v * (F32(0.7978845608028654) + F32(0.035677408136300125) * v * v)).astype(F32)
    return (v * F32(0.5) * (F32(1) + tanh(inner))).astype(F32)


def gelu_erf(x: np.ndarray, bias: np.ndarray) -> np.ndarray:
    """GELU in its erf form (transformers' "gelu"): v * 0.5 * (1 + erf(v / sqrt 2)), v = x +
    bias; erf in float64."""
    v = (x + bias).astype(F32)
    erf = np.vectorize(math.erf, otypes=[np.float64])(v.astype(np.float64) / math.sqrt(2.0))
    return (v * F32(0.5) * (F32(1) + erf.astype(F32))).astype(F32)


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(F32)


_LANES = 8   # the x86-64 LayerNorm kernel's vector width (AVX2: 8 floats)


def _lane_sum(v: np.ndarray) -> np.ndarray:
    """The kernel's horizontal sum of 8 lanes: (l0+l4)+(l2+l6) + (l1+l5)+(l3+l7)."""
    r = (v[..., 0:4] + v[..., 4:8]).astype(F32)
    r2 = (r[..., 0:2] + r[..., 2:4]).astype(F32)
    return (r2[..., 0] + r2[..., 1]).astype(F32)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, eps: float) -> np.ndarray:
    """LayerNormalization over the last axis as onnxruntime's x86-64 kernel computes it: sums
    of x and x * x in 8 float32 lanes (the squares by fused multiply-add) reduced pairwise,
    var = E[x^2] - E[x]^2, y = ((x - mean) / sqrt(var + eps)) * weight + bias, the last step
    fused. Rows whose length is not a multiple of 8 finish with a running sum."""
    x = np.asarray(x, F32)
    n = x.shape[-1]
    full = n - n % _LANES
    lanes = x[..., :full].reshape(*x.shape[:-1], full // _LANES, _LANES)
    vsum = np.zeros(x.shape[:-1] + (_LANES,), F32)
    vsq = np.zeros(x.shape[:-1] + (_LANES,), F32)
    for j in range(lanes.shape[-2]):
        v = lanes[..., j, :]
        vsum = (vsum + v).astype(F32)
        vsq = _fma(v, v, vsq)
    total, squares = _lane_sum(vsum), _lane_sum(vsq)
    for j in range(full, n):
        total = (total + x[..., j]).astype(F32)
        squares = (squares + (x[..., j] * x[..., j]).astype(F32)).astype(F32)
    mean = (total / F32(n)).astype(F32)[..., None]
    var = ((squares / F32(n)).astype(F32)[..., None] - (mean * mean).astype(F32)).astype(F32)
    inv = (F32(1) / np.sqrt((var + F32(eps)).astype(F32))).astype(F32)
    y = ((x - mean).astype(F32) * inv).astype(F32)
    return _fma(y, weight.astype(F32), bias.astype(F32))


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
