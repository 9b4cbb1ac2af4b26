"""Whisper in plain NumPy: the reference for the fast paths.

::

    from dasllama.reference.whisper import ReferenceWhisper
    m = ReferenceWhisper("whisper-tiny.en.gguf")
    mel = m.log_mel(audio)                       # [n_mels, n_frames], 16 kHz float32 audio in
    window = m.window(mel, seek=0)               # [n_mels, 3000]: 30 s, zero padded
    enc = m.encode(window)                       # [n_audio_ctx, d]
    logits = m.decoder_logits(enc, [50257])      # [n_tokens, n_vocab]
    tokens, info = m.greedy(enc, [50257])        # the decoding rules below

Whisper (Radford et al. 2022, "Robust Speech Recognition via Large-Scale Weak Supervision";
the definition is openai/whisper's model.py and audio.py) is an encoder-decoder transformer:

1. Log-mel front end. The audio, with one hop of zeros appended, is cut into frames of
   n_fft = 400 samples every hop = 160 samples (10 ms), centered (reflect padding of n_fft/2
   on each side), weighted by a periodic Hann window; the power |rfft|^2 of each frame but the
   last goes through the mel filterbank (stored in the file), then log10(max(x, 1e-10)),
   clamped to (its maximum over the whole clip - 8), and mapped by (x + 4) / 4. A 30 s window
   (3000 frames) is cut from it at a seek frame and padded with zeros (faster-whisper's
   feature extractor; openai's pads the audio with 30 s of zeros instead).
2. Encoder. conv1 (kernel 3, padding 1) + GELU, conv2 (kernel 3, stride 2, padding 1) + GELU
   give n_audio_ctx = 1500 rows; sinusoidal positions are added (stored in the file); then
   pre-LayerNorm blocks x += attn(ln(x)), x += mlp(ln(x)) with bidirectional multi-head
   attention and a GELU MLP (4d), and a final LayerNorm.
3. Decoder. Token embeddings + learned positions; pre-LN blocks of causal self-attention (over
   a cache of earlier tokens), cross-attention to the encoder output (its keys and values are
   computed once per window), and the MLP; a final LayerNorm; logits = x @ tok_emb^T (tied).

GELU is the erf form; LayerNorm eps is 1e-5; attention scales q.k by head_dim^-1/2.

Decoding (``greedy``), as CTranslate2 applies it for faster-whisper at temperature 0 and beam 1.
A ``prefix`` of b tokens is forced as the first b outputs (scored 0, kept in the output);
step b is the first free step. At each step i (0 for the first output) the logits are masked,
in this order: ``suppress_tokens`` always; ``suppress_blank`` ids (the file's
suppress_ids_begin: the space and <|endoftext|>) at step b; and, unless the prompt ends with
<|notimestamps|>, the timestamp rules: <|notimestamps|> always; at step 0 when b = 0, every
text token and every timestamp past ``max_initial_timestamp_index``; at steps after b, after
a timestamp that follows a timestamp (or is the first free output), every timestamp; after a
timestamp that follows text, every text token below <|endoftext|> and every timestamp before
it; after text, every timestamp not later than the last free one. Then, where the last token
was text or a lone timestamp, if the log-sum-exp of the timestamps' log-probabilities beats
the best text token's, every text token (and <|endoftext|>) is masked. The arg-max is taken;
<|endoftext|> or the length limit (min(n_text_ctx / 2, n_text_ctx - prompt length + 1) steps,
the prefix's included) ends the output. The no-speech probability is the softmax of the
unmasked logits at <|startoftranscript|>.

Beam search (``beam``), as CTranslate2's BeamSearch: the same masks on every hypothesis; at
the first step the prompt's one hypothesis gives the 2B best tokens (B = beam_size); later,
each beam's log-probabilities plus its score give B x n_vocab candidates, of which the best 2B
are kept. Of those, the first B become the beams, except that a candidate ending in
<|endoftext|> (or any candidate at the last step) is recorded as a finished hypothesis and
its place goes to the next candidate (from the (B+1)-th on) that does not end. Decoding stops
at the last step or once round(B * patience) hypotheses are recorded; the winner has the best
score / length^length_penalty.

Precision: weights are widened to float32 by the ``gguf`` package (not dasllama's reader,
whose code the fast paths share), then the arithmetic is done in ``dtype`` (float64 by
default); outputs are float32.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import numpy as np

__all__ = ["ReferenceWhisper", "WhisperHParams", "log_mel", "gelu", "layer_norm",
           "N_FRAMES", "DecodeInfo"]

N_FRAMES = 3000   # frames in a 30 s window (chunk_seconds * sample_rate / hop)
LN_EPS = 1e-5
LOG_FLOOR = 1e-10      # log10 is taken of max(power, LOG_FLOOR)
DYNAMIC_RANGE = 8.0    # log-mel values are clamped to (max - 8)


@dataclass(frozen=True)
class WhisperHParams:
    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int
    n_vocab: int
    n_fft: int
    hop_length: int
    sample_rate: int


@dataclass
class DecodeInfo:
    """What greedy decoding reports besides the tokens."""
    sum_logprob: float      # log-probabilities of the chosen tokens, <|endoftext|> included
    no_speech_prob: float


# ============================================================================ shared math

def gelu(x: np.ndarray) -> np.ndarray:
    """GELU, erf form: x/2 (1 + erf(x / sqrt 2))."""
    erf = np.vectorize(math.erf, otypes=[x.dtype])
    return 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, eps: float = LN_EPS) -> np.ndarray:
    mean = x.mean(axis=-1, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * w + b


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray) -> np.ndarray:
    m = x.max()
    return x - m - np.log(np.exp(x - m).sum())


def log_mel(audio: np.ndarray, filters: np.ndarray, n_fft: int = 400,
            hop: int = 160) -> np.ndarray:
    """Log-mel spectrogram of a whole clip: [n_mels, len(audio) // hop + 1] float32."""
    x = np.concatenate([np.asarray(audio, dtype=np.float64), np.zeros(hop)])
    x = np.pad(x, n_fft // 2, mode="reflect")
    n_frames = 1 + (len(x) - n_fft) // hop
    window = 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(n_fft) / n_fft)   # periodic Hann
    frames = np.stack([x[i * hop:i * hop + n_fft] for i in range(n_frames)]) * window
    power = np.abs(np.fft.rfft(frames, axis=-1)) ** 2                    # [n_frames, bins]
    mel = filters.astype(np.float64) @ power[:-1].T                      # [n_mels, frames]
    logm = np.log10(np.maximum(mel, LOG_FLOOR))
    logm = np.maximum(logm, logm.max() - DYNAMIC_RANGE)
    return ((logm + 4.0) / 4.0).astype(np.float32)


def conv1d(x: np.ndarray, w: np.ndarray, b: np.ndarray, stride: int, pad: int) -> np.ndarray:
    """x [C_in, T], w [C_out, C_in, K] -> [C_out, T_out], zero padding ``pad`` each side."""
    c_in, t = x.shape
    k = w.shape[2]
    xp = np.pad(x, ((0, 0), (pad, pad)))
    t_out = (t + 2 * pad - k) // stride + 1
    out = np.zeros((w.shape[0], t_out), dtype=x.dtype)
    for j in range(k):
        out += w[:, :, j] @ xp[:, j:j + stride * (t_out - 1) + 1:stride]
    return out + b[:, None]


def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, n_head: int,
              causal_from: Optional[int] = None) -> np.ndarray:
    """Multi-head attention. q [n_q, d], k and v [n_k, d]. causal_from: the position of q's
    first row among the keys (query i sees keys 0..causal_from + i); None: every key."""
    n_q, d = q.shape
    hd = d // n_head
    out = np.empty_like(q)
    for h in range(n_head):
        s = slice(h * hd, (h + 1) * hd)
        scores = (q[:, s] @ k[:, s].T) / math.sqrt(hd)
        if causal_from is not None:
            visible = np.arange(k.shape[0])[None, :] <= causal_from + np.arange(n_q)[:, None]
            scores = np.where(visible, scores, -np.inf)
        out[:, s] = softmax(scores) @ v[:, s]
    return out


