"""Tensor formats: the C++ converters (dasllama.formats) against the NumPy reference
(dasllama.reference.quants) and the peer oracle, the ``gguf`` package (gguf.quants).

Contract (DESIGN.md, "Correctness"):

- Dequantization is exact: C++ == reference == gguf, compared as float32 *bit patterns*.
- Quantizers that have a deterministic ggml reference (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1,
  Q8_K) are exact too: C++ bytes == reference bytes == gguf bytes (where gguf has one).
- Every format C++ can write keeps its round-trip error (rel-l2 on N(0, 1) data) under a bar
  set from the measured value with ~2x room; the test prints the measured value.
- Negative controls show each comparison bites.

A note on operation order, found while writing these tests: with an f16 scale (11 significant
bits) and the small integers of these formats (scales <= 8 bits, quants <= 6 bits, codebook
values <= 7 bits), every *product* in every dequantizer here fits in float32's 24-bit
significand, so it is exact, and reassociating products (``(d*sc)*q`` vs ``d*(sc*q)``) cannot
change a bit (``test_products_are_exact`` pins this down).  The only rounding step is the final
``+ m`` / ``- m1`` of the formats with a minimum (Q4_1, Q5_1, Q2_K, Q4_K, Q5_K), and Q8_K's
``d * q`` with a full float32 ``d``.  So the bit-exact tests catch layout, sign, scale-decoding
and precision bugs (an f16 intermediate, a flushed subnormal scale), which is what the
negative controls below use.
"""

from __future__ import annotations

import numpy as np
import pytest

from dasllama import formats
from dasllama.errors import FormatError
from dasllama.reference import quants as ref

SEED = 20240611

# Every format the reference and the C++ core both read.
DEQ_TYPES = ["F32", "F16", "BF16", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0",
             "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K", "Q8_K", "IQ4_NL", "IQ4_XS"]
# What the C++ core must be able to write.
CPP_QUANT_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                   "Q4_K", "Q5_K", "Q6_K", "Q8_K"]
# Of those, the ones with a deterministic reference quantizer here (the K-quant searches are not
# written in the reference).
REF_QUANT_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_K"]
# The gguf package's quantizers that follow ggml's reference bit for bit.
PEER_QUANT_TYPES = ["F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1"]

# Byte offsets of the f16 scale fields in each block (everything else is quant data).
F16_FIELDS = {
    "Q4_0": [0], "Q4_1": [0, 2], "Q5_0": [0], "Q5_1": [0, 2], "Q8_0": [0],
    "Q2_K": [80, 82], "Q3_K": [108], "Q4_K": [0, 2], "Q5_K": [0, 2], "Q6_K": [208],
    "IQ4_NL": [0], "IQ4_XS": [0],
}
F32_FIELDS = {"Q8_K": [0]}

# Round-trip bars: rel-l2 of dequantize(quantize(x)) - x on 262144 N(0, 1) values.  Each is
# about 2x the value measured when the test was written (in brackets); the test prints the
# value it measures.  F16 / BF16: half an ulp of a 10- / 7-bit mantissa on average.
ROUNDTRIP_BAR = {
    "F16": 5e-4,    # [2.1e-4]
    "BF16": 4e-3,   # [1.7e-3]
    "Q8_0": 1.2e-2,  # [5.4e-3]
    "Q8_K": 1.5e-2,  # [7.0e-3]
    "Q4_0": 0.18,   # [0.086]
    "Q4_1": 0.16,   # [0.078]
    "Q5_0": 0.09,   # [0.043]
    "Q5_1": 0.08,   # [0.038]
    "Q4_K": 0.14,   # [0.070]  (C++ only: the reference has no K-quant quantizer)
    "Q5_K": 0.07,   # [0.035]
    "Q6_K": 0.035,  # [0.017]
}


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

def _peer():
    gguf = pytest.importorskip("gguf", reason="the peer oracle is the `gguf` package (pip install gguf==0.19.0)")
    return gguf


