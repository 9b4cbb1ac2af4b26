"""Pocket TTS building blocks in plain NumPy: norms, activations, rotary embeddings, windowed
attention, the transformer layer, and causal 1-D convolutions.

Shared by the FlowLM backbone (:mod:`.pocket`) and the Mimi codec (:mod:`.pocket_mimi`).
Definitions follow the ``pocket-tts`` package (modules/transformer.py, attention.py, rope.py,
conv.py, mlp.py); a comment says wherever the package's definition differs from the textbook.

Shapes: T rows in this call, P cached positions, H heads, Hkv key/value heads, Dh per-head
width, C channels, K kernel taps. A linear layer's weight W is (out, in): ``y = x @ W.T``.
"""

from __future__ import annotations

import math
from typing import Callable, Optional

import numpy as np

# =============================================================================================
# Norms and activations
# =============================================================================================


def layer_norm(x: np.ndarray, weight: Optional[np.ndarray], bias: Optional[np.ndarray],
               eps: float) -> np.ndarray:
    """LayerNorm (Ba et al. 2016) over the last axis: (x - mean) / sqrt(var + eps) * w + b,
    var the biased (1/n) variance. weight None: no affine part (the flow head's final norm)."""
    mean = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mean) ** 2, axis=-1, keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    if weight is not None:
        y = y * weight + bias
    return y


def flow_rms_norm(x: np.ndarray, alpha: np.ndarray, eps: float) -> np.ndarray:
    """The time embedder's "RMSNorm" (pocket_tts modules/mlp.py _rms_norm). Not the textbook
    RMSNorm: it divides x (not centred) by sqrt(eps + the *unbiased* variance of x), i.e.
    torch's x.var() with its default n - 1 denominator."""
    var = np.var(x, axis=-1, keepdims=True, ddof=1)
    return x * (alpha / np.sqrt(eps + var))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (Hendrycks & Gimpel 2016): the transformers' activation."""
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU: x * sigmoid(x). The flow head's activation."""
    return x / (1.0 + np.exp(-x))


def elu(x: np.ndarray) -> np.ndarray:
    """ELU with alpha 1: the SEANet activation."""
    return np.where(x > 0, x, np.expm1(np.minimum(x, 0)))


# =============================================================================================
# Attention
# =============================================================================================


