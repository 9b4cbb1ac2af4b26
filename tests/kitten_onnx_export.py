"""A random-weight model at Kitten TTS's shapes, built from the `kokoro` package's modules
(kokoro_torch_models.KITTEN_LIKE), exported to a float32 ONNX graph the way the published
Kokoro/Kitten graphs are laid out, for the converter and onnxruntime tests.

The published graphs come from an exporter whose module scopes are /encoder/... (ALBERT, the
prosody predictor, the text encoder) and /decoder/decoder/... (the package's Decoder); the wrapper
below calls the package's modules in that nesting, so the exporter's node names carry the same
module paths. What the wrapper does itself, and why:

- the LSTMs run on whole sequences (batch 1, no padding): pack_padded_sequence and
  pad_packed_sequence are identities for the export, as they are for one full-length sequence;
- the alignment is built from cumulative durations with comparisons (the package's
  repeat_interleave exports as a Loop);
- the generator's STFT is real-valued (torch.stft without complex outputs, magnitude and
  atan2 phase; the package's TorchSTFT uses complex tensors, which the exporter refuses) and its
  inverse is the exporters' form: a transposed convolution with a basis named
  istft.stft.inverse_basis and a division by a window_sum constant, times n_fft / hop;
- SineGen's random initial phases and noises are zeros (kokoro_torch_models.pinned_source), as
  in the published graphs;
- F0_proj's bias is set to 150 Hz so that the random model's source is voiced.

The file is saved after onnxruntime's extended graph optimizations (constant folding, Identity
removal, the FastGelu / LayerNorm fusions), as the published files are (their fused nodes show
it).
"""

from __future__ import annotations

import types
from pathlib import Path

import numpy as np

import kokoro_torch_models as km
from requires import require

OPSET = 17                 # the published Kokoro / Kitten graphs' opset
MAX_SAMPLES = 400_000      # the exported window sum's length (16 s at 24 kHz)
EXPORT_IDS = [0, 5, 9, 12, 3, 7, 0]   # the trace's example input (the graph's T is dynamic)


def export(folder: Path, seed: int = 1234) -> dict:
    """Builds and exports the model into folder: {"onnx": optimized graph path, "voices": a
    .pt voice pack, "config": a vocabulary file, "parts": the modules, "cfg": the config}."""
    torch = require("torch")
    require("onnx")
    ort = require("onnxruntime")
    nn = torch.nn

    cfg = km.KITTEN_LIKE
    style_dim = cfg["style_dim"]
    ist = cfg["istftnet"]
    parts = km.build(cfg, seed=seed, kitten_decoder=True)
    with torch.no_grad():
        parts["predictor"].F0_proj.bias.fill_(km.VOICED_F0)

    def predictor_forward(self, d_en, s, lengths, mask):
        d = self.text_encoder(d_en, s, lengths, mask)
        x, _ = self.lstm(d)
        return d, self.duration_proj(x)

    parts["predictor"].forward = types.MethodType(predictor_forward, parts["predictor"])
    gen = parts["decoder"].generator
    gen.stft = _Stft(torch, ist["gen_istft_n_fft"], ist["gen_istft_hop_size"])
    model = _Export(torch, parts, style_dim).eval()

    raw = folder / "kitten-raw.onnx"
    ids = torch.tensor([EXPORT_IDS])
    style = 0.3 * torch.randn(1, 2 * style_dim, generator=torch.Generator().manual_seed(seed))
    rnn = nn.utils.rnn
    real = rnn.pack_padded_sequence, rnn.pad_packed_sequence
    rnn.pack_padded_sequence = lambda x, *a, **k: x
    rnn.pad_packed_sequence = lambda x, *a, **k: (x, None)
    try:
        with torch.no_grad(), km.pinned_source(torch):
            torch.onnx.export(model, (ids, style, torch.tensor(1.0)), str(raw),
                              opset_version=OPSET, dynamo=False,
                              input_names=["input_ids", "style", "speed"],
                              output_names=["waveform", "duration"],
                              dynamic_axes={"input_ids": {1: "T"}, "waveform": {0: "L"},
                                            "duration": {0: "T"}})
    finally:
        rnn.pack_padded_sequence, rnn.pad_packed_sequence = real
    optimized = folder / "kitten.onnx"
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    so.optimized_model_filepath = str(optimized)
    ort.InferenceSession(str(raw), so, providers=["CPUExecutionProvider"])

    voices = folder / "voice0.pt"
    g = torch.Generator().manual_seed(seed + 1)
    torch.save(0.3 * torch.randn(510, 1, 2 * style_dim, generator=g), voices)
    config = folder / "config.json"
    import json

    config.write_text(json.dumps({"vocab": km.vocab()}), encoding="utf-8")
    return {"onnx": optimized, "voices": voices, "config": config, "parts": parts, "cfg": cfg}


