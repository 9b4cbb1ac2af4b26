"""GGUF tensor formats in plain NumPy: block layouts, dequantization, reference quantizers.

A GGUF tensor of ``n`` elements in a block format is ``n / block_size`` blocks laid end to end,
each ``type_size`` bytes.  Every multi-byte field is little-endian.  Each format below opens with
a banner giving its block layout, byte by byte, and the formula that turns a block back into
floats.  The code then works on all blocks at once: ``blocks`` is a ``(n_blocks, type_size)``
uint8 array and every function returns ``(n_blocks, block_size)`` float32.

Bit-exactness contract
----------------------
Dequantization must equal the C++ converters (csrc/core/quants/) bit for bit.  Both follow the
float32 operation order of ggml's reference ``dequantize_row_*`` functions, with no fused
multiply-add.  So here:

- every product is between float32 arrays: integers are cast to float32 first, so NumPy never
  promotes to float64 (and a product of two integers is never formed before the float step);
- a formula written ``(d * sc) * q`` is computed as that pair of float32 roundings, in that
  order; ``d * (sc * q)`` would round differently in the last bit.

Quantizers
----------
``quantize`` covers F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 and Q8_K, matching ggml's
reference quantizers (``quantize_row_*_ref``) byte for byte: the scale is computed in float32,
``id = 1/d`` (0 when d is 0), values are rounded the way the C code rounds (truncation of
``v + 0.5``, ``roundf`` = half away from zero, or round-half-even for ``nearest_int``) and then
clamped.  The K-quant quantizers (an iterative scale search) are not written here.

The f16 <-> f32 conversions are IEEE binary16 with round-to-nearest-even, which is what
NumPy's ``astype(np.float16)`` does.
"""

from __future__ import annotations

import numpy as np

__all__ = ["BLOCK", "KVALUES_IQ4NL", "dequantize", "quantize", "dequantize_blocks"]

F32 = np.float32
QK = 32     # elements in a legacy / IQ4_NL block
QK_K = 256  # elements in a K-quant super-block

# name -> (block_size, type_size): elements per block, bytes per block.
BLOCK: dict[str, tuple[int, int]] = {
    "F32": (1, 4),
    "F16": (1, 2),
    "BF16": (1, 2),
    "Q4_0": (32, 2 + 16),
    "Q4_1": (32, 2 + 2 + 16),
    "Q5_0": (32, 2 + 4 + 16),
    "Q5_1": (32, 2 + 2 + 4 + 16),
    "Q8_0": (32, 2 + 32),
    "Q2_K": (256, 16 + 64 + 2 + 2),
    "Q3_K": (256, 32 + 64 + 12 + 2),
    "Q4_K": (256, 2 + 2 + 12 + 128),
    "Q5_K": (256, 2 + 2 + 12 + 32 + 128),
    "Q6_K": (256, 128 + 64 + 16 + 2),
    "Q8_K": (256, 4 + 256 + 32),
    "IQ4_NL": (32, 2 + 16),
    "IQ4_XS": (256, 2 + 2 + 4 + 128),
}

# The 16 levels of the IQ4 codebook (non-uniform, denser near zero).
KVALUES_IQ4NL = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.int8)


# ---------------------------------------------------------------------------------------------
# Field readers.  Each takes a (n_blocks, k) uint8 slice and returns (n_blocks, k / width).
# ---------------------------------------------------------------------------------------------

def f16(b: np.ndarray) -> np.ndarray:
    """Little-endian IEEE half(s) -> float32 (exact)."""
    return np.ascontiguousarray(b).view("<f2").astype(F32)


