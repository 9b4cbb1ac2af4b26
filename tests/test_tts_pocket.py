"""The C++ Pocket TTS chain (csrc/tts/pocket, dasllama.tts) against the NumPy reference.

Both read the same random-weight GGUF (dasllama.testing.pocket: the pocket-tts package's
English model, seeded, converted in the f32 lane). Stages are compared one by one with the
reference's inputs (teacher forcing), then the whole frame loop and the API end to end with
the same noise rows. rel = ||ours - ref|| / ||ref||; frame counts and EOS frames are exact.

Bars (f32 lane; the reference computes in float64, the C++ chain in float32, so the errors
are float32 rounding; measured on an AMD EPYC with 2 threads): each bar is a few times the
largest error measured at that stage, printed by every test; each negative control is a
plausible bug whose error must exceed its bar at least 10x.
"""

from __future__ import annotations

import argparse

import numpy as np
import pytest
from requires import require as _require
from parity import check, rel_l2 as rel


# Bars, f32 lane (measured maxima in brackets).
BAR_KV = 1e-6             # prompt K and V rows, every layer              [1.5e-7]
BAR_COND = 1.5e-6         # per-frame conditioning                        [2.5e-7]
BAR_EOS = 2e-7            # EOS logits (absolute)                         [3.5e-8]
BAR_FLOW = 1.5e-6         # flow head output, teacher forced              [2.3e-7]
BAR_LATENTS = 8e-7        # whole frame loop, free running                [1.5e-7]
BAR_MIMI = 3e-7           # Mimi decoder audio                            [7.1e-8]
BAR_AUDIO = 3e-7          # end to end through the API                    [7.6e-8]
BAR_VOICE = 5e-7          # voice rows: Mimi encoder + speaker projection [8.1e-8]
BAR_Q8_FAST = 2e-4        # q8_0 lane with 8-bit activations, audio       [5.1e-5]
TEXT = "Hello world."
LONG_TEXT = ("The quick brown fox jumps over the lazy dog near the river bank today. "
             "Then it runs far away, into the dark green forest.")


# =============================================================================================
# Fixtures
# =============================================================================================

@pytest.fixture(scope="module")
def fx():
    _require("torch")
    _require("pocket_tts")
    _require("tokenizers")
    from dasllama.testing.pocket import shared_fixture
    return shared_fixture(("f32",))


@pytest.fixture(scope="module")
def ref(fx):
    from dasllama.reference.pocket import ReferencePocket
    with ReferencePocket(fx.gguf_path("f32")) as m:
        yield m


@pytest.fixture(scope="module")
def core(fx):
    from dasllama import _core
    m = _core.PocketModel(str(fx.gguf_path("f32")), 2)
    m.set_precision("f32")
    yield m
    m.close()


@pytest.fixture(scope="module")
def tts(fx):
    from dasllama.tts import TTS
    with TTS(fx.gguf_path("f32"), n_threads=2) as t:
        yield t


def _tokens(ref, text=TEXT):
    return ref.tokenize(ref.chunks(text)[0][0])


def _kv_error(state, ref_state, layers) -> float:
    """rel over every layer's K and V rows together."""
    ours = np.concatenate([np.concatenate([state.kv(i)[0].ravel(), state.kv(i)[1].ravel()])
                           for i in range(layers)])
    theirs = np.concatenate([np.concatenate([ref_state.k[i].ravel(), ref_state.v[i].ravel()])
                             for i in range(layers)])
    return rel(ours, theirs)


# =============================================================================================
# 1. Loader and prompt stage
# =============================================================================================

def test_config_matches_reference(core, ref):
    c, r = core.config, ref.config
    for key in ("sample_rate", "latent_dim", "chunk_tokens", "min_frames_before_eos",
                "frames_after_eos", "voice_cloning"):
        assert c[key] == r[key], key
    assert c["frame_size"] == r["frame_size"]
    assert c["d_model"] == r["lm"]["d_model"] and c["num_layers"] == r["lm"]["num_layers"]
    for n in (1, 3, 17, 50):
        assert core.frames_cap(n) == ref.frames_cap(n)


def _write_partial(path, fx, tensors: dict):
    """A GGUF with the fixture's metadata and only the given tensors."""
    from dasllama.convert import GGUFWriter
    from dasllama.convert.pocket import _metadata, hyperparameters, load_config

    hp = hyperparameters(load_config(None))
    w = GGUFWriter()
    _metadata(w, hp, "f32", False, "tokenizers", fx.tokenizer.read_bytes(), "test")
    for name, values in tensors.items():
        w.add_tensor(name, values.shape, "F32", lambda v=values: v)
    return w.write(path)


