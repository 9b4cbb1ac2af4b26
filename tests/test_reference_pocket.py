"""The NumPy Pocket TTS reference (dasllama.reference.pocket) against the pocket-tts package.

Both run the package's English model (about 110M parameters) with the same random weights
(dasllama.testing.pocket: a seeded TTSModel, saved with safetensors, converted to GGUF). Hooks
record what the package computes inside ``generate_audio`` (every FlowLM call's noise draw,
conditioning, EOS logit and latent; every Mimi decoder call's input and output); the
reference is fed the same inputs stage by stage (teacher forcing), and end to end with the
package's noise. rel = ||ref - package|| / ||package||; discrete outputs (token ids, chunks,
frame counts, the EOS frame) must be equal.

Bars (f32 lane, the reference in float64; torch 2.13.0 CPU): the package computes in
float32, so errors are its rounding, 1e-7..1e-6 relative. Its Mimi encoder's convolutions
round differently by CPU (oneDNN's AVX2 kernels give about 4x the AVX-512 ones' error, so the
voice stages are measured with both). Each bar is about 4x the largest error measured at
that stage (printed by every test); each negative control is a plausible bug whose error
must exceed its bar at least 10x.

With random weights EOS fires arbitrarily, so the frame count is pinned through the package's
own knobs: ``eos_threshold`` (a very low one makes every frame an EOS candidate: the loop then
stops min_frames_before_eos + frames_after_eos frames in) or a threshold chosen between two
recorded EOS logits, and ``frames_after_eos``.

The f16 and q8_0 lanes are measured against the package too (their own bars, set from the
measured errors: weight rounding, not arithmetic, dominates them); the reference runs them in
float32 to halve time and memory, which adds about 1e-6.
"""

from __future__ import annotations


import numpy as np
import pytest
from requires import require as _require
from parity import check, rel_l2 as rel


# Bars per stage, f32 lane (measured maxima in brackets).
BAR_PROMPT_KV = 2e-6      # K and V rows of text, every layer      [3.8e-7]
BAR_VOICE_ROWS = 1e-5     # Mimi encoder + speaker projection      [5.9e-7 AVX-512, 2.7e-6 AVX2]
BAR_VOICE_KV = 8e-6       # K and V rows of a voice, every layer   [5.6e-7 AVX-512, 2.0e-6 AVX2]
BAR_CONDITIONING = 3e-6   # per-frame backbone output              [6.0e-7 .. 7.1e-7]
BAR_EOS = 3e-6            # per-frame EOS logits (absolute)        [6.0e-7]
BAR_FLOW = 2.5e-6         # per-frame flow head output             [3.4e-7 .. 4.5e-7]
BAR_DECODER = 1e-6        # Mimi decoder audio                     [1.5e-7]
BAR_AUDIO = 1e-6          # end to end, free running               [1.5e-7]
# Other lanes: (prompt K/V, conditioning, decoder audio, end-to-end audio).
LANE_BARS = {"f16": (1e-3, 1e-3, 2e-5, 2e-5),          # [2.3e-4, 3.0e-4, 4.6e-6, 5.0e-6]
             "q8_0": (2e-2, 2e-2, 3e-4, 3e-4)}         # [4.7e-3, 5.9e-3, 8.4e-5, 8.9e-5]
TEXT = "Hello world."
LONG_TEXT = ("The quick brown fox jumps over the lazy dog near the river bank today. "
             "Then it runs far away, into the dark green forest.")


# =============================================================================================
# Fixtures: one random model per session, package runs recorded once
# =============================================================================================

@pytest.fixture(scope="module")
def fx():
    _require("torch")
    _require("pocket_tts")
    from dasllama.testing.pocket import shared_fixture
    return shared_fixture(("f32",))


@pytest.fixture(scope="module")
def ref(fx):
    from dasllama.reference.pocket import ReferencePocket
    with ReferencePocket(fx.gguf_path("f32")) as m:
        yield m


@pytest.fixture(scope="module")
def voice(fx):
    """(wav, the package's voice state, its speaker-projected rows)."""
    from dasllama.testing.pocket import package_voice, voice_wav
    wav = voice_wav()
    state, rows = package_voice(fx.model, wav)
    return wav, state, rows