def f32(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<f4").astype(F32)


def u16(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<u2").astype(np.uint32)


def u32(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view("<u4")


def i8(b: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(b).view(np.int8)


def nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 16) bytes -> (nb, 32) values: the 16 low nibbles first, then the 16 high ones.

    This is the order of every 32-element group that stores two 4-bit values per byte."""
    return np.concatenate([qs & 0x0F, qs >> 4], axis=-1)


def bits_of_u32(word: np.ndarray, count: int) -> np.ndarray:
    """(nb, 1) uint32 -> (nb, count) bits, bit i in column i."""
    return ((word >> np.arange(count, dtype=np.uint32)) & 1).astype(np.uint8)


def _per_group(scale: np.ndarray, q: np.ndarray, group: int) -> tuple[np.ndarray, np.ndarray]:
    """Reshape q (nb, N) into (nb, N/group, group) next to a (nb, N/group, 1) scale."""
    nb = q.shape[0]
    return scale.reshape(nb, -1, 1), q.reshape(nb, -1, group)


# =============================================================================================
# F32 -- 1 element in 4 bytes: IEEE binary32.                      y = x
# F16 -- 1 element in 2 bytes: IEEE binary16.                      y = (float) h
# BF16 - 1 element in 2 bytes: the top half of a binary32.         y = bits(h << 16)
# =============================================================================================

def dequantize_f32(blocks: np.ndarray) -> np.ndarray:
    return f32(blocks)


def dequantize_f16(blocks: np.ndarray) -> np.ndarray:
    return f16(blocks)


def dequantize_bf16(blocks: np.ndarray) -> np.ndarray:
    return (u16(blocks) << 16).view(F32)


def quantize_f32(x: np.ndarray) -> np.ndarray:
    return x.astype("<f4").view(np.uint8)


def quantize_f16(x: np.ndarray) -> np.ndarray:
    # Round to nearest even; overflow goes to +-inf, NaN stays NaN.
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype("<f2").view(np.uint8)


def quantize_bf16(x: np.ndarray) -> np.ndarray:
    # ggml's rule: a NaN keeps its top half with the quiet bit (bit 6 of the half) forced on;
    # anything else is rounded to nearest even by adding 0x7FFF + (lowest kept bit) and
    # dropping the low 16 bits.  (Infinities survive; finite values may round up to inf.)
    u = x.astype(F32).view(np.uint32).astype(np.uint64)
    is_nan = (u & 0x7FFFFFFF) > 0x7F800000
    rounded = (u + (0x7FFF + ((u >> 16) & 1))) >> 16
    quiet = (u >> 16) | 64
    h = np.where(is_nan, quiet, rounded).astype("<u2")
    return h.view(np.uint8)


# =============================================================================================
# Q4_0 -- 32 elements in 18 bytes
#   [0:2]   d     f16   scale
#   [2:18]  qs    16 B  4-bit quants; byte j holds element j (low nibble), j+16 (high nibble)
#   y[i] = (q[i] - 8) * d                  (q in 0..15, so values -8d .. 7d)
# =============================================================================================

def dequantize_q4_0(blocks: np.ndarray) -> np.ndarray:
    d = f16(blocks[:, 0:2])
    q = nibbles(blocks[:, 2:18]).astype(np.int32) - 8
    return q.astype(F32) * d


# =============================================================================================
# Q4_1 -- 32 elements in 20 bytes
#   [0:2]   d     f16   scale
#   [2:4]   m     f16   minimum (offset)
#   [4:20]  qs    16 B  4-bit quants, nibble order as Q4_0
#   y[i] = q[i] * d + m
# =============================================================================================

def dequantize_q4_1(blocks: np.ndarray) -> np.ndarray:
    d = f16(blocks[:, 0:2])
    m = f16(blocks[:, 2:4])
    q = nibbles(blocks[:, 4:20]).astype(F32)
    return q * d + m


# =============================================================================================
# Q5_0 -- 32 elements in 22 bytes
#   [0:2]   d     f16   scale
#   [2:6]   qh    u32   bit i = the 5th (high) bit of element i
#   [6:22]  qs    16 B  low 4 bits, nibble order as Q4_0
#   y[i] = ((low[i] | high[i] << 4) - 16) * d
# =============================================================================================

def dequantize_q5_0(blocks: np.ndarray) -> np.ndarray:
    d = f16(blocks[:, 0:2])
    high = bits_of_u32(u32(blocks[:, 2:6]), 32)
    q = (nibbles(blocks[:, 6:22]) | (high << 4)).astype(np.int32) - 16
    return q.astype(F32) * d


# =============================================================================================
# Q5_1 -- 32 elements in 24 bytes
#   [0:2]   d     f16   scale
#   [2:4]   m     f16   minimum
#   [4:8]   qh    u32   high bits, as Q5_0
#   [8:24]  qs    16 B  low 4 bits, as Q4_0
#   y[i] = (low[i] | high[i] << 4) * d + m
# =============================================================================================

def dequantize_q5_1(blocks: np.ndarray) -> np.ndarray:
    d = f16(blocks[:, 0:2])
    m = f16(blocks[:, 2:4])
    high = bits_of_u32(u32(blocks[:, 4:8]), 32)
    q = (nibbles(blocks[:, 8:24]) | (high << 4)).astype(F32)
    return q * d + m


# =============================================================================================
# Q8_0 -- 32 elements in 34 bytes
#   [0:2]   d     f16   scale
#   [2:34]  qs    32 x int8
#   y[i] = q[i] * d
# =============================================================================================

def dequantize_q8_0(blocks: np.ndarray) -> np.ndarray:
    d = f16(blocks[:, 0:2])
    return i8(blocks[:, 2:34]).astype(F32) * d


# =============================================================================================
# Q2_K -- 256 elements in 84 bytes; 16 sub-blocks of 16, each with a 4-bit scale and min
#   [0:16]   scales  byte s: low nibble = scale of sub-block s, high nibble = its min
#   [16:80]  qs      2-bit quants: element e = 128c + 32j + l (c<2, j<4, l<32) is
#                    (qs[32c + l] >> 2j) & 3
#   [80:82]  d       f16  super-block scale of the scales
#   [82:84]  dmin    f16  super-block scale of the mins
#   sub-block s = e // 16:
#   dl = d * (sc & 0xF);  ml = dmin * (sc >> 4);  y = dl * q - ml
# =============================================================================================

def _crumbs(qs: np.ndarray) -> np.ndarray:
    """(nb, 64) bytes -> (nb, 256) 2-bit values in K-quant element order (see Q2_K banner)."""
    nb = qs.shape[0]
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
    return ((qs.reshape(nb, 2, 1, 32) >> shifts) & 3).reshape(nb, QK_K)


def dequantize_q2_k(blocks: np.ndarray) -> np.ndarray:
    sc = blocks[:, 0:16]
    q = _crumbs(blocks[:, 16:80]).astype(F32)
    d = f16(blocks[:, 80:82])
    dmin = f16(blocks[:, 82:84])
    dl = d * (sc & 0x0F).astype(F32)
    ml = dmin * (sc >> 4).astype(F32)
    dl, qg = _per_group(dl, q, 16)
    ml = ml.reshape(dl.shape)
    return (dl * qg - ml).reshape(-1, QK_K)


# =============================================================================================
# Q3_K -- 256 elements in 110 bytes; 16 sub-blocks of 16 with 6-bit signed scales
#   [0:32]    hmask   element e's 3rd bit is bit (e // 32) of hmask[e % 32]
#   [32:96]   qs      low 2 bits, laid out as Q2_K
#   [96:108]  scales  16 x 6 bits: scale j has low 4 bits in nibble (j // 8) of byte j % 8,
#                     high 2 bits at bit 2*(j // 4) of byte 8 + j % 4; stored biased by 32
#   [108:110] d       f16
#   q = low - (hbit ? 0 : 4)        (so q in -4..3)
#   dl = d * (scale - 32);  y = dl * q
# =============================================================================================

def q3_k_scales(s: np.ndarray) -> np.ndarray:
    """(nb, 12) bytes -> (nb, 16) unbiased scales (int32, -32..31)."""
    nb = s.shape[0]
    low = np.concatenate([s[:, 0:8] & 0x0F, s[:, 0:8] >> 4], axis=1)          # j = 0..15
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 4, 1)
    high = ((s[:, 8:12].reshape(nb, 1, 4) >> shifts) & 3).reshape(nb, 16)    # j = 4*(j//4) + j%4
    return (low | (high << 4)).astype(np.int32) - 32


def dequantize_q3_k(blocks: np.ndarray) -> np.ndarray:
    nb = blocks.shape[0]
    hmask = blocks[:, 0:32]
    low = _crumbs(blocks[:, 32:96]).astype(np.int32)
    scales = q3_k_scales(blocks[:, 96:108])
    d = f16(blocks[:, 108:110])
    hbit = ((hmask.reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1)
    q = (low - 4 * (1 - hbit.reshape(nb, QK_K).astype(np.int32))).astype(F32)
    dl = d * scales.astype(F32)
    dl, qg = _per_group(dl, q, 16)
    return (dl * qg).reshape(nb, QK_K)


# =============================================================================================
# Q4_K -- 256 elements in 144 bytes; 8 sub-blocks of 32, each with a 6-bit scale and min
#   [0:2]    d       f16  scale of the scales
#   [2:4]    dmin    f16  scale of the mins
#   [4:16]   scales  8 scales + 8 mins, 6 bits each (get_scale_min_k4), bytes s[0..11]:
#                    j < 4:  sc = s[j] & 63,  m = s[j+4] & 63
#                    j >= 4: sc = (s[j+4] & 0xF) | (s[j-4] >> 6) << 4
#                            m  = (s[j+4] >> 4)  | (s[j]   >> 6) << 4
#   [16:144] qs      4-bit quants: element e = 64c + 32h + l is nibble h of qs[32c + l]
#   sub-block j = e // 32:
#   d1 = d * sc;  m1 = dmin * m;  y = d1 * q - m1
# =============================================================================================

def k4_scale_min(s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nb, 12) packed bytes -> (sc, m), each (nb, 8) uint8 in 0..63."""
    lo, mid, hi = s[:, 0:4], s[:, 4:8], s[:, 8:12]
    sc = np.concatenate([lo & 63, (hi & 0x0F) | ((lo >> 6) << 4)], axis=1)
    m = np.concatenate([mid & 63, (hi >> 4) | ((mid >> 6) << 4)], axis=1)
    return sc, m


def _k4_nibbles(qs: np.ndarray) -> np.ndarray:
    """(nb, 128) bytes -> (nb, 256) 4-bit values in Q4_K element order."""
    nb = qs.shape[0]
    shifts = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
    return ((qs.reshape(nb, 4, 1, 32) >> shifts) & 0x0F).reshape(nb, QK_K)


def q4_k_fields(blocks: np.ndarray):
    """Unpacked Q4_K fields: d, dmin (nb, 1) f32; sc, m (nb, 8) uint8; q (nb, 256) uint8."""
    d = f16(blocks[:, 0:2])
    dmin = f16(blocks[:, 2:4])
    sc, m = k4_scale_min(blocks[:, 4:16])
    q = _k4_nibbles(blocks[:, 16:144])
    return d, dmin, sc, m, q


def dequantize_q4_k(blocks: np.ndarray) -> np.ndarray:
    d, dmin, sc, m, q = q4_k_fields(blocks)
    d1 = d * sc.astype(F32)
    m1 = dmin * m.astype(F32)
    d1, qg = _per_group(d1, q.astype(F32), 32)
    m1 = m1.reshape(d1.shape)
    return (d1 * qg - m1).reshape(-1, QK_K)


# =============================================================================================
# Q5_K -- 256 elements in 176 bytes; as Q4_K plus a fifth bit
#   [0:2]    d       f16
#   [2:4]    dmin    f16
#   [4:16]   scales  as Q4_K
#   [16:48]  qh      element e's 5th bit is bit (e // 32) of qh[e % 32]
#   [48:176] qs      low 4 bits, laid out as Q4_K
#   d1 = d * sc;  m1 = dmin * m;  y = d1 * (low + 16 * hbit) - m1
# =============================================================================================

def dequantize_q5_k(blocks: np.ndarray) -> np.ndarray:
    nb = blocks.shape[0]
    d = f16(blocks[:, 0:2])
    dmin = f16(blocks[:, 2:4])
    sc, m = k4_scale_min(blocks[:, 4:16])
    qh = blocks[:, 16:48]
    low = _k4_nibbles(blocks[:, 48:176])
    hbit = ((qh.reshape(nb, 1, 32) >> np.arange(8, dtype=np.uint8).reshape(1, 8, 1)) & 1)
    q = (low | (hbit.reshape(nb, QK_K) << 4)).astype(F32)
    d1 = d * sc.astype(F32)
    m1 = dmin * m.astype(F32)
    d1, qg = _per_group(d1, q, 32)
    m1 = m1.reshape(d1.shape)
    return (d1 * qg - m1).reshape(nb, QK_K)


# =============================================================================================
# Q6_K -- 256 elements in 210 bytes; 16 sub-blocks of 16 with int8 scales
#   [0:128]   ql      low 4 bits: element e = 128c + 32k + l (c<2, k<4, l<32) is
#                     nibble (k // 2) of ql[64c + 32(k % 2) + l]
#   [128:192] qh      high 2 bits: (qh[32c + l] >> 2k) & 3
#   [192:208] scales  16 x int8
#   [208:210] d       f16
#   q = (low | high << 4) - 32          (so q in -32..31)
#   sub-block s = e // 16:   y = (d * scale[s]) * q
# =============================================================================================

def dequantize_q6_k(blocks: np.ndarray) -> np.ndarray:
    nb = blocks.shape[0]
    ql = blocks[:, 0:128]
    qh = blocks[:, 128:192]
    scales = i8(blocks[:, 192:208]).astype(F32)
    d = f16(blocks[:, 208:210])
    # low: axes (c, nibble, half, l) -> k = 2 * nibble + half
    low = (ql.reshape(nb, 2, 1, 2, 32) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1, 1)) & 0x0F
    low = low.reshape(nb, QK_K)
    high = (qh.reshape(nb, 2, 1, 32) >> np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)) & 3
    high = high.reshape(nb, QK_K)
    q = ((low | (high << 4)).astype(np.int32) - 32).astype(F32)
    ds = d * scales
    ds, qg = _per_group(ds, q, 16)
    return (ds * qg).reshape(nb, QK_K)


# =============================================================================================
# Q8_K -- 256 elements in 292 bytes (the intermediate format of K-quant dot products)
#   [0:4]     d      f32  scale (a full float here, not f16)
#   [4:260]   qs     256 x int8
#   [260:292] bsums  16 x int16: sum of qs over each group of 16 (not needed to dequantize)
#   y[i] = d * q[i]
# =============================================================================================

def dequantize_q8_k(blocks: np.ndarray) -> np.ndarray:
    d = f32(blocks[:, 0:4])
    return d * i8(blocks[:, 4:260]).astype(F32)


# =============================================================================================
# IQ4_NL -- 32 elements in 18 bytes; 4-bit indices into the non-linear codebook KVALUES_IQ4NL
#   [0:2]   d     f16
#   [2:18]  qs    16 B  indices, nibble order as Q4_0
#   y[i] = d * kvalues[idx[i]]
# =============================================================================================

def dequantize_iq4_nl(blocks: np.ndarray) -> np.ndarray:
    d = f16(blocks[:, 0:2])
    kv = KVALUES_IQ4NL[nibbles(blocks[:, 2:18])].astype(F32)
    return d * kv


# =============================================================================================
# IQ4_XS -- 256 elements in 136 bytes; 8 sub-blocks of 32 with 6-bit scales, IQ4_NL codebook
#   [0:2]    d         f16
#   [2:4]    scales_h  u16: high 2 bits of scale ib at bits 2ib, 2ib+1
#   [4:8]    scales_l  low 4 bits of scale ib in nibble (ib % 2) of byte ib // 2
#   [8:136]  qs        sub-block ib uses qs[16ib : 16ib+16], nibble order as Q4_0
#   ls = low | high << 4 (biased by 32);  dl = d * (ls - 32);  y = dl * kvalues[idx]
# =============================================================================================

def dequantize_iq4_xs(blocks: np.ndarray) -> np.ndarray:
    nb = blocks.shape[0]
    d = f16(blocks[:, 0:2])
    sh = u16(blocks[:, 2:4])                                              # (nb, 1)
    sl = blocks[:, 4:8]
    low = ((sl.reshape(nb, 4, 1) >> np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2)) & 0x0F)
    low = low.reshape(nb, 8).astype(np.int32)
    high = ((sh >> (2 * np.arange(8, dtype=np.uint32))) & 3).astype(np.int32)
    ls = (low | (high << 4)) - 32
    dl = d * ls.astype(F32)                                               # (nb, 8)
    idx = nibbles(blocks[:, 8:136].reshape(nb * 8, 16)).reshape(nb, QK_K)
    kv = KVALUES_IQ4NL[idx].astype(F32)
    dl, kg = _per_group(dl, kv, 32)
    return (dl * kg).reshape(nb, QK_K)


