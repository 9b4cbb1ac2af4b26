"""The Pocket TTS converter (dasllama.convert.pocket), its CLI and the safetensors reader.

The checkpoint is the package's English TTSModel with random weights (dasllama.testing.pocket),
saved with safetensors, as the released model.safetensors is: the same names and shapes. The
plan is also checked against every config the package ships (its modules built on the meta
device, so no weights are made).
"""

from __future__ import annotations

import argparse
import json
import struct

import numpy as np
import pytest

import dasllama
from dasllama.convert import ConvertError, read_safetensors
from dasllama.convert.cli import add_convert_parser
from dasllama.convert.pocket import (LANES, convert_pocket, english_config, hyperparameters,
                                     load_config, tensor_plan)
from dasllama.errors import DasllamaError
from requires import require as _require


@pytest.fixture(scope="module")
def fx():
    _require("torch")
    _require("pocket_tts")
    from dasllama.testing.pocket import shared_fixture
    return shared_fixture(("f32", "f16", "q8_0"))


@pytest.fixture(scope="module")
def state(fx):
    """The checkpoint as read back from its safetensors file (memory-mapped, read-only)."""
    return read_safetensors(fx.checkpoint)


# =============================================================================================
# Round trip
# =============================================================================================

@pytest.mark.parametrize("lane", sorted(LANES))
def test_round_trip_names_shapes_types_values(fx, state, lane):
    plan = tensor_plan(hyperparameters(english_config()))
    with dasllama.gguf.open(fx.gguf_path(lane)) as f:
        assert list(f.tensors) == [e.name for e in plan]
        matrix_type = LANES[lane][0]
        worst = 0.0
        for e in plan:
            info = f.tensors[e.name]
            assert info.shape == e.shape, e.name
            assert info.type == (matrix_type if e.matrix else "F32"), e.name
            want = np.asarray(state[e.source], np.float32).reshape(e.shape)
            got = f.tensor(e.name)
            if info.type == "F32":
                assert np.array_equal(got, want), e.name
            elif info.type == "F16":
                assert np.array_equal(got, want.astype(np.float16).astype(np.float32)), e.name
            else:
                err = float(np.linalg.norm(got - want) / np.linalg.norm(want))
                worst = max(worst, err)
                assert err < 1e-2, (e.name, err)
        if matrix_type == "Q8_0":
            print(f"q8_0 matrices: worst rel {worst:.2e}")
        meta = f.metadata
        assert meta["general.architecture"] == "pocket"
        assert meta["general.file_type"] == LANES[lane][1]
        expected = {"pocket.sample_rate": 24000, "pocket.frame_rate": 12.5,
                    "pocket.latent_dim": 32, "pocket.lsd_decode_steps": 1,
                    "pocket.eos_threshold": -4.0, "pocket.chunk_tokens": 50,
                    "pocket.min_frames_before_eos": 6, "pocket.frames_after_eos": -1,
                    "pocket.voice_cloning": True, "pocket.text.n_bins": 4000,
                    "pocket.lm.d_model": 1024, "pocket.lm.num_heads": 16,
                    "pocket.lm.num_kv_heads": 16, "pocket.lm.head_dim": 64,
                    "pocket.lm.num_layers": 6, "pocket.lm.ffn_dim": 4096,
                    "pocket.flow.type": "lsd", "pocket.flow.dim": 512, "pocket.flow.depth": 6,
                    "pocket.mimi.upsample_stride": 16, "pocket.mimi.dec.ratios": [6, 5, 4],
                    "pocket.mimi.dec_tf.context": 250, "pocket.mimi.dec_tf.num_heads": 8,
                    "pocket.tokenizer.kind": "tokenizers",
                    "pocket.text.replace_from": ["\u2019", "\u2018"]}
        for key, value in expected.items():
            assert meta[key] == value, key
        assert abs(meta["pocket.temperature"] - 0.3) < 1e-7
        assert meta["tokenizer.huggingface.json"] == fx.tokenizer.read_text(encoding="utf-8")


