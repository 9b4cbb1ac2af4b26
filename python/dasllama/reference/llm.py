"""A decoder-only language model's forward pass in plain NumPy: the reference for the fast paths.

::

    from dasllama.reference.llm import ReferenceLLM
    m = ReferenceLLM("model.gguf")
    m.config["arch"]                  # 'llama'
    m.logits([504, 3575, 282])        # float32 [3, n_vocab]: next-token logits at every position
    m.greedy([504, 3575, 282], 16)    # 16 argmax continuations, decoded with a KV cache

Architectures: llama, qwen2, qwen3, qwen3moe, gemma3 (their differences are tabled in
:mod:`dasllama.reference.llm_arch`). Each is the transformer decoder of Vaswani et al. (2017)
with the LLaMA changes (Touvron et al. 2023): RMSNorm before each sub-layer, rotary position
embeddings (Su et al. 2021) on queries and keys, a gated feed-forward network, and grouped-query
attention (Ainslie et al. 2023). The code follows the published model definitions (Hugging Face
transformers' modeling_{llama,qwen2,qwen3,qwen3_moe,gemma3}.py) as laid out in GGUF by
llama.cpp (src/llama-model.cpp, src/models/*.cpp); comments say where the file changes the math.

Conventions
-----------
- Shapes in comments: T tokens in this call, P positions in the cache after it, E = n_embd,
  H / Hkv query / key-value heads, D / Dv key / value width per head, F = n_ff, V = n_vocab,
  X experts, K experts used per token.
- A llama.cpp matrix of shape {in, out} is the NumPy array W of shape (out, in): one row per
  output feature, so a linear layer is ``y = x @ W.T``.
- Precision: the file is read through the ``gguf`` package and every tensor dequantized to
  float32 by :mod:`dasllama.reference.quants` (:mod:`.gguf_file`; exactly: each quantized
  format is a float32 formula), never by dasllama's C++ reader; the reference then widens to ``dtype`` (float64 by default) and does
  all arithmetic in it. Logits are rounded to float32 at the end. ``dtype=np.float32`` halves
  memory and time at about 1e-6 relative error.

Nothing here is fast: the hot spot is the weight-matrix product ``x @ W.T`` in every linear
layer (and the [T, E] x [E, V] output layer, the largest matrix of a small model).
"""

from __future__ import annotations

import math
import os
from typing import Any, Sequence

import numpy as np

from . import gguf_file as gguf
from ..errors import GGUFError, ShapeError
from .llm_arch import ARCHITECTURES, is_local_layer, read_config, tensor_names

__all__ = ["ReferenceLLM", "ARCHITECTURES", "rms_norm", "rope", "attention"]


# =============================================================================================
# Building blocks
# =============================================================================================