# =============================================================================================
# Reference quantizers (ggml quantize_row_*_ref), one block per row of x.reshape(-1, 32|256)
# =============================================================================================

def _inv(d: np.ndarray) -> np.ndarray:
    """id = 1/d, or 0 where d is 0 (float32)."""
    with np.errstate(divide="ignore"):
        return np.where(d != 0, F32(1) / d, F32(0)).astype(F32)


def _signed_absmax(x: np.ndarray) -> np.ndarray:
    """(nb, k) -> (nb, 1): the element of largest magnitude, the first one on ties."""
    i = np.argmax(np.abs(x), axis=1)[:, None]
    return np.take_along_axis(x, i, axis=1)


def roundf(v: np.ndarray) -> np.ndarray:
    """C roundf: nearest integer, halves away from zero (exact in float32)."""
    t = np.trunc(v)
    return t + np.sign(v) * (np.abs(v - t) >= F32(0.5)).astype(F32)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """(nb, 32) values 0..15 -> (nb, 16) bytes: element j low nibble, j+16 high nibble."""
    return (q[:, 0:16] | (q[:, 16:32] << 4)).astype(np.uint8)


def _pack_high_bits(q: np.ndarray) -> np.ndarray:
    """(nb, 32) 5-bit values -> (nb, 4) bytes: bit 4 of element i at bit i of a LE u32."""
    bits = ((q >> 4) & 1).astype(np.uint32)
    word = (bits << np.arange(32, dtype=np.uint32)).sum(axis=1, dtype=np.uint32)
    return word.astype("<u4").reshape(-1, 1).view(np.uint8)


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):    # a scale beyond 65504 is stored as inf, as in ggml
        return v.astype("<f2").reshape(-1, 1).view(np.uint8)


