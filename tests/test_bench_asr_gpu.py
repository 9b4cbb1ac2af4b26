"""The Whisper GPU bench (python/dasllama/bench/asr_gpu.py) end to end on the test device
(lavapipe in CI), on a small random-weight Whisper, with a stand-in for openai-whisper (dasllama on the CPU: openai-whisper and CUDA are on the GPU machine
only). Checked: the record passes the schema, the seat served every window of the timed
requests, the validation compares the two engines' transcripts; and the peer checkpoint holds
the values of tiny.en's ggml file in OpenAI's layout."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from gpu_helpers import SPEC, _unavailable
from requires import require

jsonschema = require("jsonschema")
torch = require("torch")

from dasllama.bench import asr_gpu, probe, record  # noqa: E402
from dasllama.bench.asr import Request  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ggml_file(tmp_path_factory, real_model):
    out = tmp_path_factory.mktemp("asr-gpu") / "tiny-q8_0.bin"
    return asr_gpu.pack(real_model("whisper-tiny.en"), out)


class CpuStandIn:
    """dasllama on the CPU under the peer's name, with the peer's Request interface."""
    name, backend, compute_type, device_name = asr_gpu.PEER, "cuda", "float16", "stand-in"

    def __init__(self, model, work):
        import dasllama
        self.asr = dasllama.ASR(model, n_threads=2)
        self.version, self.threads = "stand-in", 2

    def run(self, samples, beam):
        t0 = time.perf_counter_ns()
        segs = list(self.asr.transcribe(samples, beam_size=beam, temperature=0.0,
                                        language="en")[0])
        wall = time.perf_counter_ns() - t0
        return Request(wall, wall, "".join(s.text for s in segs),
                       [t for s in segs for t in s.tokens])

    def encoder_ms(self, window, reps):
        return [1.0] * reps


@pytest.mark.parametrize("lane,tag", [("float32", "f32"), ("int8", "int8")])
def test_bench_record_on_the_test_device(tmp_path, lane, tag):
    import dasllama
    from dasllama.testing.whisper import write_random_whisper_dir
    model = write_random_whisper_dir(tmp_path / "model", seed=5)
    try:
        dasllama.ASR(model, device=SPEC, n_threads=2).close()
    except Exception as e:   # noqa: BLE001 - no test device: say why
        _unavailable(f"no Vulkan device {SPEC!r} for the encoder seat: {e}")
    result = asr_gpu.benchmark(model, clips=ROOT / "tests" / "fixtures" / "asr", reps=1,
                               threads=2, clip_seconds=[10], beams=[1], device=SPEC,
                               work=tmp_path, pause=0.0, encoder_reps=2, open_peer=CpuStandIn,
                               compute_type=lane)
    machine = probe.machine(gpu=True)
    rec = record.finish(result, machine, probe.build(), probe.process_peak_rss_bytes(),
                        box=probe.box_name(machine), command="test")
    schema = __import__("json").loads((ROOT / "bench" / "schema.json").read_text())
    jsonschema.validate(rec, schema)
    tests = {(r["engine"], r["test"]) for r in rec["rows"]}
    for engine in ("dasllama", asr_gpu.PEER):
        assert {(engine, t) for t in (asr_gpu.encoder_test(lane), f"request_wall_10s{tag}b1",
                                      f"first_text_10s{tag}b1", f"rtf_10s{tag}b1")} <= tests
    assert rec["engines"]["dasllama"]["compute_type"] == lane
    assert (lane == "float32") == ("encoder_window" in {t for _, t in tests})
    assert rec["config"]["lanes"]["dasllama"] == asr_gpu.LANES[lane]
    v = result["validation"][0]
    # one timed request of a 10 s clip: one window, encoded on the seat
    assert v["seat"]["served"] == 1 and not any(v["seat"]["declined"].values())
    assert v["wer"] is not None and set(v["texts"]) == {"dasllama", asr_gpu.PEER}


def test_bench_names_a_lane_it_lacks(tmp_path):
    with pytest.raises(asr_gpu.BenchError, match="'float16' is not one of"):
        asr_gpu.benchmark(tmp_path, clips=ROOT / "tests" / "fixtures" / "asr", reps=1,
                          compute_type="float16")


def test_openai_checkpoint_holds_the_ggml_values(ggml_file, tmp_path):
    from dasllama.convert.whisper_ggml import read_ggml_whisper
    ckpt = torch.load(asr_gpu.openai_checkpoint(ggml_file, tmp_path / "c.pt"))
    g = read_ggml_whisper(ggml_file)
    assert ckpt["dims"] == g.hparams and set(ckpt["dims"]) >= {"n_mels", "n_text_layer"}
    state = g.openai_state()
    name = "decoder.blocks.0.cross_attn.query.weight"
    got = ckpt["model_state_dict"][name].float().numpy()
    assert got.dtype == np.float32 and np.allclose(got, state[name], rtol=1e-3, atol=1e-4)
    assert not np.allclose(got, state["decoder.blocks.1.cross_attn.query.weight"], atol=1e-4)
