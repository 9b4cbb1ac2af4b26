"""Pocket TTS on a GPU (csrc/tts/pocket/gpu_*): the seats against the CPU chain and the NumPy
reference, on the random-weight English model (dasllama.testing.pocket).

The prompt seat runs a chunk's text rows (or a voice's rows) through the backbone and reads
every layer's K/V rows back into the host state, leaving them resident for the frames seat;
the frames seat runs a batch of frames per command buffer (backbone step + flow head); the
codec seat decodes each step's frames with Mimi's decoder, its streaming state on the device.
The fault seam: DASLLAMA_GPU_FAIL_SUBMIT=N (the process's nth encoder submit) or
_core.gpu_inject_submit_fault(n) (the nth from the call: armed before begin_chunk, the nth of a
request) fails that submit with DeviceError('injected fault'); the seat declines with
gpu_error and the CPU chain serves the call.
The device is lavapipe by name unless
$DASLLAMA_TEST_VULKAN picks another (tests/gpu_helpers.py); CI=true makes a missing device a
failure. $DASLLAMA_TEST_POCKET_MODELS names a folder of converted models (pocket-f32.gguf, ...)
to use instead of building the random one (which needs torch and the package).

Bars (f32 lane, lavapipe): the GPU sums in other orders than the CPU (matrix products split
over subgroups and workgroups, float32 LayerNorm statistics where the CPU uses double), so
its errors are float32 rounding carried through the frame loop; each bar is a few times the
measured maximum (in brackets), printed by each test; frame counts and EOS frames are exact.
Each negative control is a plausible bug whose error exceeds its bar at least tenfold.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from gpu_helpers import SPEC, in_ci, open_gpu, rel_l2
from requires import require as _require
from parity import check

# Bars (measured on lavapipe, subgroups of 8, in brackets).
BAR_LATENTS = 1e-6      # frame loop latents, GPU against the CPU chain     [2.2e-7]
BAR_COND = 1.5e-6       # per-frame conditioning                            [3.2e-7]
BAR_AUDIO = 5e-7        # audio (GPU frames, GPU codec)                     [1.6e-7]
BAR_CODEC = 5e-7        # codec seat audio against the CPU decoder, same latents  [1.6e-7]
BAR_REF = 1e-6          # GPU latents against the NumPy reference           [1.8e-7]
BAR_LANE = 1e-6         # f16 / q8_0 lanes, GPU against the CPU chain       [2.0e-7]
# The served lane's Mimi convolutions as float16 matrices (cooperative-matrix products, float32
# sums) against float32 ones, on one device: float16 rounding of weights and inputs carried
# through the decoder [3.5e-4 on an H200; the restarted-decoder control 3.2e-2].
BAR_CODEC_F16 = 1e-3
# Prompt K/V rows: 9 voice rows take the tiled matrix stamps, whose float32 sums here land
# about 5x further from a float64 reference than the CPU's (1.3e-6 against 2.5e-7).
BAR_PROMPT_KV = 4e-6    # prompt seat K/V rows against the CPU prompt stage [1.2e-6]
TEXT = "Hello world."
OTHER = "This is a short test."


class _ModelFolder:
    """Models converted elsewhere (pocket-<lane>.gguf in a folder), for a GPU machine without
    torch and the package: every test here compares the GPU with the CPU chain or the NumPy
    reference on the same file, so any weights serve."""

    def __init__(self, folder: str):
        self.folder = Path(folder)

    def gguf_path(self, lane: str) -> Path:
        path = self.folder / f"pocket-{lane}.gguf"
        if not path.is_file():
            pytest.skip(f"$DASLLAMA_TEST_POCKET_MODELS holds no {path.name}")
        return path


@pytest.fixture(scope="module")
def fx():
    if os.environ.get("DASLLAMA_TEST_POCKET_MODELS"):
        return _ModelFolder(os.environ["DASLLAMA_TEST_POCKET_MODELS"])
    for m in ("torch", "pocket_tts", "tokenizers"):
        _require(m)
    from dasllama.testing.pocket import shared_fixture
    return shared_fixture(("f32",))


def _open(path, device):
    from dasllama import _core
    from dasllama.errors import DeviceError
    try:
        m = _core.PocketModel(str(path), 2, device)
    except DeviceError as e:
        if in_ci():
            pytest.fail(f"no Vulkan device matches {device!r}: {e}")
        pytest.skip(f"no Vulkan device matches {device!r}: {e}")
    m.set_precision("f32")
    return m


@pytest.fixture(scope="module")
def cpu(fx):
    from dasllama import _core
    m = _core.PocketModel(str(fx.gguf_path("f32")), 2)
    m.set_precision("f32")
    yield m
    m.close()


@pytest.fixture(scope="module")
def gpu(fx):
    m = _open(fx.gguf_path("f32"), SPEC)
    yield m
    m.close()


@pytest.fixture(scope="module")
def ids(fx):
    from dasllama.tts import TTS
    with TTS(fx.gguf_path("f32"), n_threads=1) as t:
        return {text: t.plan(text)[0][1] for text in (TEXT, OTHER)}


def _seats(model):
    return model.seat_stats()


SEED = 5


def _run(model, ids, voice_rows):
    """The scenario both chains run (lavapipe is slow: ~3 s a frame for this model, so every
    GPU frame counts). Chunk A, seeded noise, every frame an EOS candidate and no frame after
    EOS (so the chunk keeps 6 frames and computes a 7th it drops): 3 frames, 1 frame with the
    frames seat off (the CPU serves it), then 3 more (the last one dropped). Chunk B, another
    text with a voice (its prompt on the CPU: the prompt seat off), on the same noise stream: 2
    frames. Returns (record A, audio A, record B, seat counters after
    each step)."""
    on_gpu = bool(model.seat_stats())
    model.seed_noise(SEED)
    model.add_voice("v", voice_rows)
    counters = []
    audio = []
    model.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
    for budget, on in ((3, True), (1, False), (3, True)):
        if on_gpu:
            model.set_seat_enabled("frames", on)
        a, n = model.step(budget)
        audio.append(a)
        counters.append(_seats(model))
    if on_gpu:
        model.set_seat_enabled("frames", True)
    assert model.step(3)[1] == 0 and model.chunk_done
    rec_a = model.record()
    if on_gpu:
        model.set_seat_enabled("prompt", False)  # chunk B's prompt on the CPU: a stale record
    model.begin_chunk(ids[OTHER], "v", 0.3, -1e9, 0)
    if on_gpu:
        model.set_seat_enabled("prompt", True)
    model.step(2)
    counters.append(_seats(model))
    rec_b = model.record()
    model.remove_voice("v")
    return rec_a, np.concatenate(audio), rec_b, counters


@pytest.fixture(scope="module")
def runs(cpu, gpu, ids):
    # 9 rows: past the matrix-vector path, which lavapipe runs slowest on several rows.
    voice = (0.1 * np.random.default_rng(12).standard_normal((9, 1024))).astype(np.float32)
    before = _seats(gpu)
    return _run(cpu, ids, voice), _run(gpu, ids, voice), before


def test_frames_seat_matches_cpu_chain(runs):
    """Latents, conditioning, EOS logits, the EOS frame, frame counts and audio against the
    CPU chain; a second chunk on the same seeded stream (the generator left alike although the
    GPU drew noise for a frame it dropped). Control: the latents one frame late."""
    (ca, caudio, cb, _), (ga, gaudio, gb, _), _ = runs
    assert ga["eos_frame"] == ca["eos_frame"] == 6
    assert len(ga["latents"]) == len(ca["latents"]) == 6
    assert len(gaudio) == len(caudio) and len(gb["latents"]) == len(cb["latents"]) == 2
    check("latents, chunk A", rel_l2(ga["latents"], ca["latents"]), BAR_LATENTS,
          rel_l2(ga["latents"][1:], ca["latents"][:-1]))
    check("conditioning, chunk A", rel_l2(ga["conditioning"], ca["conditioning"]), BAR_COND)
    check("audio, chunk A", rel_l2(gaudio, caudio), BAR_AUDIO)
    check("latents, chunk B (voice, same noise stream)", rel_l2(gb["latents"], cb["latents"]),
          BAR_LATENTS, rel_l2(gb["latents"][1:], cb["latents"][:1]))
    eos = np.abs(np.asarray(ga["eos_logits"]) - ca["eos_logits"]).max()
    print(f"EOS logits: max abs difference {eos:.2e}")
    assert eos < 1e-4


def test_frames_against_reference(fx, runs, ids):
    """The GPU chain's chunk A against the NumPy reference (float64) fed the seeded noise."""
    from dasllama import _core
    from dasllama.reference.pocket import ReferencePocket
    _, (ga, _, _, _), _ = runs
    noise = _core.pocket_noise(SEED, 6, 32).astype(np.float64)
    with ReferencePocket(fx.gguf_path("f32")) as ref:
        prepared, _ = ref.chunks(TEXT)[0]
        assert ref.tokenize(prepared) == ids[TEXT]
        want = ref.generate_chunk(prepared, 0, None, 0.3, -1e9, noise)
    assert len(want.latents) == 6 and want.eos_frame == 6
    check("latents against the reference", rel_l2(ga["latents"], want.latents), BAR_REF,
          rel_l2(ga["latents"][1:], want.latents[:-1]))


