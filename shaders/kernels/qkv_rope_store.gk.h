// The step between the q/k/v projection and attention, in one pass: for every head of every
// token row of the packed projection qkv ([n_tok][q | k | v], row stride qkv_stride):
//   + bias (qwen2; flags bit 1), RMSNorm with q_norm / k_norm (qwen3, gemma3; flags bit 0),
//   rope of the first n_rot dims (NORM pairs, or NEOX with GK_ROPE_NEOX=1), then
//   q heads written back in place, k and v heads appended to the f16 caches kc and vc at
//   element (pos_base[0] + dst_pos + t) * kv_dim + h * head_dim (kv_dim = n_head_kv * head_dim).
// The position base is read from memory so that one recorded command buffer serves every
// decode step.
// Same order and rounding as the separate kernels (eltwise add, rmsnorm, rope, kv_store).
// Dispatch: gx = n_head + 2 * n_head_kv (one workgroup per head slot: q heads, k heads, v
// heads), gy = n_tok. head_dim even and at most GK_QKV_DMAX; v heads as wide as k heads.
#include "../gk/gk.h"

#ifndef GK_ROPE_NEOX
#define GK_ROPE_NEOX 0
#endif
// The widest head the shared row holds (gemma3: 256).
#define GK_QKV_DMAX 256

#define GK_BUFFERS(B) B(0, rw, float, qkv) B(1, ro, float, tab) B(2, rw, uint, kc) \
    B(3, rw, uint, vc) B(4, ro, float, q_norm) B(5, ro, float, k_norm) B(6, ro, float, bias) \
    B(7, ro, uint, pos_base)
#define GK_ARGS(A) A(uint, n_head) A(uint, n_head_kv) A(uint, head_dim) A(uint, n_rot) \
    A(uint, qkv_off) A(uint, qkv_stride) A(uint, dst_pos) A(uint, tab_off) A(uint, flags) \
    A(float, eps)
#define GK_SHARED(S) S(float, head, GK_QKV_DMAX) S(float, part, GK_REDUCE_PARTS(GK_WG))
#define GK_WG 128

#ifdef GK_BODY
GK_KERNEL(qkv_rope_store, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint slot = GK_GROUP_ID.x;
    uint t = GK_GROUP_ID.y;
    uint hd = args.head_dim;
    uint q_dim = args.n_head * hd;
    uint kv_dim = args.n_head_kv * hd;
    // kind 0: a q head, 1: a k head, 2: a v head (uniform over the workgroup).
    uint kind = slot < args.n_head ? 0u : (slot < args.n_head + args.n_head_kv ? 1u : 2u);
    uint h = kind == 0u ? slot : (kind == 1u ? slot - args.n_head : slot - args.n_head - args.n_head_kv);
    uint col = kind == 0u ? h * hd : (kind == 1u ? q_dim + h * hd : q_dim + kv_dim + h * hd);
    uint row = args.qkv_off + t * args.qkv_stride + col;

    for (uint i = GK_LOCAL_ID; i < hd; i += GK_WG) {
        float v = qkv[row + i];
        if ((args.flags & 2u) != 0u) v += bias[col + i];
        head[i] = v;
    }
    GK_BARRIER();
    if (kind < 2u && (args.flags & 1u) != 0u) {
        float ss = 0.0f;
        for (uint i = GK_LOCAL_ID; i < hd; i += GK_WG) ss = gk_fma(head[i], head[i], ss);
        float total;
        GK_WG_SUM_INTO(total, ss, part, 0u)
        float inv = gk_rms_inv(total, hd, args.eps);
        for (uint i = GK_LOCAL_ID; i < hd; i += GK_WG) {
            GK_PRECISE float xi = head[i] * inv;
            head[i] = xi * (kind == 0u ? q_norm[i] : k_norm[i]);
        }
        GK_BARRIER();
    }
    if (kind < 2u) {
        uint half_rot = args.n_rot / 2u;
        for (uint i = GK_LOCAL_ID; i < half_rot; i += GK_WG) {
#if GK_ROPE_NEOX
            uint a = i;
            uint b = i + half_rot;
#else
            uint a = 2u * i;
            uint b = a + 1u;
#endif
            uint ti = args.tab_off + (t * half_rot + i) * 2u;
            float c = tab[ti];
            float s = tab[ti + 1u];
            float x0 = head[a];
            float x1 = head[b];
            GK_PRECISE float ya = x0 * c - x1 * s;
            GK_PRECISE float yb = x0 * s + x1 * c;
            head[a] = ya;
            head[b] = yb;
        }
        GK_BARRIER();
    }
    if (kind == 0u) {
        for (uint i = GK_LOCAL_ID; i < hd; i += GK_WG) qkv[row + i] = head[i];
    } else {
        uint base = ((pos_base[0] + args.dst_pos + t) * kv_dim + h * hd) / 2u;
        for (uint j = GK_LOCAL_ID; j < hd / 2u; j += GK_WG) {
            uint packed = gk_f32_to_f16_rne(head[2u * j]) | (gk_f32_to_f16_rne(head[2u * j + 1u]) << 16u);
            if (kind == 1u) kc[base + j] = packed;
            else vc[base + j] = packed;
        }
    }
}
GK_KERNEL_END
#endif
