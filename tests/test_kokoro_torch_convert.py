"""dasllama convert kokoro on hexgrad's PyTorch checkpoint: the float32 layout (checked against
the package's modules' own tensors), the weight-norm fold in both spellings, the command line,
and the errors for keys, configs and files it does not know."""

import json
import subprocess
import sys

import numpy as np
import pytest

import kokoro_torch_models as km
from requires import require


@pytest.fixture(scope="module")
def kitten(tmp_path_factory):
    """(parts, config, folder, converted GGUF) of a random Kitten-like model."""
    from dasllama.convert.kokoro_torch import convert_kokoro_torch

    parts = km.build(km.KITTEN_LIKE, seed=5, kitten_decoder=True)
    folder = tmp_path_factory.mktemp("kitten")
    ckpt, config, voices = km.save(parts, km.KITTEN_LIKE, folder)
    out = convert_kokoro_torch(ckpt, config, voices, folder / "kitten.gguf")
    return parts, config, folder, out


def _flat(parts):
    """The folded flat state dict, as the converter reads a checkpoint."""
    from dasllama.convert.kokoro_torch import fold_weight_norm

    sd = {f"{p}.{k}": v.detach().float().numpy() for p, m in parts.items()
          for k, v in m.state_dict().items()}
    return fold_weight_norm(sd)


def test_float_file_metadata_and_types(kitten):
    gguf = require("gguf")
    from dasllama.reference.kokoro import ReferenceKokoro

    _, _, _, out = kitten
    r = gguf.GGUFReader(str(out))
    assert {t.tensor_type for t in r.tensors} == {gguf.GGMLQuantizationType.F32}
    m = ReferenceKokoro(out)
    cfg = km.KITTEN_LIKE
    assert m.meta["general.file_type"] == 0 and m.meta["kokoro.quantized"] is False
    assert m.meta["kokoro.style_split"] == [cfg["style_dim"], cfg["style_dim"]]
    assert m.meta["kokoro.bert.layers"] == cfg["plbert"]["num_hidden_layers"]
    assert m.meta["kokoro.bert.heads"] == cfg["plbert"]["num_attention_heads"]
    assert m.meta["kokoro.bert.activation"] == "gelu_new"
    assert (m.meta["kokoro.n_fft"], m.meta["kokoro.hop"]) == (20, 5)
    assert m.meta["kokoro.upsample_scale"] == 300 and m.meta["kokoro.harmonics"] == 9
    assert m.voices == ["voice0", "voice1"] and m.vocab == km.vocab()
    assert "decoder.generator.stft.window_sum" not in m.w   # the exact inverse


def test_weights_are_the_modules_in_the_layouts_order(kitten):
    from dasllama.reference.kokoro import ReferenceKokoro

    parts, _, _, out = kitten
    w = ReferenceKokoro(out).w
    # a Linear is stored (in, out)
    fc = parts["predictor"].F0[0].norm1.fc
    np.testing.assert_array_equal(w["predictor.F0.0.norm1.fc.weight"], fc.weight.detach().numpy().T)
    # an LSTM: torch's gate blocks i, f, g, o become i, o, f, c, per direction
    lstm = parts["text_encoder"].lstm
    h = lstm.hidden_size
    torch_blocks = lstm.weight_ih_l0_reverse.detach().numpy().reshape(4, h, -1)
    stored = w["text_encoder.lstm.weight_ih"][1].T.reshape(4, h, -1)
    for layout, torch_gate in enumerate((0, 3, 1, 2)):
        np.testing.assert_array_equal(stored[layout], torch_blocks[torch_gate])
    b = w["text_encoder.lstm.bias"][0]
    np.testing.assert_array_equal(b[h:2 * h], lstm.bias_ih_l0.detach().numpy()[3 * h:])   # o
    np.testing.assert_array_equal(b[5 * h:6 * h], lstm.bias_hh_l0.detach().numpy()[3 * h:])
    # a weight-normed convolution: what the module's forward hook computes from g and v
    # (its .weight attribute is refreshed only by a forward)
    torch = require("torch")
    conv = parts["decoder"].generator.resblocks[1].convs1[2]
    want = torch._weight_norm(conv.weight_v, conv.weight_g, 0).detach().numpy()
    np.testing.assert_allclose(w["decoder.generator.resblocks.1.convs1.2.weight"], want,
                               rtol=1e-6, atol=1e-7)