def _threshold_between(logits: list[float], first: int) -> tuple[float, int]:
    """An EOS threshold that the frame logits first exceed at a frame e >= first, with a
    margin: the frame after `first` whose logit rises most above all before it (from `first`
    on). Returns (threshold, e)."""
    best = None
    for e in range(first + 1, len(logits)):
        gap = logits[e] - max(logits[first:e])
        if best is None or gap > best[0]:
            best = (gap, e)
    gap, e = best
    if gap <= 1e-3:  # falling logits: EOS at `first` itself
        return logits[first] - 1e-2, first
    return logits[e] - gap / 2, e


@pytest.fixture(scope="module")
def text_run(fx, ref):
    """The package on TEXT without a voice at temperature 0.3, EOS firing on a frame past the
    minimum, chosen from a first run's logits; frames after EOS from the package's guess."""
    from dasllama.testing.pocket import record_package_run
    probe = record_package_run(fx.model, TEXT, eos_threshold=-1e9, frames_after_eos=3,
                               temperature=0.3, seed=0)
    frame_logits = [probe.eos_logits[i] for i in probe.chunk_calls()[0]]
    threshold, eos_frame = _threshold_between(frame_logits, ref.config["min_frames_before_eos"])
    run = record_package_run(fx.model, TEXT, eos_threshold=threshold, temperature=0.3, seed=0)
    return run, threshold, eos_frame


@pytest.fixture(scope="module")
def voice_run(fx, voice):
    """The package on LONG_TEXT (two chunks) with the voice, temperature 0.3, every frame an
    EOS candidate, one frame after EOS."""
    from dasllama.testing.pocket import record_package_run
    return record_package_run(fx.model, LONG_TEXT, voice[1], eos_threshold=-1e9,
                              frames_after_eos=1, temperature=0.3, seed=1)


# =============================================================================================
# Text: normalization, chunking, tokens
# =============================================================================================

def test_text_chunks_and_tokens_match_package(fx, ref):
    from pocket_tts.models.text_chunking import prepare_text_prompt, split_into_best_sentences
    m = fx.model
    texts = [TEXT, "  hello there,  ", "Pi is 3.14 or so. Next one! And? \u2018quoted\u2019 end;",
             LONG_TEXT, "Line one\nline two: more", LONG_TEXT + " " + LONG_TEXT]
    for text in texts:
        for max_tokens in (50, 12):
            theirs = []
            for chunk in split_into_best_sentences(
                    m.flow_lm.conditioner.tokenizer, text, max_tokens, False, False, True, True,
                    m.replace_characters):
                prepared, guess = prepare_text_prompt(chunk, False, False, True, True,
                                                      m.replace_characters)
                theirs.append((prepared, guess + 2,
                               m.flow_lm.conditioner.prepare(prepared)[0].tolist()))
            ours = [(p, g, ref.tokenize(p)) for p, g in ref.chunks(text, max_tokens)]
            assert ours == theirs, (text, max_tokens)
    # Negative control: the cases above do split (at sentences, then at commas).
    assert len(ref.chunks(LONG_TEXT, 12)) > len(ref.chunks(LONG_TEXT, 50)) == 2
    print("chunks of LONG_TEXT at 50 tokens:", [len(ref.tokenize(p)) for p, _ in
                                                  ref.chunks(LONG_TEXT)])


# =============================================================================================
# The prompt: K/V rows of every layer
# =============================================================================================

def _package_prompt_kv(model, tokens):
    import torch
    from pocket_tts.modules.stateful_module import init_states
    state = init_states(model.flow_lm, batch_size=1, sequence_length=len(tokens))
    with torch.no_grad():
        model._run_flow_lm_and_increment_step(model_state=state,
                                              text_tokens=torch.tensor([tokens]))
    return _cache_rows(model, state, len(tokens))


def _cache_rows(model, state, n):
    """[(k, v)] per layer: the package's cache rows 0..n-1 as [n, Hkv, Dh]."""
    out = []
    for i in range(len(model.flow_lm.transformer.layers)):
        cache = state[f"transformer.layers.{i}.self_attn"]["cache"]
        out.append((cache[0, 0, :n].double().numpy(), cache[1, 0, :n].double().numpy()))
    return out


def _kv_error(state, theirs) -> float:
    return max(max(rel(state.k[i], k), rel(state.v[i], v)) for i, (k, v) in enumerate(theirs))