def test_counters_prove_the_gpu_served(runs):
    """The prompt seat computed the voice's rows and chunk A's (served twice) and left chunk
    A's rows resident: the frames seat's first batch uploaded nothing. Chunk A: the frames
    seat served steps 1 and 3 (3 frames; then 3 frames, the 7th dropped), the CPU step 2 (knob
    off: one decline), whose row went up before step 3. Chunk B's prompt ran on the CPU (the
    prompt knob off): the record was stale and every row went up. The codec seat decoded
    every step that made frames (3 in chunk A, 1 in chunk B), on one device stream per chunk
    (no replays: its uploads stay)."""
    _, (_, _, _, c), before = runs
    f = [x["frames"] for x in [before] + c]
    assert [f[i + 1]["served"] - f[i]["served"] for i in range(4)] == [1, 0, 1, 1]
    assert [f[i + 1]["uploads"] - f[i]["uploads"] for i in range(4)] == [0, 0, 1, 1]
    assert [f[i + 1]["declined"]["knob"] - f[i]["declined"]["knob"] for i in range(4)] == \
        [0, 1, 0, 0]
    assert f[4]["dispatches"] - f[0]["dispatches"] > 40 * 8    # 8 frames, 49 dispatches each
    assert f[4]["replays"] - f[0]["replays"] >= 1   # chunk A's second batch of 3 frames
    assert all(sum(x["declined"][r] for r in ("shape", "device", "memory", "gpu_error")) ==
               sum(before["frames"]["declined"][r] for r in ("shape", "device", "memory",
                                                             "gpu_error")) for x in f)
    end = c[-1]
    p0, p1 = before["prompt"], end["prompt"]
    assert p1["served"] - p0["served"] == 2 and p1["dispatches"] > p0["dispatches"]
    assert p1["uploads"] == p0["uploads"]       # a fresh voice state, an empty plain state
    assert p1["declined"]["knob"] - p0["declined"]["knob"] == 1
    assert end["codec"]["served"] - before["codec"]["served"] == 4
    assert end["codec"]["dispatches"] > before["codec"]["dispatches"]
    assert end["codec"]["uploads"] == before["codec"]["uploads"]
    assert sum(end["codec"]["declined"].values()) == sum(before["codec"]["declined"].values())