# ============================================================================ the model

class ReferenceWhisper:
    """A Whisper GGUF (dasllama.convert.whisper's layout) run in NumPy."""

    def __init__(self, path: Union[str, os.PathLike], dtype=np.float64):
        from gguf import GGUFReader   # the gguf package, independent of dasllama's reader

        self.path = os.fspath(path)
        self.dtype = np.dtype(dtype)
        r = GGUFReader(self.path)
        self._fields = r.fields
        self._tensors = {t.name: t for t in r.tensors}
        arch = self.meta_str("general.architecture")
        if arch != "whisper":
            raise ValueError(f"{self.path}: general.architecture is {arch!r}, not 'whisper'")
        g = lambda k: self.meta_int("whisper." + k)   # noqa: E731
        self.hp = WhisperHParams(
            n_mels=g("n_mels"), n_audio_ctx=g("n_audio_ctx"), n_audio_state=g("n_audio_state"),
            n_audio_head=g("n_audio_head"), n_audio_layer=g("n_audio_layer"),
            n_text_ctx=g("n_text_ctx"), n_text_state=g("n_text_state"),
            n_text_head=g("n_text_head"), n_text_layer=g("n_text_layer"),
            n_vocab=g("n_vocab"), n_fft=g("n_fft"), hop_length=g("hop_length"),
            sample_rate=g("sample_rate"))
        self.tok = {k: self.meta_int("whisper.token." + k) for k in (
            "eot", "sot", "translate", "transcribe", "sot_lm", "sot_prev", "no_speech",
            "no_timestamps", "timestamp_begin")}
        self.suppress_ids = self.meta_ints("whisper.suppress_ids")
        self.suppress_ids_begin = self.meta_ints("whisper.suppress_ids_begin")
        self._cache = {}

    # ------------------------------------------------------------------ file access
    def meta_int(self, key: str) -> int:
        f = self._fields[key]
        return int(f.parts[f.data[0]][0])

    def meta_ints(self, key: str) -> list:
        f = self._fields.get(key)
        return [] if f is None else [int(f.parts[i][0]) for i in f.data]

    def meta_str(self, key: str) -> str:
        f = self._fields[key]
        return bytes(f.parts[f.data[0]]).decode("utf-8")

    def w(self, name: str) -> np.ndarray:
        """Tensor ``name`` in NumPy order, as ``dtype``."""
        if name not in self._cache:
            self._cache[name] = np.asarray(self._tensors[name].data, dtype=np.float32).astype(
                self.dtype)
        return self._cache[name]

    # ------------------------------------------------------------------ front end
    def log_mel(self, audio: np.ndarray) -> np.ndarray:
        """[n_mels, len(audio) // hop + 1]: the whole clip's log-mel (see the module text)."""
        return log_mel(audio, self.w("mel_filters"), self.hp.n_fft, self.hp.hop_length)

    @staticmethod
    def window(mel: np.ndarray, seek: int = 0, size: Optional[int] = None) -> np.ndarray:
        """``size`` frames from ``seek`` (default: up to 30 s of content), zero padded to
        N_FRAMES."""
        content = mel.shape[1] - 1           # the last frame is the appended hop's
        size = min(N_FRAMES, content - seek) if size is None else size
        out = np.zeros((mel.shape[0], N_FRAMES), dtype=np.float32)
        out[:, :size] = mel[:, seek:seek + size]
        return out

    # ------------------------------------------------------------------ encoder
    def encode(self, window: np.ndarray) -> np.ndarray:
        """window [n_mels, 2 * n_audio_ctx] -> encoder output [n_audio_ctx, d] float32."""
        hp = self.hp
        x = np.asarray(window, dtype=self.dtype)
        x = gelu(conv1d(x, self.w("enc.conv1.weight"), self.w("enc.conv1.bias"), 1, 1))
        x = gelu(conv1d(x, self.w("enc.conv2.weight"), self.w("enc.conv2.bias"), 2, 1))
        x = x.T + self.w("enc.pos")                                     # [n_ctx, d]
        d = hp.n_audio_state
        for i in range(hp.n_audio_layer):
            p = f"enc.blk.{i}."
            h = layer_norm(x, self.w(p + "attn_ln.weight"), self.w(p + "attn_ln.bias"))
            qkv = h @ self.w(p + "attn.qkv.weight").T + self.w(p + "attn.qkv.bias")
            a = attention(qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], hp.n_audio_head)
            x = x + a @ self.w(p + "attn.out.weight").T + self.w(p + "attn.out.bias")
            x = x + self._mlp(p, x)
        x = layer_norm(x, self.w("enc.ln_post.weight"), self.w("enc.ln_post.bias"))
        return x.astype(np.float32)

    def _mlp(self, p: str, x: np.ndarray) -> np.ndarray:
        h = layer_norm(x, self.w(p + "mlp_ln.weight"), self.w(p + "mlp_ln.bias"))
        h = gelu(h @ self.w(p + "mlp.fc1.weight").T + self.w(p + "mlp.fc1.bias"))
        return h @ self.w(p + "mlp.fc2.weight").T + self.w(p + "mlp.fc2.bias")

    # ------------------------------------------------------------------ decoder
    def cross_kv(self, enc: np.ndarray) -> list:
        """Per layer, the cross-attention keys and values of the encoder output (computed once
        per window): [(k [n_audio_ctx, d], v [n_audio_ctx, d]), ...]."""
        d = self.hp.n_text_state
        e = np.asarray(enc, dtype=self.dtype)
        out = []
        for i in range(self.hp.n_text_layer):
            p = f"dec.blk.{i}."
            kv = e @ self.w(p + "cross.kv.weight").T + self.w(p + "cross.kv.bias")
            out.append((kv[:, :d], kv[:, d:]))
        return out

    def decoder_step(self, tokens: Sequence[int], cache: list, cross: list) -> np.ndarray:
        """Run ``tokens`` at positions len(cache rows).. ; appends their self-attention keys and
        values to ``cache`` (a list of [k, v] per layer, grown in place). Returns the logits
        [len(tokens), n_vocab]."""
        hp = self.hp
        d = hp.n_text_state
        pos0 = 0 if not cache else cache[0][0].shape[0]
        if not cache:
            cache.extend([[np.zeros((0, d), self.dtype), np.zeros((0, d), self.dtype)]
                          for _ in range(hp.n_text_layer)])
        ids = np.asarray(tokens, dtype=np.int64)
        x = self.w("dec.tok_emb")[ids] + self.w("dec.pos")[pos0:pos0 + len(ids)]
        for i in range(hp.n_text_layer):
            p = f"dec.blk.{i}."
            h = layer_norm(x, self.w(p + "attn_ln.weight"), self.w(p + "attn_ln.bias"))
            qkv = h @ self.w(p + "attn.qkv.weight").T + self.w(p + "attn.qkv.bias")
            cache[i][0] = np.concatenate([cache[i][0], qkv[:, d:2 * d]])
            cache[i][1] = np.concatenate([cache[i][1], qkv[:, 2 * d:]])
            a = attention(qkv[:, :d], cache[i][0], cache[i][1], hp.n_text_head, causal_from=pos0)
            x = x + a @ self.w(p + "attn.out.weight").T + self.w(p + "attn.out.bias")
            h = layer_norm(x, self.w(p + "cross_ln.weight"), self.w(p + "cross_ln.bias"))
            q = h @ self.w(p + "cross.q.weight").T + self.w(p + "cross.q.bias")
            a = attention(q, cross[i][0], cross[i][1], hp.n_text_head)
            x = x + a @ self.w(p + "cross.out.weight").T + self.w(p + "cross.out.bias")
            x = x + self._mlp(p, x)
        x = layer_norm(x, self.w("dec.ln.weight"), self.w("dec.ln.bias"))
        proj = "dec.proj.weight" if "dec.proj.weight" in self._tensors else "dec.tok_emb"
        return (x @ self.w(proj).T).astype(np.float32)

    def decoder_logits(self, enc: np.ndarray, tokens: Sequence[int]) -> np.ndarray:
        """Logits [len(tokens), n_vocab] of a token sequence from position 0."""
        return self.decoder_step(tokens, [], self.cross_kv(enc))

    # ------------------------------------------------------------------ decoding
    def greedy(self, enc: np.ndarray, prompt: Sequence[int], *,
               suppress_tokens: Optional[Sequence[int]] = None, suppress_blank: bool = True,
               max_initial_timestamp_index: int = 50,
               max_length: Optional[int] = None, prefix: Sequence[int] = ()) -> tuple:
        """Greedy decoding of one window (the rules in the module text). prompt: the tokens
        before the output (ending with the sot sequence, maybe <|notimestamps|>).
        suppress_tokens: ids to mask at every step (None: the file's suppress_ids).
        prefix: tokens forced as the first outputs.
        Returns (the prefix and the decoded tokens, without <|endoftext|>; DecodeInfo)."""
        hp, t = self.hp, self.tok
        suppress = list(self.suppress_ids if suppress_tokens is None else suppress_tokens)
        timestamps = prompt[-1] != t["no_timestamps"]
        ts_begin, ts_end = t["timestamp_begin"], hp.n_vocab - 1
        cross = self.cross_kv(enc)
        cache: list = []
        logits = self.decoder_step(prompt, cache, cross)
        sot_index = list(prompt).index(t["sot"])
        no_speech = float(softmax(logits[sot_index].astype(np.float64))[t["no_speech"]])
        step_logits = logits[-1].astype(np.float64)
        limit = max_length if max_length is not None else hp.n_text_ctx
        max_new = min(limit // 2, limit - (len(prompt) - 1))
        out: list = []
        total = 0.0
        begin = len(prefix)
        for step in range(max_new):
            z = step_logits.copy()
            z[suppress] = -np.inf
            if step == begin and suppress_blank:
                z[self.suppress_ids_begin] = -np.inf
            if timestamps:
                z = self._timestamp_rules(z, step, begin, out, ts_begin, ts_end,
                                          ts_begin + max_initial_timestamp_index)
            if step < begin:
                token = int(prefix[step])          # forced, scored 0
            else:
                logp = log_softmax(z)
                token = int(np.argmax(logp))
                total += float(logp[token])
                if token == t["eot"]:
                    break
            out.append(token)
            step_logits = self.decoder_step([token], cache, cross)[0].astype(np.float64)
        return out, DecodeInfo(total, no_speech)

    def beam(self, enc: np.ndarray, prompt: Sequence[int], *, beam_size: int = 5,
             patience: float = 1.0, length_penalty: float = 1.0,
             suppress_tokens: Optional[Sequence[int]] = None, suppress_blank: bool = True,
             max_initial_timestamp_index: int = 50,
             max_length: Optional[int] = None) -> tuple:
        """Beam search of one window (the rules in the module text). Returns (the winner's
        tokens without <|endoftext|>, DecodeInfo with its unnormalized summed log-prob)."""
        hp, t = self.hp, self.tok
        suppress = list(self.suppress_ids if suppress_tokens is None else suppress_tokens)
        timestamps = prompt[-1] != t["no_timestamps"]
        ts_begin, ts_end = t["timestamp_begin"], hp.n_vocab - 1
        B, n_cand = beam_size, 2 * beam_size
        max_hyps = int(round(B * patience))
        cross = self.cross_kv(enc)
        cache: list = []
        logits = self.decoder_step(prompt, cache, cross)
        sot_index = list(prompt).index(t["sot"])
        no_speech = float(softmax(logits[sot_index].astype(np.float64))[t["no_speech"]])
        limit = max_length if max_length is not None else hp.n_text_ctx
        max_steps = min(limit // 2, limit - (len(prompt) - 1))
        beams = [([], 0.0, cache)]          # (tokens, score, self-attention cache)
        rows = [logits[-1].astype(np.float64)]
        hyps = []
        for step in range(max_steps):
            cands = []
            for k, (seq, score, _) in enumerate(beams):
                z = rows[k].copy()
                z[suppress] = -np.inf
                if step == 0 and suppress_blank:
                    z[self.suppress_ids_begin] = -np.inf
                if timestamps:
                    z = self._timestamp_rules(z, step, 0, seq, ts_begin, ts_end,
                                              ts_begin + max_initial_timestamp_index)
                lp = log_softmax(z) + score
                for tok in np.argsort(-lp, kind="stable")[:n_cand]:
                    cands.append((float(lp[tok]), k, int(tok)))
            cands.sort(key=lambda c: (-c[0], c[1], c[2]))
            cands = cands[:n_cand]
            last = step + 1 == max_steps
            chosen, secondary = [], B
            for k in range(B):
                score, origin, tok = cands[k]
                pick = k
                if tok == t["eot"] or last:
                    seq = beams[origin][0] + ([] if tok == t["eot"] else [tok])
                    hyps.append((seq, score))
                    for j in range(secondary, n_cand):
                        if cands[j][2] != t["eot"]:
                            pick, secondary = j, j + 1
                            break
                chosen.append(cands[pick])
            if last or len(hyps) >= max_hyps:
                break
            beams_next, rows = [], []
            for score, origin, tok in chosen:
                cache_k = [[kk.copy(), vv.copy()] for kk, vv in beams[origin][2]]
                rows.append(self.decoder_step([tok], cache_k, cross)[0].astype(np.float64))
                beams_next.append((beams[origin][0] + [tok], score, cache_k))
            beams = beams_next
        best = max(range(len(hyps)), key=lambda i: (
            hyps[i][1] / (len(hyps[i][0]) ** length_penalty) if hyps[i][0] else -np.inf, -i))
        return hyps[best][0], DecodeInfo(hyps[best][1], no_speech)

    def _timestamp_rules(self, z: np.ndarray, step: int, begin: int, out: list,
                         ts_begin: int, ts_end: int, max_initial: int) -> np.ndarray:
        eot = self.tok["eot"]
        z[self.tok["no_timestamps"]] = -np.inf
        check = False
        if step == begin == 0:
            z[:ts_begin] = -np.inf
            z[max_initial + 1:ts_end + 1] = -np.inf
        elif step > begin:
            last = out[step - 1]
            if last >= ts_begin:
                penultimate = out[step - 2] if step - 1 > begin else last
                if penultimate >= ts_begin:
                    z[ts_begin:ts_end + 1] = -np.inf
                else:
                    z[:eot] = -np.inf
                    z[ts_begin:last] = -np.inf
                    check = True
            else:
                check = True
                earlier = [tok for tok in out[begin:] if tok >= ts_begin]
                if earlier:
                    z[ts_begin:earlier[-1] + 1] = -np.inf
        if check:
            logp = log_softmax(z)
            ts = logp[ts_begin:ts_end + 1]
            m = ts.max()
            ts_mass = -np.inf if not np.isfinite(m) else m + np.log(np.exp(ts - m).sum())
            if ts_mass > logp[:ts_begin].max():
                z[:ts_begin] = -np.inf
        return z