def test_prompt_kv_rows_text(fx, ref):
    prepared, _ = ref.chunks(LONG_TEXT)[0]
    tokens = ref.tokenize(prepared)
    theirs = _package_prompt_kv(fx.model, tokens)
    ours = ref.prompt_kv(ref.new_state(), ref.text_rows(tokens))
    assert ours.n == len(tokens)
    rotated = ref.prompt_kv(ref.new_state(), ref.text_rows(tokens[1:] + tokens[:1]))
    check(f"prompt K/V, {len(tokens)} text rows x {len(theirs)} layers",
          _kv_error(ours, theirs), BAR_PROMPT_KV, _kv_error(rotated, theirs))


def test_voice_rows_and_prompt_kv(fx, ref, voice):
    wav, state, rows = voice
    ours = ref.encode_voice(wav, 24000)
    bos = 1 if ref.config["lm"]["insert_bos_before_voice"] else 0
    assert ours.shape == (rows.shape[0] + bos, ref.config["lm"]["d_model"])
    # Negative control: the encoder's output one frame late (a padding off by one frame).
    late = np.concatenate([ours[bos:bos + 1], ours[bos:-1]])
    check(f"voice rows ({rows.shape[0]} frames)", rel(ours[bos:], rows), BAR_VOICE_ROWS,
          rel(late, rows))
    theirs = _cache_rows(fx.model, state, ours.shape[0])
    kv = ref.prompt_kv(ref.new_state(), ours)
    no_bos = ref.prompt_kv(ref.new_state(), np.concatenate([ours[bos:], ours[-1:]]))
    check("prompt K/V of the voice", _kv_error(kv, theirs), BAR_VOICE_KV,
          _kv_error(no_bos, theirs))


# =============================================================================================
# The frame loop, teacher-forced
# =============================================================================================

def test_frames_teacher_forced(fx, ref, text_run):
    """Every frame: the conditioning from the package's previous latent, the EOS logit, and
    the flow head on the package's conditioning and noise."""
    run, _, _ = text_run
    calls = run.chunk_calls()[0]
    prepared, _ = ref.chunks(TEXT)[0]
    state = ref.prompt_kv(ref.new_state(), ref.text_rows(ref.tokenize(prepared)))
    std = run.temperature ** 0.5
    cond_err = eos_err = flow_err = 0.0
    cond_ctl = eos_ctl = flow_ctl = np.inf
    previous = None
    for g, call in enumerate(calls):
        c = ref.frame_step(state, previous)
        cond_err = max(cond_err, rel(c, run.conditioning[call]))
        eos_err = max(eos_err, abs(ref.eos_logit(c) - run.eos_logits[call]))
        latent = ref.flow_head(run.conditioning[call], run.noise[call] / std, run.temperature)
        flow_err = max(flow_err, rel(latent, run.latents[call]))
        if g > 0:  # negative controls: the previous frame's values (off by one frame)
            cond_ctl = min(cond_ctl, rel(run.conditioning[calls[g - 1]], run.conditioning[call]))
            eos_ctl = min(eos_ctl, abs(run.eos_logits[calls[g - 1]] - run.eos_logits[call]))
            wrong = ref.flow_head(run.conditioning[call], run.noise[calls[g - 1]] / std,
                                  run.temperature)
            flow_ctl = min(flow_ctl, rel(wrong, run.latents[call]))
        previous = run.latents[call]
    print(f"{len(calls)} frames")
    check("conditioning", cond_err, BAR_CONDITIONING, cond_ctl)
    check("EOS logits (absolute)", eos_err, BAR_EOS, eos_ctl)
    check("flow head", flow_err, BAR_FLOW, flow_ctl)


def test_mimi_decoder(fx, ref, text_run):
    run, _, _ = text_run
    latents = np.concatenate(run.mimi_inputs)          # the package's de-normalized latents
    theirs = np.concatenate(run.mimi_outputs)
    kept = [run.latents[i] for i in run.frame_calls()]
    assert rel(ref.denormalize(np.array(kept)), latents) < BAR_FLOW   # de-normalization
    ours = ref.mimi_decode(latents)[0]
    assert ours.shape == theirs.shape == (len(latents) * ref.config["frame_size"],)
    late = ref.mimi_decode(np.concatenate([latents[:1], latents[:-1]]))[0]
    check(f"Mimi decoder, {len(latents)} frames", rel(ours, theirs), BAR_DECODER, rel(late, theirs))


# =============================================================================================
# End to end
# =============================================================================================

