"""The random-weight GGUF writer (dasllama.testing): read its files back with the gguf package's
reader and with dasllama's, and check them against llama.cpp's layout written out here
independently of the writer (GGUF dimension order, innermost first, as in llama-model.cpp)."""

from __future__ import annotations

import struct

import numpy as np
import pytest

gguf = pytest.importorskip("gguf")
from gguf import GGUFReader, GGUFValueType as V  # noqa: E402

from dasllama.testing import (  # noqa: E402
    ALL_TYPES_KV, ARCHS, all_types_tensors, split_paths, write_all_types_gguf, write_gguf_version,
    write_random_model,
)

# Relative RMS error of a round trip through each type, for N(0, 1/fan_in) rows of 64..512,
# measured: F16 2.1e-4, BF16 1.7e-3, Q8_0 5.3e-3, Q5_1 3.8e-2, Q5_0 4.3e-2, Q4_1 7.8e-2,
# Q4_0 8.7e-2, Q4_K 7.0e-2, Q5_K 3.5e-2, Q6_K 1.7e-2 (test_kquant_model prints its own). Bars are 2-5x that, far below the
# ~1.4 that a wrong row order or a wrong block's scale gives.
REL_BAR = {"F32": 0.0, "F16": 1e-3, "BF16": 6e-3, "Q8_0": 1.5e-2, "Q5_0": 0.1, "Q5_1": 0.1,
           "Q4_0": 0.2, "Q4_1": 0.2, "Q4_K": 0.15, "Q5_K": 0.08, "Q6_K": 0.04}


def rel_err(a, b):
    return float(np.linalg.norm(np.asarray(a, np.float64) - b) / np.linalg.norm(b))


def expected_layout(arch, L=2, E=64, H=4, Hkv=2, F=128, V=512, hd=16, X=4, Fe=64, tied=None):
    """name -> GGUF dims (innermost first), written from llama.cpp's create_tensor calls."""
    tied = (arch == "gemma3") if tied is None else tied
    t = {"token_embd.weight": (E, V), "output_norm.weight": (E,)}
    if not tied:
        t["output.weight"] = (E, V)
    for i in range(L):
        b = f"blk.{i}."
        t[b + "attn_norm.weight"] = (E,)
        t[b + "attn_q.weight"] = (E, hd * H)
        t[b + "attn_k.weight"] = (E, hd * Hkv)
        t[b + "attn_v.weight"] = (E, hd * Hkv)
        t[b + "attn_output.weight"] = (hd * H, E)
        t[b + "ffn_norm.weight"] = (E,)
        if arch == "qwen2":
            t[b + "attn_q.bias"] = (hd * H,)
            t[b + "attn_k.bias"] = (hd * Hkv,)
            t[b + "attn_v.bias"] = (hd * Hkv,)
        if arch in ("qwen3", "qwen3moe", "gemma3"):
            t[b + "attn_q_norm.weight"] = (hd,)
            t[b + "attn_k_norm.weight"] = (hd,)
        if arch == "gemma3":
            t[b + "post_attention_norm.weight"] = (E,)
            t[b + "post_ffw_norm.weight"] = (E,)
        if arch == "qwen3moe":
            t[b + "ffn_gate_inp.weight"] = (E, X)
            t[b + "ffn_gate_exps.weight"] = (E, Fe, X)
            t[b + "ffn_down_exps.weight"] = (Fe, E, X)
            t[b + "ffn_up_exps.weight"] = (E, Fe, X)
        else:
            t[b + "ffn_gate.weight"] = (E, F)
            t[b + "ffn_down.weight"] = (F, E)
            t[b + "ffn_up.weight"] = (E, F)
    return t


def fields(reader):
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def is_matrix(name):
    return name.endswith(".weight") and "norm" not in name and "ffn_gate_inp" not in name


# (arch, weight type): every arch in F32 and Q8_0, the other gguf-package types spread over them.
CASES = [(a, "F32") for a in ARCHS] + [(a, "Q8_0") for a in ARCHS] + [
    ("llama", "F16"), ("qwen2", "BF16"), ("qwen3", "Q4_0"), ("qwen3moe", "Q4_1"),
    ("gemma3", "Q5_0"), ("llama", "Q5_1")]


