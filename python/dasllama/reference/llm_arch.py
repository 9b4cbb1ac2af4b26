"""What a GGUF file says about its model: the hyperparameters the reference forward pass needs.

``read_config(metadata, tensors)`` turns a file's metadata (and its tensor table, for facts only
the tensors carry) into one flat dict, the same for every architecture, so that the forward
pass in :mod:`dasllama.reference.llm` reads names, never metadata keys. Defaults follow
llama.cpp's loader (src/llama-model.cpp, ``load_hparams``): a key that llama.cpp treats as
optional is optional here, with llama.cpp's default.

Facts that are fixed by an architecture rather than stored in its file:

========  ==========  ==========  ========  ======  ===============================================
arch      RoPE pairs  q/k/v bias  QK-norm   FFN     extras
========  ==========  ==========  ========  ======  ===============================================
llama     adjacent    no          no        SwiGLU  optional rope_freqs (per-frequency divisors)
qwen2     half-split  yes         no        SwiGLU
qwen3     half-split  no          yes       SwiGLU
qwen3moe  half-split  no          yes       MoE     softmax router, top-k, weights renormalized
gemma3    half-split  no          yes       GeGLU   sqrt(E) embedding scale, post-norms, sliding
                                                    window on layers il % 6 < 5 (rope base 1e4)
========  ==========  ==========  ========  ======  ===============================================

RoPE pairs: llama.cpp's ``LLAMA_ROPE_TYPE_NORM`` rotates adjacent pairs (x[2i], x[2i+1]); its
``NEOX`` type rotates (x[i], x[i + n_rot/2]). Hugging Face's Llama rotates half-split pairs
too, but the GGUF converter permutes the rows of attn_q/attn_k so that adjacent pairs in the
file are those halves; the file therefore needs the adjacent rotation. The Qwen and Gemma
converters do not permute, so those files keep the half-split rotation.
"""

from __future__ import annotations

import math
from typing import Any

from ..errors import FormatError, GGUFError

ARCHITECTURES = ("llama", "qwen2", "qwen3", "qwen3moe", "gemma3")

_ROPE_STYLE = {"llama": "adjacent", "qwen2": "half", "qwen3": "half", "qwen3moe": "half",
               "gemma3": "half"}

# gemma3: fixed by the architecture (llama.cpp sets them in code; the converter writes none).
GEMMA3_SWA_PERIOD = 6               # layer il is local (sliding) when il % 6 < 5
GEMMA3_ROPE_BASE_LOCAL = 10000.0    # rope base of the local layers; the global ones use the file's
GEMMA3_27B_LAYERS = 62              # the 27B scales queries by 1/sqrt(E/H), the others 1/sqrt(D)