def test_end_to_end_text(ref, text_run):
    run, threshold, eos_frame = text_run
    noise = run.frame_noise()
    res = ref.generate(TEXT, temperature=0.3, noise=noise, eos_threshold=threshold)
    (chunk,) = res.chunks
    fae = ref.chunks(TEXT)[0][1]
    print(f"threshold {threshold:.3f}: EOS at frame {chunk.eos_frame} (expected {eos_frame}), "
          f"{len(chunk.latents)} frames, {fae} after EOS, cap {chunk.frames_cap}; frames before "
          f"the minimum over the threshold: "
          f"{[g for g in range(6) if chunk.eos_logits[g] > threshold]}")
    assert chunk.eos_frame == eos_frame
    assert len(chunk.latents) == run.chunk_frames()[0] == eos_frame + fae
    assert res.audio.shape == run.audio.shape
    # Negative control: the noise one frame late (the frame count pinned to the same length).
    rotated = ref.generate(TEXT, temperature=0.3, noise=np.roll(noise, 1, axis=0),
                           eos_threshold=-1e9, frames_after_eos=len(noise) - 6).audio
    check("audio, text only", rel(res.audio, run.audio), BAR_AUDIO, rel(rotated, run.audio))


def test_end_to_end_voice_two_chunks(ref, voice, voice_run):
    run = voice_run
    rows = ref.encode_voice(voice[0], 24000)
    res = ref.generate(LONG_TEXT, voice=rows, temperature=0.3, noise=run.frame_noise(),
                       eos_threshold=-1e9, frames_after_eos=1)
    frames = [len(c.latents) for c in res.chunks]
    print(f"chunks: {[len(c.tokens) for c in res.chunks]} tokens, {frames} frames")
    assert len(res.chunks) == 2
    assert frames == run.chunk_frames() == [ref.config["min_frames_before_eos"] + 1] * 2
    assert res.audio.shape == run.audio.shape
    no_voice = ref.generate(LONG_TEXT, temperature=0.3, noise=run.frame_noise(),
                            eos_threshold=-1e9, frames_after_eos=1).audio
    check("audio, voice and two chunks", rel(res.audio, run.audio), BAR_AUDIO,
          rel(no_voice, run.audio))


def test_length_cap_and_temperature_zero(fx, ref):
    """EOS never fires: the package's cap ends the loop. Temperature 0: no noise, and the
    reference is deterministic."""
    from dasllama.testing.pocket import record_package_run
    text = "Hi."
    run = record_package_run(fx.model, text, eos_threshold=1e9, temperature=0.0)
    res = ref.generate(text, temperature=0.0, eos_threshold=1e9)
    (chunk,) = res.chunks
    print(f"{len(chunk.tokens)} tokens: cap {chunk.frames_cap} frames")
    assert chunk.eos_frame is None
    assert len(chunk.latents) == chunk.frames_cap == run.chunk_frames()[0]
    again = ref.generate(text, temperature=0.0, eos_threshold=1e9, seed=7).audio
    assert np.array_equal(again, res.audio)
    warm = ref.generate(text, temperature=0.3, eos_threshold=1e9, seed=7).audio
    check("audio at temperature 0, length cap", rel(res.audio, run.audio), BAR_AUDIO,
          rel(warm, run.audio))


# =============================================================================================
# The f16 and q8_0 lanes
# =============================================================================================

@pytest.mark.parametrize("lane", sorted(LANE_BARS))
def test_lane_errors(fx, lane, text_run):
    from dasllama.reference.pocket import ReferencePocket
    bar_kv, bar_cond, bar_dec, bar_audio = LANE_BARS[lane]
    run, threshold, _ = text_run
    with ReferencePocket(fx.gguf_path(lane), dtype=np.float32) as m:
        prepared, _ = m.chunks(LONG_TEXT)[0]
        tokens = m.tokenize(prepared)
        theirs = _package_prompt_kv(fx.model, tokens)
        kv = _kv_error(m.prompt_kv(m.new_state(), m.text_rows(tokens)), theirs)
        rotated = _kv_error(m.prompt_kv(m.new_state(), m.text_rows(tokens[1:] + tokens[:1])),
                            theirs)
        check(f"{lane}: prompt K/V", kv, bar_kv, rotated)

        calls = run.chunk_calls()[0]
        state = m.prompt_kv(m.new_state(), m.text_rows(m.tokenize(m.chunks(TEXT)[0][0])))
        cond, previous = 0.0, None
        for call in calls:
            cond = max(cond, rel(m.frame_step(state, previous), run.conditioning[call]))
            previous = run.latents[call]
        check(f"{lane}: conditioning, teacher-forced", cond, bar_cond)

        latents = np.concatenate(run.mimi_inputs)
        theirs = np.concatenate(run.mimi_outputs)
        late = m.mimi_decode(np.concatenate([latents[:1], latents[:-1]]))[0]
        check(f"{lane}: Mimi decoder", rel(m.mimi_decode(latents)[0], theirs), bar_dec,
              rel(late, theirs))

        res = m.generate(TEXT, temperature=0.3, noise=run.frame_noise(), eos_threshold=threshold)
        assert len(res.chunks[0].latents) == run.chunk_frames()[0]
        check(f"{lane}: audio end to end", rel(res.audio, run.audio), bar_audio)