def quantize_q4_0(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, QK)
    d = _signed_absmax(x) / F32(-8)
    q = np.trunc(x * _inv(d) + F32(8.5))                  # (int8_t)(v + 8.5f)
    q = np.minimum(q, 15).astype(np.uint8)
    return np.concatenate([_f16_bytes(d), _pack_nibbles(q)], axis=1)


def quantize_q4_1(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, QK)
    lo = x.min(axis=1, keepdims=True)
    hi = x.max(axis=1, keepdims=True)
    d = (hi - lo) / F32(15)
    q = np.trunc((x - lo) * _inv(d) + F32(0.5))
    q = np.minimum(q, 15).astype(np.uint8)
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _pack_nibbles(q)], axis=1)


def quantize_q5_0(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, QK)
    d = _signed_absmax(x) / F32(-16)
    q = np.trunc(x * _inv(d) + F32(16.5))
    q = np.minimum(q, 31).astype(np.uint8)
    return np.concatenate([_f16_bytes(d), _pack_high_bits(q), _pack_nibbles(q & 0x0F)], axis=1)


def quantize_q5_1(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, QK)
    lo = x.min(axis=1, keepdims=True)
    hi = x.max(axis=1, keepdims=True)
    d = (hi - lo) / F32(31)
    # ggml stores (uint8_t)(v + 0.5f) unclamped and keeps bits 0..4; v never exceeds 31.5.
    q = np.trunc((x - lo) * _inv(d) + F32(0.5)).astype(np.uint8) & 0x1F
    return np.concatenate([_f16_bytes(d), _f16_bytes(lo), _pack_high_bits(q),
                           _pack_nibbles(q & 0x0F)], axis=1)