def normal_f16(rng: np.random.Generator, size: int) -> np.ndarray:
    """Random finite, normal halves: +-(1 + k/1024) * 2^e, e in -14..3 (no NaN, Inf, huge)."""
    e = rng.integers(-14, 4, size)
    k = rng.integers(0, 1024, size)
    s = rng.choice([-1.0, 1.0], size)
    return (s * (1.0 + k / 1024.0) * np.exp2(e)).astype(np.float16)


def normal_f32(rng: np.random.Generator, size: int) -> np.ndarray:
    """Random finite float32 with a full 24-bit significand, magnitudes 2^-20 .. 2^1."""
    m = rng.integers(1 << 23, 1 << 24, size).astype(np.float64) / (1 << 23)
    e = rng.integers(-20, 1, size)
    s = rng.choice([-1.0, 1.0], size)
    return (s * m * np.exp2(e)).astype(np.float32)


def random_blocks(type_name: str, n_blocks: int, rng: np.random.Generator,
                  scales: np.ndarray | None = None) -> np.ndarray:
    """n_blocks random blocks: random bytes for quant fields, finite scales (or `scales`)."""
    _, type_size = ref.BLOCK[type_name]
    raw = rng.integers(0, 256, size=(n_blocks, type_size), dtype=np.uint8)
    for off in F16_FIELDS.get(type_name, []):
        h = normal_f16(rng, n_blocks) if scales is None else rng.choice(scales, n_blocks)
        raw[:, off:off + 2] = h.astype("<f2").view(np.uint8).reshape(n_blocks, 2)
    for off in F32_FIELDS.get(type_name, []):
        f = normal_f32(rng, n_blocks) if scales is None else rng.choice(scales, n_blocks)
        raw[:, off:off + 4] = f.astype("<f4").view(np.uint8).reshape(n_blocks, 4)
    return raw.reshape(-1)


def format_data(type_name: str, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """(raw bytes, n) exercising a whole format: several thousand blocks, or every bit pattern
    of the 16-bit float formats."""
    if type_name in ("F16", "BF16"):
        raw = np.arange(1 << 16, dtype="<u2").view(np.uint8)
        return raw, 1 << 16
    if type_name == "F32":
        raw = rng.integers(0, 256, size=4 * 65536, dtype=np.uint8)
        return raw, 65536
    block_size, _ = ref.BLOCK[type_name]
    n_blocks = 4096 if block_size == 32 else 2048
    return random_blocks(type_name, n_blocks, rng), n_blocks * block_size


def bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32).view(np.uint32)


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str, allow_nan_payload=False):
    assert got.dtype == np.float32, f"{what}: dtype {got.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    g, w = bits(got), bits(want)
    diff = g != w
    if allow_nan_payload:
        diff &= ~(np.isnan(got) & np.isnan(want))
    n_bad = int(np.count_nonzero(diff))
    if n_bad:
        i = int(np.flatnonzero(diff)[0])
        pytest.fail(f"{what}: {n_bad} of {g.size} values differ; first at {i}: "
                    f"{got[i]!r} (0x{g[i]:08x}) != {want[i]!r} (0x{w[i]:08x})")


def stress_floats(block: int, rng: np.random.Generator, n_blocks: int = 2048) -> np.ndarray:
    """Quantizer inputs: N(0,1) blocks at scales 1e-3..1e3, plus the corner cases of the
    reference quantizers (zero / constant blocks, +-a ties for the absmax, exact .5 ties after
    scaling, a scale that underflows and one that overflows f16)."""
    x = rng.standard_normal((n_blocks, block)).astype(np.float32)
    x *= (10.0 ** rng.uniform(-3, 3, (n_blocks, 1))).astype(np.float32)
    x[0] = 0.0
    x[1] = 1.25
    x[2] = -3.0
    x[3] = rng.integers(-20, 21, block) / np.float32(4)          # quarter steps
    x[4, 0], x[4, 1] = -3.0, 3.0                                  # absmax tie: first wins
    x[4, 2:] = rng.uniform(-2.9, 2.9, block - 2)
    x[5, 0], x[5, 1] = 3.0, -3.0
    x[5, 2:] = rng.uniform(-2.9, 2.9, block - 2)
    # d = 127/127 = 1 (Q8_0) and iscale = -127/-127 = 1 (Q8_K): halves stay exact halves, so
    # roundf (Q8_0: away from zero) and nearest_int (Q8_K: to even) are both exercised.
    x[6] = (rng.integers(-126, 126, block) + np.float32(0.5)).astype(np.float32)
    x[6, 0] = 127.0
    x[7] = x[6]
    x[7, 0] = -127.0
    x[8] = rng.standard_normal(block).astype(np.float32) * np.float32(1e-30)  # d underflows f16
    x[9] = rng.standard_normal(block).astype(np.float32) * np.float32(1e7)    # d overflows f16
    x[10] = np.float32(-7.0)
    return x.reshape(-1)