def read_config(metadata: dict[str, Any], tensors: dict[str, Any]) -> dict[str, Any]:
    """The hyperparameters of a GGUF model as one dict (see the keys set below).

    metadata: the file's metadata; tensors: name -> an object with ``.shape`` (NumPy order).
    Raises FormatError for an architecture outside ARCHITECTURES, GGUFError for a missing
    required key, NotImplementedError for a feature the reference does not compute (a RoPE
    scaling type other than none/linear), naming the key.
    """
    arch = metadata.get("general.architecture")
    if arch not in ARCHITECTURES:
        raise FormatError(f"general.architecture = {arch!r} is not supported by the reference "
                          f"forward pass; supported: {', '.join(ARCHITECTURES)}")

    def get(key: str, default: Any = KeyError) -> Any:
        full = f"{arch}.{key}"
        if full in metadata:
            return metadata[full]
        if default is KeyError:
            raise GGUFError(f"metadata key {full!r} is missing; the {arch} forward pass needs it")
        return default

    if "token_embd.weight" not in tensors:
        raise GGUFError("tensor 'token_embd.weight' is missing")
    n_vocab, n_embd = (int(d) for d in tensors["token_embd.weight"].shape)

    n_head = int(get("attention.head_count"))
    head_dim = int(get("attention.key_length", n_embd // n_head))
    c: dict[str, Any] = dict(
        arch=arch,
        n_vocab=n_vocab,
        n_embd=int(get("embedding_length")),
        n_layer=int(get("block_count")),
        n_ctx_train=int(get("context_length", 0)),
        n_head=n_head,
        n_head_kv=int(get("attention.head_count_kv", n_head)),
        head_dim=head_dim,                                    # D: query/key width per head
        head_dim_v=int(get("attention.value_length", n_embd // n_head)),
        n_ff=int(get("feed_forward_length", 0)),
        rms_eps=float(get("attention.layer_norm_rms_epsilon")),
        qk_norm=arch in ("qwen3", "qwen3moe", "gemma3"),         # RMSNorm per head on q and k
        rope_style=_ROPE_STYLE[arch],
        rope_base=float(get("rope.freq_base", 10000.0)),
        n_rot=int(get("rope.dimension_count", head_dim)),     # leading dims of a head that rotate
        rope_freq_scale=_rope_freq_scale(arch, get),          # position multiplier (linear scaling)
        attn_scale=1.0 / math.sqrt(head_dim),                 # softmax(q.k * attn_scale)
        embd_scale=1.0,                                       # token embeddings times this
        final_logit_softcap=0.0,                              # 0: none
        tied_output="output.weight" not in tensors,           # lm head = token_embd
        sliding_window=0,                                     # 0: every layer attends globally
        swa_period=0,
        rope_base_local=0.0,
        n_expert=int(get("expert_count", 0)),
        n_expert_used=int(get("expert_used_count", 0)),
        n_ff_exp=int(get("expert_feed_forward_length", 0)),
    )
    if c["n_embd"] != n_embd:
        raise GGUFError(f"{arch}.embedding_length = {c['n_embd']} but token_embd.weight has rows "
                        f"of {n_embd}")
    if c["n_head"] % c["n_head_kv"]:
        raise GGUFError(f"{arch}.attention.head_count = {c['n_head']} is not a multiple of "
                        f"head_count_kv = {c['n_head_kv']}")
    if c["n_rot"] % 2 or c["n_rot"] > head_dim:
        raise GGUFError(f"{arch}.rope.dimension_count = {c['n_rot']} must be even and at most the "
                        f"head width {head_dim}")

    if arch == "qwen3moe":
        if not 0 < c["n_expert_used"] <= c["n_expert"]:
            raise GGUFError(f"qwen3moe needs 0 < expert_used_count ({c['n_expert_used']}) <= "
                            f"expert_count ({c['n_expert']})")
    if arch == "gemma3":
        c["embd_scale"] = math.sqrt(n_embd)
        if c["n_layer"] == GEMMA3_27B_LAYERS:
            c["attn_scale"] = 1.0 / math.sqrt(n_embd / n_head)
        c["sliding_window"] = int(get("attention.sliding_window", 0))
        if c["sliding_window"] > 0:      # llama.cpp: no window written -> no local layers
            c["swa_period"] = GEMMA3_SWA_PERIOD
            c["rope_base_local"] = GEMMA3_ROPE_BASE_LOCAL
        c["final_logit_softcap"] = float(get("final_logit_softcapping", 0.0))
    if "rope_freqs.weight" in tensors and arch != "llama":
        raise NotImplementedError(f"tensor 'rope_freqs.weight' (RoPE frequency factors) is not "
                                  f"used by {arch} in llama.cpp; the reference does not guess")
    return c


def _rope_freq_scale(arch: str, get) -> float:
    """RoPE position scaling: 1.0 for none; 1/factor for linear (positions are divided by the
    factor). Other scaling types change the frequencies themselves and are not implemented."""
    kind = get("rope.scaling.type", "none")
    factor = float(get("rope.scaling.factor", 0.0) or get("rope.scale_linear", 0.0))
    if kind == "none" or (kind == "linear" and factor in (0.0, 1.0)):
        return 1.0
    if kind == "linear":
        return 1.0 / factor
    raise NotImplementedError(f"{arch}.rope.scaling.type = {kind!r}: the reference implements "
                              f"only 'none' and 'linear' RoPE scaling")


def tensor_names(c: dict[str, Any]) -> tuple[set[str], set[str]]:
    """(required, optional) tensor names of a model with config c. The forward pass uses
    exactly these; a file with any other tensor holds something it would silently ignore."""
    arch = c["arch"]
    required = {"token_embd.weight", "output_norm.weight"}
    optional = {"output.weight"} | ({"rope_freqs.weight"} if arch == "llama" else set())
    for il in range(c["n_layer"]):
        b = f"blk.{il}."
        layer = ["attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm"]
        if c["qk_norm"]:
            layer += ["attn_q_norm", "attn_k_norm"]
        if arch == "gemma3":
            layer += ["post_attention_norm", "post_ffw_norm"]
        if arch == "qwen3moe":
            layer += ["ffn_gate_inp", "ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"]
        else:
            layer += ["ffn_gate", "ffn_up", "ffn_down"]
        required |= {b + n + ".weight" for n in layer}
        biases = {b + n + ".bias" for n in ("attn_q", "attn_k", "attn_v")}
        (required if arch == "qwen2" else optional).update(biases)   # llama.cpp: optional elsewhere
    return required, optional


def is_local_layer(c: dict[str, Any], il: int) -> bool:
    """True when layer il attends through the sliding window (gemma3's local layers)."""
    return c["swa_period"] > 0 and il % c["swa_period"] < c["swa_period"] - 1