@pytest.mark.parametrize("arch,wtype", CASES)
def test_layout_metadata_and_values(tmp_path, arch, wtype):
    weights = {}
    path = write_random_model(tmp_path / "m.gguf", arch, weight_type=wtype, weights_out=weights,
                              tokenizer="spm" if arch == "gemma3" else "bpe")
    r = GGUFReader(path)
    md = fields(r)
    k = arch + "."
    assert md["general.architecture"] == arch
    assert r.fields["GGUF.version"].contents() == 3
    common = {"block_count": 2, "embedding_length": 64, "feed_forward_length": 128,
              "attention.head_count": 4, "attention.head_count_kv": 2, "context_length": 256}
    for key, val in common.items():
        assert md[k + key] == val, key
        assert r.fields[k + key].types == [V.UINT32], key
    eps, base = (1e-5, 1e4) if arch == "llama" else (1e-6, 1e6)
    assert md[k + "attention.layer_norm_rms_epsilon"] == pytest.approx(eps)
    assert md[k + "rope.freq_base"] == base
    if arch in ("qwen3", "qwen3moe", "gemma3"):
        assert md[k + "attention.key_length"] == md[k + "attention.value_length"] == 16
    else:
        assert k + "attention.key_length" not in md
    if arch == "qwen3moe":
        assert (md[k + "expert_count"], md[k + "expert_used_count"],
                md[k + "expert_feed_forward_length"]) == (4, 2, 64)
    else:
        assert k + "expert_count" not in md
    if arch == "gemma3":
        assert md[k + "attention.sliding_window"] == 32
    else:
        assert not any("sliding_window" in key for key in md)

    want = expected_layout(arch)
    got = {t.name: t for t in r.tensors}
    assert set(got) == set(want)
    assert set(weights) == set(want)
    for name, dims in want.items():
        t = got[name]
        assert tuple(int(d) for d in t.shape) == dims, name
        ttype = wtype if is_matrix(name) else "F32"
        assert t.tensor_type.name == ttype, name
        values = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(weights[name].shape)
        assert weights[name].shape == tuple(reversed(dims)), name
        err = rel_err(values, weights[name])
        assert err <= REL_BAR[ttype], f"{name} {ttype}: rel err {err:.3g} > {REL_BAR[ttype]}"
    # the generator's scales: norms near 1, matrices ~N(0, 1/fan_in)
    assert abs(float(weights["output_norm.weight"].mean()) - 1) < 0.05
    assert float(weights["token_embd.weight"].std()) == pytest.approx(1 / 8, rel=0.05)


def test_same_seed_same_values_other_seed_differs(tmp_path):
    a, b, c = {}, {}, {}
    write_random_model(tmp_path / "a.gguf", "qwen3", seed=7, weights_out=a)
    write_random_model(tmp_path / "b.gguf", "qwen3", seed=7, weight_type="Q8_0", weights_out=b)
    write_random_model(tmp_path / "c.gguf", "qwen3", seed=8, weights_out=c)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    assert not np.array_equal(a["blk.0.attn_q.weight"], c["blk.0.attn_q.weight"])


def test_options(tmp_path):
    p = write_random_model(tmp_path / "q.gguf", "qwen3", head_dim=32, n_vocab=600, tied_output=True,
                           tensor_types={"token_embd.weight": "F16", "blk.1.*": "Q8_0"},
                           chat_template=True, tokenizer_pre="qwen2")
    r = GGUFReader(p)
    md = fields(r)
    assert md["qwen3.attention.key_length"] == 32 and md["qwen3.rope.dimension_count"] == 32
    assert "<|im_start|>" in md["tokenizer.chat_template"]
    assert md["tokenizer.ggml.pre"] == "qwen2"
    want = expected_layout("qwen3", hd=32, V=600, tied=True)
    got = {t.name: t for t in r.tensors}
    assert {n: tuple(int(d) for d in t.shape) for n, t in got.items()} == want
    assert got["token_embd.weight"].tensor_type.name == "F16"
    assert got["blk.1.attn_q.weight"].tensor_type.name == "Q8_0"
    assert got["blk.1.attn_norm.weight"].tensor_type.name == "Q8_0"  # patterns win over kinds
    assert got["blk.0.attn_q.weight"].tensor_type.name == "F32"
    toks = md["tokenizer.ggml.tokens"]
    assert len(toks) == 600 and toks[-1] == "[PAD599]"
    assert r.fields["tokenizer.ggml.token_type"].contents()[-1] == gguf.TokenType.UNUSED
    # gemma3 without a window writes none; untied gemma3 has output.weight
    r = GGUFReader(write_random_model(tmp_path / "g.gguf", "gemma3", sliding_window=0, tied_output=False))
    assert "gemma3.attention.sliding_window" not in fields(r)
    assert "output.weight" in {t.name for t in r.tensors}