def test_knob_off_falls_back_to_the_cpu(cpu, gpu, ids):
    """With every seat off the CPU serves: the output equals the CPU chain's bit for bit and
    each seat counts a decline, not a served call."""
    seats = ("prompt", "frames", "codec")
    before = _seats(gpu)
    for seat in seats:
        gpu.set_seat_enabled(seat, False)
    try:
        for m in (cpu, gpu):
            m.seed_noise(9)
            m.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
        got = gpu.step(2)
    finally:
        for seat in seats:
            gpu.set_seat_enabled(seat, True)
    want = cpu.step(2)
    after = _seats(gpu)
    assert got[1] == want[1] == 2 and np.array_equal(got[0], want[0])
    assert np.array_equal(gpu.record()["latents"], cpu.record()["latents"])
    for seat in seats:
        assert after[seat]["served"] == before[seat]["served"]
        assert after[seat]["declined"]["knob"] - before[seat]["declined"]["knob"] == 1
    with pytest.raises(ValueError, match="no seat 'decode'"):
        gpu.set_seat_enabled("decode", False)
    with pytest.raises(ValueError, match="none on the CPU"):
        cpu.set_seat_enabled("frames", False)


REPLAY = "vulkan.pocket.replay"


def test_replay_equals_recording(gpu, ids):
    """The frames and codec seats replay a call's command buffer for a later call of its shape
    (positions read from memory): of three one-frame steps, the last two frame batches replay
    the first's recording and the codec's third call its second's (the first call of a stream
    has its own); the latents, conditioning and audio equal those of recording every call
    (knob 0) bit for bit. Control: with the knob at 0 nothing replays."""
    from dasllama import _core

    def run(replay):
        _core.tuning_set(REPLAY, replay)
        gpu.seed_noise(21)
        gpu.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
        before = _seats(gpu)
        audio = [gpu.step(1)[0] for _ in range(3)]
        after = _seats(gpu)
        delta = {s: {k: after[s][k] - before[s][k] for k in ("replays", "served")}
                 for s in ("frames", "codec")}
        return gpu.record(), np.concatenate(audio), delta

    try:
        rec1, audio1, on = run(1)
        rec0, audio0, off = run(0)
    finally:
        _core.tuning_reset(REPLAY)
    print(f"replays of 3 calls: {on} (knob 0: {off})")
    for seat in ("frames", "codec"):
        assert on[seat]["served"] == off[seat]["served"] == 3
        assert off[seat]["replays"] == 0
    assert on["frames"]["replays"] == 2 and on["codec"]["replays"] == 1
    assert np.array_equal(rec1["latents"], rec0["latents"])
    assert np.array_equal(rec1["conditioning"], rec0["conditioning"])
    assert np.array_equal(audio1, audio0)