def test_loader_names_missing_and_misshapen_tensors(fx, tmp_path):
    from dasllama import _core
    from dasllama.errors import GGUFError, ShapeError

    path = _write_partial(tmp_path / "missing.gguf", fx, {})
    with pytest.raises(GGUFError, match="tensor 'text.embd.weight' is missing"):
        _core.PocketModel(str(path), 1)
    bad = np.zeros((4001, 512), np.float32)  # the table is (n_bins + 1, d_model = 1024)
    path = _write_partial(tmp_path / "misshapen.gguf", fx, {"text.embd.weight": bad})
    with pytest.raises(ShapeError, match=r"'text.embd.weight' has shape \(4001, 512\), "
                                         r"expected \(4001, 1024\)"):
        _core.PocketModel(str(path), 1)


def test_prompt_kv_rows(core, ref):
    ids = _tokens(ref, LONG_TEXT)
    rows = ref.text_rows(ids)
    assert np.array_equal(core.text_rows(ids), rows.astype(np.float32))
    layers = ref.config["lm"]["num_layers"]
    state = core.new_state(len(ids))
    core.prompt(state, rows.astype(np.float32))
    assert state.n_past == len(ids)
    want = ref.prompt_kv(ref.new_state(), rows)
    rotated = core.new_state(len(ids))
    core.prompt(rotated, ref.text_rows(ids[1:] + ids[:1]).astype(np.float32))
    check(f"prompt K/V ({len(ids)} tokens, {layers} layers)", _kv_error(state, want, layers),
          BAR_KV, _kv_error(rotated, want, layers))


def test_prompt_last_layer_cut_changes_nothing(core, ref):
    """The prompt's last layer computes only K and V: the states and the first frame equal
    those of the full computation exactly; a different prompt (rotated tokens) does not."""
    ids = _tokens(ref, LONG_TEXT)
    rows = ref.text_rows(ids).astype(np.float32)
    layers = ref.config["lm"]["num_layers"]
    cut, full = core.new_state(len(ids) + 1), core.new_state(len(ids) + 1)
    core.prompt(cut, rows)
    core.prompt(full, rows, full_last_layer=True)
    for i in range(layers):
        assert np.array_equal(cut.kv(i)[0], full.kv(i)[0]) and \
            np.array_equal(cut.kv(i)[1], full.kv(i)[1]), f"layer {i}"
    c_cut, c_full = core.frame_step(cut, None), core.frame_step(full, None)
    assert np.array_equal(c_cut, c_full)
    other = core.new_state(len(ids) + 1)
    core.prompt(other, np.roll(rows, 1, axis=0))
    assert rel(core.frame_step(other, None), c_full) > 1e-3


def test_tokens_out_of_range(core):
    from dasllama.errors import ShapeError
    with pytest.raises(ShapeError, match="token id 4001 at index 1"):
        core.text_rows([5, 4001])


# =============================================================================================
# 2. Frame loop
# =============================================================================================

def test_frames_teacher_forced(core, ref):
    """Each frame from the reference's previous latent: conditioning, EOS logit, flow head."""
    ids = _tokens(ref)
    rows = ref.text_rows(ids)
    state, rstate = core.new_state(64), ref.new_state()
    core.prompt(state, rows.astype(np.float32))
    ref.prompt_kv(rstate, rows)
    rng = np.random.default_rng(3)
    latent = None
    errs = {"cond": [], "eos": [], "flow": []}
    controls = []
    for g in range(8):
        c = core.frame_step(state, None if latent is None else latent.astype(np.float32))
        rc = ref.frame_step(rstate, latent)
        eps = rng.standard_normal(ref.config["latent_dim"])
        x = core.flow_head(rc.astype(np.float32), eps.astype(np.float32), 0.3)
        rx = ref.flow_head(rc, eps, 0.3)
        errs["cond"].append(rel(c, rc))
        errs["eos"].append(abs(core.eos_logit(rc.astype(np.float32)) - ref.eos_logit(rc)))
        errs["flow"].append(rel(x, rx))
        controls.append(rel(core.flow_head(rc.astype(np.float32), eps.astype(np.float32), 0.35),
                            rx))  # a wrong noise scale
        latent = rx
    check("conditioning, 8 frames", max(errs["cond"]), BAR_COND)
    check("EOS logits (absolute)", max(errs["eos"]), BAR_EOS)
    check("flow head", max(errs["flow"]), BAR_FLOW, min(controls))