def test_conv_attributes_follow_the_modules(kitten):
    from dasllama.reference.kokoro import ReferenceKokoro

    parts, _, _, out = kitten
    meta = ReferenceKokoro(out).meta
    g = parts["decoder"].generator
    for name, mod in (("decoder.generator.ups.0", g.ups[0]),
                      ("decoder.generator.noise_convs.0", g.noise_convs[0]),
                      ("decoder.generator.noise_convs.1", g.noise_convs[1]),
                      ("decoder.generator.resblocks.3.convs1.2", g.resblocks[3].convs1[2]),
                      ("decoder.generator.noise_res.1.convs1.1", g.noise_res[1].convs1[1]),
                      ("decoder.decode.3.pool", parts["decoder"].decode[3].pool),
                      ("decoder.F0_conv", parts["decoder"].F0_conv),
                      ("text_encoder.cnn.1.0", parts["text_encoder"].cnn[1][0])):
        want = [mod.stride[0], mod.padding[0], mod.padding[0], mod.dilation[0], mod.groups,
                getattr(mod, "output_padding", (0,))[0]]
        assert meta[f"kokoro.conv.{name}"] == want, name


def test_parametrized_weight_norm_folds_alike():
    torch = require("torch")
    from torch.nn.utils.parametrizations import weight_norm

    from dasllama.convert.kokoro_torch import fold_weight_norm

    torch.manual_seed(0)
    conv = weight_norm(torch.nn.ConvTranspose1d(6, 4, 5))
    with torch.no_grad():
        conv.parametrizations.weight.original0.mul_(1.7)
    sd = {f"m.{k}": v.detach().numpy() for k, v in conv.state_dict().items()}
    assert "m.parametrizations.weight.original0" in sd
    folded = fold_weight_norm(sd)
    np.testing.assert_allclose(folded["m.weight"], conv.weight.detach().numpy(), rtol=1e-6)
    assert "m.parametrizations.weight.original1" not in folded


def test_unknown_and_malformed_keys_fail_naming_them(kitten):
    from dasllama.convert.kokoro_torch import tensors_from_state_dict
    from dasllama.errors import ConvertError

    parts, _, _, _ = kitten
    cfg = km.KITTEN_LIKE
    base = _flat(parts)
    with pytest.raises(ConvertError, match=r"decoder\.mystery\.weight \[3\] is not one"):
        tensors_from_state_dict(dict(base, **{"decoder.mystery.weight": np.zeros(3, np.float32)}),
                                cfg)
    with pytest.raises(ConvertError, match=r"predictor\.F0\.9\.conv7 is a convolution"):
        tensors_from_state_dict(dict(base, **{"predictor.F0.9.conv7.weight":
                                              np.zeros((2, 2, 3), np.float32)}), cfg)
    with pytest.raises(ConvertError, match=r"text_encoder\.lstm\.weight_ih_l1: the family's "
                                           r"LSTMs have one layer"):
        tensors_from_state_dict(dict(base, **{"text_encoder.lstm.weight_ih_l1": np.zeros((4, 4))}),
                                cfg)
    bad = dict(base)
    bad["decoder.encode.norm1.norm.weight"] = bad["decoder.encode.norm1.norm.weight"] * 2
    with pytest.raises(ConvertError, match=r"decoder\.encode\.norm1\.norm\.weight: AdaIN"):
        tensors_from_state_dict(bad, cfg)
    with pytest.raises(ConvertError, match="albert_layers.1.*one ALBERT layer"):
        tensors_from_state_dict(dict(base, **{
            "bert.encoder.albert_layer_groups.0.albert_layers.1.ffn.bias": np.zeros(3)}), cfg)