def rms_norm(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """RMSNorm (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps) * weight, over the last axis.

    Gemma's definition multiplies by (1 + weight); its GGUF converter stores 1 + weight, so the
    stored weight multiplies here as for every other architecture.
    """
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return x / np.sqrt(ms + eps) * weight


def silu(x: np.ndarray) -> np.ndarray:
    """SiLU / swish: x * sigmoid(x)."""
    return x / (1.0 + np.exp(-x))


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """GELU, tanh approximation (Hendrycks & Gimpel 2016), Gemma's hidden_activation."""
    # math.sqrt, not np.sqrt: a NumPy float64 scalar would promote a float32 x to float64
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """exp(x - max) / sum, along ``axis``; -inf entries get probability 0."""
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def rope(x: np.ndarray, pos: np.ndarray, n_rot: int, base: float, style: str,
         freq_scale: float = 1.0, freq_factors: np.ndarray | None = None) -> np.ndarray:
    """Rotary position embedding of queries or keys.

    x: [T, heads, D]; pos: [T] integer positions. The first n_rot dims of each head form
    n_rot/2 pairs; pair i is rotated by the angle pos * freq_scale * theta_i / factor_i with
    theta_i = base^(-2i / n_rot). Dims past n_rot pass through unchanged.
    style "adjacent": pair i is (x[2i], x[2i+1]) (llama.cpp ROPE_TYPE_NORM);
    style "half":     pair i is (x[i], x[i + n_rot/2]) (llama.cpp ROPE_TYPE_NEOX).
    """
    half = n_rot // 2
    theta = base ** (-np.arange(half, dtype=np.float64) * 2.0 / n_rot)        # [n_rot/2]
    if freq_factors is not None:
        theta = theta / freq_factors
    angle = (pos.astype(np.float64) * freq_scale)[:, None] * theta[None, :]   # [T, n_rot/2]
    cos = np.cos(angle)[:, None, :].astype(x.dtype)                           # [T, 1, n_rot/2]
    sin = np.sin(angle)[:, None, :].astype(x.dtype)
    out = x.copy()
    if style == "adjacent":
        a, b = x[..., 0:n_rot:2], x[..., 1:n_rot:2]
        out[..., 0:n_rot:2] = a * cos - b * sin
        out[..., 1:n_rot:2] = a * sin + b * cos
    elif style == "half":
        a, b = x[..., :half], x[..., half:n_rot]
        out[..., :half] = a * cos - b * sin
        out[..., half:n_rot] = a * sin + b * cos
    else:
        raise ValueError(f"rope style must be 'adjacent' or 'half', got {style!r}")
    return out


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, q_pos: np.ndarray, scale: float,
              window: int = 0) -> np.ndarray:
    """Causal scaled dot-product attention with grouped-query heads.

    q: [T, H, D] at positions q_pos [T]; k: [P, Hkv, D], v: [P, Hkv, Dv] at positions 0..P-1.
    Query head h reads key/value head h // (H / Hkv) (each K/V head serves a contiguous group).
    Query position i sees key position j when j <= i and, with a window w > 0, i - j < w.
    Returns [T, H * Dv].
    """
    T, H, D = q.shape
    P, Hkv, Dv = v.shape
    g = H // Hkv                                                   # query heads per K/V head
    qg = q.reshape(T, Hkv, g, D).transpose(1, 2, 0, 3)             # [Hkv, g, T, D]
    kt = k.transpose(1, 2, 0)[:, None]                             # [Hkv, 1, D, P]
    scores = (qg @ kt) * scale                                     # [Hkv, g, T, P]

    key_pos = np.arange(P)
    visible = key_pos[None, :] <= q_pos[:, None]                   # [T, P] causal
    if window > 0:
        visible &= (q_pos[:, None] - key_pos[None, :]) < window   # sliding window
    scores = np.where(visible, scores, -np.inf)

    probs = softmax(scores, axis=-1)                               # [Hkv, g, T, P]
    out = probs @ v.transpose(1, 0, 2)[:, None]                    # [Hkv, g, T, Dv]
    return out.transpose(2, 0, 1, 3).reshape(T, H * Dv)            # heads in order h = kv*g + j