def test_flow_head_temperature_zero(core, ref):
    rng = np.random.default_rng(4)
    c = rng.standard_normal(core.config["cond_dim"])
    eps = rng.standard_normal(core.config["latent_dim"]).astype(np.float32)
    x0 = core.flow_head(c.astype(np.float32), eps, 0.0)
    assert np.array_equal(x0, core.flow_head(c.astype(np.float32), None, 0.0))
    assert np.array_equal(x0, core.flow_head(c.astype(np.float32), None, 0.3))
    check("flow head at temperature 0", rel(x0, ref.flow_head(c, None, 0.0)), BAR_FLOW,
          rel(core.flow_head(c.astype(np.float32), eps, 0.3), ref.flow_head(c, None, 0.0)))


def _run_chunk(core, ids, noise, temperature=0.3, threshold=-4.0, after=2, step=5):
    core.set_noise(noise.astype(np.float32))
    core.begin_chunk(ids, "", temperature, threshold, after)
    audio = []
    while True:
        a, n = core.step(step)
        if n == 0:
            break
        audio.append(a)
    return core.record(), np.concatenate(audio) if audio else np.zeros(0, np.float32)


def test_frame_loop_free_running(core, ref):
    """The whole loop from the prompt on, with the reference's noise rows: latents, EOS
    frame and frame count. Control: the noise read one row late (an off-by-one)."""
    prepared, _ = ref.chunks(TEXT)[0]
    ids = ref.tokenize(prepared)
    noise = np.random.default_rng(7).standard_normal((64, ref.config["latent_dim"]))
    # every frame an EOS candidate: the loop ends min_frames_before_eos + 3 frames in
    want = ref.generate_chunk(prepared, 3, None, 0.3, -1e9, noise)
    rec, _ = _run_chunk(core, ids, noise, threshold=-1e9, after=3)
    assert rec["eos_frame"] == want.eos_frame == ref.config["min_frames_before_eos"]
    assert len(rec["latents"]) == len(want.latents) == want.eos_frame + 3
    late, _ = _run_chunk(core, ids, noise[1:], threshold=-1e9, after=3)
    check(f"latents, {len(want.latents)} frames free running", rel(rec["latents"], want.latents),
          BAR_LATENTS, rel(late["latents"], want.latents))
    check("conditioning, free running", rel(rec["conditioning"], want.conditioning), BAR_COND)
    # a threshold between recorded logits: EOS on a later frame, as the reference finds it
    logits = want.eos_logits
    if len(logits) > 7:
        thr = float(np.max(logits[6:8]) - 1e-3)
        want2 = ref.generate_chunk(prepared, 0, None, 0.3, thr, noise)
        rec2, _ = _run_chunk(core, ids, noise, threshold=thr, after=0)
        assert rec2["eos_frame"] == want2.eos_frame
        assert len(rec2["latents"]) == len(want2.latents)


def test_length_cap_and_temperature_zero(core, ref):
    prepared, _ = ref.chunks(TEXT)[0]
    ids = ref.tokenize(prepared)
    noise = np.zeros((0, ref.config["latent_dim"]))
    rec, audio = _run_chunk(core, ids, noise, temperature=0.0, threshold=1e9, after=2, step=16)
    cap = ref.frames_cap(len(ids))
    assert rec["eos_frame"] is None and len(rec["latents"]) == rec["frames_cap"] == cap
    assert len(audio) == cap * ref.config["frame_size"]
    rec0, _ = _run_chunk(core, ids, noise, temperature=0.0, threshold=-1e9, after=1)
    assert len(rec0["latents"]) == ref.config["min_frames_before_eos"] + 1
    again, _ = _run_chunk(core, ids, noise, temperature=0.0, threshold=-1e9, after=1)
    assert np.array_equal(rec0["latents"], again["latents"])


def test_denormalize(core, ref):
    lat = np.random.default_rng(5).standard_normal((4, ref.config["latent_dim"]))
    check("de-normalized latents", rel(core.denormalize(lat.astype(np.float32)),
                                       ref.denormalize(lat)), 1e-7,
          rel(lat, ref.denormalize(lat)))  # [3.7e-8]


# =============================================================================================
# 3. Mimi decoder, streaming
# =============================================================================================

