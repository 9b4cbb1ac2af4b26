"""Whisper's word alignment in plain NumPy: the reference for csrc/asr/whisper/alignment.

::

    from dasllama.reference.whisper import ReferenceWhisper
    from dasllama.reference.whisper_align import align
    m = ReferenceWhisper("whisper-tiny.en.gguf")
    enc = m.encode(window)
    text_idx, time_idx, probs = align(m, enc, [50257], text_tokens, num_frames=segment_size)

The alignment (Radford et al. 2022, section 3.8 of openai/whisper's notes on word timestamps;
the rules below are the ones CTranslate2 applies for faster-whisper):

1. The decoder runs once over ``sot_sequence + [<|notimestamps|>] + text + [<|endoftext|>]``
   (teacher forcing), keeping the cross-attention logits (q.k / sqrt(head_dim)) of the
   model's alignment heads, (layer, head) pairs that follow the speech in time.
2. Each head's logits over the window's first ``num_frames // 2`` encoder rows (the audio's
   content; conv2 halves the mel frames) go through a softmax per token.
3. Each head's weights are normalized per frame over the tokens: (w - mean) / std (the
   population std, every token of step 1 counted).
4. A median filter of width 7 runs along the frames of each row (reflected at the edges:
   frame -k reads frame k, frame n - 1 + k reads frame n - 1 - k).
5. The heads are averaged; the rows from <|notimestamps|> to the last text token (one per
   text token, plus one) form the matrix whose negation dynamic time warping aligns: the
   cheapest monotonic path from (0, 0) to the last row and frame, moving diagonally, down a
   row, or right a frame. Ties go right (a frame), then down (a row) before diagonal: a
   diagonal move is taken only when strictly cheaper than both, a row move only when strictly
   cheaper than both others. The path is read back from the end while both indices are
   positive.
6. The probability of text token t is the softmax, over the text tokens alone (ids below
   <|endoftext|>), of the logits at the position before it.

The arithmetic runs in ``m.dtype`` (float64 by default; float32 gives CTranslate2's rounding).
"""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

__all__ = ["align", "cross_scores", "median_filter", "negative_dtw", "alignment_matrix",
           "MEDIAN_FILTER_WIDTH"]

MEDIAN_FILTER_WIDTH = 7   # faster-whisper's width: smooths a head's frame-to-frame jitter


def _attention_logits(q: np.ndarray, k: np.ndarray, n_head: int) -> np.ndarray:
    """[n_head, n_q, n_k]: q.k / sqrt(head_dim) per head."""
    hd = q.shape[1] // n_head
    qh = q.reshape(q.shape[0], n_head, hd).transpose(1, 0, 2)
    kh = k.reshape(k.shape[0], n_head, hd).transpose(1, 2, 0)
    return (qh @ kh) / np.sqrt(hd)


def cross_scores(m, enc: np.ndarray, tokens: Sequence[int],
                 heads: Sequence[Tuple[int, int]]) -> Tuple[np.ndarray, Dict]:
    """Teacher-forced decoder pass of ``tokens`` from position 0 on the window ``enc``.
    Returns (logits [n, n_vocab], {(layer, head): cross-attention logits [n, n_audio_ctx]})."""
    from .whisper import attention, layer_norm

    hp = m.hp
    d = hp.n_text_state
    ids = np.asarray(tokens, dtype=np.int64)
    cross = m.cross_kv(enc)
    x = m.w("dec.tok_emb")[ids] + m.w("dec.pos")[:len(ids)]
    wanted = {}
    for layer, head in heads:
        wanted.setdefault(layer, []).append(head)
    scores = {}
    for i in range(hp.n_text_layer):
        p = f"dec.blk.{i}."
        h = layer_norm(x, m.w(p + "attn_ln.weight"), m.w(p + "attn_ln.bias"))
        qkv = h @ m.w(p + "attn.qkv.weight").T + m.w(p + "attn.qkv.bias")
        a = attention(qkv[:, :d], qkv[:, d:2 * d], qkv[:, 2 * d:], hp.n_text_head, causal_from=0)
        x = x + a @ m.w(p + "attn.out.weight").T + m.w(p + "attn.out.bias")
        h = layer_norm(x, m.w(p + "cross_ln.weight"), m.w(p + "cross_ln.bias"))
        q = h @ m.w(p + "cross.q.weight").T + m.w(p + "cross.q.bias")
        if i in wanted:
            logits = _attention_logits(q, cross[i][0], hp.n_text_head)
            for head in wanted[i]:
                scores[(i, head)] = logits[head]
        a = attention(q, cross[i][0], cross[i][1], hp.n_text_head)
        x = x + a @ m.w(p + "cross.out.weight").T + m.w(p + "cross.out.bias")
        x = x + m._mlp(p, x)
    x = layer_norm(x, m.w("dec.ln.weight"), m.w("dec.ln.bias"))
    proj = "dec.proj.weight" if "dec.proj.weight" in m._tensors else "dec.tok_emb"
    return x @ m.w(proj).T, scores