def swiglu_ffn(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, w_down: np.ndarray,
               act=silu) -> np.ndarray:
    """Gated feed-forward network (Shazeer 2020): down(act(x @ gate^T) * (x @ up^T)).

    x: [T, E]; w_gate, w_up: [F, E]; w_down: [E, F]. act = SiLU gives SwiGLU (Llama, Qwen);
    act = GELU-tanh gives GeGLU (Gemma).
    """
    return (act(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T


def moe_ffn(x: np.ndarray, w_router: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray,
            w_down: np.ndarray, k: int) -> np.ndarray:
    """Sparse mixture of SwiGLU experts (Qwen3-MoE).

    x: [T, E]; w_router: [X, E]; w_gate, w_up: [X, Fe, E]; w_down: [X, E, Fe].
    Router: p = softmax(x @ router^T) over all X experts; keep the k most probable; their
    weights are renormalized to sum to 1 (Qwen3-MoE's norm_topk_prob; llama.cpp passes
    norm_w = true for qwen3moe). Output: sum over the kept experts of weight * expert(x).
    """
    probs = softmax(x @ w_router.T, axis=-1)                       # [T, X]
    chosen = np.argsort(-probs, axis=-1, kind="stable")[:, :k]     # [T, K] expert ids
    weights = np.take_along_axis(probs, chosen, axis=-1)           # [T, K]
    weights = weights / weights.sum(axis=-1, keepdims=True)

    out = np.zeros_like(x)                                         # [T, E]
    for e in np.unique(chosen):                                    # only experts some token chose
        rows, slot = np.nonzero(chosen == e)                       # tokens routed to e
        y = swiglu_ffn(x[rows], w_gate[e], w_up[e], w_down[e])     # [n, E]
        out[rows] += weights[rows, slot][:, None] * y
    return out


# =============================================================================================
# The KV cache
# =============================================================================================

class KVCache:
    """Rotated keys and values of every position processed so far, for every layer.

    k: [n_layer, capacity, Hkv, D], v: [n_layer, capacity, Hkv, Dv]; positions 0..n-1 are filled.
    """

    def __init__(self, c: dict[str, Any], capacity: int, dtype):
        self.k = np.zeros((c["n_layer"], capacity, c["n_head_kv"], c["head_dim"]), dtype)
        self.v = np.zeros((c["n_layer"], capacity, c["n_head_kv"], c["head_dim_v"]), dtype)
        self.n = 0

    @property
    def capacity(self) -> int:
        return self.k.shape[1]


# =============================================================================================
# The model
# =============================================================================================

class ReferenceLLM:
    """A GGUF language model evaluated in NumPy, slowly and plainly.

    ``config`` holds the hyperparameters (see llm_arch.read_config); ``weights`` maps every
    tensor name of the file to its values in ``dtype`` (NumPy order, see Conventions).
    """

    def __init__(self, path: str | os.PathLike, dtype=np.float64):
        self.dtype = np.dtype(dtype)
        with gguf.open(path) as f:
            self.config = read_config(f.metadata, f.tensors)
            self.weights = {name: f.tensor(name).astype(self.dtype, copy=False)
                            for name in f.tensors}
        self._check_tensors()

    @property
    def output(self) -> np.ndarray:
        """The output (lm head) matrix [V, E]: token_embd itself when the file ties them."""
        return self.weights["token_embd.weight" if self.config["tied_output"] else "output.weight"]

    @property
    def rope_freqs(self) -> np.ndarray | None:
        """llama's optional per-frequency divisors [n_rot/2] (Llama 3.1 long-context RoPE)."""
        return self.weights.get("rope_freqs.weight")

    # ----- weights ---------------------------------------------------------------------------

    def w(self, il: int, name: str) -> np.ndarray:
        """Layer il's tensor ``blk.{il}.{name}``."""
        full = f"blk.{il}.{name}"
        if full not in self.weights:
            raise GGUFError(f"tensor {full!r} is missing; {self.config['arch']} needs it")
        return self.weights[full]

    def has(self, il: int, name: str) -> bool:
        return f"blk.{il}.{name}" in self.weights

    def _check_tensors(self) -> None:
        """Every tensor the forward pass needs is present with its shape, and none is unused."""
        c = self.config
        required, optional = tensor_names(c)
        missing = sorted(required - self.weights.keys())
        if missing:
            raise GGUFError(f"{c['arch']} needs tensor {missing[0]!r}, missing from the file "
                            f"({len(missing)} missing in all)")
        unknown = sorted(self.weights.keys() - required - optional)
        if unknown:
            raise NotImplementedError(f"tensor {unknown[0]!r} ({len(unknown)} unknown in all) "
                                      f"has no place in the reference {c['arch']} forward pass")
        E, H, Hkv, D, Dv = c["n_embd"], c["n_head"], c["n_head_kv"], c["head_dim"], c["head_dim_v"]
        expect = {"attn_q.weight": (H * D, E), "attn_k.weight": (Hkv * D, E),
                  "attn_v.weight": (Hkv * Dv, E), "attn_output.weight": (E, H * Dv)}
        for il in range(c["n_layer"]):
            for name, shape in expect.items():
                if self.w(il, name).shape != shape:
                    raise ShapeError(f"blk.{il}.{name} has shape {self.w(il, name).shape}, the "
                                     f"hyperparameters say {shape}")
        if self.output.shape != (c["n_vocab"], E):
            raise ShapeError(f"output matrix has shape {self.output.shape}, expected "
                             f"{(c['n_vocab'], E)}")

    # ----- one transformer block -------------------------------------------------------------

    def attention_block(self, il: int, x: np.ndarray, pos: np.ndarray,
                        cache: KVCache) -> np.ndarray:
        """Self-attention of layer il on normalized input x: [T, E] -> [T, E].

        Appends this call's keys and values to the cache at positions pos, then attends over
        cache positions 0..pos[-1].
        """
        c = self.config
        T = x.shape[0]
        H, Hkv, D, Dv = c["n_head"], c["n_head_kv"], c["head_dim"], c["head_dim_v"]

        q = x @ self.w(il, "attn_q.weight").T                          # [T, H*D]
        k = x @ self.w(il, "attn_k.weight").T                          # [T, Hkv*D]
        v = x @ self.w(il, "attn_v.weight").T                          # [T, Hkv*Dv]
        if self.has(il, "attn_q.bias"):                    # qwen2; optional for the others
            q = q + self.w(il, "attn_q.bias")
            k = k + self.w(il, "attn_k.bias")
            v = v + self.w(il, "attn_v.bias")
        q = q.reshape(T, H, D)
        k = k.reshape(T, Hkv, D)
        v = v.reshape(T, Hkv, Dv)

        if c["qk_norm"]:                                               # qwen3, qwen3moe, gemma3
            # QK-norm: RMSNorm over each head's D features, before the rotation.
            q = rms_norm(q, self.w(il, "attn_q_norm.weight"), c["rms_eps"])
            k = rms_norm(k, self.w(il, "attn_k_norm.weight"), c["rms_eps"])

        local = is_local_layer(c, il)                                  # gemma3 sliding layers
        base = c["rope_base_local"] if local else c["rope_base"]
        scale = 1.0 if local else c["rope_freq_scale"]                 # llama.cpp: local unscaled
        q = rope(q, pos, c["n_rot"], base, c["rope_style"], scale, self.rope_freqs)
        k = rope(k, pos, c["n_rot"], base, c["rope_style"], scale, self.rope_freqs)

        cache.k[il, pos[0]:pos[-1] + 1] = k
        cache.v[il, pos[0]:pos[-1] + 1] = v
        P = pos[-1] + 1
        window = c["sliding_window"] if local else 0
        out = attention(q, cache.k[il, :P], cache.v[il, :P], pos, c["attn_scale"], window)
        return out @ self.w(il, "attn_output.weight").T                # [T, E]

    def ffn_block(self, il: int, x: np.ndarray) -> np.ndarray:
        """Feed-forward network of layer il on normalized input x: [T, E] -> [T, E]."""
        c = self.config
        if c["arch"] == "qwen3moe":
            return moe_ffn(x, self.w(il, "ffn_gate_inp.weight"), self.w(il, "ffn_gate_exps.weight"),
                           self.w(il, "ffn_up_exps.weight"), self.w(il, "ffn_down_exps.weight"),
                           c["n_expert_used"])
        act = gelu_tanh if c["arch"] == "gemma3" else silu
        return swiglu_ffn(x, self.w(il, "ffn_gate.weight"), self.w(il, "ffn_up.weight"),
                          self.w(il, "ffn_down.weight"), act)

    def block(self, il: int, h: np.ndarray, pos: np.ndarray, cache: KVCache) -> np.ndarray:
        """Transformer layer il: residual stream h [T, E] -> [T, E].

        llama / qwen2 / qwen3 / qwen3moe (pre-norm):
            h = h + Attn(RMSNorm(h))
            h = h + FFN(RMSNorm(h))
        gemma3 (pre- and post-norm, Gemma 2/3 "sandwich"):
            h = h + RMSNorm_post_attn(Attn(RMSNorm(h)))
            h = h + RMSNorm_post_ffw(FFN(RMSNorm(h)))
        """
        c = self.config
        eps = c["rms_eps"]
        a = self.attention_block(il, rms_norm(h, self.w(il, "attn_norm.weight"), eps), pos, cache)
        if c["arch"] == "gemma3":
            a = rms_norm(a, self.w(il, "post_attention_norm.weight"), eps)
        h = h + a
        f = self.ffn_block(il, rms_norm(h, self.w(il, "ffn_norm.weight"), eps))
        if c["arch"] == "gemma3":
            f = rms_norm(f, self.w(il, "post_ffw_norm.weight"), eps)
        return h + f

    # ----- the whole model -------------------------------------------------------------------

    def forward(self, ids: Sequence[int], cache: KVCache) -> np.ndarray:
        """Run ids at positions cache.n, cache.n+1, ...; returns logits [T, V] in ``dtype``."""
        c = self.config
        ids = np.asarray(ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ShapeError(f"ids must be a non-empty 1-d sequence, got shape {ids.shape}")
        bad = ids[(ids < 0) | (ids >= c["n_vocab"])]
        if bad.size:
            raise ValueError(f"token id {int(bad[0])} is outside [0, {c['n_vocab']})")
        if cache.n + ids.size > cache.capacity:
            raise ShapeError(f"{cache.n} cached + {ids.size} new positions exceed the cache's "
                             f"{cache.capacity}")
        pos = np.arange(cache.n, cache.n + ids.size)                   # [T]

        h = self.weights["token_embd.weight"][ids] * c["embd_scale"]   # [T, E] (gemma: * sqrt(E))
        for il in range(c["n_layer"]):
            h = self.block(il, h, pos, cache)
        cache.n += ids.size

        h = rms_norm(h, self.weights["output_norm.weight"], c["rms_eps"])
        logits = h @ self.output.T                                     # [T, V]
        if c["final_logit_softcap"] > 0:                               # cap * tanh(logits / cap)
            cap = c["final_logit_softcap"]
            logits = cap * np.tanh(logits / cap)
        return logits

    def logits(self, ids: Sequence[int]) -> np.ndarray:
        """Next-token logits at every position of ids, run from position 0: float32 [T, V]."""
        cache = KVCache(self.config, len(ids), self.dtype)
        return self.forward(ids, cache).astype(np.float32)

    def greedy(self, prompt_ids: Sequence[int], n: int) -> list[int]:
        """n tokens of greedy (argmax) decoding after prompt_ids: the prompt in one forward
        pass, then one token per pass, each reading the earlier positions from a KV cache."""
        cache = KVCache(self.config, len(prompt_ids) + n, self.dtype)
        out: list[int] = []
        logits = self.forward(prompt_ids, cache)[-1]
        for _ in range(n):
            out.append(int(np.argmax(logits)))
            if len(out) < n:
                logits = self.forward([out[-1]], cache)[-1]
        return out