def test_mimi_streaming_equals_one_pass(core, ref):
    rng = np.random.default_rng(6)
    lat = ref.denormalize(rng.standard_normal((9, ref.config["latent_dim"])))
    want = ref.mimi_decode(lat)[0]
    x = lat.astype(np.float32)
    whole = core.mimi_decode(x)
    assert whole.shape == want.shape
    pieces = core.mimi_decode(x, [1, 2, 1, 4, 1])
    # a decoder that forgets its state between pieces
    fresh = np.concatenate([core.mimi_decode(x[a:b]) for a, b in ((0, 1), (1, 3), (3, 4),
                                                                  (4, 8), (8, 9))])
    check("Mimi decoder, one pass", rel(whole, want), BAR_MIMI)
    check("Mimi decoder, streamed in 5 pieces", rel(pieces, want), BAR_MIMI, rel(fresh, want))


# =============================================================================================
# 4. The API
# =============================================================================================

def test_speak_matches_reference(tts, ref):
    """Two chunks end to end through TTS.speak with the reference's noise."""
    plan = tts.plan(LONG_TEXT)
    assert [(p, ids, a) for p, ids, a in plan] == \
        [(p, ref.tokenize(p), a) for p, a in ref.chunks(LONG_TEXT)]
    assert len(plan) == 2
    noise = np.random.default_rng(8).standard_normal((200, ref.config["latent_dim"]))
    audio, sr = tts.speak(LONG_TEXT, temperature=0.3, noise=noise, eos_threshold=-1e9)
    want = ref.generate(LONG_TEXT, temperature=0.3, noise=noise, eos_threshold=-1e9)
    assert sr == ref.config["sample_rate"] and audio.dtype == np.float32
    assert tts.stats["chunk_frames"] == [len(c.latents) for c in want.chunks]
    late, _ = tts.speak(LONG_TEXT, temperature=0.3, noise=noise[1:], eos_threshold=-1e9)
    check("audio through TTS.speak, two chunks", rel(audio, want.audio), BAR_AUDIO,
          rel(late, want.audio))


def test_stream_and_seed(tts):
    pieces = list(tts.stream(TEXT, seed=11))
    stats = dict(tts.stats)
    audio, _ = tts.speak(TEXT, seed=11)
    assert np.array_equal(np.concatenate(pieces), audio)
    frame = tts.config["frame_size"]
    assert len(pieces[0]) == frame and len(pieces) > 2
    assert stats["seed"] == 11 and stats["frames"] * frame == len(audio)
    assert stats["audio_seconds"] == pytest.approx(len(audio) / tts.sample_rate)
    assert 0 < stats["first_audio_ms"] <= 1000 * stats["wall_seconds"]
    other, _ = tts.speak(TEXT, seed=12)
    n = min(len(other), len(audio))
    assert not np.array_equal(other[:n], audio[:n])
    cold_a, _ = tts.speak(TEXT, temperature=0.0, seed=1)
    cold_b, _ = tts.speak(TEXT, temperature=0.0, seed=2)
    assert np.array_equal(cold_a, cold_b)


def test_save_wav(tts, tmp_path):
    from dasllama.reference.pocket import read_wav
    audio = np.array([0.0, 0.5, -0.5, 1.5, -1.5, 0.25], np.float32)
    path = tts.save_wav(tmp_path / "a.wav", audio)
    back, sr = read_wav(path)
    assert sr == tts.sample_rate
    assert np.allclose(back, np.clip(audio, -1, 1) * 32767 / 32768, atol=1 / 32768)


def test_bad_input_is_a_typed_error(tts):
    from dasllama.tts import TTSInputError
    with pytest.raises(TTSInputError, match="empty"):
        tts.speak("  \n ")
    with pytest.raises(TTSInputError, match=r"cannot encode: '\\u00e9'|cannot encode: 'é'"):
        tts.speak("caf\u00e9 ok")
    with pytest.raises(TTSInputError, match="unknown voice 'nobody'; known voices"):
        tts.speak(TEXT, voice="nobody")
    with pytest.raises(TTSInputError, match="temperature"):
        tts.speak(TEXT, temperature=-1)
    assert isinstance(TTSInputError("x"), ValueError)


def test_cli_speak(fx, tmp_path, capsys):
    from dasllama.reference.pocket import read_wav
    from dasllama.tts import add_speak_parser
    parser = argparse.ArgumentParser()
    add_speak_parser(parser.add_subparsers())
    out = tmp_path / "out.wav"
    args = parser.parse_args(["speak", "-m", str(fx.gguf_path("f32")), TEXT, "-o", str(out),
                              "--seed", "3", "--threads", "2"])
    assert args.run(args) == 0
    audio, sr = read_wav(out)
    assert sr == 24000 and len(audio) > 0
    assert "real-time factor" in capsys.readouterr().err