def test_tts_api_on_the_gpu(fx):
    from dasllama.tts import TTS
    with TTS(fx.gguf_path("f32"), n_threads=2) as c:
        want, _ = c.speak(TEXT, seed=3, max_frames=2)
        assert "seats" not in c.stats
    try:
        t = TTS(fx.gguf_path("f32"), device=SPEC, n_threads=2)
    except Exception as e:  # noqa: BLE001 - the device error type decides skip or fail below
        from dasllama.errors import DeviceError
        if not isinstance(e, DeviceError) or in_ci():
            raise
        pytest.skip(f"no Vulkan device matches {SPEC!r}: {e}")
    with t:
        audio, _ = t.speak(TEXT, seed=3, max_frames=2)
        seats = t.stats["seats"]
    assert len(audio) == len(want)
    check("TTS.speak on the GPU, 2 frames", rel_l2(audio, want), BAR_AUDIO)
    assert seats["frames"]["served"] == 2 and seats["frames"]["dispatches"] > 0
    assert set(seats) == {"prompt", "frames", "codec"}


@pytest.mark.parametrize("lane", ["f16", "q8_0"])
def test_quantized_lanes(fx, lane, ids):
    """The f16 and q8_0 lanes' backbone matrices decoded in the kernels: the GPU against the
    CPU chain with float32 activations on the same file."""
    from dasllama import _core
    path = fx.gguf_path(lane)
    noise = np.random.default_rng(14).standard_normal((64, 32))
    c = _core.PocketModel(str(path), 2)
    c.set_precision("f32")
    g = _open(path, SPEC)
    g.set_seat_enabled("codec", False)  # latents only: the audio is not compared
    recs = []
    try:
        for m, rows in ((c, noise), (g, noise), (c, noise[1:])):
            m.set_noise(rows.astype(np.float32))
            m.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
            assert m.step(2)[1] == 2
            recs.append(m.record()["latents"])
    finally:
        c.close()
        g.close()
    want, got, late = recs
    check(f"{lane} lane latents, 2 frames", rel_l2(got, want), BAR_LANE, rel_l2(late, want))


# =============================================================================================
# The prompt seat
# =============================================================================================