def test_albert_activation_names_map_to_the_layouts(kitten):
    from dasllama.convert.kokoro_torch import tensors_from_state_dict

    parts, _, _, _ = kitten
    base = _flat(parts)
    cfg = km.KITTEN_LIKE
    for name, want in (("gelu", "gelu"), ("gelu_new", "gelu_new"),
                       ("gelu_pytorch_tanh", "gelu_new")):
        _, meta = tensors_from_state_dict(base, dict(cfg, plbert=dict(cfg["plbert"],
                                                                      hidden_act=name)))
        assert meta["kokoro.bert.activation"] == ("str", want), name
    plbert = {k: v for k, v in cfg["plbert"].items() if k != "hidden_act"}   # the default
    _, meta = tensors_from_state_dict(base, dict(cfg, plbert=plbert))
    assert meta["kokoro.bert.activation"] == ("str", "gelu_new")


def test_config_errors_name_the_field(kitten):
    from dasllama.convert.kokoro_torch import tensors_from_state_dict
    from dasllama.errors import ConvertError

    parts, _, _, _ = kitten
    base = _flat(parts)
    cfg = json.loads(json.dumps(km.KITTEN_LIKE))
    with pytest.raises(ConvertError, match=r"config style_dim = 32 but the checkpoint's tensors "
                                           r"have 64"):
        tensors_from_state_dict(base, dict(cfg, style_dim=32))
    with pytest.raises(ConvertError, match="field 'hidden_dim' is missing"):
        tensors_from_state_dict(base, {k: v for k, v in cfg.items() if k != "hidden_dim"})
    with pytest.raises(ConvertError, match="hidden_act 'relu' is not one of"):
        tensors_from_state_dict(base, dict(cfg, plbert=dict(cfg["plbert"], hidden_act="relu")))
    with pytest.raises(ConvertError, match="plbert.embedding_size = 128 but"):
        plbert = {k: v for k, v in cfg["plbert"].items() if k != "embedding_size"}
        tensors_from_state_dict(base, dict(cfg, plbert=plbert))   # AlbertConfig's default
    with pytest.raises(ConvertError, match=r"field 'gen_istft_n_fft' = '20' is not int"):
        tensors_from_state_dict(base, dict(cfg, istftnet=dict(cfg["istftnet"],
                                                              gen_istft_n_fft="20")))


def test_bad_files_fail_naming_them(kitten, tmp_path):
    torch = require("torch")
    from dasllama.convert.kokoro_torch import convert_kokoro_torch, read_checkpoint
    from dasllama.errors import ConvertError

    _, config, folder, _ = kitten
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(ConvertError, match="junk.pth: not a PyTorch checkpoint"):
        read_checkpoint(junk)
    odd = tmp_path / "odd.pth"
    torch.save({"vocoder": {"w": torch.zeros(1)}}, odd)
    with pytest.raises(ConvertError, match="part 'vocoder' is not one of KModel's"):
        read_checkpoint(odd)
    half = tmp_path / "half.pth"
    sd = torch.load(folder / "model.pth", weights_only=True)
    del sd["decoder"]["generator.conv_post.weight_v"]
    torch.save(sd, half)
    with pytest.raises(ConvertError, match="decoder.generator.conv_post has a weight-norm "
                                           "magnitude without its pair"):
        read_checkpoint(half)
    narrow = tmp_path / "narrow.pt"
    torch.save(torch.zeros(510, 1, 100), narrow)
    with pytest.raises(ConvertError, match="voice 'narrow' rows of 100 values; the "
                                           "checkpoint's style is 128"):
        convert_kokoro_torch(folder / "model.pth", config, [narrow], tmp_path / "x.gguf")


def test_command_line_converts_a_checkpoint(kitten, tmp_path):
    _, config, folder, _ = kitten
    out = tmp_path / "cli.gguf"
    done = subprocess.run([sys.executable, "-m", "dasllama.cli", "convert", "kokoro",
                           str(folder / "model.pth"), "--config", str(config), "--voices",
                           str(folder / "voice0.pt"), str(folder / "voice1.pt"), "-o", str(out)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "float32 weights" in done.stderr and out.stat().st_size > 0
    done = subprocess.run([sys.executable, "-m", "dasllama.cli", "convert", "kokoro",
                           str(folder / "model.pth"), "--voices", str(folder / "voice0.pt"),
                           "-o", str(tmp_path / "y.gguf")],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode != 0 and "needs --config" in done.stderr