def median_filter(x: np.ndarray, width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """Median of ``width`` (odd) neighbours along the last axis, the edges reflected (not
    repeated). Rows shorter than width // 2 + 1 pass unchanged."""
    rank = width // 2
    n = x.shape[-1]
    if n <= rank:
        return x.copy()
    idx = np.abs(np.arange(n)[:, None] + np.arange(-rank, rank + 1)[None, :])
    idx = np.where(idx >= n, 2 * (n - 1) - idx, idx)
    return np.median(x[..., idx], axis=-1).astype(x.dtype)


def negative_dtw(x: np.ndarray) -> List[Tuple[int, int]]:
    """Dynamic time warping of the cost -x [n, m] (see the module text, step 5): the path's
    (row, frame) pairs from the first to the last."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=x.dtype)
    cost[0, 0] = 0
    trace = np.full((n + 1, m + 1), -1, dtype=np.int8)
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0, c1, c2 = cost[i - 1, j - 1], cost[i - 1, j], cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = -x[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    path = []
    while i > 0 and j > 0:
        path.append((i - 1, j - 1))
        t = trace[i, j]
        if t == 0:
            i, j = i - 1, j - 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return path[::-1]


def alignment_matrix(head_scores: Sequence[np.ndarray], n_frames: int,
                     width: int = MEDIAN_FILTER_WIDTH) -> np.ndarray:
    """Steps 2-4 and the head average: head logits [n_tokens, n_audio_ctx] each ->
    [n_tokens, n_frames]."""
    w = np.stack([s[:, :n_frames] for s in head_scores])
    w = np.exp(w - w.max(axis=-1, keepdims=True))
    w = w / w.sum(axis=-1, keepdims=True)
    mean = w.mean(axis=1, keepdims=True)
    std = w.std(axis=1, keepdims=True)
    w = (w - mean) / std
    return median_filter(w, width).mean(axis=0)


def align(m, enc: np.ndarray, sot_sequence: Sequence[int], text_tokens: Sequence[int],
          num_frames: int, heads: Sequence[Tuple[int, int]] = None,
          width: int = MEDIAN_FILTER_WIDTH):
    """(text_indices, time_indices, text_token_probs) of ``text_tokens`` on the window ``enc``
    whose first ``num_frames`` mel frames are audio. heads: (layer, head) pairs (default: the
    file's whisper.alignment_heads)."""
    if heads is None:
        flat = m.meta_ints("whisper.alignment_heads")
        heads = list(zip(flat[0::2], flat[1::2]))
    if not heads:
        raise ValueError(f"{m.path}: no alignment heads (whisper.alignment_heads is empty)")
    tok = m.tok
    tokens = list(sot_sequence) + [tok["no_timestamps"]] + list(text_tokens) + [tok["eot"]]
    logits, scores = cross_scores(m, enc, tokens, heads)
    n_frames = min(num_frames // 2, m.hp.n_audio_ctx)
    matrix = alignment_matrix([scores[h] for h in heads], n_frames, width)
    offset = len(sot_sequence)
    path = negative_dtw(matrix[offset:offset + len(text_tokens) + 1])
    text_idx = np.array([p[0] for p in path], dtype=np.int64)
    time_idx = np.array([p[1] for p in path], dtype=np.int64)
    z = logits[offset:offset + len(text_tokens), :tok["eot"]]
    z = np.exp(z - z.max(axis=-1, keepdims=True))
    z = z / z.sum(axis=-1, keepdims=True)
    probs = z[np.arange(len(text_tokens)), np.asarray(text_tokens, dtype=np.int64)]
    return text_idx, time_idx, probs
