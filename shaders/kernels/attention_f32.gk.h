// Causal softmax attention over a float32 K/V cache (the Pocket TTS backbone and Mimi's
// transformer keep theirs in float32, as the CPU chain does), grouped-query, optionally
// windowed (cpu::attention). Query token t sits at position pos_base[0] + pos0 + t (the base
// read from memory, so one recorded command buffer serves every position); head h reads
// q[q_off + t * q_stride + h * head_dim] and kv head g = h / (n_head / n_head_kv); it sees the
// keys p with lo <= p <= pos, lo = pos - window + 1 when window > 0 (clamped at 0),
// else 0. Key p of head g is kc[k_off + p * kv_stride + g * head_dim + d] (vc alike);
// attn_out[out_off + t * out_stride + h * head_dim + d] gets the softmax(scale * q.k)-weighted
// sum of the values.
//
// One workgroup per (head, query): every score is held in workgroup memory, so the softmax is
// exact in two passes (the workgroup max, then the sum of exponentials, both through the
// workgroup reduce) with no rescaling. Then thread (part kp, dim d) sums the weighted values of
// the keys j = kp (mod WG / head_dim), and the parts are added in a fixed order.
// Dispatch: gx = n_head, gy = n_tok. Limits (the host's admission rules): head_dim <= 128,
// at most GK_ATTN32_KEYS keys per query (window or position), n_head a multiple of n_head_kv.
#include "../gk/gk.h"
#include "softmax_weights.h"

#define GK_WG 128
#define GK_ATTN32_KEYS 4096u
#define GK_ATTN32_DMAX 128u

#define GK_BUFFERS(B) B(0, ro, float, q) B(1, ro, float, kc) B(2, ro, float, vc) \
    B(3, wo, float, attn_out) B(4, ro, uint, pos_base)
#define GK_ARGS(A) A(uint, n_tok) A(uint, n_head) A(uint, n_head_kv) A(uint, head_dim) \
    A(uint, pos0) A(uint, window) A(uint, q_off) A(uint, q_stride) A(uint, kv_stride) \
    A(uint, k_off) A(uint, v_off) A(uint, out_off) A(uint, out_stride) A(float, scale)
#define GK_SHARED(S) S(float, qs, GK_ATTN32_DMAX) S(float, sc, GK_ATTN32_KEYS) \
    S(float, vp, GK_WG) S(float, part, GK_REDUCE_PARTS(GK_WG))

#ifdef GK_BODY
GK_KERNEL(attention_f32, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint h = GK_GROUP_ID.x;
    uint t = GK_GROUP_ID.y;
    if (t >= args.n_tok) return;  // the whole workgroup leaves together
    uint D = args.head_dim;
    uint g = h / (args.n_head / args.n_head_kv);
    uint pos = pos_base[0] + args.pos0 + t;
    uint lo = (args.window > 0u && pos + 1u > args.window) ? pos + 1u - args.window : 0u;
    uint nk = gk_min(pos + 1u - lo, GK_ATTN32_KEYS);
    for (uint d = tid; d < D; d += GK_WG) qs[d] = q[args.q_off + t * args.q_stride + h * D + d];
    GK_BARRIER();

    // 1. Scores, and this thread's max.
    float m = -3.0e38f;
    for (uint j = tid; j < nk; j += GK_WG) {
        uint kb = args.k_off + (lo + j) * args.kv_stride + g * D;
        float dot = 0.0f;
        for (uint d = 0u; d < D; ++d) dot = gk_fma(qs[d], kc[kb + d], dot);
        float s = dot * args.scale;
        sc[j] = s;
        m = gk_max(m, s);
    }
    float mx;
    GK_WG_MAX_INTO(mx, m, part, 0u)
    // 2. Weights exp(s - max) and their sum.
    float lsum;
    GK_SOFTMAX_WEIGHTS(sc, nk, mx, lsum, part)
    // 3. Values: part kp of the keys, dimension d.
    uint kparts = GK_WG / D;
    uint kp = tid / D;
    uint d = tid - kp * D;
    float acc = 0.0f;
    if (kp < kparts) {
        uint vb = args.v_off + g * D + d;
        for (uint j = kp; j < nk; j += kparts) acc = gk_fma(sc[j], vc[vb + (lo + j) * args.kv_stride], acc);
    }
    vp[tid] = acc;
    GK_BARRIER();
    if (tid < D) {
        float o = 0.0f;
        for (uint k = 0u; k < kparts; ++k) o += vp[k * D + tid];
        // Every query sees at least its own key, so lsum >= 1.
        attn_out[args.out_off + t * args.out_stride + h * D + tid] = gk_div(o, lsum);
    }
}
GK_KERNEL_END
#endif