def _kv(state, n_layers=6):
    """Every layer's K/V rows of a state (the test model's 6 layers): [layer, k|v, n, h, d]."""
    return np.stack([np.stack(state.kv(il)) for il in range(n_layers)])


def test_prompt_seat_kv_rows(cpu, gpu, ids):
    """A voice's rows, then a text's rows after them, through the prompt stage on both chains:
    every layer's K/V rows against the CPU's. The second call names a new record (the stage's
    calls each move the chunk counter on), so the voice's rows went up first: one upload.
    Control: the rows one position late."""
    rng = np.random.default_rng(8)
    voice = (0.1 * rng.standard_normal((9, 1024))).astype(np.float32)
    text = cpu.text_rows(ids[TEXT])
    states = []
    before = _seats(gpu)["prompt"]
    for m in (cpu, gpu):
        st = m.new_state(64)
        m.prompt(st, voice)
        m.prompt(st, text)
        states.append(_kv(st))
    after = _seats(gpu)["prompt"]
    want, got = states
    assert got.shape == want.shape and got.shape[2] == 9 + len(ids[TEXT])
    check("prompt seat K/V rows, 6 layers", rel_l2(got, want), BAR_PROMPT_KV,
          rel_l2(got[:, :, 1:], want[:, :, :-1]))
    assert after["served"] - before["served"] == 2
    assert after["uploads"] - before["uploads"] == 1


# =============================================================================================
# The codec seat
# =============================================================================================

def test_codec_seat_matches_cpu_decoder(cpu, gpu):
    """Mimi's decoder on the device against the CPU decoder on the same latents, fed in pieces
    of 1 and 17 frames (the second goes in two submissions, 16 + 1): the streaming state
    (upsampling tail, the windowed transformer's cache past its 250-position window, every
    convolution's history and overlap-add tail) carried across calls. Control: the CPU
    decoder restarted for each piece (the state dropped)."""
    rng = np.random.default_rng(31)
    lat = rng.standard_normal((18, 32)).astype(np.float32)
    sizes = [1, 17]
    before = _seats(gpu)["codec"]
    got = gpu.mimi_decode(lat, sizes)
    after = _seats(gpu)["codec"]
    want = cpu.mimi_decode(lat, sizes)
    restarted = np.concatenate([cpu.mimi_decode(lat[a:a + n], [n])
                                for a, n in ((0, 1), (1, 17))])
    assert len(got) == len(want) == 18 * 1920
    check("codec seat, 18 frames in 2 pieces", rel_l2(got, want), BAR_CODEC,
          rel_l2(restarted, want))
    assert after["served"] - before["served"] == 2 and after["dispatches"] > before["dispatches"]
    assert after["uploads"] == before["uploads"]
    assert sum(after["declined"].values()) == sum(before["declined"].values())


def test_codec_f16_products_against_float32(fx):
    """On a device with cooperative matrices, the q8_0 lane's Mimi convolutions go up as float16
    matrices (knob vulkan.pocket.codec_f16): the codec seat's audio against the same seat with
    the knob 0 (float32 matrices), same latents in the same pieces, within BAR_CODEC_F16.
    Control: the float32 decoder restarted for each piece (the state dropped)."""
    from dasllama import _core
    info = open_gpu().info
    if not info.get("coopmat_khr"):
        pytest.skip(f"{info.get('name')!r} has no cooperative matrices: Mimi stays float32")
    path = fx.gguf_path("q8_0")
    fast = _open(path, SPEC)
    _core.tuning_set("vulkan.pocket.codec_f16", 0)
    try:
        portable = _open(path, SPEC)
    finally:
        _core.tuning_reset("vulkan.pocket.codec_f16")
    try:
        lat = np.random.default_rng(32).standard_normal((18, 32)).astype(np.float32)
        got = fast.mimi_decode(lat, [1, 17])
        want = portable.mimi_decode(lat, [1, 17])
        restarted = np.concatenate([portable.mimi_decode(lat[a:a + n], [n])
                                    for a, n in ((0, 1), (1, 17))])
        assert _seats(fast)["codec"]["served"] == 2 and _seats(portable)["codec"]["served"] == 4
        assert not np.array_equal(got, want), "the float16 matrices did not serve"
        check("codec seat, float16 convolutions", rel_l2(got, want), BAR_CODEC_F16,
              rel_l2(restarted, want))
    finally:
        fast.close()
        portable.close()


