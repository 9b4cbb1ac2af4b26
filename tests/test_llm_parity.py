"""The C++ forward pass (_core.LLMModel) against the NumPy reference (dasllama.reference.llm).

Errors are per position: rel-l2 = ||cpp - ref|| / ||ref|| over the vocabulary, the worst
position counts. The "fast" precision (8-bit activations) is judged by the KL divergence of the
next-token distributions instead: its rounding moves logits by a few percent, which is what
sampling sees, and no rel-l2 bar that covers it can also sit ten times under an unrelated
sequence's error. Every bar was set from the error measured here (printed next to it), with a
few times that as room; every comparison carries a negative control that must exceed its bar
tenfold.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest

from dasllama import _core
from dasllama.errors import DasllamaError, ShapeError
from dasllama.reference.llm import ReferenceLLM
from dasllama.testing.random_gguf import ARCHS, write_random_model

# Random models: width 128 with 4 heads gives heads of 32 (q8_0 KV needs whole blocks of 32).
# gemma3 gets 7 layers and a window of 8 so that local (il % 6 < 5) and global layers both
# run, and the 40-token prompt crosses the window.
RANDOM_SHAPE = dict(n_embd=128, n_head=4, n_head_kv=2, n_ff=256)
GEMMA3_EXTRA = dict(n_layer=7, sliding_window=8)
N_PROMPT = 40
# Top-k routing is discontinuous: a rounding that flips a near-tie between two experts changes
# a position's logits by O(1) (measured: 0.72 at one of 40 positions with q8_0 keys). The lossy
# paths (f16/q8_0 KV, fast) therefore run qwen3moe with every expert used, which keeps the
# renormalized softmax weights continuous; the f32 test checks top-k routing exactly.
LOSSY_EXTRA = {"qwen3moe": dict(n_expert=4, n_expert_used=4)}

# Bars (measured worst position in brackets).
BAR_F32 = 5e-6          # f32 activations, f32 KV: float32 rounding only   [random 7.6e-7]
BAR_F32_REAL = 1e-5     #   real models                                       [smollm2 1.3e-6, gemma3 5.9e-7]
BAR_KV_F16 = 3e-3       # f16 KV rounds every cached key and value          [random 8.6e-4]
BAR_KV_F16_REAL = 5e-3  #                                                     [smollm2 1.7e-3, gemma3 2.9e-4]
BAR_KV_Q8_0 = 6e-2      # q8_0 KV: 8-bit keys and values                    [random 2.1e-2]
BAR_FAST_KL = 3e-3      # fast: KL(ref || cpp) in nats, worst position      [random 6.7e-4]
BAR_FAST_KL_REAL = 3e-2  #                                                    [smollm2 1.1e-2, gemma3 3.0e-3]


def rel_l2(got: np.ndarray, ref: np.ndarray) -> float:
    """Worst position's ||got - ref|| / ||ref||."""
    return float(np.max(np.linalg.norm(got - ref, axis=-1) / np.linalg.norm(ref, axis=-1)))


def kl(ref: np.ndarray, got: np.ndarray) -> float:
    """Worst position's KL(softmax(ref) || softmax(got)), in nats."""
    def log_softmax(x):
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))
    lp, lq = log_softmax(ref), log_softmax(got)
    return float(np.max((np.exp(lp) * (lp - lq)).sum(-1)))


def check(what: str, err: float, bar: float, control: float) -> None:
    print(f"{what}: error {err:.3e} (bar {bar:.1e}); negative control {control:.3e} "
          f"(must exceed {10 * bar:.1e})")
    assert err <= bar, f"{what}: error {err:.3e} exceeds the bar {bar:.1e}"
    assert control > 10 * bar, f"{what}: the negative control {control:.3e} does not bite"


def rotated(ids: list[int]) -> list[int]:
    """The negative control's input: the same tokens shifted by one place."""
    return ids[1:] + ids[:1]


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("llm_parity")


@functools.lru_cache(maxsize=None)
def _reference_logits(path: str, ids: tuple[int, ...]) -> np.ndarray:
    return ReferenceLLM(path).logits(list(ids))