@pytest.fixture(scope="module")
def cpp_types():
    return formats.types()


# ---------------------------------------------------------------------------------------------
# The type table
# ---------------------------------------------------------------------------------------------

def test_type_table_layouts(cpp_types):
    for name, (block_size, type_size) in ref.BLOCK.items():
        assert name in cpp_types, f"C++ type table lacks {name}"
        info = cpp_types[name]
        assert (info.block_size, info.type_size) == (block_size, type_size), name
        assert info.can_dequantize, f"C++ cannot dequantize {name}"
    for name in CPP_QUANT_TYPES:
        assert cpp_types[name].can_quantize, f"C++ cannot quantize {name}"


def test_type_table_matches_gguf(cpp_types):
    gguf = _peer()
    for name, info in cpp_types.items():
        qt = gguf.GGMLQuantizationType[name]
        if name == "Q8_1":
            # gguf 0.19.0 still lists Q8_1 as (32, 40): two f32 fields (d, s), its original
            # layout.  ggml's block_q8_1 has been two f16 fields + 32 int8 = 36 bytes since
            # (ggml-common.h static_asserts 2*sizeof(ggml_half) + QK8_1).  Q8_1 is an
            # activation format that no GGUF file stores, so only the id is compared.
            assert int(qt) == info.id and (info.block_size, info.type_size) == (32, 36)
            continue
        assert int(qt) == info.id, name
        assert gguf.GGML_QUANT_SIZES[qt] == (info.block_size, info.type_size), name


# ---------------------------------------------------------------------------------------------
# Dequantization: bit for bit
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("type_name", DEQ_TYPES)
def test_dequantize_matches_reference(type_name):
    rng = np.random.default_rng([SEED, DEQ_TYPES.index(type_name)])
    raw, n = format_data(type_name, rng)
    got = formats.dequantize(type_name, raw, n)
    want = ref.dequantize(type_name, raw, n)
    # F16 NaNs: NumPy's half -> float conversion may or may not quiet a signalling NaN; the
    # value is NaN either way.  Every other pattern (BF16 and F32 NaNs included) must be exact.
    assert_bits_equal(got, want, f"{type_name} C++ vs reference",
                      allow_nan_payload=(type_name == "F16"))


@pytest.mark.parametrize("type_name", [t for t in DEQ_TYPES if t in F16_FIELDS or t in F32_FIELDS])
def test_dequantize_special_scales(type_name):
    """Scales at the edges of their format: +-0, f16 subnormals (normal again in f32, so a
    DAZ/FTZ or a hand-written half decoder that drops them shows up), the largest halves."""
    rng = np.random.default_rng([SEED, 100 + DEQ_TYPES.index(type_name)])
    if type_name in F16_FIELDS:
        special = np.array([0.0, -0.0, 2.0**-24, -(2.0**-24), 2.0**-15, 1023 * 2.0**-24,
                            2.0**-14, 65504.0, -65504.0, 1.0], dtype=np.float16)
    else:
        special = np.array([0.0, -0.0, 1e-38, 1.5e-45, 3e38, -1.0, 1.0 / 127], dtype=np.float32)
    block_size, _ = ref.BLOCK[type_name]
    raw = random_blocks(type_name, 512, rng, scales=special)
    got = formats.dequantize(type_name, raw, 512 * block_size)
    want = ref.dequantize(type_name, raw, 512 * block_size)
    assert_bits_equal(got, want, f"{type_name} special scales, C++ vs reference")