# =============================================================================================
# 5. Voices
# =============================================================================================

@pytest.fixture(scope="module")
def voice(tts, ref):
    """(wav, our rows, the reference's rows) of a voice registered as 'tone'."""
    from dasllama.testing.pocket import voice_wav
    wav = voice_wav()
    return wav, tts.register_voice("tone", wav), ref.encode_voice(wav, 24000)


def test_voice_rows_and_prompt(core, ref, voice):
    wav, rows, want = voice
    assert rows.shape == want.shape
    check(f"voice rows ({len(rows)})", rel(rows, want), BAR_VOICE, rel(np.roll(rows, 1, 0), want))
    ids = _tokens(ref)
    text = ref.text_rows(ids)
    state = core.new_state(len(rows) + len(ids))
    core.prompt(state, want.astype(np.float32))
    core.prompt(state, text.astype(np.float32))
    rstate = ref.prompt_kv(ref.prompt_kv(ref.new_state(), want), text)
    plain = core.new_state(len(rows) + len(ids))
    core.prompt(plain, np.zeros_like(want, np.float32))
    core.prompt(plain, text.astype(np.float32))
    layers = ref.config["lm"]["num_layers"]
    check("prompt K/V after the voice", _kv_error(state, rstate, layers), BAR_KV,
          _kv_error(plain, rstate, layers))


def test_speak_with_voice(tts, ref, voice, tmp_path):
    """Two chunks with the voice against the reference; the voice's state is reused and
    forgotten back to its own rows between calls; voice files and .wav paths."""
    wav, rows, want_rows = voice
    noise = np.random.default_rng(9).standard_normal((200, ref.config["latent_dim"]))
    audio, _ = tts.speak(LONG_TEXT, voice="tone", noise=noise, eos_threshold=-1e9)
    want = ref.generate(LONG_TEXT, voice=want_rows, temperature=0.3, noise=noise,
                        eos_threshold=-1e9)
    plain, _ = tts.speak(LONG_TEXT, noise=noise, eos_threshold=-1e9)
    check("audio with a voice, two chunks", rel(audio, want.audio), BAR_AUDIO,
          rel(plain, want.audio))
    again, _ = tts.speak(LONG_TEXT, voice="tone", noise=noise, eos_threshold=-1e9)
    assert np.array_equal(again, audio)
    assert tts.model.voice_rows("tone") == len(rows)

    path = tts.save_voice("tone", tmp_path / "tone.voice")
    tts.load_voice("tone2", path)
    assert np.array_equal(tts.speak(TEXT, voice="tone2", seed=1)[0],
                          tts.speak(TEXT, voice="tone", seed=1)[0])
    wav_path = tts.save_wav(tmp_path / "tone.wav", wav)
    by_path, _ = tts.speak(TEXT, voice=str(wav_path), seed=1)
    assert str(wav_path) in tts.voices and len(by_path) > 0
    from dasllama.tts import TTSInputError
    (tmp_path / "junk.voice").write_bytes(b"not a voice")
    with pytest.raises(TTSInputError, match="not a dasllama voice file"):
        tts.load_voice("junk", tmp_path / "junk.voice")


def test_voice_files_are_checked_against_the_model(tts, voice, tmp_path):
    """A voice file names the model that encoded it (a fingerprint of the backbone's float32
    vectors, the same in every lane) and its geometry; a file that does not fit is refused,
    naming the field, and the voice registered under that name stays as it was."""
    from dasllama.tts import TTSInputError
    wav, rows, _ = voice
    tts.add_voice_rows("keep", rows)
    want = tts.speak(TEXT, voice="keep", seed=2)[0]
    good = tts.save_voice("keep", tmp_path / "keep.voice")
    with np.load(good) as z:
        fields = {k: z[k] for k in z.files}
    assert str(fields["model"]) == tts.model_fingerprint() and int(fields["version"]) == 2

    def variant(name, **changes):
        path = tmp_path / f"{name}.voice"
        with open(path, "wb") as f:
            np.savez(f, **{**fields, **{k: np.asarray(v) for k, v in changes.items()}})
        return path

    bad_rows = np.array(rows, np.float32)
    bad_rows[1, 3] = np.nan
    cases = {
        "another model": variant("model", model="0" * 64),
        "sample_rate 16000": variant("rate", sample_rate=16000),
        "frame_size 1000": variant("frame", frame_size=1000),
        "latent_dim 16": variant("latent", latent_dim=16),
        "d_model 512": variant("width", d_model=512),
        "not finite": variant("nan", rows=bad_rows),
        "version 1": variant("old", version=1),
        "voice rows of shape": variant("shape", rows=np.asarray(rows)[:, :-1]),
    }
    for message, path in cases.items():
        with pytest.raises(TTSInputError, match=message) as e:
            tts.load_voice("keep", path)
        assert str(path) in str(e.value)
    assert np.array_equal(tts.speak(TEXT, voice="keep", seed=2)[0], want)
    tts.load_voice("again", good)
    assert np.array_equal(tts.speak(TEXT, voice="again", seed=2)[0], want)