def random_model(models_dir: Path, arch: str, weight_type: str = "F32", **kw) -> str:
    shape = dict(RANDOM_SHAPE, **(GEMMA3_EXTRA if arch == "gemma3" else {}), **kw)
    tag = "_".join(f"{k}{v}" for k, v in sorted(kw.items()))
    path = models_dir / f"{arch}_{weight_type}_{tag}.gguf"
    if not path.exists():
        write_random_model(path, arch, weight_type=weight_type, **shape)
    return str(path)


def prompt(n_vocab: int, n: int = N_PROMPT, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, n_vocab, n)]


def cpp_logits(path: str, ids: list[int], kv_type: str = "f32", precision: str = "f32",
               n_ctx: int = 256) -> np.ndarray:
    with _core.LLMModel(path, n_ctx=n_ctx, n_threads=2, kv_type=kv_type) as m:
        m.set_precision(precision)
        return m.eval(ids, all_logits=True)


# ---------------------------------------------------------------------------------------------
# Random-weight models of every architecture
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("weight_type", ["F32", "Q8_0"])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_f32_parity(models_dir, arch, weight_type):
    path = random_model(models_dir, arch, weight_type)
    ids = prompt(500)
    ref = _reference_logits(path, tuple(ids))
    got = cpp_logits(path, ids)
    assert got.shape == ref.shape == (len(ids), 512) and got.dtype == np.float32
    control = cpp_logits(path, rotated(ids))
    check(f"{arch} {weight_type} f32", rel_l2(got, ref), BAR_F32, rel_l2(control, ref))


@pytest.mark.parametrize("kv_type,bar", [("f16", BAR_KV_F16), ("q8_0", BAR_KV_Q8_0)])
@pytest.mark.parametrize("arch", ARCHS)
def test_random_kv_types(models_dir, arch, kv_type, bar):
    path = random_model(models_dir, arch, **LOSSY_EXTRA.get(arch, {}))
    ids = prompt(500)
    ref = _reference_logits(path, tuple(ids))
    got = cpp_logits(path, ids, kv_type=kv_type)
    control = cpp_logits(path, rotated(ids), kv_type=kv_type)
    check(f"{arch} kv {kv_type}", rel_l2(got, ref), bar, rel_l2(control, ref))


@pytest.mark.parametrize("arch", ARCHS)
def test_random_fast_precision(models_dir, arch):
    path = random_model(models_dir, arch, "Q8_0", **LOSSY_EXTRA.get(arch, {}))
    ids = prompt(500)
    ref = _reference_logits(path, tuple(ids))
    got = cpp_logits(path, ids, kv_type="f16", precision="fast")
    control = cpp_logits(path, rotated(ids), kv_type="f16", precision="fast")
    check(f"{arch} fast (KL)", kl(ref, got), BAR_FAST_KL, kl(ref, control))


def test_tied_output_and_long_prompt(models_dir):
    """A tied head (no output.weight) and a prompt longer than one 512-token prefill chunk."""
    path = random_model(models_dir, "llama", tied_output=True, n_ctx=1024)
    ids = prompt(500, n=600, seed=3)
    ref = _reference_logits(path, tuple(ids))
    got = cpp_logits(path, ids, n_ctx=1024)
    control = cpp_logits(path, rotated(ids), n_ctx=1024)
    check("llama tied, 600 tokens", rel_l2(got, ref), BAR_F32, rel_l2(control, ref))
    # Last position only: the first chunk then skips its last layer's outputs, the second
    # computes one row of them.
    with _core.LLMModel(path, n_ctx=1024, n_threads=2, kv_type="f32") as m:
        m.set_precision("f32")
        last = m.eval(ids)
    assert last.shape == (1, 512)
    check("llama tied, 600 tokens, last row only", rel_l2(last, ref[-1:]), BAR_F32,
          rel_l2(control[-1:], ref[-1:]))


# ---------------------------------------------------------------------------------------------
# Real models
# ---------------------------------------------------------------------------------------------

TEXT = "The capital of France is Paris. The capital of Germany is"


@pytest.fixture(scope="module", params=["smollm2", "gemma3"])
def real(request, real_model):
    path = str(real_model(request.param))
    with _core.LLMModel(path, n_ctx=64, n_threads=2) as m:
        ids = m.tokenizer.encode(TEXT, add_special=True)
    return request.param, path, ids, _reference_logits(path, tuple(ids))