def quantize_q8_0(x: np.ndarray) -> np.ndarray:
    x = x.reshape(-1, QK)
    d = np.abs(x).max(axis=1, keepdims=True) / F32(127)
    q = roundf(x * _inv(d)).astype(np.int8)
    return np.concatenate([_f16_bytes(d), q.view(np.uint8)], axis=1)


def quantize_q8_k(x: np.ndarray) -> np.ndarray:
    # iscale = -127 / (signed absmax); q = min(127, nearest_int(iscale * x)), where
    # nearest_int rounds half to even; d = 1 / iscale stored as f32.  An all-zero block is
    # stored as zeros (ggml leaves its bsums unwritten; zero is the only sensible value).
    x = x.reshape(-1, QK_K)
    mx = _signed_absmax(x)
    zero = mx == 0
    with np.errstate(divide="ignore", invalid="ignore"):
        iscale = np.where(zero, F32(0), F32(-127) / np.where(zero, F32(1), mx)).astype(F32)
        d = np.where(zero, F32(0), F32(1) / np.where(zero, F32(1), iscale)).astype(F32)
    q = np.minimum(np.rint(iscale * x), 127).astype(np.int8)
    bsums = q.reshape(-1, 16, 16).astype(np.int16).sum(axis=2, dtype=np.int16).astype("<i2")
    return np.concatenate([d.astype("<f4").view(np.uint8), q.view(np.uint8),
                           bsums.view(np.uint8)], axis=1)