def test_plan_matches_every_packaged_config(fx):
    """Names and shapes of the plan equal the state dict of every config pocket-tts ships."""
    import torch
    from pocket_tts.models.flow_lm import FlowLMModel
    from pocket_tts.models.mimi import build_mimi
    from pocket_tts.utils.config import CONFIGS_DIR
    from pocket_tts.utils.config import load_config as package_config

    paths = sorted(CONFIGS_DIR.glob("*.yaml"))
    assert paths
    for path in paths:
        cfg = package_config(path)
        lut = cfg.flow_lm.lookup_table
        lut.tokenizer_path, lut.tokenizer = str(fx.tokenizer), "tokenizers"
        n_bins, lut.n_bins = lut.n_bins, 4000  # the test tokenizer's size; rows are n_bins + 1
        with torch.device("meta"):
            flow = FlowLMModel.from_pydantic_config(
                cfg.flow_lm, latent_dim=cfg.mimi.quantizer.dimension,
                insert_bos_before_voice=cfg.flow_lm.insert_bos_before_voice)
            mimi = build_mimi(cfg.mimi)
        theirs = {"flow_lm." + k: tuple(v.shape) for k, v in flow.state_dict().items()}
        theirs.update({"mimi." + k: tuple(v.shape) for k, v in mimi.state_dict().items()})
        theirs["flow_lm.speaker_proj_weight"] = (cfg.flow_lm.transformer.d_model,
                                                 cfg.mimi.inner_dim or cfg.mimi.seanet.dimension)
        config = load_config(path)
        config["flow_lm"]["lookup_table"]["n_bins"] = 4000
        ours = {e.source: e.source_shape for e in tensor_plan(hyperparameters(config))}
        assert ours == theirs, path.name
        print(f"{path.stem}: {len(ours)} tensors (n_bins {n_bins})")


def test_config_overrides():
    hp = hyperparameters(load_config({"flow_lm": {"transformer": {"num_heads": 8}}}))
    assert (hp["lm"]["num_heads"], hp["lm"]["head_dim"], hp["lm"]["d_model"]) == (8, 128, 1024)
    assert hyperparameters(load_config(None)) == hyperparameters(english_config())
    with pytest.raises(ConvertError, match="num_kv_heads"):
        hyperparameters(load_config({"flow_lm": {"transformer": {"num_kv_heads": 5}}}))


# =============================================================================================
# Errors name the tensor
# =============================================================================================