def _Export(torch, parts, style_dim):
    nn = torch.nn

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.bert, self.bert_encoder = parts["bert"], parts["bert_encoder"]
            self.predictor, self.text_encoder = parts["predictor"], parts["text_encoder"]

        def forward(self, ids, style, speed):
            t = ids.shape[1]
            lengths = torch.full((1,), t, dtype=torch.long)
            mask = torch.zeros(1, t, dtype=torch.bool)
            bert = self.bert(ids, attention_mask=torch.ones_like(ids))
            d_en = self.bert_encoder(bert).transpose(-1, -2)
            s_pred = style[:, style_dim:]
            d, logits = self.predictor(d_en, s_pred, lengths, mask)
            dur = torch.round(torch.sigmoid(logits).sum(-1) / speed).clamp(min=1).long()[0]
            ends = torch.cumsum(dur, 0)
            frames = torch.arange(ends[-1])
            aln = ((frames[None, :] >= (ends - dur)[:, None]) &
                   (frames[None, :] < ends[:, None])).float()[None]
            f0, n = self.predictor.F0Ntrain(d.transpose(-1, -2) @ aln, s_pred)
            asr = self.text_encoder(ids, lengths, mask) @ aln
            return asr, f0, n, dur

    class Decoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.decoder = parts["decoder"]

        def forward(self, asr, f0, n, s_dec):
            return self.decoder(asr, f0, n, s_dec)

    class Export(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder, self.decoder = Encoder(), Decoder()

        def forward(self, ids, style, speed):
            asr, f0, n, dur = self.encoder(ids, style, speed)
            return self.decoder(asr, f0, n, style[:, :style_dim]).reshape(-1), dur

    return Export()


def _Stft(torch, n_fft: int, hop: int):
    nn, F = torch.nn, torch.nn.functional

    class Basis(nn.Module):
        """The one-sided inverse DFT times the window, scaled by hop / n_fft (the exporters'
        basis: the window-sum division and the n_fft / hop factor undo it)."""

        def __init__(self):
            super().__init__()
            w = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
            j = torch.arange(n_fft, dtype=torch.float64)
            k = torch.arange(n_fft // 2 + 1, dtype=torch.float64)[:, None]
            weight = torch.full((n_fft // 2 + 1, 1), 2.0, dtype=torch.float64)
            weight[0] = 1.0
            weight[-1] = 1.0
            angle = 2 * np.pi * k * j / n_fft
            basis = torch.cat([weight * torch.cos(angle) / n_fft * w,
                               -weight * torch.sin(angle) / n_fft * w])[:, None, :]
            self.register_buffer("inverse_basis", (basis * hop / n_fft).float())

        def forward(self, x):
            return F.conv_transpose1d(x, self.inverse_basis, stride=hop)

    class Inverse(nn.Module):
        def __init__(self):
            super().__init__()
            self.stft = Basis()
            w = torch.hann_window(n_fft, periodic=True, dtype=torch.float64)
            env = torch.zeros(MAX_SAMPLES, dtype=torch.float64)
            for start in range(0, MAX_SAMPLES - n_fft + 1, hop):
                env[start:start + n_fft] += w * w
            self.register_buffer("window_sum", env.float())

        def forward(self, mag, phase):
            y = self.stft(torch.cat([mag * torch.cos(phase), mag * torch.sin(phase)], 1))[:, 0]
            ws = self.window_sum[:y.shape[-1]]
            y = torch.where(ws > 1e-30, y / ws, y) * (n_fft / hop)
            return y[..., n_fft // 2:y.shape[-1] - n_fft // 2]

    class Stft(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("window", torch.hann_window(n_fft, periodic=True))
            self.istft = Inverse()

        def transform(self, x):
            spec = torch.stft(x, n_fft, hop, window=self.window, center=True,
                              pad_mode="reflect", return_complex=False)
            re, im = spec[..., 0], spec[..., 1]
            return torch.sqrt(re * re + im * im), torch.atan2(im, re)

        def inverse(self, mag, phase):
            return self.istft(mag, phase)

    return Stft()