def test_codec_stream_changes_sides(cpu, gpu, ids):
    """The codec knob flipped within a chunk (the prompt and frames on the CPU): step 1 on the
    CPU, step 2 on the device (which first replays step 1's frames: one upload), step 3 on the
    CPU again (the CPU decoder replays steps 1 and 2). Steps 1 and 3 equal the CPU chain bit for bit,
    step 2 within the codec bar. Control: step 2 against step 1's audio."""
    gpu.set_seat_enabled("prompt", False)
    gpu.set_seat_enabled("frames", False)
    for m in (cpu, gpu):
        m.seed_noise(4)
        m.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
    before = _seats(gpu)["codec"]
    got = []
    try:
        for n, on in ((1, False), (1, True), (1, False)):
            gpu.set_seat_enabled("codec", on)
            got.append(gpu.step(n)[0])
    finally:
        for seat in ("prompt", "frames", "codec"):
            gpu.set_seat_enabled(seat, True)
    after = _seats(gpu)["codec"]
    want = [cpu.step(1)[0] for _ in range(3)]
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[2], want[2])
    check("codec seat after a change of sides", rel_l2(got[1], want[1]), BAR_CODEC,
          rel_l2(got[1], want[0]))
    assert after["served"] - before["served"] == 1
    assert after["uploads"] - before["uploads"] == 1
    assert after["declined"]["knob"] - before["declined"]["knob"] == 2


def test_a_batch_shares_its_first_input_projection(cpu, gpu, ids):
    """The frames seat's dispatch counter: a batch of n frames records the first Euler step's
    input projection once for all its frames (GpuFrames::record_batch), so it runs
    n * (a one-frame batch's dispatches) - (n - 1). Both batches on the device, EOS off."""
    for m in (cpu, gpu):
        m.seed_noise(2)
    gpu.begin_chunk(ids[TEXT], "", 0.3, 1e9, 0)
    counts = []
    for n in (1, 3):
        before = _seats(gpu)["frames"]
        assert gpu.step(n)[1] == n
        after = _seats(gpu)["frames"]
        assert after["served"] - before["served"] == 1
        counts.append(after["dispatches"] - before["dispatches"])
    one, three = counts
    print(f"frames seat: {one} dispatches a one-frame batch, {three} a three-frame batch "
          f"({three / 3:.2f} a frame)")
    assert three == 3 * one - 2
    cpu.begin_chunk(ids[TEXT], "", 0.3, 1e9, 0)
    for n in (1, 3):
        cpu.step(n)
    g, c = gpu.record()["latents"], cpu.record()["latents"]
    check("latents of a shared input projection", rel_l2(g, c), BAR_LATENTS,
          rel_l2(g[1:], c[:-1]))


SEATS = ("prompt", "frames", "codec")


@pytest.mark.parametrize("nth, seat", [(1, "prompt"), (2, "frames"), (3, "codec"), (0, None)],
                         ids=["prompt", "frames", "codec", "no-fault"])
