"""The Mimi codec of Pocket TTS in plain NumPy: latents -> audio, and audio -> latents.

Written from pocket_tts models/mimi.py, modules/seanet.py, modules/conv.py, modules/resample.py
(4.0.1); Mimi is Défossez et al. 2024 (Moshi), its convolutional part SEANet (Tagliasacchi et
al. 2020). The package runs it streaming, chunk by chunk, with per-layer states; a whole signal
in one call gives the same numbers, which is what this module does: causal convolutions are
left-padded (zeros, or copies of the first sample), a transposed convolution's tail is cut
(:mod:`.pocket_blocks`), and the transformers attend within a window of ``context`` frames.

Decoding, for latents [T, L] at the frame rate (12.5 Hz):

    quantizer output_proj (1x1 conv)      [T, L]       -> [Co, T]
    upsample: depthwise ConvTranspose1d   stride u     -> [Co, T*u]    (encoder frame rate)
    decoder transformer (windowed)        [T*u, d]
    SEANet decoder: conv K, then per ratio q: ELU, ConvTranspose1d (2q, stride q), residual
    blocks; ELU, conv Kl                   -> [channels, T*u*prod(ratios)] samples

Encoding (voices): SEANet encoder (the mirror image, strided convs), encoder transformer,
downsample (Conv1d, kernel 2u, stride u, replicate padding) -> latents [T', Ci].
"""

from __future__ import annotations

import numpy as np

from .pocket_blocks import conv1d_causal, conv_transpose1d_causal, elu, transformer


def _seanet_residual(x, w, prefix: str, p: dict, stage: int) -> np.ndarray:
    """x + conv2(ELU(conv1(ELU(x)))) for each residual block of a stage (modules/seanet.py);
    conv1 has kernel residual_kernel_size and dilation dilation_base^r, conv2 kernel 1."""
    for r in range(p["n_residual_layers"]):
        b = f"{prefix}.res.{stage}.{r}."
        h = conv1d_causal(elu(x), w(b + "conv1.weight"), w(b + "conv1.bias"),
                          dilation=p["dilation_base"] ** r, pad_mode=p["pad_mode"])
        h = conv1d_causal(elu(h), w(b + "conv2.weight"), w(b + "conv2.bias"),
                          pad_mode=p["pad_mode"])
        x = x + h
    return x


def seanet_decode(x: np.ndarray, w, p: dict) -> np.ndarray:
    """SEANetDecoder: x [dimension, T] -> [channels, T * prod(ratios)]."""
    pm = p["pad_mode"]
    x = conv1d_causal(x, w("mimi.dec.in.weight"), w("mimi.dec.in.bias"), pad_mode=pm)
    for s, ratio in enumerate(p["ratios"]):
        x = conv_transpose1d_causal(elu(x), w(f"mimi.dec.up.{s}.weight"),
                                    w(f"mimi.dec.up.{s}.bias"), stride=ratio)
        x = _seanet_residual(x, w, "mimi.dec", p, s)
    return conv1d_causal(elu(x), w("mimi.dec.out.weight"), w("mimi.dec.out.bias"), pad_mode=pm)


def seanet_encode(x: np.ndarray, w, p: dict) -> np.ndarray:
    """SEANetEncoder: x [channels, T] -> [dimension, T / prod(ratios)]; the stages run in the
    reverse order of the config's ratios."""
    pm = p["pad_mode"]
    x = conv1d_causal(x, w("mimi.enc.in.weight"), w("mimi.enc.in.bias"), pad_mode=pm)
    for s, ratio in enumerate(reversed(p["ratios"])):
        x = _seanet_residual(x, w, "mimi.enc", p, s)
        x = conv1d_causal(elu(x), w(f"mimi.enc.down.{s}.weight"), w(f"mimi.enc.down.{s}.bias"),
                          stride=ratio, pad_mode=pm)
    return conv1d_causal(elu(x), w("mimi.enc.out.weight"), w("mimi.enc.out.bias"), pad_mode=pm)


def projected_transformer(x: np.ndarray, w, prefix: str, tf: dict) -> np.ndarray:
    """ProjectedTransformer on x [C, T] (channels first, as the convolutions hold it):
    optional input projection, the windowed transformer on the T rows, optional output
    projection. Returns [C', T]."""
    rows = x.T
    if tf["input_dim"] != tf["d_model"]:
        rows = rows @ w(prefix + "in_proj.weight").T
    rows = transformer(rows, w, prefix, n_layers=tf["num_layers"], num_heads=tf["num_heads"],
                       kv_heads=tf["num_heads"], head_dim=tf["d_model"] // tf["num_heads"],
                       rope_max_period=tf["rope_max_period"], eps=tf["norm_eps"],
                       context=tf["context"], layer_scale=tf["layer_scale"])
    if tf["output_dim"] != tf["d_model"]:
        rows = rows @ w(prefix + "out_proj.weight").T
    return rows.T


def mimi_decode(latents: np.ndarray, w, m: dict) -> np.ndarray:
    """De-normalized latents [T, L] -> audio [channels, T * frame_size] (MimiModel
    .decode_from_latent on a fresh state)."""
    x = w("mimi.quant_proj.weight") @ latents.T                          # [Co, T]
    if m["upsample_stride"] > 1:
        x = conv_transpose1d_causal(x, w("mimi.upsample.weight"), None,
                                    stride=m["upsample_stride"], depthwise=True)
    x = projected_transformer(x, w, "mimi.dec_tf.", m["dec_tf"])
    return seanet_decode(x, w, m["dec"])


def mimi_encode(audio: np.ndarray, w, m: dict, frame_size: int) -> np.ndarray:
    """Audio [channels, N] at the model's sample rate -> latents [T', Ci]
    (MimiModel.encode_to_latent): zero-padded at the end to a whole number of frames."""
    n = audio.shape[1]
    audio = np.concatenate([audio, np.zeros((audio.shape[0], -n % frame_size), audio.dtype)], 1)
    x = seanet_encode(audio, w, m["enc"])
    x = projected_transformer(x, w, "mimi.enc_tf.", m["enc_tf"])
    if m["upsample_stride"] > 1:
        u = m["upsample_stride"]
        x = conv1d_causal(x, w("mimi.downsample.weight"), None, stride=u, pad_mode="replicate")
    return x.T


def end_on_pause(wav: np.ndarray, sample_rate: int, pause_sec: float = 0.08,
                 fade_sec: float = 0.02, floor_db: float = 35.0) -> np.ndarray:
    """A voice prompt [channels, N] cut after its last loud 20 ms frame (within floor_db of the
    loudest), faded out over fade_sec, followed by pause_sec of silence
    (pocket_tts data/audio_utils.py end_on_pause)."""
    frame = max(1, int(0.02 * sample_rate))
    n = wav.shape[-1] // frame
    if n == 0:
        return wav
    frames = wav[..., :n * frame].reshape(-1, n, frame)
    rms = np.sqrt(np.mean(frames ** 2, axis=(0, 2)))
    db = 20 * np.log10(rms + 1e-12)
    end = (int(np.nonzero(db > db.max() - floor_db)[0][-1]) + 1) * frame
    wav = wav[..., :end].copy()
    fade = min(int(fade_sec * sample_rate), end)
    wav[..., end - fade:] *= np.linspace(1, 0, fade)
    pause = np.zeros(wav.shape[:-1] + (int(pause_sec * sample_rate),), wav.dtype)
    return np.concatenate([wav, pause], axis=-1)