# ---------------------------------------------------------------------------------------------
# Dispatch
# ---------------------------------------------------------------------------------------------

_DEQUANTIZE = {
    "F32": dequantize_f32, "F16": dequantize_f16, "BF16": dequantize_bf16,
    "Q4_0": dequantize_q4_0, "Q4_1": dequantize_q4_1, "Q5_0": dequantize_q5_0,
    "Q5_1": dequantize_q5_1, "Q8_0": dequantize_q8_0,
    "Q2_K": dequantize_q2_k, "Q3_K": dequantize_q3_k, "Q4_K": dequantize_q4_k,
    "Q5_K": dequantize_q5_k, "Q6_K": dequantize_q6_k, "Q8_K": dequantize_q8_k,
    "IQ4_NL": dequantize_iq4_nl, "IQ4_XS": dequantize_iq4_xs,
}

_QUANTIZE = {
    "F32": quantize_f32, "F16": quantize_f16, "BF16": quantize_bf16,
    "Q4_0": quantize_q4_0, "Q4_1": quantize_q4_1, "Q5_0": quantize_q5_0,
    "Q5_1": quantize_q5_1, "Q8_0": quantize_q8_0, "Q8_K": quantize_q8_k,
}

CAN_DEQUANTIZE = frozenset(_DEQUANTIZE)
CAN_QUANTIZE = frozenset(_QUANTIZE)