def rope_interleaved(x: np.ndarray, pos: np.ndarray, max_period: float) -> np.ndarray:
    """Rotary position embedding (Su et al. 2021) with adjacent pairs, as pocket_tts rope.py.

    x: [T, heads, Dh]; pos: [T] positions. Pair i = (x[2i], x[2i+1]) turns by the angle
    pos * max_period^(-2i / Dh). (The package forms the angle in float32; here it is exact.)
    """
    d = x.shape[-1]
    theta = np.exp(np.arange(d // 2, dtype=np.float64) * (-math.log(max_period) * 2.0 / d))
    angle = pos.astype(np.float64)[:, None] * theta[None, :]             # [T, Dh/2]
    cos = np.cos(angle)[:, None, :].astype(x.dtype)                      # [T, 1, Dh/2]
    sin = np.sin(angle)[:, None, :].astype(x.dtype)
    re, im = x[..., 0::2], x[..., 1::2]
    out = np.empty_like(x)
    out[..., 0::2] = re * cos - im * sin
    out[..., 1::2] = re * sin + im * cos
    return out


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray,
              context: int = 0) -> np.ndarray:
    """Causal scaled dot-product attention, grouped-query, optionally windowed.

    q: [T, H, Dh] at positions q_pos; k, v: [P, Hkv, Dh] at positions 0..P-1. Query head h
    reads key/value head h // (H / Hkv) (torch repeat_interleave). Position i sees j when
    j <= i and, with context > 0, i - j < context. Returns [T, H * Dh].
    """
    T, H, Dh = q.shape
    P, Hkv, _ = k.shape
    g = H // Hkv
    qg = q.reshape(T, Hkv, g, Dh).transpose(1, 2, 0, 3)                  # [Hkv, g, T, Dh]
    scores = qg @ k.transpose(1, 2, 0)[:, None] / math.sqrt(Dh)         # [Hkv, g, T, P]
    key_pos = np.arange(P)
    visible = key_pos[None, :] <= q_pos[:, None]
    if context > 0:
        visible &= (q_pos[:, None] - key_pos[None, :]) < context
    probs = softmax(np.where(visible, scores, -np.inf), axis=-1)
    out = probs @ v.transpose(1, 0, 2)[:, None]                          # [Hkv, g, T, Dh]
    return out.transpose(2, 0, 1, 3).reshape(T, H * Dh)


class KVRows:
    """The rotated keys and the values of every position seen so far, per layer.

    k[i], v[i]: [P, Hkv, Dh] for layer i; ``n`` positions are filled (the next row's position).
    """

    def __init__(self, n_layers: int, kv_heads: int, head_dim: int, dtype):
        self.k = [np.zeros((0, kv_heads, head_dim), dtype) for _ in range(n_layers)]
        self.v = [np.zeros((0, kv_heads, head_dim), dtype) for _ in range(n_layers)]
        self.n = 0

    def copy(self) -> "KVRows":
        c = KVRows.__new__(KVRows)
        c.k, c.v, c.n = list(self.k), list(self.v), self.n
        return c


def transformer(x: np.ndarray, w: Callable[[str], np.ndarray], prefix: str, *, n_layers: int,
                num_heads: int, kv_heads: int, head_dim: int, rope_max_period: float,
                eps: float, context: int = 0, layer_scale: bool = False,
                cache: Optional[KVRows] = None) -> np.ndarray:
    """A pre-norm StreamingTransformer (pocket_tts modules/transformer.py) over rows x [T, d].

    Per layer: x += ls1 * out(attn(LN1(x))); x += ls2 * down(gelu_tanh(up(LN2(x)))), the layer
    scales ls present in Mimi's transformers only. Rows sit at positions cache.n .. cache.n+T-1
    (0.. without a cache); with a cache, their rotated keys and values are appended to it.
    ``w(name)`` returns the weight ``prefix + name`` in the compute dtype.
    """
    T = x.shape[0]
    start = cache.n if cache is not None else 0
    pos = np.arange(start, start + T)
    A, KV = num_heads * head_dim, kv_heads * head_dim
    for i in range(n_layers):
        b = f"{prefix}blk.{i}."
        h = layer_norm(x, w(b + "attn_norm.weight"), w(b + "attn_norm.bias"), eps)
        qkv = h @ w(b + "attn_qkv.weight").T                             # [T, A + 2 KV]
        q = qkv[:, :A].reshape(T, num_heads, head_dim)
        k = qkv[:, A:A + KV].reshape(T, kv_heads, head_dim)
        v = qkv[:, A + KV:].reshape(T, kv_heads, head_dim)
        q = rope_interleaved(q, pos, rope_max_period)
        k = rope_interleaved(k, pos, rope_max_period)
        if cache is not None:
            cache.k[i] = np.concatenate([cache.k[i], k])
            cache.v[i] = np.concatenate([cache.v[i], v])
            k, v = cache.k[i], cache.v[i]
        upd = attention(q, k, v, pos, context) @ w(b + "attn_out.weight").T
        x = x + (upd * w(b + "attn_scale") if layer_scale else upd)
        h = layer_norm(x, w(b + "ffn_norm.weight"), w(b + "ffn_norm.bias"), eps)
        upd = gelu_tanh(h @ w(b + "ffn_up.weight").T) @ w(b + "ffn_down.weight").T
        x = x + (upd * w(b + "ffn_scale") if layer_scale else upd)
    if cache is not None:
        cache.n += T
    return x


# =============================================================================================
# Causal convolutions (pocket_tts modules/conv.py, run on a whole signal at once)
# =============================================================================================


def conv1d_causal(x: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray], stride: int = 1,
                  dilation: int = 1, pad_mode: str = "constant") -> np.ndarray:
    """StreamingConv1d from a fresh state: a Conv1d on x [Cin, T] left-padded by
    (K - 1) * dilation + 1 - stride samples (zeros, or copies of the first sample with
    pad_mode "replicate"), so T / stride frames come out. weight [Cout, Cin, K]."""
    cout, cin, K = weight.shape
    pad = (K - 1) * dilation + 1 - stride
    if pad > 0:
        head = np.repeat(x[:, :1], pad, axis=1) if pad_mode == "replicate" \
            else np.zeros((cin, pad), x.dtype)
        x = np.concatenate([head, x], axis=1)
    n_out = (x.shape[1] - (K - 1) * dilation - 1) // stride + 1
    y = np.zeros((cout, n_out), x.dtype)
    for k in range(K):                                                   # one matmul per tap
        start = k * dilation
        y += weight[:, :, k] @ x[:, start:start + (n_out - 1) * stride + 1:stride]
    if bias is not None:
        y += bias[:, None]
    return y


def conv_transpose1d_causal(x: np.ndarray, weight: np.ndarray, bias: Optional[np.ndarray],
                            stride: int, depthwise: bool = False) -> np.ndarray:
    """StreamingConvTranspose1d over a whole signal: the ConvTranspose1d of x [Cin, T], cut to
    its first T * stride samples (the streaming module carries the last K - stride into the
    next call; decoding in one call they are never emitted). weight [Cin, Cout, K], or
    [C, 1, K] depthwise (groups = C)."""
    cin, cout_g, K = weight.shape
    T = x.shape[1]
    cout = cin if depthwise else cout_g
    y = np.zeros((cout, (T - 1) * stride + K), x.dtype)
    for k in range(K):
        contrib = weight[:, 0, k][:, None] * x if depthwise else weight[:, :, k].T @ x
        y[:, k:k + (T - 1) * stride + 1:stride] += contrib
    y = y[:, :T * stride]
    if bias is not None:
        y += bias[:, None]
    return y