@pytest.mark.parametrize("type_name", DEQ_TYPES)
def test_dequantize_matches_gguf(type_name):
    """The peer oracle. It computes in the same float32 order, so it is exact too."""
    gguf = _peer()
    qt = gguf.GGMLQuantizationType[type_name]
    rng = np.random.default_rng([SEED, DEQ_TYPES.index(type_name)])
    raw, n = format_data(type_name, rng)
    block_size, type_size = ref.BLOCK[type_name]
    try:
        rows = raw.reshape(-1, type_size * (256 if block_size == 1 else 1))
        peer = gguf.quants.dequantize(rows, qt)
    except NotImplementedError:
        pytest.skip(f"the gguf package has no dequantizer for {type_name}")
    peer = np.asarray(peer, dtype=np.float32).reshape(-1)
    got = formats.dequantize(type_name, raw, n)
    assert_bits_equal(got, peer, f"{type_name} C++ vs gguf", allow_nan_payload=(type_name == "F16"))
    assert_bits_equal(ref.dequantize(type_name, raw, n), peer, f"{type_name} reference vs gguf",
                      allow_nan_payload=(type_name == "F16"))


@pytest.mark.parametrize("type_name", ["Q4_0", "Q4_K", "IQ4_XS"])
def test_dequantize_prefix_of_longer_buffer(type_name):
    """`raw` may be longer than n elements need; only the first blocks are read."""
    rng = np.random.default_rng([SEED, 200])
    raw, n = format_data(type_name, rng)
    block_size, type_size = ref.BLOCK[type_name]
    full = formats.dequantize(type_name, raw, n)
    part = formats.dequantize(type_name, raw, 3 * block_size)
    assert_bits_equal(part, full[:3 * block_size], f"{type_name} prefix")
    # A block-aligned slice decodes to the matching slice.
    mid = formats.dequantize(type_name, raw[5 * type_size:], 2 * block_size)
    assert_bits_equal(mid, full[5 * block_size:7 * block_size], f"{type_name} offset slice")


def test_products_are_exact():
    """Why operation order among the products cannot matter (see the module docstring): the
    reassociated forms equal the reference bit for bit on random data."""
    rng = np.random.default_rng([SEED, 300])
    blocks = random_blocks("Q4_K", 2048, rng).reshape(2048, -1)
    d, dmin, sc, m, q = ref.q4_k_fields(blocks)
    sc32 = np.repeat(sc, 32, axis=1).astype(np.float32)
    m32 = np.repeat(m, 32, axis=1).astype(np.float32)
    reassoc = d * (sc32 * q.astype(np.float32)) - dmin * m32
    assert_bits_equal(reassoc.reshape(-1), ref.dequantize_blocks("Q4_K", blocks).reshape(-1),
                      "Q4_K d*(sc*q) vs (d*sc)*q")


# ---------------------------------------------------------------------------------------------
# Negative controls for the bit-exact comparison
# ---------------------------------------------------------------------------------------------

def _q4_k_variant(blocks: np.ndarray, bug: str) -> np.ndarray:
    """Q4_K dequantization with one plausible bug."""
    d, dmin, sc, m, q = ref.q4_k_fields(blocks)
    if bug == "scale_min_hi_bits":
        # get_scale_min_k4 with the min's high bits taken from s[j-4] (the scale's byte) instead
        # of s[j]: wrong only for sub-blocks 4..7 and only when those 2 bits differ.
        s = blocks[:, 4:16]
        m = m.copy()
        m[:, 4:] = (s[:, 8:12] >> 4) | ((s[:, 0:4] >> 6) << 4)
    d1 = np.repeat(d * sc.astype(np.float32), 32, axis=1)
    m1 = np.repeat(dmin * m.astype(np.float32), 32, axis=1)
    qf = q.astype(np.float32)
    if bug == "min_sign":
        y = d1 * qf + m1
    elif bug == "f16_intermediate":
        # A shader computing in half precision: the right formula, rounded through f16.
        y = (d1 * qf - m1).astype(np.float16).astype(np.float32)
    else:
        y = d1 * qf - m1
    return y.reshape(-1)


