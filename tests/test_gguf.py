"""dasllama.gguf from Python, checked against the gguf package's reader (the peer oracle) on
real model files and on random-weight models of every architecture."""

import gc

import numpy as np
import pytest

import dasllama
from dasllama.errors import DasllamaError, GGUFError
from dasllama.testing.random_gguf import (ALL_TYPES_KV, ARCHS, all_types_tensors,
                                          write_all_types_gguf, write_random_model)

gguf = pytest.importorskip("gguf", reason="the test extra installs the gguf package")


def _assert_same_metadata(ours: dict, path):
    peer = gguf.GGUFReader(path)
    peer_fields = {k: f for k, f in peer.fields.items() if not k.startswith("GGUF.")}
    assert set(ours) == set(peer_fields)
    for key, field in peer_fields.items():
        want = field.contents()
        got = ours[key]
        if isinstance(want, float) or (isinstance(want, list) and want and isinstance(want[0], float)):
            np.testing.assert_array_equal(np.asarray(got, np.float64), np.asarray(want, np.float64),
                                          err_msg=key)
        else:
            assert got == want, key
    return peer


@pytest.mark.parametrize("name", ["smollm2", "gemma3"])
def test_real_model_matches_peer_reader(real_model, name):
    path = real_model(name)
    with dasllama.gguf.open(path) as f:
        peer = _assert_same_metadata(f.metadata, path)
        assert list(f.tensors) == [t.name for t in peer.tensors]
        for t in peer.tensors:
            info = f.tensors[t.name]
            assert info.shape == tuple(int(d) for d in reversed(t.shape)), t.name
            assert info.type == t.tensor_type.name
            assert info.nbytes == t.n_bytes
            assert info.offset == t.data_offset
        # One tensor of each stored type, dequantized, equals the peer's dequantization.
        seen = set()
        for t in peer.tensors:
            if t.tensor_type.name in seen:
                continue
            seen.add(t.tensor_type.name)
            raw = f.raw(t.name)
            assert raw.dtype == np.uint8 and raw.nbytes == t.n_bytes
            assert not raw.flags.writeable
            want = gguf.quants.dequantize(np.asarray(t.data), t.tensor_type).reshape(-1)
            got = f.tensor(t.name)
            assert got.shape == f.tensors[t.name].shape
            np.testing.assert_array_equal(got.reshape(-1).view(np.uint32),
                                          want.astype(np.float32).view(np.uint32), err_msg=t.name)
        assert len(seen) >= 3


@pytest.mark.parametrize("arch", ARCHS)
def test_random_models_match_peer_reader(tmp_path, arch):
    weights = {}
    path = write_random_model(tmp_path / f"{arch}.gguf", arch, weight_type="Q8_0",
                              weights_out=weights)
    with dasllama.gguf.open(path) as f:
        _assert_same_metadata(f.metadata, path)
        assert f.architecture == arch
        for name, values in weights.items():
            got = f.tensor(name)
            assert got.shape == values.shape, name
            err = np.linalg.norm(got - values) / max(np.linalg.norm(values), 1e-30)
            bar = 0.0 if f.tensors[name].type == "F32" else 1.2e-2  # Q8_0's round-trip bound
            assert err <= bar, (name, err)


def _same(got, want, f32: bool) -> bool:
    """Equal values, nested lists compared item by item, f32 values at f32 precision."""
    if isinstance(want, (list, tuple)):
        return isinstance(got, list) and len(got) == len(want) and all(
            _same(g, w, f32) for g, w in zip(got, want))
    if isinstance(want, (bytes, bytearray)):
        want = want.decode("utf-8", "replace")
    if f32 and isinstance(want, float):
        return np.float32(got) == np.float32(want)
    return type(got) is type(want) and got == want


def test_every_metadata_type_and_nested_arrays(tmp_path):
    # The gguf package flattens arrays of arrays, so the oracle here is what was written.
    path = write_all_types_gguf(tmp_path / "all.gguf")
    with dasllama.gguf.open(path) as f:
        assert f.metadata.keys() == {key for key, _, _ in ALL_TYPES_KV}
        for key, spec, value in ALL_TYPES_KV:
            f32 = gguf.GGUFValueType.FLOAT32 in (spec if isinstance(spec, tuple) else (spec,))
            assert _same(f.metadata[key], value, f32), key
        nested = [v for v in f.metadata.values()
                  if isinstance(v, list) and v and isinstance(v[0], list)]
        assert nested, "the all-types file holds arrays of arrays"
        assert f.alignment == 64
        for name, values, _ in all_types_tensors():
            np.testing.assert_allclose(f.tensor(name), values, rtol=1e-2, atol=2e-2)
        np.testing.assert_array_equal(f.tensor("t.f32"), all_types_tensors()[0][1])


def test_split_model_opens_as_one(tmp_path):
    whole = write_random_model(tmp_path / "whole.gguf", "llama")
    first = write_random_model(tmp_path / "parts.gguf", "llama", split_max_tensors=5)
    with dasllama.gguf.open(whole) as w, dasllama.gguf.open(first) as s:
        assert s.file_count > 1 and w.file_count == 1
        assert sorted(s.tensors) == sorted(w.tensors)
        for name in w.tensors:
            np.testing.assert_array_equal(s.tensor(name), w.tensor(name))
    # Opening a later part is refused, naming the part to open instead.
    later = first.with_name(first.name.replace("-00001-", "-00002-"))
    with pytest.raises(GGUFError, match="open part 00001"):
        dasllama.gguf.open(later)
    # A missing part is an error naming it.
    last = sorted(tmp_path.glob("parts-*.gguf"))[-1]
    last.unlink()
    with pytest.raises(GGUFError, match=last.name):
        dasllama.gguf.open(first)


def test_raw_view_keeps_the_mapping_alive(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "llama")
    f = dasllama.gguf.open(path)
    raw = f.raw("token_embd.weight")
    want = raw.copy()
    f.close()
    del f
    gc.collect()
    np.testing.assert_array_equal(raw, want)  # still readable: the view holds the mapping
    with pytest.raises(ValueError):
        raw[0] = 1  # read-only


def test_errors_are_typed_and_name_the_offset(tmp_path):
    path = write_random_model(tmp_path / "m.gguf", "llama")
    data = bytearray(path.read_bytes())
    data[4:8] = (7).to_bytes(4, "little")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(data)
    with pytest.raises(GGUFError, match=r"version at offset 4: GGUF version 7") as info:
        dasllama.gguf.open(bad)
    assert isinstance(info.value, ValueError) and isinstance(info.value, DasllamaError)
    assert str(bad) in str(info.value)
    with pytest.raises(GGUFError, match="lies outside"):
        dasllama.gguf.open_buffer(bytes(path.read_bytes()[:-100]))
    with pytest.raises(FileNotFoundError):
        dasllama.gguf.open(tmp_path / "missing.gguf")
    with dasllama.gguf.open(path) as f, pytest.raises(KeyError, match="no tensor named"):
        f.tensor("nope")
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(GGUFError, match="magic"):
        dasllama.gguf.open(empty)
    with pytest.raises(GGUFError):
        dasllama.gguf.open(tmp_path)  # a folder
