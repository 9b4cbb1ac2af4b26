"""Kokoro (and Kitten TTS) in plain NumPy: the reference for the fast paths.

::

    from dasllama.reference.kokoro import ReferenceKokoro
    m = ReferenceKokoro("kokoro.gguf")          # written by dasllama convert kokoro
    out = m.synthesize(ids, m.voice("jf_alpha")[len(ids) - 1], speed=1.0)
    out.audio, out.durations                     # float32 at 24 kHz; frames per phoneme

The model is StyleTTS2 with an iSTFTNet decoder (hexgrad's Kokoro-82M; Kitten is the same
design at smaller widths). The 256-wide style row splits into a decoder half (acoustic, first)
and a predictor half (prosodic, second). Stages, each a method so a fast path can be compared
stage by stage:

1. ``albert``: ALBERT over the phoneme ids (one shared layer applied ``layers`` times), then
   ``bert_encoder`` to the hidden width: d_en (T, 512).
2. ``duration_encoder``: three rounds of [BiLSTM on (x ++ style), AdaLayerNorm by style],
   the style appended again after each: d (T, 640).
3. ``durations``: BiLSTM, a linear to 50 bins, sigmoid, summed, / speed, rounded (half to
   even), at least 1: frames per phoneme. ``alignment`` expands them into a (T, F) 0/1 matrix.
4. ``f0_energy``: the shared BiLSTM over the aligned d, then the F0 and energy (N) branches of
   AdaIN residual blocks (the second upsamples x2): F0 and N curves (2F,).
5. ``text_encoder``: embedding, three [conv, LayerNorm, LeakyReLU 0.2], a BiLSTM: (T, 512),
   aligned to (512, F).
6. ``decoder``: F0 and N downsampled by stride-2 convs; an AdaIN encode block and four decode
   blocks (the last upsamples x2), fed again with the aligned text, F0 and N: (512, 2F).
7. ``generator``: the harmonic source (SineGen: F0 times 1..9, phase accumulated at frame
   rate and interpolated to samples, voiced where F0 > 10 Hz; the exported graph has no
   random initial phase and no noise, so neither has this reference), its STFT, two
   transposed-conv upsamplings (x10, x6) each added to a noise branch of the source, Snake
   AdaIN residual blocks, conv_post to magnitude (exp) and phase (sin), the graph's iSTFT.
   600 samples per frame, 24 kHz.

A file holds either lane: the int8 graph's (I8 weights with scales and zero points) or float32
(hexgrad's PyTorch checkpoint, :mod:`dasllama.convert.kokoro_torch`). Each weight-bearing op
(linear, qconv, lstm, embed) picks its arithmetic from its tensor's type, and ALBERT's
activation is the one the file names (kokoro.bert.activation).

Every int8 op (DynamicQuantizeLinear, MatMulInteger, ConvInteger, DynamicQuantizeLSTM) is
done as the graph does it (:mod:`.kokoro_ops`): the integer sums are the graph's bit for bit.
Float ops are float32; where onnxruntime's arithmetic decides which quantization step a value
lands on, the reference follows it: the LSTM gates with MLAS's logistic and tanh (the LSTMs
match onnxruntime bit for bit), FastGelu's form, LayerNorm's lane sums. Softmax's exp, the
reductions of the instance norms, sin and the STFT's DFT are NumPy's, so their last bits can
differ, and a quantization step downstream can then go the other way (see
tests/test_kokoro_parity.py for what that does and how the comparison is staged). Weights are
read through the ``gguf`` package.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional, Sequence

import numpy as np

from .kokoro_ops import (F32, conv1d, conv_integer, conv_transpose1d, fast_gelu, gelu_erf,
                         instance_norm, layer_norm, leaky_relu, lstm_float, lstm_integer,
                         matmul_float, matmul_integer, resize_linear_half_pixel, sigmoid,
                         softmax)

__all__ = ["ReferenceKokoro", "KokoroOutput", "alignment"]

LEAKY_BLOCKS = 0.2        # the AdaIN residual blocks' and the text encoder's LeakyReLU
LEAKY_UPSAMPLE = 0.1      # before each of the generator's transposed convolutions
LEAKY_POST = 0.01         # before conv_post (PyTorch's default slope)
RSQRT2 = F32(1.4142135381698608)   # residual blocks divide (residual + shortcut) by this
ADAIN_EPS = 1e-5          # InstanceNorm's epsilon inside AdaIN
BOUNDARY_ID = 0           # the id the model reads before and after the phonemes


@dataclass
class KokoroOutput:
    audio: np.ndarray                 # float32 (600 * frames,)
    durations: np.ndarray             # int64 (T,) frames per input id (boundaries included)
    stages: dict = field(default_factory=dict)   # intermediate results when asked for


def alignment(durations: np.ndarray) -> np.ndarray:
    """The (T, F) matrix with a 1 at (i, j) when frame j belongs to input i."""
    ends = np.cumsum(durations)
    starts = ends - durations
    frames = np.arange(int(ends[-1]))
    return ((frames[None, :] >= starts[:, None]) & (frames[None, :] < ends[:, None])).astype(F32)


class ReferenceKokoro:
    """A converted Kokoro/Kitten GGUF, run stage by stage in NumPy."""

    def __init__(self, path: os.PathLike) -> None:
        import gguf   # the peer reader: the reference never reads through dasllama's

        reader = gguf.GGUFReader(os.fspath(path))
        self.w = {t.name: np.array(t.data) for t in reader.tensors}
        self.meta = {}
        for key, f in reader.fields.items():
            if not key.startswith(("kokoro.", "general.")):
                continue
            kind = f.types[0] if f.types else None
            if kind == gguf.GGUFValueType.ARRAY:
                if f.types[1] == gguf.GGUFValueType.STRING:
                    self.meta[key] = [bytes(f.parts[i]).decode("utf-8") for i in f.data]
                else:
                    self.meta[key] = [f.parts[i].tolist()[0] for i in f.data]
            elif kind == gguf.GGUFValueType.STRING:
                self.meta[key] = bytes(f.parts[f.data[0]]).decode("utf-8")
            else:
                self.meta[key] = f.parts[f.data[0]].tolist()[0]
        if self.meta.get("general.architecture") != "kokoro":
            raise ValueError(f"{path}: not a kokoro GGUF")
        self.style_split = list(self.meta["kokoro.style_split"])
        self.vocab = dict(zip(self.meta["kokoro.vocab.symbols"], self.meta["kokoro.vocab.ids"]))
        self.voices = list(self.meta["kokoro.voices"])

    # ------------------------------------------------------------------ weights
    def voice(self, name: str) -> np.ndarray:
        """A voice pack (rows, 256): row n - 1 is the style for n phonemes."""
        return self.w[f"voice.{name}"]

    def conv_attrs(self, name: str) -> list:
        return self.meta[f"kokoro.conv.{name}"]

    # Each weight-bearing op dispatches on its tensor's type: I8 runs the graph's integer
    # arithmetic with the stored scales and zero points, F32 plain float32 arithmetic.
    def linear(self, x: np.ndarray, name: str, bias: bool = True) -> np.ndarray:
        """A linear x (..., K) -> (..., N) (weight (K, N)), bias included when present and
        asked for: MatMulInteger for I8 weights, a float32 product for F32."""
        w = self.w
        weight = w[f"{name}.weight"]
        b = w.get(f"{name}.bias") if bias else None
        if weight.dtype == np.int8:
            return matmul_integer(x, weight, w[f"{name}.weight_zp"], w[f"{name}.weight_scale"],
                                  b)
        return matmul_float(x, weight, b)

    def qconv(self, x: np.ndarray, name: str) -> np.ndarray:
        """A convolution x (Cin, L) -> (Cout, L'): ConvInteger for I8 weights, a float32
        Conv for F32."""
        w = self.w
        weight = w[f"{name}.weight"]
        if weight.dtype == np.int8:
            return conv_integer(x, weight, float(w[f"{name}.weight_zp"][0]),
                                float(w[f"{name}.weight_scale"][0]), self.conv_attrs(name),
                                w.get(f"{name}.bias"))
        return conv1d(x, weight, w.get(f"{name}.bias"), self.conv_attrs(name))

    def lstm(self, x: np.ndarray, name: str) -> np.ndarray:
        """A bidirectional LSTM x (T, In) -> (T, 2H): DynamicQuantizeLSTM for I8 weights,
        float32 for F32 (gates i, o, f, c in both)."""
        w = self.w
        wi, wh, b = w[f"{name}.weight_ih"], w[f"{name}.weight_hh"], w[f"{name}.bias"]
        if wi.dtype == np.int8:
            return lstm_integer(x, wi, wh, b, w[f"{name}.weight_ih_scale"],
                                w[f"{name}.weight_ih_zp"], w[f"{name}.weight_hh_scale"],
                                w[f"{name}.weight_hh_zp"])
        return lstm_float(x, wi, wh, b)

    def embed(self, ids: np.ndarray, name: str) -> np.ndarray:
        """Embedding rows: dequantized for an I8 table, as stored for F32."""
        w = self.w
        table = w[f"{name}.weight"]
        if table.dtype != np.int8:
            return table[ids].astype(F32)
        q = table[ids].astype(F32)
        return ((q - w[f"{name}.weight_zp"][0]) * w[f"{name}.weight_scale"][0]).astype(F32)

    def bert_activation(self, x: np.ndarray, bias: np.ndarray) -> np.ndarray:
        """ALBERT's feed-forward activation on x + bias, as the file names it: "gelu_new" (the
        tanh form; the graph's FastGelu) or "gelu" (the erf form)."""
        act = self.meta.get("kokoro.bert.activation", "gelu_new")
        if act == "gelu_new":
            return fast_gelu(x, bias)
        if act == "gelu":
            return gelu_erf(x, bias)
        raise ValueError(f"kokoro.bert.activation {act!r} is not gelu_new or gelu")

    def ln(self, x: np.ndarray, name: str) -> np.ndarray:
        return layer_norm(x, self.w[f"{name}.weight"], self.w[f"{name}.bias"],
                          self.meta[f"kokoro.eps.{name}"])

    # ------------------------------------------------------------------ style conditioning
    def ada_in(self, x: np.ndarray, style: np.ndarray, name: str) -> np.ndarray:
        """AdaIN1d: (1 + gamma) * InstanceNorm(x) + beta, gamma and beta from fc(style);
        x (C, L)."""
        h = self.linear(style[None, :], f"{name}.fc")[0]
        c = x.shape[0]
        gamma, beta = h[:c], h[c:]
        return ((gamma + F32(1))[:, None] * instance_norm(x, ADAIN_EPS) + beta[:, None]).astype(F32)

    def ada_layer_norm(self, x: np.ndarray, style: np.ndarray, name: str) -> np.ndarray:
        """AdaLayerNorm: (1 + gamma) * LayerNorm(x) + beta over channels; x (T, C)."""
        h = self.linear(style[None, :], f"{name}.fc")[0]
        c = x.shape[1]
        return ((h[:c] + F32(1)) * self.ln(x, name) + h[c:]).astype(F32)

    def adain_resblock(self, x: np.ndarray, style: np.ndarray, name: str) -> np.ndarray:
        """AdainResBlk1d (x (Cin, L)): residual norm1 -> LeakyReLU -> [pool: depthwise x2
        transposed conv] -> conv1 -> norm2 -> LeakyReLU -> conv2; shortcut [nearest x2]
        [-> conv1x1]; (residual + shortcut) / sqrt(2)."""
        up = f"{name}.pool.weight" in self.w
        r = leaky_relu(self.ada_in(x, style, f"{name}.norm1"), LEAKY_BLOCKS)
        if up:
            r = conv_transpose1d(r, self.w[f"{name}.pool.weight"], self.w[f"{name}.pool.bias"],
                                 self.conv_attrs(f"{name}.pool"))
        r = self.qconv(r, f"{name}.conv1")
        r = leaky_relu(self.ada_in(r, style, f"{name}.norm2"), LEAKY_BLOCKS)
        r = self.qconv(r, f"{name}.conv2")
        s = np.repeat(x, 2, axis=1) if up else x
        if f"{name}.conv1x1.weight" in self.w:
            s = self.qconv(s, f"{name}.conv1x1")
        return ((r + s) / RSQRT2).astype(F32)

    def snake_resblock(self, x: np.ndarray, style: np.ndarray, name: str) -> np.ndarray:
        """AdaINResBlock1: three rounds of AdaIN -> Snake -> dilated conv -> AdaIN -> Snake ->
        conv, each added to x. Snake(x) = x + (1 / alpha) sin(alpha x)^2."""
        for j in range(3):
            t = x
            for k in (1, 2):
                t = self.ada_in(t, style, f"{name}.adain{k}.{j}")
                alpha = self.w[f"{name}.alpha{k}.{j}"][0]
                t = (t + (F32(1) / alpha) * np.sin(alpha * t) ** 2).astype(F32)
                t = self.qconv(t, f"{name}.convs{k}.{j}")
            x = (t + x).astype(F32)
        return x

    # ------------------------------------------------------------------ 1. ALBERT
    def albert(self, ids: np.ndarray) -> np.ndarray:
        """ids (T,) -> d_en (T, hidden)."""
        t = len(ids)
        e = (self.embed(ids, "bert.embeddings.word_embeddings")
             + self.embed(np.zeros(t, np.int64), "bert.embeddings.token_type_embeddings"))
        e = (e + self.embed(np.arange(t), "bert.embeddings.position_embeddings")).astype(F32)
        e = self.ln(e, "bert.embeddings.LayerNorm")
        h = self.linear(e, "bert.encoder.embedding_hidden_mapping_in")            # (T, 768)
        for _ in range(self.meta["kokoro.bert.layers"]):   # one shared layer, applied again
            h = self.albert_layer(h)
        return self.linear(h, "bert_encoder")                                  # (T, 512)

    def albert_layer(self, h: np.ndarray) -> np.ndarray:
        """One application of ALBERT's shared layer: h (T, 768) -> (T, 768). Attention scales q
        and k each by sqrt(1 / sqrt(head_dim)), as the graph does."""
        layer = "bert.encoder.albert_layer_groups.0.albert_layers.0"
        t = h.shape[0]
        heads = self.meta["kokoro.bert.heads"]
        dim = h.shape[1] // heads
        qk_scale = np.sqrt(F32(1) / np.sqrt(F32(dim))).astype(F32)
        q = self.linear(h, f"{layer}.attention.query").reshape(t, heads, dim)
        k = self.linear(h, f"{layer}.attention.key").reshape(t, heads, dim)
        v = self.linear(h, f"{layer}.attention.value").reshape(t, heads, dim)
        q = (q.transpose(1, 0, 2) * qk_scale).astype(F32)                     # (H, T, d)
        k = (k.transpose(1, 2, 0) * qk_scale).astype(F32)                     # (H, d, T)
        p = softmax(q @ k)                                                    # (H, T, T)
        ctx = (p @ v.transpose(1, 0, 2)).transpose(1, 0, 2).reshape(t, heads * dim)
        a = self.linear(ctx.astype(F32), f"{layer}.attention.dense")
        a = self.ln((h + a).astype(F32), f"{layer}.attention.LayerNorm")
        f = self.linear(a, f"{layer}.ffn", bias=False)
        f = self.bert_activation(f, self.w[f"{layer}.ffn.bias"])             # bias inside
        f = self.linear(f, f"{layer}.ffn_output")
        return self.ln((f + a).astype(F32), f"{layer}.full_layer_layer_norm")

    # ------------------------------------------------------------------ 2-3. prosody
    def duration_encoder(self, d_en: np.ndarray, s_pred: np.ndarray) -> np.ndarray:
        """(T, 512) -> (T, 512 + style): BiLSTM / AdaLayerNorm rounds with the style appended."""
        t = d_en.shape[0]
        s_rows = np.broadcast_to(s_pred, (t, s_pred.shape[0]))
        x = np.concatenate([d_en, s_rows], axis=1).astype(F32)
        names = [n[:-len(".weight_ih")] for n in self.w
                 if n.startswith("predictor.text_encoder.lstms.") and n.endswith(".weight_ih")]
        for i in range(len(names)):
            x = self.lstm(x, f"predictor.text_encoder.lstms.{2 * i}")
            x = self.ada_layer_norm(x, s_pred, f"predictor.text_encoder.lstms.{2 * i + 1}")
            x = np.concatenate([x, s_rows], axis=1).astype(F32)
        return x

    def duration_totals(self, d: np.ndarray, speed: float) -> np.ndarray:
        """Frames per input id before rounding: sum(sigmoid(proj(BiLSTM(d)))) / speed."""
        x = self.lstm(d, "predictor.lstm")
        logits = self.linear(x, "predictor.duration_proj.linear_layer")        # (T, 50)
        return sigmoid(logits).sum(axis=-1, dtype=np.float64).astype(F32) / F32(speed)

    def durations(self, d: np.ndarray, speed: float) -> np.ndarray:
        """Frames per input id: the totals rounded, at least 1."""
        return np.maximum(np.rint(self.duration_totals(d, speed)), 1).astype(np.int64)

    def f0_energy(self, en: np.ndarray, s_pred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """en (640, F) -> F0 (2F,), N (2F,)."""
        x = self.lstm(en.T.copy(), "predictor.shared").T.astype(F32)           # (512, F)
        curves = []
        for branch in ("F0", "N"):
            y = x
            for i in range(3):
                y = self.adain_resblock(y, s_pred, f"predictor.{branch}.{i}")
            curves.append(self.qconv(y, f"predictor.{branch}_proj")[0])
        return curves[0], curves[1]

    # ------------------------------------------------------------------ 5. text encoder
    def text_encoder(self, ids: np.ndarray) -> np.ndarray:
        """ids (T,) -> (T, 512)."""
        x = self.embed(ids, "text_encoder.embedding").T.copy()                 # (512, T)
        i = 0
        while f"text_encoder.cnn.{i}.0.weight" in self.w:     # [conv, LayerNorm, LeakyReLU]
            x = self.qconv(x, f"text_encoder.cnn.{i}.0")
            x = self.ln(x.T.copy(), f"text_encoder.cnn.{i}.1").T
            x = leaky_relu(x, LEAKY_BLOCKS)
            i += 1
        return self.lstm(x.T.copy(), "text_encoder.lstm")

    # ------------------------------------------------------------------ 6. decoder
    def decoder(self, asr: np.ndarray, f0: np.ndarray, n: np.ndarray,
                s_dec: np.ndarray) -> np.ndarray:
        """asr (512, F), F0 and N (2F,) -> (512, 2F)."""
        f0d = self.qconv(f0[None, :], "decoder.F0_conv")                       # (1, F)
        nd = self.qconv(n[None, :], "decoder.N_conv")
        x = np.concatenate([asr, f0d, nd], axis=0)
        x = self.adain_resblock(x, s_dec, "decoder.encode")
        res = self.qconv(asr, "decoder.asr_res.0")                             # (64, F)
        i = 0
        while f"decoder.decode.{i}.conv1.weight" in self.w:
            x = np.concatenate([x, res, f0d, nd], axis=0)
            x = self.adain_resblock(x, s_dec, f"decoder.decode.{i}")
            i += 1
        return x

    # ------------------------------------------------------------------ 7. generator
    def harmonic_source(self, f0: np.ndarray) -> np.ndarray:
        """SineGen + the merge linear: f0 (2F,) frame-rate curve -> (L,) source at 24 kHz."""
        m = self.meta
        up = m["kokoro.upsample_scale"]
        f0_up = np.repeat(f0, up).astype(F32)                                  # (L,)
        harm = np.arange(1, m["kokoro.harmonics"] + 1, dtype=F32)[:, None]
        rad = (f0_up[None, :] * harm / F32(m["kokoro.sample_rate"])).astype(F32)
        rad = (rad - np.floor(rad)).astype(F32)                                 # (9, L) mod 1
        frames = len(f0)
        rad = resize_linear_half_pixel(rad, F32(1) / F32(up), frames)          # (9, 2F)
        phase = (np.cumsum(rad, axis=1, dtype=F32) * F32(2) * F32(np.pi)).astype(F32)
        phase = resize_linear_half_pixel((phase * F32(up)).astype(F32), F32(up), len(f0_up))
        uv = (f0_up > F32(m["kokoro.voiced_threshold"])).astype(F32)
        sines = (np.sin(phase) * F32(m["kokoro.sine_amp"]) * uv).astype(F32)    # (9, L)
        merged = sines.T @ self.w["decoder.generator.m_source.l_linear.weight"]
        return np.tanh(merged[:, 0] + self.w["decoder.generator.m_source.l_linear.bias"][0])

    def stft(self, x: np.ndarray) -> np.ndarray:
        """The source's magnitude and phase (22, frames): reflect pad n_fft/2, hann frames of
        n_fft every hop, one-sided DFT; phase from atan(im / re) with the graph's quadrants."""
        n_fft, hop = self.meta["kokoro.n_fft"], self.meta["kokoro.hop"]
        window = self.w["decoder.generator.stft.window"]
        xp = np.pad(x, (n_fft // 2, n_fft // 2), mode="reflect").astype(F32)
        count = (len(xp) - n_fft) // hop + 1
        idx = np.arange(n_fft)[None, :] + hop * np.arange(count)[:, None]
        frames = (xp[idx] * window).astype(F32)                                 # (frames, n_fft)
        # onnxruntime's STFT for a length that is not a power of two: the naive DFT in
        # float32, bin k summing e^{-i k j 2 pi / n} x_j w_j over j in order, the angle
        # (k j) * (-2 * 3.14159265f / n) in float32. Where a bin is ~0 its phase is rounding
        # noise that the network still reads, so the arithmetic is the graph's, step by step.
        step = F32(-1) * (F32(2) * F32(3.14159265)) / F32(n_fft)
        bins = n_fft // 2 + 1
        re = np.zeros((bins, count), F32)
        im = np.zeros((bins, count), F32)
        for k in range(bins):
            for j in range(n_fft):
                angle = F32(F32(k * j) * step)
                c, s = F32(np.cos(np.float64(angle))), F32(np.sin(np.float64(angle)))
                re[k] = re[k] + c * frames[:, j]
                im[k] = im[k] + s * frames[:, j]
        mag = np.sqrt(re * re + im * im).astype(F32)
        with np.errstate(divide="ignore", invalid="ignore"):
            a = np.arctan(im / re).astype(F32)
        pi = F32(np.pi)
        phase = np.where(re < 0, np.where(im > 0, a + pi, a - pi), a).astype(F32)
        return np.concatenate([mag, phase], axis=0)

    def istft(self, spec: np.ndarray, phase: np.ndarray) -> np.ndarray:
        """The graph's inverse: a transposed conv of [spec cos, spec sin] with the exported
        basis, the first n_fft samples divided by the exported window sum, times n_fft / hop,
        n_fft / 2 trimmed from each end. A file without the window sum holds the exact basis
        and is divided by the squared window's overlap-add instead."""
        n_fft, hop = self.meta["kokoro.n_fft"], self.meta["kokoro.hop"]
        x = np.concatenate([spec * np.cos(phase), spec * np.sin(phase)], axis=0).astype(F32)
        y = conv_transpose1d(x, self.w["decoder.generator.stft.inverse_basis"], None,
                             self.conv_attrs("decoder.generator.stft"))[0]
        if "decoder.generator.stft.window_sum" not in self.w:
            # the exact inverse (a converted PyTorch checkpoint): divide by the overlap-added
            # squared window, as torch.istft does
            window = self.w["decoder.generator.stft.window"].astype(F32)
            envelope = np.zeros(len(y), F32)
            for start in range(0, len(y) - n_fft + 1, hop):
                envelope[start:start + n_fft] += window * window
            y = y[n_fft // 2:len(y) - n_fft // 2]
            return (y / envelope[n_fft // 2:len(envelope) - n_fft // 2]).astype(F32)
        ws = self.w["decoder.generator.stft.window_sum"][:len(y)]
        nz = np.nonzero(ws > np.finfo(np.float32).tiny)[0]
        y = y.copy()
        y[nz] = y[nz] / ws[nz]
        y = (y * F32(n_fft / hop)).astype(F32)
        return y[n_fft // 2:len(y) - n_fft // 2]

    def generator(self, x: np.ndarray, s_dec: np.ndarray, f0: np.ndarray,
                  har: Optional[np.ndarray] = None) -> np.ndarray:
        """x (512, 2F), F0 (2F,) -> audio (600 F,). har: the source's STFT from a peer."""
        if har is None:
            har = self.stft(self.harmonic_source(f0))                           # (22, 120F+1)
        g = "decoder.generator"
        ups = sum(1 for n in self.w if n.startswith(f"{g}.ups.") and n.endswith(".weight"))
        kernels = sum(1 for n in self.w if n.startswith(f"{g}.resblocks.")
                      and n.endswith(".convs1.0.weight")) // ups        # resblocks per stage
        i = 0
        while f"{g}.ups.{i}.weight" in self.w:
            x = leaky_relu(x, LEAKY_UPSAMPLE)
            src = self.qconv(har, f"{g}.noise_convs.{i}")
            src = self.snake_resblock(src, s_dec, f"{g}.noise_res.{i}")
            x = conv_transpose1d(x, self.w[f"{g}.ups.{i}.weight"], self.w[f"{g}.ups.{i}.bias"],
                                 self.conv_attrs(f"{g}.ups.{i}"))
            if f"{g}.ups.{i + 1}.weight" not in self.w:
                x = np.pad(x, ((0, 0), (1, 0)), mode="reflect")   # ReflectionPad1d((1, 0))
            x = (x + src).astype(F32)
            acc = None
            for j in range(kernels):
                r = self.snake_resblock(x, s_dec, f"{g}.resblocks.{i * kernels + j}")
                acc = r if acc is None else (acc + r).astype(F32)
            x = (acc / F32(kernels)).astype(F32)
            i += 1
        x = leaky_relu(x, LEAKY_POST)
        x = conv1d(x, self.w[f"{g}.conv_post.weight"], self.w[f"{g}.conv_post.bias"],
                   self.conv_attrs(f"{g}.conv_post"))
        bins = self.meta["kokoro.n_fft"] // 2 + 1
        return self.istft(np.exp(x[:bins]), np.sin(x[bins:]))

    # ------------------------------------------------------------------ the whole chain
    def synthesize(self, ids: Sequence[int], style: np.ndarray, speed: float = 1.0, *,
                   keep_stages: bool = False,
                   durations: Optional[np.ndarray] = None,
                   d_en: Optional[np.ndarray] = None,
                   har: Optional[np.ndarray] = None) -> KokoroOutput:
        """Phoneme ids (without the boundary ids, which are added), one style row (256,) and a
        speed -> audio and durations. durations, d_en, har: use these instead of the
        reference's own (a peer's durations, ALBERT output or source STFT, to compare the rest
        of the chain from the same point)."""
        ids = np.asarray([BOUNDARY_ID, *ids, BOUNDARY_ID], np.int64)
        style = np.asarray(style, F32).reshape(-1)
        s_dec = style[:self.style_split[0]]
        s_pred = style[self.style_split[0]:]
        st = {}
        d_en = self.albert(ids) if d_en is None else np.asarray(d_en, F32)
        d = self.duration_encoder(d_en, s_pred)
        pred = self.durations(d, speed)
        dur = pred if durations is None else np.asarray(durations, np.int64)
        aln = alignment(dur)                                                    # (T, F)
        en = (d.T @ aln).astype(F32)                                            # (640, F)
        f0, n = self.f0_energy(en, s_pred)
        asr = (self.text_encoder(ids).T @ aln).astype(F32)                      # (512, F)
        x = self.decoder(asr, f0, n, s_dec)
        audio = self.generator(x, s_dec, f0, har)
        if keep_stages:
            st = dict(d_en=d_en, d=d, durations=pred, f0=f0, n=n, asr=asr, decoded=x)
        return KokoroOutput(audio=audio.astype(F32), durations=pred, stages=st)