def test_injected_device_fault_falls_back_mid_request(cpu, gpu, ids, nth, seat):
    """A device failure mid-request, through the fault seam (the nth encoder submit after
    begin_chunk fails: the prompt's, the first frame batch's, the first codec call's): that
    seat declines with gpu_error, the CPU serves the call, and the next step is back on the
    device. Latents and audio of both steps equal the CPU chain's within the GPU bars (nothing
    lost or repeated: the same frame count, the noise stream alike). Control: the latents one
    frame late. Negative control of the seam (nth 0, disarmed): no seat declines and the
    device serves the prompt, every frame batch and every codec call."""
    from dasllama import _core
    before = _seats(gpu)
    for m in (cpu, gpu):
        m.seed_noise(3)
    _core.gpu_inject_submit_fault(nth)
    try:
        gpu.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
        got = [gpu.step(2) for _ in range(2)]
    finally:
        _core.gpu_inject_submit_fault(0)
    after = _seats(gpu)
    cpu.begin_chunk(ids[TEXT], "", 0.3, -1e9, 0)
    want = [cpu.step(2) for _ in range(2)]
    faults = {s: after[s]["declined"]["gpu_error"] - before[s]["declined"]["gpu_error"]
              for s in SEATS}
    assert faults == {s: int(s == seat) for s in SEATS}
    assert [n for _, n in got] == [n for _, n in want] == [2, 2]
    g, c = gpu.record()["latents"], cpu.record()["latents"]
    check(f"latents with a {seat or 'no'} fault", rel_l2(g, c), BAR_LATENTS,
          rel_l2(g[1:], c[:-1]))
    check(f"audio with a {seat or 'no'} fault", rel_l2(np.concatenate([a for a, _ in got]),
                                               np.concatenate([a for a, _ in want])), BAR_AUDIO)
    if seat in ("frames", "codec"):   # a chunk has one prompt call; the others serve again
        assert after[seat]["served"] > before[seat]["served"]
    served = {s: after[s]["served"] - before[s]["served"] for s in SEATS}
    assert served["frames"] == (2 if seat != "frames" else 1)
    if seat is None:
        assert served == {"prompt": 1, "frames": 2, "codec": 2}
        assert all(after[s]["declined"] == before[s]["declined"] for s in SEATS)


def test_voice_rows_stay_resident_across_chunks(cpu, gpu, ids):
    """A voice's rows go up (or are computed) once, not every chunk: chunk 1 on a fresh voice
    and chunk 2 on it again run their prompts on the device without an upload (the voice's
    own prompt left its rows resident, then chunk 1's record kept them). A chunk on the plain
    state in between makes the record stale: chunk 3's prompt uploads the voice's rows (one
    upload). Chunk 4's prompt fails through the fault seam (gpu_error): the CPU computes it
    after the resident voice rows and the frames seat uploads the chunk's rows only (one
    upload). One frame a chunk, latents against the CPU chain on the same sequence. Control:
    the CPU chain's frames of the same chunks without the voice (its rows missing)."""
    from dasllama import _core
    rng = np.random.default_rng(17)
    voice = (0.1 * rng.standard_normal((9, 1024))).astype(np.float32)
    texts = (TEXT, OTHER, TEXT, OTHER)

    def run(m, on_gpu, name):
        m.add_voice("w", voice)
        lats, ups = [], []
        try:
            for i, text in enumerate(texts):
                if i == 2:   # another state's chunk in between: prompt only
                    m.begin_chunk(ids[OTHER], "", 0.3, 1e9, 0)
                before = _seats(m) if on_gpu else None
                m.seed_noise(40 + i)
                if on_gpu and i == 3:
                    _core.gpu_inject_submit_fault(1)
                try:
                    m.begin_chunk(ids[text], name, 0.3, 1e9, 0)
                finally:
                    if on_gpu:
                        _core.gpu_inject_submit_fault(0)
                assert m.step(1)[1] == 1
                lats.append(np.asarray(m.record()["latents"]))
                if on_gpu:
                    after = _seats(m)
                    ups.append({s: (after[s]["uploads"] - before[s]["uploads"],
                                    after[s]["served"] - before[s]["served"],
                                    after[s]["declined"]["gpu_error"] -
                                    before[s]["declined"]["gpu_error"])
                                for s in ("prompt", "frames")})
        finally:
            m.remove_voice("w")
        return np.concatenate(lats), ups

    got, ups = run(gpu, True, "w")
    want, _ = run(cpu, False, "w")
    plain, _ = run(cpu, False, "")
    print(f"(uploads, served, gpu_error) per chunk: {ups}")
    # chunks 1-2: the device computed both prompts, nothing went up
    assert ups[0] == ups[1] == {"prompt": (0, 1, 0), "frames": (0, 1, 0)}
    # chunk 3: the plain state's chunk made the record stale: the voice rows went up
    assert ups[2] == {"prompt": (1, 1, 0), "frames": (0, 1, 0)}
    # chunk 4: the prompt's submit failed, the CPU computed it; the chunk's rows went up
    assert ups[3] == {"prompt": (0, 0, 1), "frames": (1, 1, 0)}
    check("latents of 4 chunks on a resident voice", rel_l2(got, want), BAR_LATENTS,
          rel_l2(plain, want))


