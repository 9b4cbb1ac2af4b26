"""The NumPy reference forward pass (dasllama.reference.llm).

Two kinds of evidence:

1. Against the peer, llama.cpp, on the two real models. The fixtures hold llama.cpp's greedy
   continuation (64 tokens) of six prompts, the top-1 minus top-2 logit margin at every step,
   and the first step's top-5 logits. llama.cpp's CPU path rounds activations to 8 bits before
   every quantized matrix product and keeps the KV cache in f16, so its logits are not ours.
   Measured (the same in float32 and float64): our margin for llama.cpp's token differs from
   llama.cpp's margin by 0.11 (SmolLM2) / 0.14 (Gemma 3) on average and by at most 0.58 / 0.69
   over all 384 steps; the first-step top-5 logits differ by at most 0.62 / 0.42. So:
   - a margin below NOISE_MARGIN = 1.5 (about twice the largest margin error seen) is a coin
     toss between the two engines; at every step with a larger margin the argmax must agree;
   - the mean margin error must stay under MARGIN_ERR_BAR = 0.3 (about twice the measured
     mean), the first-step top-5 logits within TOP5_BAR = 1.5 (2.4x the measured maximum);
   - negative control: the wrong RoPE pairing gives a mean margin error of 3.4 / 4.1 (over 10x
     the bar) and disagrees at about half of the confident steps.
   The steps are teacher-forced: one forward pass over prompt + llama.cpp's continuation gives
   our logits at every step with llama.cpp's history, so all 64 steps are compared even after
   the two engines' greedy paths part (their margins fall below the noise bound within the
   first 0-1 steps of most prompts, which leaves a plain greedy comparison little to check).
   The greedy decode with the KV cache is run too, for GREEDY_STEPS tokens, and must equal
   llama.cpp's up to the first low-margin step; the leading steps it matches are printed.
2. Every architecture on random-weight models: causality, KV-cache decoding equal to
   recomputation, every tensor mattering, gemma3's sliding window and rope base, qwen3moe's
   routing, RoPE's defining property, and the errors.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from dasllama.errors import FormatError, GGUFError
from dasllama.reference import llm as ref
from dasllama.reference.llm import ReferenceLLM
from dasllama.reference.llm_arch import ARCHITECTURES, read_config, tensor_names
from dasllama.testing.random_gguf import write_random_model

FIXTURES = Path(__file__).parent / "fixtures" / "llm"
REAL = {"smollm2": "llama_cpp_b11669_SmolLM2-135M-Instruct.Q4_1.json",
        "gemma3": "llama_cpp_b11669_gemma-3-270m-q4_k_m.json"}

NOISE_MARGIN = 1.5        # logits; see the module docstring
MARGIN_ERR_BAR = 0.3      # mean |our margin - llama.cpp's margin| over all teacher-forced steps
TOP5_BAR = 1.5            # |our logit - llama.cpp's| for the first step's top-5 tokens
GREEDY_STEPS = 8          # KV-cache greedy tokens per prompt (NumPy decoding: ~0.05 s a token)
# The real models run in float32: against llama.cpp's 8-bit activations it makes no difference
# (margin error means 0.112 / 0.137 in float32 and in float64) and it halves time and memory.
REAL_DTYPE = np.float32


# =============================================================================================
# 1. Against llama.cpp, on the real models
# =============================================================================================

@pytest.fixture(scope="module", params=sorted(REAL))
def real(request, real_model):
    """(name, ReferenceLLM, fixture dict); one model in memory at a time."""
    name = request.param
    path = FIXTURES / REAL[name]
    if not path.exists():
        pytest.fail(f"llama.cpp fixture {path} is missing")
    model = ReferenceLLM(real_model(name), dtype=REAL_DTYPE)
    yield name, model, json.loads(path.read_text())
    del model


def compare(model: ReferenceLLM, fixture: dict) -> dict:
    """Teacher-forced comparison with llama.cpp over every prompt of a fixture.

    One forward pass over prompt + llama.cpp's continuation gives our logits at each of its 64
    steps with its history. Per step: our argmax, and our margin of llama.cpp's token (its
    logit minus the best other). Returns the mean margin error, the confident steps (llama.cpp
    margin >= NOISE_MARGIN) and our disagreements there, the worst first-step top-5 logit
    difference, and a line per prompt.
    """
    errors, n_conf, n_bad, top5_worst, lines = [], 0, 0, 0.0, []
    for case in fixture["greedy"]:
        prompt, cont = case["prompt_ids"], case["greedy_ids"]
        steps = model.logits(prompt + cont[:-1]).astype(np.float64)[len(prompt) - 1:]  # [S, V]
        s = np.arange(len(cont))
        others = steps.copy()
        others[s, cont] = -np.inf
        margin = steps[s, cont] - others.max(-1)                                     # [S]
        agree = steps.argmax(-1) == np.array(cont)
        theirs = np.array(case["margins"])
        confident = theirs >= NOISE_MARGIN
        errors.append(np.abs(margin - theirs))
        n_conf += int(confident.sum())
        n_bad += int((confident & ~agree).sum())
        top5 = [abs(steps[0, i] - v) for i, v in case["first_top5"]]
        top5_worst = max(top5_worst, max(top5))
        lead = int(np.argmin(agree)) if not agree.all() else agree.size
        lines.append(f"{case['prompt']!r}: leading steps matched {lead}/{agree.size}, "
                     f"argmax agrees at {int(agree.sum())}/{agree.size} steps, margin error "
                     f"mean {errors[-1].mean():.3f} max {errors[-1].max():.3f}, first-step "
                     f"top-5 |ours - llama.cpp| " + " ".join(f"{d:.3f}" for d in top5))
    return dict(margin_err=float(np.concatenate(errors).mean()), n_conf=n_conf, n_bad=n_bad,
                top5=top5_worst, lines=lines)


def test_logits_match_llama_cpp(real):
    name, model, fixture = real
    r = compare(model, fixture)
    print("\n".join(f"{name} {line}" for line in r["lines"]))
    print(f"{name}: margin error mean {r['margin_err']:.3f} (bar {MARGIN_ERR_BAR}); argmax "
          f"differs at {r['n_bad']} of {r['n_conf']} steps whose llama.cpp margin >= "
          f"{NOISE_MARGIN}; first-step top-5 logits differ by at most {r['top5']:.3f} "
          f"(bar {TOP5_BAR})")
    assert r["n_conf"] >= 100, "too few confident steps for the test to mean anything"
    assert r["n_bad"] == 0
    assert r["margin_err"] < MARGIN_ERR_BAR
    assert r["top5"] < TOP5_BAR

    # Negative control: the other RoPE pairing (adjacent <-> half-split), the classic
    # llama-vs-neox mix-up.
    right = model.config["rope_style"]
    model.config["rope_style"] = {"adjacent": "half", "half": "adjacent"}[right]
    try:
        bug = compare(model, fixture)
    finally:
        model.config["rope_style"] = right
    print(f"{name} wrong RoPE pairing: margin error mean {bug['margin_err']:.3f} "
          f"({bug['margin_err'] / MARGIN_ERR_BAR:.1f}x the bar), argmax differs at "
          f"{bug['n_bad']} of {bug['n_conf']} confident steps, top-5 differ by {bug['top5']:.3f}")
    assert bug["margin_err"] > 10 * MARGIN_ERR_BAR
    assert bug["n_bad"] > bug["n_conf"] // 4


def test_greedy_with_kv_cache_matches_llama_cpp(real):
    name, model, fixture = real
    for case in fixture["greedy"]:
        ours = model.greedy(case["prompt_ids"], GREEDY_STEPS)
        theirs = case["greedy_ids"][:GREEDY_STEPS]
        margins = case["margins"][:GREEDY_STEPS]
        low = [i for i, m in enumerate(margins) if m < NOISE_MARGIN]
        n_sure = low[0] if low else GREEDY_STEPS        # steps before the first coin toss
        lead = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), GREEDY_STEPS)
        print(f"{name} {case['prompt']!r}: greedy matches llama.cpp for {lead}/{GREEDY_STEPS} "
              f"steps; must match {n_sure} (first margin < {NOISE_MARGIN} at step "
              f"{low[0] if low else None})")
        assert ours[:n_sure] == theirs[:n_sure]


# =============================================================================================
# 2. Every architecture, on random-weight models
# =============================================================================================

# arch -> write_random_model keywords; qwen3 and gemma3 get a head width other than E/H.
RANDOM = {
    "llama": {},
    "qwen2": {},
    "qwen3": {"head_dim": 32},
    "qwen3moe": {"n_expert": 8, "n_expert_used": 2},
    "gemma3": {"head_dim": 32, "sliding_window": 6},
}
assert set(RANDOM) == set(ARCHITECTURES)


def random_model(tmp_path, arch: str, tag: str = "", **kw) -> ReferenceLLM:
    args = {**RANDOM[arch], **kw}
    return ReferenceLLM(write_random_model(tmp_path / f"{arch}{tag}.gguf", arch, **args))


def random_ids(n: int, seed: int = 1, n_vocab: int = 512) -> list[int]:
    return [int(i) for i in np.random.default_rng(seed).integers(0, n_vocab, n)]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_causal(tmp_path, arch):
    m = random_model(tmp_path, arch)
    ids = random_ids(12)
    base = m.logits(ids)
    changed = list(ids)
    changed[8] = (changed[8] + 1) % m.config["n_vocab"]
    after = m.logits(changed)
    before_diff = float(np.abs(after[:8] - base[:8]).max())
    after_diff = float(np.abs(after[8:] - base[8:]).max())
    print(f"{arch}: changing token 8 moves logits 0..7 by {before_diff:.2e}, "
          f"8..11 by {after_diff:.2e}")
    assert before_diff < 1e-5
    assert after_diff > 1e-2


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_kv_cache_greedy_equals_recompute(tmp_path, arch):
    m = random_model(tmp_path, arch, n_layer=3)
    prompt = random_ids(5, seed=2)
    cached = m.greedy(prompt, 10)
    ids, margins = list(prompt), []
    for _ in range(10):
        last = m.logits(ids)[-1].astype(np.float64)          # from scratch, no cache reuse
        top2 = np.sort(last)[-2:]
        margins.append(top2[1] - top2[0])
        ids.append(int(np.argmax(last)))
    print(f"{arch}: greedy {cached}, smallest margin {min(margins):.3f}")
    # logits() rounds to float32: a margin under ~1e-5 could tie there and decide nothing
    assert min(margins) > 1e-4
    assert cached == ids[len(prompt):]


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_float32_mode_stays_float32(tmp_path, arch):
    """dtype=float32 computes in float32 throughout (a stray float64 scalar would silently
    widen activations and make every product convert its weight matrix) and agrees with the
    float64 default to float32 rounding."""
    path = write_random_model(tmp_path / f"{arch}.gguf", arch, **RANDOM[arch])
    m32, m64 = ReferenceLLM(path, dtype=np.float32), ReferenceLLM(path)
    ids = random_ids(8, seed=9)
    out32 = m32.forward(ids, ref.KVCache(m32.config, len(ids), m32.dtype))
    out64 = m64.forward(ids, ref.KVCache(m64.config, len(ids), m64.dtype))
    rel = float(np.linalg.norm(out32 - out64) / np.linalg.norm(out64))
    print(f"{arch}: float32 vs float64 logits rel-l2 {rel:.1e} (bar 1e-6)")
    assert out32.dtype == np.float32
    assert rel < 1e-6


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_every_tensor_matters(tmp_path, arch):
    """Perturbing any one tensor of the file changes the logits: no weight is silently unused
    (a forgotten bias, QK-norm or post-norm would pass every other test here). The perturbation
    is elementwise, not a common factor: norms make many tensors scale-invariant (a QK-normed
    attn_q, anything feeding Gemma's post-norms)."""
    m = random_model(tmp_path, arch)
    ids = random_ids(6, seed=3)
    base = m.logits(ids)
    rng = np.random.default_rng(8)
    unused = []
    for name in list(m.weights):
        saved = m.weights[name]
        m.weights[name] = saved * (1.0 + 0.5 * rng.standard_normal(saved.shape))
        moved = float(np.abs(m.logits(ids) - base).max())
        m.weights[name] = saved
        if moved < 1e-4:
            unused.append(name)
    assert not unused, f"{arch}: scaling these tensors left the logits unchanged: {unused}"


def test_gemma3_sliding_window_edge(tmp_path):
    """One local layer with window w: position i sees exactly positions i-w+1 .. i."""
    w = 4
    m = random_model(tmp_path, "gemma3", n_layer=1, sliding_window=w)
    assert ref.is_local_layer(m.config, 0)
    ids = random_ids(12, seed=4)
    base = m.logits(ids)[-1]
    i = len(ids) - 1
    moved = {}
    for j in (i - w, i - w + 1):
        changed = list(ids)
        changed[j] = (changed[j] + 7) % m.config["n_vocab"]
        moved[j] = float(np.abs(m.logits(changed)[-1] - base).max())
    print(f"window {w}: changing position i-w moves position i by {moved[i - w]:.2e}, "
          f"i-w+1 by {moved[i - w + 1]:.2e}")
    assert moved[i - w] == 0.0
    assert moved[i - w + 1] > 1e-2


def test_gemma3_global_layer_sees_past_the_window(tmp_path):
    """Layers 0-4 are local, layer 5 global: with 6 layers a token far outside the stacked
    windows still reaches the last position; with 5 it does not."""
    ids = random_ids(40, seed=5)
    far = 0                                   # 39 positions back; 5 windows of 6 reach 25
    for n_layer, reaches in ((5, False), (6, True)):
        m = random_model(tmp_path, "gemma3", tag=f"-{n_layer}", n_layer=n_layer, sliding_window=6)
        changed = list(ids)
        changed[far] = (changed[far] + 7) % m.config["n_vocab"]
        moved = float(np.abs(m.logits(changed)[-1] - m.logits(ids)[-1]).max())
        print(f"gemma3 with {n_layer} layers: a token 39 back moves the last logits by {moved:.2e}")
        assert (moved > 1e-3) == reaches


def test_gemma3_local_layers_ignore_the_file_rope_base(tmp_path):
    """Local layers rotate with base 10000 whatever the file says (the file's base is the
    global layers'); a model of only local layers must not depend on it."""
    ids = random_ids(10, seed=6)
    logits = {}
    for n_layer in (5, 6):
        for base in (1e6, 1e4):
            m = random_model(tmp_path, "gemma3", tag=f"-{n_layer}-{base:g}", n_layer=n_layer,
                             rope_freq_base=base)
            logits[n_layer, base] = m.logits(ids)
    local_only = float(np.abs(logits[5, 1e6] - logits[5, 1e4]).max())
    with_global = float(np.abs(logits[6, 1e6] - logits[6, 1e4]).max())
    print(f"rope base 1e6 vs 1e4: local-only model moves {local_only:.2e}, with a global layer "
          f"{with_global:.2e}")
    assert local_only == 0.0
    assert with_global > 1e-3


def test_qwen3moe_routing(tmp_path, monkeypatch):
    """One token, one layer: only the top-k experts act, and their weights are renormalized."""
    m = random_model(tmp_path, "qwen3moe", n_layer=1)
    k, n_expert = m.config["n_expert_used"], m.config["n_expert"]
    seen = {}
    real_moe = ref.moe_ffn

    def spy(x, w_router, *rest):
        seen["x"] = x.copy()
        return real_moe(x, w_router, *rest)

    monkeypatch.setattr(ref, "moe_ffn", spy)
    ids = [17]
    base = m.logits(ids)
    probs = ref.softmax(seen["x"] @ m.w(0, "ffn_gate_inp.weight").T)[0]
    chosen = set(np.argsort(-probs)[:k].tolist())

    moved = {}
    for e in range(n_expert):
        saved = {n: m.weights[f"blk.0.{n}"].copy() for n in ("ffn_gate_exps.weight",
                                                              "ffn_up_exps.weight",
                                                              "ffn_down_exps.weight")}
        for n in saved:
            m.weights[f"blk.0.{n}"][e] *= 1.5
        moved[e] = float(np.abs(m.logits(ids) - base).max())
        for n, v in saved.items():
            m.weights[f"blk.0.{n}"] = v
    print(f"chosen experts {sorted(chosen)}; logit change per perturbed expert "
          + " ".join(f"{e}:{d:.1e}" for e, d in moved.items()))
    assert all((moved[e] > 1e-3) == (e in chosen) for e in range(n_expert))

    # Lower an unchosen expert's router score: the chosen experts' softmax probabilities rise
    # (their sum changes), but after renormalization their weights -- and the logits -- do not.
    router = m.weights["blk.0.ffn_gate_inp.weight"]
    other = max((e for e in range(n_expert) if e not in chosen), key=lambda e: probs[e])
    x = seen["x"][0]
    saved = router[other].copy()
    router[other] -= 3.0 * x / (x @ x)                 # its logit drops by exactly 3
    new_probs = ref.softmax(x @ router.T)
    mass_before = sum(probs[e] for e in chosen)
    mass_after = sum(new_probs[e] for e in chosen)
    moved_logits = float(np.abs(m.logits(ids) - base).max())
    router[other] = saved
    print(f"chosen experts' probability mass {mass_before:.4f} -> {mass_after:.4f}; "
          f"logits moved {moved_logits:.2e}")
    assert abs(mass_after - mass_before) > 1e-2        # without renormalization this would show
    assert moved_logits < 1e-5


def test_rope_properties():
    """RoPE's defining property: q.k after rotation depends only on the positions' difference;
    the two pairings are the same rotation under the converter's row permutation; linear
    scaling by f at position p equals no scaling at position p*f."""
    rng = np.random.default_rng(7)
    D = 16
    q, k = rng.standard_normal((2, 1, 1, D))
    for style in ("adjacent", "half"):
        dots = [float(np.sum(ref.rope(q, np.array([m + s]), D, 1e4, style)
                             * ref.rope(k, np.array([n + s]), D, 1e4, style)))
                for m, n, s in ((5, 2, 0), (5, 2, 11), (9, 6, 0))]
        assert np.allclose(dots, dots[0], rtol=1e-12), (style, dots)
    # adjacent pairs (2i, 2i+1) are the half-split pairs (i, i + D/2) after interleaving
    perm = np.concatenate([np.arange(0, D, 2), np.arange(1, D, 2)])
    pos = np.arange(6)
    x = rng.standard_normal((6, 3, D))
    adj = ref.rope(x, pos, D, 1e4, "adjacent")
    half = ref.rope(x[..., perm], pos, D, 1e4, "half")
    assert np.allclose(adj[..., perm], half, rtol=1e-12, atol=1e-12)
    assert not np.allclose(adj, ref.rope(x, pos, D, 1e4, "half"))     # the styles do differ
    assert np.allclose(ref.rope(x, pos * 2, D, 1e4, "half", freq_scale=0.5),
                       ref.rope(x, pos, D, 1e4, "half"), rtol=1e-12, atol=1e-12)
    # partial rotation: dims past n_rot pass through
    assert np.array_equal(ref.rope(x, pos, 8, 1e4, "half")[..., 8:], x[..., 8:])


def test_unknown_architecture_names_the_supported_ones(tmp_path):
    import gguf
    path = tmp_path / "phi3.gguf"
    w = gguf.GGUFWriter(path, "phi3")
    w.add_tensor("token_embd.weight", np.zeros((4, 8), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    with pytest.raises(FormatError) as e:
        ReferenceLLM(path)
    msg = str(e.value)
    assert "'phi3'" in msg and all(a in msg for a in ARCHITECTURES), msg


def test_unsupported_rope_scaling_raises(tmp_path):
    import dasllama.gguf
    with dasllama.gguf.open(write_random_model(tmp_path / "q.gguf", "qwen3")) as f:
        meta, tensors = dict(f.metadata), f.tensors
    meta["qwen3.rope.scaling.type"] = "yarn"
    meta["qwen3.rope.scaling.factor"] = 4.0
    with pytest.raises(NotImplementedError, match=r"qwen3\.rope\.scaling\.type"):
        read_config(meta, tensors)
    meta["qwen3.rope.scaling.type"] = "linear"
    assert read_config(meta, tensors)["rope_freq_scale"] == 0.25


@pytest.mark.parametrize("arch", ARCHITECTURES)
def test_tensor_set_is_checked(tmp_path, arch):
    """The reference uses every tensor of the file and refuses one it has no place for (it
    would otherwise ignore it silently), or a missing one."""
    m = random_model(tmp_path, arch)
    required, optional = tensor_names(m.config)
    assert required <= m.weights.keys() <= required | optional
    m.weights["blk.0.attn_output.bias"] = np.zeros(m.config["n_embd"])
    with pytest.raises(NotImplementedError, match=r"blk\.0\.attn_output\.bias"):
        m._check_tensors()
    del m.weights["blk.0.attn_output.bias"]
    del m.weights["blk.1.ffn_norm.weight"]
    with pytest.raises(GGUFError, match=r"blk\.1\.ffn_norm\.weight"):
        m._check_tensors()


def test_bad_ids(tmp_path):
    m = random_model(tmp_path, "llama")
    with pytest.raises(ValueError, match="512"):
        m.logits([1, 512])
    with pytest.raises(ValueError):
        m.logits([])