def _layout(type_name: str, n: int) -> tuple[int, int]:
    if type_name not in BLOCK:
        raise ValueError(f"unknown tensor type {type_name!r}")
    block_size, type_size = BLOCK[type_name]
    if n < 0 or n % block_size != 0:
        raise ValueError(f"{type_name}: element count {n} is not a multiple of the block size "
                         f"{block_size}")
    return n // block_size, type_size


def dequantize_blocks(type_name: str, blocks: np.ndarray) -> np.ndarray:
    """(n_blocks, type_size) uint8 -> (n_blocks, block_size) float32."""
    return _DEQUANTIZE[type_name](blocks)


def dequantize(type_name: str, raw: np.ndarray, n: int) -> np.ndarray:
    """Decode the first n elements of a tensor stored as type_name; returns n float32."""
    n_blocks, type_size = _layout(type_name, n)
    raw = np.asarray(raw)
    if raw.dtype != np.uint8:
        raise ValueError(f"{type_name}: raw data must be uint8, got {raw.dtype}")
    need = n_blocks * type_size
    if raw.size < need:
        raise ValueError(f"{type_name}: {n} elements need {need} bytes, got {raw.size}")
    blocks = raw.reshape(-1)[:need].reshape(n_blocks, type_size)
    with np.errstate(over="ignore"):    # huge scales give inf, as in C
        return _DEQUANTIZE[type_name](blocks).reshape(n).astype(F32, copy=False)


def quantize(type_name: str, x: np.ndarray) -> np.ndarray:
    """Encode float32 values (count a multiple of the block size) as type_name bytes."""
    x = np.asarray(x, dtype=F32).reshape(-1)
    n_blocks, type_size = _layout(type_name, x.size)
    if type_name not in _QUANTIZE:
        raise ValueError(f"{type_name}: the reference has no quantizer for this type")
    out = _QUANTIZE[type_name](x).reshape(-1)
    assert out.size == n_blocks * type_size, (type_name, out.size)
    return out