def test_errors(tmp_path):
    with pytest.raises(ValueError, match="arch"):
        write_random_model(tmp_path / "x.gguf", "gpt5")
    with pytest.raises(ValueError, match="block size 256"):
        write_random_model(tmp_path / "x.gguf", "llama", weight_type="Q4_K")   # n_embd 64
    with pytest.raises(ValueError, match="block size 32"):
        write_random_model(tmp_path / "x.gguf", "llama", n_embd=48, n_head=4, n_head_kv=2,
                           weight_type="Q8_0")
    with pytest.raises(ValueError, match="n_vocab"):
        write_random_model(tmp_path / "x.gguf", "llama", n_vocab=100)
    with pytest.raises(ValueError, match="sliding_window"):
        write_random_model(tmp_path / "x.gguf", "llama", sliding_window=16)
    with pytest.raises(ValueError, match="tokenizer"):
        write_random_model(tmp_path / "x.gguf", "llama", tokenizer="wordpiece")


def gpt2_byte_chars():
    # written out again here rather than imported: printable latin-1 maps to itself, the other
    # 68 bytes to U+0100 onwards in byte order
    keep = [b for b in range(256) if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    rest = [b for b in range(256) if b not in keep]
    return [chr(b) for b in keep] + [chr(256 + i) for i in range(len(rest))]


def test_bpe_tokenizer(tmp_path):
    md = fields(GGUFReader(write_random_model(tmp_path / "m.gguf", "qwen2")))
    assert md["tokenizer.ggml.model"] == "gpt2" and md["tokenizer.ggml.pre"] == "default"
    toks, types, merges = (md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"],
                           md["tokenizer.ggml.merges"])
    assert len(toks) == 512 == len(types) and len(set(toks)) == 512
    assert toks[:256] == gpt2_byte_chars()
    assert "Ġ" in toks[:256] and toks[toks.index("Ġ")] == chr(0x120)
    vocab = set(toks)
    assert len(merges) >= 200
    for m in merges:
        a, b = m.split(" ")
        assert a in vocab and b in vocab and a + b in vocab, m
    assert {"Ġthe", "Ġand"} <= vocab
    for s in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        assert types[toks.index(s)] == gguf.TokenType.CONTROL
    eot = toks.index("<|endoftext|>")
    assert md["tokenizer.ggml.bos_token_id"] == md["tokenizer.ggml.eos_token_id"] == eot
    assert md["tokenizer.ggml.add_bos_token"] is False


def test_spm_tokenizer(tmp_path):
    md = fields(GGUFReader(write_random_model(tmp_path / "m.gguf", "llama", tokenizer="spm")))
    assert md["tokenizer.ggml.model"] == "llama"
    toks, types, scores = (md["tokenizer.ggml.tokens"], md["tokenizer.ggml.token_type"],
                           md["tokenizer.ggml.scores"])
    assert len(toks) == len(types) == len(scores) == 512 and len(set(toks)) == 512
    assert toks[:3] == ["<unk>", "<s>", "</s>"]
    assert types[:3] == [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    assert toks[3:259] == [f"<0x{b:02X}>" for b in range(256)]
    assert set(types[3:259]) == {gguf.TokenType.BYTE}
    assert (md["tokenizer.ggml.unknown_token_id"], md["tokenizer.ggml.bos_token_id"],
            md["tokenizer.ggml.eos_token_id"]) == (0, 1, 2)
    assert md["tokenizer.ggml.add_bos_token"] is True
    assert {"▁the", "▁and", "▁"} <= set(toks)
    # every multi-character piece can be built from two shorter pieces of higher score
    pieces = {t: s for t, s, ty in zip(toks, scores, types) if ty == gguf.TokenType.NORMAL}
    for t, s in pieces.items():
        if len(t) > 1:
            assert any(t[:i] in pieces and t[i:] in pieces for i in range(1, len(t))), t


def test_split(tmp_path):
    whole, parts = {}, {}
    ref = write_random_model(tmp_path / "whole.gguf", "qwen3moe", weights_out=whole)
    first = write_random_model(tmp_path / "m.gguf", "qwen3moe", split_max_tensors=8, weights_out=parts)
    n_tensors = len(GGUFReader(ref).tensors)
    n = -(-n_tensors // 8)
    assert first.name == f"m-00001-of-{n:05d}.gguf"
    files = split_paths(first)
    assert [f.name for f in files] == [f"m-{i:05d}-of-{n:05d}.gguf" for i in range(1, n + 1)]
    assert sorted(p.name for p in tmp_path.glob("m-*.gguf")) == [f.name for f in files]
    ref_r = GGUFReader(ref)
    ref_data = {t.name: np.asarray(t.data).tobytes() for t in ref_r.tensors}
    seen = []
    for i, f in enumerate(files):
        r = GGUFReader(f)
        md = fields(r)
        assert (md["split.no"], md["split.count"], md["split.tensors.count"]) == (i, n, n_tensors)
        assert r.fields["split.no"].types == [V.UINT16]
        assert ("tokenizer.ggml.tokens" in md) == (i == 0)
        assert 1 <= len(r.tensors) <= 8
        for t in r.tensors:
            assert np.asarray(t.data).tobytes() == ref_data[t.name], t.name
            seen.append(t.name)
    assert seen == [t.name for t in ref_r.tensors]
    assert fields(GGUFReader(files[0]))["qwen3moe.expert_count"] == 4


def test_version_patch(tmp_path):
    p = write_random_model(tmp_path / "v2.gguf", "llama", version=2)
    assert p.read_bytes()[:8] == b"GGUF" + struct.pack("<I", 2)
    r = GGUFReader(p)
    assert r.fields["GGUF.version"].contents() == 2 and len(r.tensors) == 21
    write_gguf_version(p, 3)
    assert GGUFReader(p).fields["GGUF.version"].contents() == 3
    write_gguf_version(p, 7)
    with pytest.raises(ValueError, match="version 7"):
        GGUFReader(p)
    bad = tmp_path / "notgguf.bin"
    bad.write_bytes(b"GGML" + bytes(20))
    with pytest.raises(ValueError, match="not a GGUF"):
        write_gguf_version(bad, 3)


def flatten(spec, value):
    """What GGUFReader.contents() gives for an array: the leaves, flattened."""
    if spec[0] != V.ARRAY:
        return [value]
    return [x for v in value for x in flatten(spec[1:], v)]


def test_all_types_file_with_gguf_reader(tmp_path):
    p = write_all_types_gguf(tmp_path / "all.gguf")
    r = GGUFReader(p)
    assert r.alignment == 64
    for key, spec, value in ALL_TYPES_KV:
        f = r.fields[key]
        if spec[0] == V.ARRAY:
            # the reader records the element types of the first element only
            assert f.types[0] == V.ARRAY and f.types[-1] == (spec[-1] if value else V.ARRAY), key
            got = f.contents()
            want = flatten(spec, value)
            if spec[-1] == V.FLOAT32:
                assert got == pytest.approx(want, rel=1e-7), key
            else:
                assert got == want, key
        else:
            assert f.types == [spec[0]], key
            assert f.contents() == (pytest.approx(value) if spec[0] == V.FLOAT32 else value), key
    # nested arrays: the raw counts in the file say [[1,2,3],[4],[]] and not a flat list
    f = r.fields["test.nested.int32"]
    # parts: key length, key, value type, element type, count, then per inner array type, count, items
    assert [int(f.parts[i][0]) for i in (4, 6, 11, 14)] == [3, 3, 1, 0]
    want = {n: (v, t) for n, v, t in all_types_tensors()}
    assert [t.name for t in r.tensors] == list(want)
    for t in r.tensors:
        v, ty = want[t.name]
        assert t.tensor_type.name == ty and tuple(int(d) for d in t.shape) == tuple(reversed(v.shape))
        assert t.data_offset % 64 == 0
        got = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(v.shape)
        assert rel_err(got, v) <= REL_BAR[ty]


# ---------------------------------------------------------------------------------------------
# dasllama's own reader
# ---------------------------------------------------------------------------------------------

def _dasllama():
    try:
        import dasllama
        from dasllama import _core  # noqa: F401
    except ImportError as e:
        pytest.skip(f"dasllama extension not built: {e}")
    return dasllama


def _plain(v):
    if isinstance(v, np.ndarray):
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


def _shape_of(spec, value):
    """The nesting of a value as nested lengths, to compare ragged float arrays."""
    if spec[0] != V.ARRAY:
        return None
    return [len(value), [_shape_of(spec[1:], v) for v in value]]


@pytest.mark.parametrize("arch,wtype", [(a, "F32") for a in ARCHS] + [(a, "Q8_0") for a in ARCHS]
                         + [("qwen2", "F16"), ("gemma3", "BF16"), ("qwen3moe", "Q4_0"),
                            ("llama", "Q4_1"), ("qwen3", "Q5_0"), ("qwen2", "Q5_1")])
def test_dasllama_reader(tmp_path, arch, wtype):
    dasllama = _dasllama()
    weights = {}
    path = write_random_model(tmp_path / "m.gguf", arch, weight_type=wtype, weights_out=weights)
    ref = GGUFReader(path)
    with dasllama.gguf.open(path) as f:
        md = f.metadata
        want_md = fields(ref)
        assert set(md) == set(want_md)
        for key, val in want_md.items():
            got = _plain(md[key])
            if isinstance(val, float):
                assert got == pytest.approx(val, rel=1e-7), key
            else:
                assert got == val, key
        assert list(f.tensors) == [t.name for t in ref.tensors]
        for t in ref.tensors:
            info = f.tensors[t.name]
            assert info.shape == weights[t.name].shape, t.name
            assert info.type == t.tensor_type.name and info.nbytes == t.n_bytes, t.name
            assert info.offset == t.data_offset, t.name
            raw = np.asarray(f.raw(t.name))
            assert raw.dtype == np.uint8 and raw.tobytes() == np.asarray(t.data).tobytes(), t.name
            x = f.tensor(t.name)
            assert x.dtype == np.float32 and x.shape == weights[t.name].shape, t.name
            # same bytes decoded by the gguf package's NumPy dequantizer
            ref_x = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(x.shape)
            np.testing.assert_allclose(x, ref_x, rtol=1e-6, atol=1e-7, err_msg=t.name)
            if info.type == "F32":
                np.testing.assert_array_equal(x, weights[t.name])
            else:
                assert rel_err(x, weights[t.name]) <= REL_BAR[info.type], t.name


@pytest.mark.parametrize("qtype", ["Q4_K", "Q5_K", "Q6_K"])
def test_kquant_model(tmp_path, qtype):
    dasllama = _dasllama()
    weights = {}
    path = write_random_model(tmp_path / "k.gguf", "qwen3", n_layer=1, n_embd=256, n_head=4,
                              n_head_kv=2, head_dim=64, n_ff=512, weight_type=qtype,
                              weights_out=weights)
    ref = GGUFReader(path)
    with dasllama.gguf.open(path) as f:
        for t in ref.tensors:
            want_type = qtype if is_matrix(t.name) else "F32"
            assert t.tensor_type.name == want_type == f.tensors[t.name].type, t.name
            # the gguf package's NumPy dequantizer reads what dasllama.formats.quantize wrote
            x = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(weights[t.name].shape)
            err = rel_err(x, weights[t.name])
            print(f"{qtype} {t.name}: rel err {err:.3g}")
            assert err <= REL_BAR[want_type], f"{t.name}: {err:.3g}"
            np.testing.assert_allclose(f.tensor(t.name), x, rtol=1e-6, atol=1e-7, err_msg=t.name)


def test_dasllama_reader_split_and_v2(tmp_path):
    dasllama = _dasllama()
    weights = {}
    first = write_random_model(tmp_path / "s.gguf", "gemma3", split_max_tensors=6, version=2,
                               weight_type="Q8_0", weights_out=weights)
    files = split_paths(first)
    with dasllama.gguf.open(first) as f:
        assert f.version == 2 and f.file_count == len(files) > 1
        assert list(f.tensors) == list(weights)
        assert f.metadata["gemma3.attention.sliding_window"] == 32
        used = sorted({info.file for info in f.tensors.values()})
        assert used == list(range(len(files)))
        for name, w in weights.items():
            bar = REL_BAR["Q8_0" if is_matrix(name) else "F32"]
            assert rel_err(f.tensor(name), w) <= bar, name


def test_dasllama_reader_all_types(tmp_path):
    dasllama = _dasllama()
    p = write_all_types_gguf(tmp_path / "all.gguf", version=2)
    with dasllama.gguf.open(p) as f:
        assert f.version == 2 and f.alignment == 64
        md = f.metadata
        for key, spec, value in ALL_TYPES_KV:
            got = _plain(md[key])
            if spec[-1] == V.FLOAT32:
                assert got == pytest.approx(value, rel=1e-7) if spec[0] != V.ARRAY else \
                    flatten(spec, got) == pytest.approx(flatten(spec, value), rel=1e-7), key
                assert _shape_of(spec, got) == _shape_of(spec, value), key
            else:
                assert got == value, key
                assert type(got) is type(value), key
        for name, v, ty in all_types_tensors():
            info = f.tensors[name]
            assert info.shape == v.shape and info.type == ty and info.offset % 64 == 0
            assert rel_err(f.tensor(name), v) <= REL_BAR[ty], name