def test_missing_tensor_is_named(fx, state, tmp_path):
    broken = {k: v for k, v in state.items() if k != "flow_lm.transformer.layers.3.linear1.weight"}
    with pytest.raises(ConvertError,
                       match=r"missing.*flow_lm\.transformer\.layers\.3\.linear1\.weight"):
        convert_pocket(broken, fx.tokenizer, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


def test_wrong_shape_is_named(fx, state, tmp_path):
    broken = dict(state)
    broken["mimi.decoder.model.5.convtr.weight"] = np.zeros((256, 128, 9), np.float32)
    with pytest.raises(ConvertError, match=r"mimi\.decoder\.model\.5\.convtr\.weight is "
                                           r"\(256, 128, 9\), expected \(256, 128, 10\)"):
        convert_pocket(broken, fx.tokenizer, tmp_path / "x.gguf")


def test_unexpected_and_partial_voice_are_named(fx, state, tmp_path):
    extra = dict(state, **{"flow_lm.something_else": np.zeros(3, np.float32)})
    with pytest.raises(ConvertError, match=r"unexpected.*flow_lm\.something_else"):
        convert_pocket(extra, fx.tokenizer, tmp_path / "x.gguf")
    partial = {k: v for k, v in state.items() if k != "mimi.encoder.model.0.conv.weight"}
    with pytest.raises(ConvertError, match=r"voice encoder is partial.*mimi\.encoder\.model\.0"):
        convert_pocket(partial, fx.tokenizer, tmp_path / "x.gguf")


def test_nan_tensor_and_bad_options(fx, state, tmp_path):
    bad = dict(state)
    bad["flow_lm.out_eos.bias"] = np.array([np.nan], np.float32)
    with pytest.raises(ConvertError, match=r"flow_lm\.out_eos\.bias: holds NaN"):
        convert_pocket(bad, fx.tokenizer, tmp_path / "x.gguf")
    assert list(tmp_path.iterdir()) == []          # no partial file left behind
    with pytest.raises(ConvertError, match="lane 'q4_0'"):
        convert_pocket(state, fx.tokenizer, tmp_path / "x.gguf", lane="q4_0")
    tokenizers = _require("tokenizers")
    small = tokenizers.Tokenizer(tokenizers.models.WordLevel({"a": 0, "b": 1}, unk_token="a"))
    (tmp_path / "small.json").write_text(small.to_str())
    with pytest.raises(ConvertError, match="2 tokens but the config's flow_lm.lookup_table"
                                           ".n_bins is 4000"):
        convert_pocket(state, tmp_path / "small.json", tmp_path / "x.gguf")


def test_without_voice_encoder(fx, state, tmp_path):
    """The voice encoder's tensors all absent: a model without voice cloning."""
    from dasllama.reference.pocket import ReferencePocket
    plan = tensor_plan(hyperparameters(english_config()))
    voice = {e.source for e in plan if e.voice}
    assert "flow_lm.speaker_proj_weight" in voice and "mimi.downsample.conv.conv.weight" in voice
    out = convert_pocket({k: v for k, v in state.items() if k not in voice}, fx.tokenizer,
                         tmp_path / "novoice.gguf", lane="q8_0")
    with dasllama.gguf.open(out) as f:
        assert f.metadata["pocket.voice_cloning"] is False
        assert not any(n.startswith(("mimi.enc", "lm.speaker")) for n in f.tensors)
        assert "mimi.dec.in.weight" in f.tensors
    with ReferencePocket(out, dtype=np.float32) as m:
        with pytest.raises(DasllamaError, match="no voice encoder"):
            m.encode_voice(np.zeros(24000, np.float32))
    out.unlink()


# =============================================================================================
# The safetensors reader
# =============================================================================================

def _safetensors(path, header: dict, data: bytes) -> None:
    text = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def test_read_safetensors_types_and_errors(tmp_path):
    torch = _require("torch")
    from safetensors.torch import save_file
    values = torch.linspace(-3, 3, 12).reshape(3, 4)
    save_file({"a": values, "b": values.to(torch.bfloat16), "c": values.half()},
              str(tmp_path / "ok.safetensors"))
    read = read_safetensors(tmp_path / "ok.safetensors")
    assert np.array_equal(read["a"], values.numpy())
    assert np.array_equal(read["b"], values.to(torch.bfloat16).float().numpy())
    assert np.array_equal(read["c"], values.half().float().numpy())
    assert read["a"].dtype == read["b"].dtype == read["c"].dtype == np.float32

    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(ConvertError, match="header length 1000000000 exceeds"):
        read_safetensors(bad)
    _safetensors(bad, {"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}, bytes(8))
    with pytest.raises(ConvertError, match=r"tensor 'w': data_offsets \[0, 16\]"):
        read_safetensors(bad)
    _safetensors(bad, {"w": {"dtype": "Q9", "shape": [4], "data_offsets": [0, 16]}}, bytes(16))
    with pytest.raises(ConvertError, match="tensor 'w': bad header entry"):
        read_safetensors(bad)


# =============================================================================================
# The command line
# =============================================================================================

def _parser():
    parser = argparse.ArgumentParser(prog="dasllama")
    add_convert_parser(parser.add_subparsers(dest="command", required=True))
    return parser


def test_cli_converts_and_reports_errors(fx, tmp_path, capsys):
    out = tmp_path / "cli.gguf"
    args = _parser().parse_args(["convert", "pocket", str(fx.checkpoint), "--tokenizer",
                                 str(fx.tokenizer), "-o", str(out), "--lane", "q8_0"])
    assert args.run(args) == 0
    assert "wrote" in capsys.readouterr().err
    with dasllama.gguf.open(out) as f, dasllama.gguf.open(fx.gguf_path("q8_0")) as g:
        assert f.metadata["general.file_type"] == 7
        assert {n: (t.shape, t.type) for n, t in f.tensors.items()} == \
               {n: (t.shape, t.type) for n, t in g.tensors.items()}
    config = tmp_path / "heads.json"
    config.write_text(json.dumps({"flow_lm": {"transformer": {"num_heads": 8}}}))
    args = _parser().parse_args(["convert", "pocket", str(fx.checkpoint), "--tokenizer",
                                 str(fx.tokenizer), "-o", str(out), "--config", str(config),
                                 "--lane", "q8_0"])
    assert args.run(args) == 0
    with dasllama.gguf.open(out) as f:
        assert (f.metadata["pocket.lm.num_heads"], f.metadata["pocket.lm.head_dim"]) == (8, 128)
    out.unlink()  # pytest keeps recent tmp_paths: do not leave a model in each
    with pytest.raises(SystemExit):
        _parser().parse_args(["convert", "pocket", str(fx.checkpoint), "-o", str(out)])
    with pytest.raises(SystemExit):
        _parser().parse_args(["convert", "pocket", "x", "--tokenizer", "t", "-o", "o",
                              "--lane", "q4_0"])