# =============================================================================================
# The q8_0 lane
# =============================================================================================

def test_q8_0_lane(fx):
    """The backbone's Q8_0 matrices: with float32 activations the chain equals the reference
    on the same file (both dequantize the weights exactly); with 8-bit activations ("fast")
    the activation rounding adds its own error (bar from the measured one)."""
    from dasllama.reference.pocket import ReferencePocket
    from dasllama.tts import TTS
    path = fx.gguf_path("q8_0")
    noise = np.random.default_rng(10).standard_normal((64, 32))
    with ReferencePocket(path) as r:
        want = r.generate(TEXT, temperature=0.3, noise=noise, eos_threshold=-1e9).audio
    with TTS(path, n_threads=2, precision="f32") as t:
        exact, _ = t.speak(TEXT, noise=noise, eos_threshold=-1e9)
        late, _ = t.speak(TEXT, noise=noise[1:], eos_threshold=-1e9)
        t.model.set_precision("fast")
        fast, _ = t.speak(TEXT, noise=noise, eos_threshold=-1e9)
    check("q8_0 lane, float32 activations", rel(exact, want), BAR_AUDIO, rel(late, want))
    check("q8_0 lane, 8-bit activations", rel(fast, want), BAR_Q8_FAST, rel(late, want))


def test_noise_generator_follows_its_specification():
    """The seeded noise as csrc/tts/pocket/noise.h specifies it, written again here from that
    text: splitmix64 seeding, xoshiro256**, 53-bit uniforms, Box-Muller pairs (cos first)."""
    import math

    from dasllama import _core
    M = (1 << 64) - 1

    def rotl(x, k):
        return ((x << k) | (x >> (64 - k))) & M

    def draws(seed, count):
        s, x = [], seed
        for _ in range(4):
            x = (x + 0x9E3779B97F4A7C15) & M
            z = x
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
            s.append(z ^ (z >> 31))

        def u64():
            result = (rotl((s[1] * 5) & M, 7) * 9) & M
            t = (s[1] << 17) & M
            s[2] ^= s[0]
            s[3] ^= s[1]
            s[1] ^= s[2]
            s[0] ^= s[3]
            s[2] ^= t
            s[3] = rotl(s[3], 45)
            return result

        out = []
        while len(out) < count:
            u1, u2 = (u64() >> 11) / 2.0 ** 53, (u64() >> 11) / 2.0 ** 53
            r = math.sqrt(-2.0 * math.log(1.0 - u1))
            out += [r * math.cos(2 * math.pi * u2), r * math.sin(2 * math.pi * u2)]
        return np.array(out[:count], np.float32)

    for seed in (0, 1, 2 ** 63 + 5):
        got = _core.pocket_noise(seed, 3, 5)
        want = draws(seed, 15).reshape(3, 5)
        assert np.allclose(got, want, rtol=1e-6, atol=1e-7), seed
    assert not np.allclose(_core.pocket_noise(0, 1, 8), _core.pocket_noise(1, 1, 8))


def test_stats_stages(tts):
    """stats["stages"]: the core's per-stage clocks over the call, and the frames and prompt rows
    they ran; first_audio_stages: the same up to the first piece."""
    tts.speak("Hello there.", seed=0, max_frames=3, eos=False)
    s = tts.stats
    assert s["stages"]["frames"] == 3 and s["first_audio_stages"]["frames"] == 1
    assert s["stages"]["prompt_rows"] > 0
    assert all(s["stages"][k] >= 0 for k in ("prompt_ms", "backbone_ms", "flow_ms", "mimi_ms"))
    assert s["stages"]["prompt_ms"] > 0 and s["stages"]["mimi_ms"] > 0