def test_profile_times_each_dispatch_of_a_frame_batch(cpu, gpu, ids):
    """set_profiling times the dispatches of encoders recorded after it (the replay knob off,
    so the call records its own): a one-frame step with the codec seat off leaves the frame
    batch's submit as the last one, and last_profile holds one finite, non-negative time per
    dispatch the frames seat counted. The CPU model has no profile."""
    from dasllama import _core
    from dasllama.errors import DeviceError
    try:
        gpu.set_profiling(True)
    except DeviceError as e:
        pytest.skip(f"this device cannot time kernels: {e}")
    _core.tuning_set(REPLAY, 0)
    gpu.set_seat_enabled("codec", False)
    try:
        gpu.seed_noise(2)
        gpu.begin_chunk(ids[TEXT], "", 0.3, 1e9, 0)
        before = _seats(gpu)["frames"]["dispatches"]
        assert gpu.step(1)[1] == 1
        dispatched = _seats(gpu)["frames"]["dispatches"] - before
        prof = gpu.last_profile()
    finally:
        gpu.set_seat_enabled("codec", True)
        _core.tuning_reset(REPLAY)
        gpu.set_profiling(False)
    print(f"{len(prof)} dispatches, {sum(t for _, t in prof):.0f} us")
    assert len(prof) == dispatched > 40
    assert all(isinstance(k, str) and k and np.isfinite(t) and t >= 0 for k, t in prof)
    cpu.set_profiling(True)
    assert cpu.last_profile() == []
    cpu.set_profiling(False)


# The codec's transposed-convolution stamp on its own.

# Bar: each output is at most three float32 additions (and a product for the depthwise
# stamp) in the CPU's order, so it equals float32 NumPy in that order to rounding [0 measured].
BAR_CONV_TR = 1e-7


@pytest.mark.parametrize("depthwise", [False, True], ids=["dense", "depthwise"])
def test_conv_tr_overlap_add(depthwise):
    """conv_tr / conv_tr_depthwise against a NumPy overlap-add of a stride-3, kernel-5
    ConvTranspose1d with a carried tail, a bias and an output offset; control: the tail
    dropped."""
    from gpu_helpers import nan_filled, open_gpu, pack_args
    g = open_gpu()
    rng = np.random.default_rng(21 + depthwise)
    T, C, S, K, z_off, out_off = 4, 7, 3, 5, 3, 2
    tail = rng.standard_normal((K - S, C)).astype(np.float32)
    bias = rng.standard_normal(C).astype(np.float32)
    w = rng.standard_normal((C, K)).astype(np.float32)
    x = rng.standard_normal((T, C)).astype(np.float32)
    if depthwise:
        terms = np.einsum("ck,tc->tkc", w, x)               # [T, K, C]
        z = np.concatenate([np.zeros(z_off, np.float32), x.ravel()])
    else:
        terms = rng.standard_normal((T, K, C)).astype(np.float32)
        z = np.concatenate([np.zeros(z_off, np.float32), terms.ravel()])
    n_full = T * S + K - S

    def overlap(tail_rows):
        y = np.zeros((n_full, C), np.float32)
        y[:K - S] = tail_rows
        for t in range(T):
            for k in range(K):
                y[t * S + k] += terms[t, k]
        y[:T * S] += bias
        return y

    args = pack_args("IIIIIII", T, C, S, K, z_off, out_off, 1)
    out = g.run("conv_tr_depthwise" if depthwise else "conv_tr",
                [z, w.ravel(), tail.ravel(), bias, nan_filled(out_off + n_full * C + 3)], args,
                (2, 1, 1))
    y = np.asarray(out[4])
    assert np.all(np.isnan(y[:out_off])) and np.all(np.isnan(y[out_off + n_full * C:]))
    got = y[out_off:out_off + n_full * C].reshape(n_full, C)
    check(f"conv_tr {'depthwise' if depthwise else 'dense'}", rel_l2(got, overlap(tail)),
          BAR_CONV_TR, rel_l2(got, overlap(np.zeros_like(tail))))