# =============================================================================================
# The small configs: low-rank text table, z_proj, grouped-query attention with attn_dim,
# pointwise and drifting flow heads, a decoder SEANet and transformer of their own
# =============================================================================================

@pytest.mark.parametrize("language", ["english_2m_2026-10", "english_7m_2026-10"])
def test_small_config_end_to_end(language):
    _require("torch")
    _require("pocket_tts")
    from dasllama.reference.pocket import ReferencePocket
    from dasllama.testing.pocket import (package_voice, record_package_run, shared_fixture,
                                         voice_wav)
    fx = shared_fixture(("f32",), language)
    wav = voice_wav()
    state, rows = package_voice(fx.model, wav)
    text = "Hello world, this is a small test."
    run = record_package_run(fx.model, text, state, eos_threshold=-1e9, frames_after_eos=1,
                             temperature=0.3, seed=3)
    with ReferencePocket(fx.gguf_path("f32")) as m:
        c = m.config
        print(f"{language}: flow {c['flow']['type']}, rank {c['text']['rank']}, z_dim "
              f"{c['lm']['z_dim']}, heads {c['lm']['num_heads']}/{c['lm']['num_kv_heads']} x "
              f"{c['lm']['head_dim']}, decoder d_model {c['mimi']['dec_tf']['d_model']} "
              f"context {c['mimi']['dec_tf']['context']}")
        voice = m.encode_voice(wav, 24000)
        check("voice rows", rel(voice[1:], rows), BAR_VOICE_ROWS)
        res = m.generate(text, voice=voice, temperature=0.3, noise=run.frame_noise(),
                         eos_threshold=-1e9, frames_after_eos=1)
        assert [len(ch.latents) for ch in res.chunks] == run.chunk_frames()
        cond = max(rel(res.chunks[0].conditioning[g], run.conditioning[call])
                   for g, call in enumerate(run.frame_calls()))
        check("conditioning, free running", cond, BAR_CONDITIONING)
        rotated = m.generate(text, voice=voice, temperature=0.3,
                             noise=np.roll(run.frame_noise(), 1, axis=0), eos_threshold=-1e9,
                             frames_after_eos=1).audio
        check("audio", rel(res.audio, run.audio), BAR_AUDIO, rel(rotated, run.audio))


def test_voice_from_wav_file(fx, ref, tmp_path):
    """A 16 kHz stereo 16-bit file: read, mixed to mono, resampled to 24 kHz by both."""
    import wave
    from pathlib import Path

    import torch
    from scipy.signal import resample_poly

    from dasllama.testing.pocket import voice_wav
    mono = resample_poly(voice_wav(), 2, 3)                         # 24 kHz -> 16 kHz
    stereo = np.stack([mono, 0.5 * mono], axis=1)
    path = tmp_path / "voice16k.wav"
    with wave.open(str(path), "wb") as f:
        f.setnchannels(2)
        f.setsampwidth(2)
        f.setframerate(16000)
        f.writeframes(np.clip(stereo * 32767, -32768, 32767).astype("<i2").tobytes())
    with torch.no_grad():
        state = fx.model.get_state_for_audio_prompt(Path(path))
    rows = ref.encode_voice(path)
    theirs = _cache_rows(fx.model, state, rows.shape[0])
    mixed_wrong = ref.encode_voice(stereo[:, 0], 16000)                  # left channel only
    check("prompt K/V of a 16 kHz stereo wav", _kv_error(ref.prompt_kv(ref.new_state(), rows),
                                                         theirs), BAR_VOICE_KV,
          _kv_error(ref.prompt_kv(ref.new_state(), mixed_wrong), theirs))