def test_real_f32_parity(real):
    name, path, ids, ref = real
    got = cpp_logits(path, ids, n_ctx=64)
    control = cpp_logits(path, rotated(ids), n_ctx=64)
    check(f"{name} f32", rel_l2(got, ref), BAR_F32_REAL, rel_l2(control, ref))


def test_real_kv_f16(real):
    name, path, ids, ref = real
    got = cpp_logits(path, ids, kv_type="f16", n_ctx=64)
    control = cpp_logits(path, rotated(ids), kv_type="f16", n_ctx=64)
    check(f"{name} kv f16", rel_l2(got, ref), BAR_KV_F16_REAL, rel_l2(control, ref))


def test_real_fast_precision(real):
    name, path, ids, ref = real
    got = cpp_logits(path, ids, kv_type="f16", precision="fast", n_ctx=64)
    control = cpp_logits(path, rotated(ids), kv_type="f16", precision="fast", n_ctx=64)
    check(f"{name} fast (KL)", kl(ref, got), BAR_FAST_KL_REAL, kl(ref, control))
    # The default precision is fast.
    with _core.LLMModel(path, n_ctx=64, n_threads=2, kv_type="f16") as m:
        assert m.precision == "fast"
        np.testing.assert_array_equal(m.eval(ids, all_logits=True), got)


# ---------------------------------------------------------------------------------------------
# The cache: decode vs prefill, truncate, kv types
# ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["llama", "gemma3", "qwen3moe"])
@pytest.mark.parametrize("kv_type", ["f32", "f16", "q8_0"])
def test_decode_equals_prefill(models_dir, arch, kv_type):
    path = random_model(models_dir, arch, "Q8_0")
    ids = prompt(500, n=24, seed=1)
    with _core.LLMModel(path, n_ctx=64, n_threads=2, kv_type=kv_type) as m:
        m.set_precision("f32")
        prefill = m.eval(ids, all_logits=True)
        assert m.n_past == len(ids)
        m.reset()
        assert m.n_past == 0
        decode = np.concatenate([m.eval([t]) for t in ids])
        # Mixed: a prompt, then tokens one at a time.
        m.reset()
        mixed = np.concatenate([m.eval(ids[:10], all_logits=True)] + [m.eval([t]) for t in ids[10:]])
    # Same rows through the same kernels: equal up to summation order across batch shapes.
    bar = 1e-6
    err = max(rel_l2(decode, prefill), rel_l2(mixed, prefill))
    control = rel_l2(np.roll(decode, 1, axis=0), prefill)
    check(f"{arch} kv {kv_type} decode vs prefill", err, bar, control)


def test_truncate_then_eval_equals_fresh(models_dir):
    path = random_model(models_dir, "qwen3", "Q8_0")
    a, b, c = prompt(500, 12, 4), prompt(500, 9, 5), prompt(500, 7, 6)
    with _core.LLMModel(path, n_ctx=64, n_threads=2) as m:
        m.set_precision("f32")
        m.eval(a + b)
        m.truncate(len(a))
        assert m.n_past == len(a)
        reused = m.eval(c, all_logits=True)
        m.reset()
        m.eval(a)
        fresh = m.eval(c, all_logits=True)
        m.truncate(len(a))
        m.eval(b)
        stale = m.eval(c, all_logits=True)  # the control: a + b + c, not a + c
        with pytest.raises(ValueError, match="n_past"):
            m.truncate(m.n_past + 1)
        with pytest.raises(ValueError):
            m.truncate(-1)
    check("truncate + eval vs fresh", rel_l2(reused, fresh), 1e-6, rel_l2(stale, fresh))


def test_kv_type_property_and_bad_kv_type(models_dir):
    path = random_model(models_dir, "llama")
    for kv in ("f16", "f32", "q8_0"):
        with _core.LLMModel(path, n_ctx=16, n_threads=1, kv_type=kv) as m:
            assert m.kv_type == kv
            assert m.eval([1, 2, 3]).shape == (1, 512)
    with pytest.raises(ValueError, match="kv_type"):
        _core.LLMModel(path, kv_type="q4_0")
    narrow = random_model(models_dir, "llama", n_embd=64)   # heads of 16: not a q8_0 block
    with pytest.raises(ShapeError, match="q8_0"):
        _core.LLMModel(narrow, kv_type="q8_0")