@pytest.mark.parametrize("bug", ["min_sign", "scale_min_hi_bits", "f16_intermediate"])
def test_negative_control_q4_k_bit_exact_bites(bug):
    rng = np.random.default_rng([SEED, 400])
    n_blocks = 2048
    raw = random_blocks("Q4_K", n_blocks, rng)
    got = formats.dequantize("Q4_K", raw, n_blocks * 256)
    # Sanity: the unbroken variant is the reference, and equals C++.
    assert_bits_equal(_q4_k_variant(raw.reshape(n_blocks, -1), "none"), got, "Q4_K variant 'none'")
    bad = _q4_k_variant(raw.reshape(n_blocks, -1), bug)
    n_bad = int(np.count_nonzero(bits(bad) != bits(got)))
    rel = float(np.linalg.norm(bad - got) / np.linalg.norm(got))
    print(f"Q4_K bug {bug}: {n_bad} of {got.size} values differ, rel-l2 {rel:.2e}")
    assert n_bad > got.size // 100, f"the bit-exact comparison missed bug {bug}"
    if bug == "f16_intermediate":
        # The point of comparing bits: this bug is invisible to a loose tolerance.
        assert rel < 1e-3


def test_negative_control_q8_k_full_float_scale():
    """Q8_K stores d as f32: a decoder that narrows it to f16 (as every other format's scale)
    is caught."""
    rng = np.random.default_rng([SEED, 401])
    raw = random_blocks("Q8_K", 512, rng)
    got = formats.dequantize("Q8_K", raw, 512 * 256)
    blocks = raw.reshape(512, -1)
    d16 = ref.f32(blocks[:, 0:4]).astype(np.float16).astype(np.float32)
    bad = (d16 * ref.i8(blocks[:, 4:260]).astype(np.float32)).reshape(-1)
    n_bad = int(np.count_nonzero(bits(bad) != bits(got)))
    print(f"Q8_K with an f16 scale: {n_bad} of {got.size} values differ")
    assert n_bad > got.size // 2


# ---------------------------------------------------------------------------------------------
# Quantization: byte for byte where a deterministic reference exists
# ---------------------------------------------------------------------------------------------

def _quant_block(type_name: str) -> int:
    block_size, _ = ref.BLOCK[type_name]
    return 256 if block_size == 1 else block_size


@pytest.mark.parametrize("type_name", REF_QUANT_TYPES)
def test_quantize_matches_reference(type_name):
    rng = np.random.default_rng([SEED, 500 + REF_QUANT_TYPES.index(type_name)])
    x = stress_floats(_quant_block(type_name), rng)
    got = formats.quantize(type_name, x)
    want = ref.quantize(type_name, x)
    assert got.dtype == np.uint8 and got.shape == want.shape, (got.dtype, got.shape, want.shape)
    bad = np.flatnonzero(got != want)
    if bad.size:
        _, type_size = ref.BLOCK[type_name]
        blk = int(bad[0]) // type_size
        pytest.fail(f"{type_name}: {bad.size} of {got.size} bytes differ; first in block {blk} "
                    f"at byte {int(bad[0]) % type_size}: C++ {got[bad[0]]} vs reference {want[bad[0]]}")


@pytest.mark.parametrize("type_name", PEER_QUANT_TYPES)
def test_quantize_matches_gguf(type_name):
    gguf = _peer()
    rng = np.random.default_rng([SEED, 600 + PEER_QUANT_TYPES.index(type_name)])
    x = stress_floats(_quant_block(type_name), rng)
    with np.errstate(over="ignore"):    # the stress data overflows f16 in one block on purpose
        peer = gguf.quants.quantize(x.reshape(-1, 256), gguf.GGMLQuantizationType[type_name])
    peer = np.ascontiguousarray(peer).view(np.uint8).reshape(-1)
    got = formats.quantize(type_name, x)
    assert np.array_equal(got, peer), \
        f"{type_name}: {np.count_nonzero(got != peer)} of {got.size} bytes differ from gguf"
    assert np.array_equal(ref.quantize(type_name, x), peer), f"{type_name}: reference vs gguf"