# ---------------------------------------------------------------------------------------------
# Errors and the object's surface
# ---------------------------------------------------------------------------------------------

def test_properties(models_dir):
    path = random_model(models_dir, "gemma3")
    with _core.LLMModel(path, n_ctx=100, n_threads=2) as m:
        assert (m.arch, m.n_vocab, m.n_ctx, m.n_ctx_train) == ("gemma3", 512, 100, 256)
        assert (m.n_embd, m.n_layer, m.n_past, m.n_threads) == (128, 7, 0, 2)
        assert m.tokenizer.n_vocab == 512
        m.eval([5, 6])
        assert m.n_past == 2


def test_input_errors(models_dir):
    path = random_model(models_dir, "llama")
    with _core.LLMModel(path, n_ctx=8, n_threads=1) as m:
        with pytest.raises(ValueError, match="empty"):
            m.eval([])
        with pytest.raises(ValueError, match="512"):
            m.eval([1, 512])
        with pytest.raises(ValueError, match="-1"):
            m.eval([-1])
        assert m.n_past == 0
        m.eval([1, 2, 3, 4, 5])
        with pytest.raises(ShapeError, match=r"n_past 5.*4 new tokens.*n_ctx 8"):
            m.eval([1, 2, 3, 4])
        assert m.n_past == 5   # a refused call leaves the cache as it was
        m.eval([1, 2, 3])      # exactly fills the context
        assert m.n_past == 8
        with pytest.raises(ValueError, match="precision"):
            m.set_precision("f16")
        m.close()
        with pytest.raises(DasllamaError, match="closed"):
            m.eval([1])


def test_unknown_architecture(tmp_path):
    from gguf import GGUFValueType as V

    from dasllama.testing.random_gguf import write_gguf
    path = write_gguf(tmp_path / "mamba.gguf", [("general.architecture", V.STRING, "mamba")])
    with pytest.raises(DasllamaError, match="llama, qwen2, qwen3, qwen3moe, gemma3"):
        _core.LLMModel(str(path))


def test_shape_mismatch_names_the_tensor(models_dir, tmp_path):
    """A file whose metadata disagrees with its tensors: feed_forward_length patched 256 -> 384."""
    data = bytearray(Path(random_model(models_dir, "llama")).read_bytes())
    key = b"llama.feed_forward_length"
    at = data.index(key) + len(key)
    assert int.from_bytes(data[at:at + 4], "little") == 4          # uint32
    assert int.from_bytes(data[at + 4:at + 8], "little") == 256
    data[at + 4:at + 8] = (384).to_bytes(4, "little")
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(bytes(data))
    with pytest.raises(ShapeError, match=r"blk\.0\.ffn_gate\.weight.*\(256, 128\).*\(384, 128\)"):
        _core.LLMModel(str(bad))


def test_polling_thread_does_not_deadlock_eval(models_dir):
    """A long eval on the main thread takes the GIL between layers (to see Ctrl-C) while it
    holds the model's lock; another thread reading n_past meanwhile must not hold the GIL while
    it waits for that lock."""
    import faulthandler
    import threading

    path = random_model(models_dir, "llama", tied_output=True, n_ctx=1024)
    ids = prompt(500, n=600, seed=3)
    faulthandler.dump_traceback_later(120, exit=True)   # a deadlock fails instead of hanging
    try:
        with _core.LLMModel(path, n_ctx=1024, n_threads=2) as m:
            stop = threading.Event()
            seen = []

            def poll():
                while not stop.is_set():
                    seen.append(m.n_past)

            reader = threading.Thread(target=poll, daemon=True)
            reader.start()
            for _ in range(3):
                m.reset()
                m.eval(ids)
            stop.set()
            reader.join(timeout=30)
            assert not reader.is_alive() and seen and m.n_past == 600
    finally:
        faulthandler.cancel_dump_traceback_later()