def test_quantize_f16_all_ranges():
    """f32 -> f16 rounding over random bit patterns of every finite f32 (and +-inf): round to
    nearest even, subnormal halves, overflow to inf."""
    rng = np.random.default_rng([SEED, 700])
    u = rng.integers(0, 1 << 32, 1 << 18, dtype=np.uint64).astype(np.uint32)
    # Concentrate half the samples on exponents near the f16 range (2^-26 .. 2^17).
    near = (rng.integers(127 - 26, 127 + 17, u.size // 2).astype(np.uint32) << 23)
    u[: u.size // 2] = (u[: u.size // 2] & np.uint32(0x807FFFFF)) | near
    x = u.view(np.float32)
    x = x[~np.isnan(x)]
    x = np.concatenate([x, np.float32([np.inf, -np.inf, 65504, 65520, 65519.996, 2.0**-25,
                                       2.0**-25 * 1.0000001, -0.0])])
    x = x[: x.size // 256 * 256]
    got = formats.quantize("F16", x)
    with np.errstate(over="ignore"):
        want = x.astype("<f2").view(np.uint8)
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} bytes differ"


def test_quantize_bf16_nan_and_rounding():
    """ggml's bf16 rule on every kind of f32: NaN keeps its top half with the quiet bit set,
    everything else rounds to nearest even (subnormals are kept, not flushed)."""
    rng = np.random.default_rng([SEED, 701])
    u = rng.integers(0, 1 << 32, 1 << 16, dtype=np.uint64).astype(np.uint32)
    specials = np.array([0x7F800000, 0xFF800000, 0x7F800001, 0x7FC00000, 0xFFFFFFFF, 0x7F80FFFF,
                         0x00000001, 0x80008000, 0x00018000, 0x3F808000, 0x3F818000, 0x7F7FFFFF],
                        dtype=np.uint32)
    u[: specials.size] = specials
    x = u.view(np.float32)
    got = formats.quantize("BF16", x)
    want = ref.quantize("BF16", x)
    assert np.array_equal(got, want), f"{np.count_nonzero(got != want)} bytes differ"


def test_negative_control_quantize_rounding_bites():
    """Q8_0 rounds halves away from zero (roundf); a quantizer using round-half-even (np.rint,
    nearbyint) differs on the tie blocks of the stress data, so the byte comparison sees it."""
    rng = np.random.default_rng([SEED, 500 + REF_QUANT_TYPES.index("Q8_0")])
    x = stress_floats(32, rng)
    got = formats.quantize("Q8_0", x).reshape(-1, 34)
    xb = x.reshape(-1, 32)
    d = np.abs(xb).max(axis=1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d != 0, np.float32(1) / d, np.float32(0)).astype(np.float32)
    q_even = np.rint(xb * inv).astype(np.int8).view(np.uint8)
    n_bad = int(np.count_nonzero(q_even != got[:, 2:]))
    print(f"Q8_0 quantized with round-half-even: {n_bad} bytes differ")
    assert n_bad > 0


# ---------------------------------------------------------------------------------------------
# Round trip: quantize -> dequantize error within each format's bar
# ---------------------------------------------------------------------------------------------

def _roundtrip_error(type_name: str, x: np.ndarray) -> float:
    q = formats.quantize(type_name, x)
    block_size, type_size = ref.BLOCK[type_name]
    assert q.dtype == np.uint8 and q.size == x.size // block_size * type_size
    y = formats.dequantize(type_name, q, x.size)
    assert np.isfinite(y).all()
    return float(np.linalg.norm(y - x) / np.linalg.norm(x))


@pytest.fixture(scope="module")
def gaussian():
    return np.random.default_rng([SEED, 800]).standard_normal(1024 * 256).astype(np.float32)


@pytest.mark.parametrize("type_name", CPP_QUANT_TYPES)
def test_roundtrip_error(type_name, gaussian):
    rel = _roundtrip_error(type_name, gaussian)
    bar = ROUNDTRIP_BAR[type_name]
    print(f"{type_name} round trip rel-l2 {rel:.3e} (bar {bar})")
    assert rel < bar, f"{type_name}: round-trip rel-l2 {rel:.3e} exceeds the bar {bar}"
    if type_name in REF_QUANT_TYPES:
        y_ref = ref.dequantize(type_name, ref.quantize(type_name, gaussian), gaussian.size)
        rel_ref = float(np.linalg.norm(y_ref - gaussian) / np.linalg.norm(gaussian))
        assert rel == rel_ref


def test_negative_control_roundtrip_bar_bites(gaussian):
    """Q4_0's honest error breaks the Q8_0 bar (~7x: 4 bits fewer is 16x the step, less the
    extra room); a plausible Q8_0 bug, quants read as unsigned, breaks it by far more than 10x."""
    bar = ROUNDTRIP_BAR["Q8_0"]
    rel_q4 = _roundtrip_error("Q4_0", gaussian)
    print(f"Q4_0 error against the Q8_0 bar: {rel_q4:.3e} = {rel_q4 / bar:.1f} x bar")
    assert rel_q4 > 5 * bar
    q = formats.quantize("Q8_0", gaussian).reshape(-1, 34)
    d = ref.f16(q[:, 0:2])
    y_unsigned = (q[:, 2:].astype(np.float32) * d).reshape(-1)
    rel_bug = float(np.linalg.norm(y_unsigned - gaussian) / np.linalg.norm(gaussian))
    print(f"Q8_0 read unsigned: {rel_bug:.3e} = {rel_bug / bar:.0f} x bar")
    assert rel_bug > 10 * bar


# ---------------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------------

def test_error_unknown_type():
    with pytest.raises(FormatError, match="Q9_9"):
        formats.dequantize("Q9_9", np.zeros(64, np.uint8), 32)
    with pytest.raises(FormatError, match="Q9_9"):
        formats.quantize("Q9_9", np.zeros(32, np.float32))
    assert issubclass(FormatError, ValueError)
    with pytest.raises(ValueError, match="Q9_9"):
        ref.dequantize("Q9_9", np.zeros(64, np.uint8), 32)


def test_error_length_not_block_multiple():
    with pytest.raises(FormatError) as e:
        formats.dequantize("Q4_0", np.zeros(64, np.uint8), 33)
    msg = str(e.value)
    assert "Q4_0" in msg and "33" in msg and "32" in msg, msg
    with pytest.raises(FormatError) as e:
        formats.quantize("Q4_K", np.zeros(300, np.float32))
    msg = str(e.value)
    assert "Q4_K" in msg and "300" in msg and "256" in msg, msg
    with pytest.raises(ValueError, match="Q4_0.*33.*32"):
        ref.dequantize("Q4_0", np.zeros(64, np.uint8), 33)


def test_error_raw_too_short():
    with pytest.raises(FormatError) as e:
        formats.dequantize("Q4_K", np.zeros(287, np.uint8), 512)   # needs 2 * 144 = 288
    msg = str(e.value)
    assert "Q4_K" in msg and "287" in msg and "288" in msg, msg
    with pytest.raises(ValueError, match="Q4_K.*288.*287"):
        ref.dequantize("Q4_K", np.zeros(287, np.uint8), 512)


def test_error_no_converter(cpp_types):
    unreadable = [n for n, t in cpp_types.items() if not t.can_dequantize]
    unwritable = [n for n, t in cpp_types.items() if not t.can_quantize]
    assert "Q2_K" in unwritable   # K-quant writers beyond Q4_K..Q8_K are not built
    for name in unreadable[:3]:
        info = cpp_types[name]
        with pytest.raises(FormatError, match=name):
            formats.dequantize(name, np.zeros(info.type_size, np.uint8), info.block_size)
    with pytest.raises(FormatError, match="Q2_K"):
        formats.quantize("Q2_K", np.zeros(256, np.float32))
