// One query row's attention step over a float32 K/V cache, with its rotary embedding and the
// cache store fused in (the Pocket TTS frame loop: attention_f32 after rope_store_f32, in one
// dispatch). The row qkv[qkv_off ...] holds q (n_head heads), k and v (n_head_kv heads each) of
// head_dim values, unrotated; its position is p = pos_base[0] + pos0. Workgroup h rotates
// q head h and k head g = h / (n_head / n_head_kv) (pairs (2i, 2i + 1), NORM, the whole head,
// as rope_store_f32), the first workgroup of each kv head writes k and v to the caches at row
// p (and, store_rows != 0, to rows[rows_off + g * head_dim ...] and + rows_v_off), and every
// workgroup attends over keys lo..p (lo = p - window + 1 when window > 0, clamped at 0): the
// cache's rows below p, which earlier dispatches wrote, and its own k and v for key p, so no
// workgroup reads a row another one writes. Scores, softmax and the weighted sum are
// attention_f32's, in the same order: the results are those of the two kernels bit for bit.
// attn_out[out_off + h * head_dim + d] gets the output.
// Dispatch: gx = n_head. Limits: attention_f32's.
#include "../gk/gk.h"
#include "softmax_weights.h"

#define GK_WG 128
#define GK_ATTS_KEYS 4096u
#define GK_ATTS_DMAX 128u

#define GK_BUFFERS(B) B(0, ro, float, qkv) B(1, ro, float, freqs) B(2, ro, uint, pos_base) \
    B(3, rw, float, kc) B(4, rw, float, vc) B(5, wo, float, attn_out) B(6, wo, float, rows)
#define GK_ARGS(A) A(uint, n_head) A(uint, n_head_kv) A(uint, head_dim) A(uint, pos0) \
    A(uint, window) A(uint, qkv_off) A(uint, out_off) A(uint, store_rows) A(uint, rows_off) \
    A(uint, rows_v_off) A(float, scale)
#define GK_SHARED(S) S(float, qs, GK_ATTS_DMAX) S(float, ks, GK_ATTS_DMAX) \
    S(float, vs, GK_ATTS_DMAX) S(float, sc, GK_ATTS_KEYS) S(float, vp, GK_WG) \
    S(float, part, GK_REDUCE_PARTS(GK_WG))

#ifdef GK_BODY
GK_KERNEL(attention_step_f32, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint h = GK_GROUP_ID.x;
    uint D = args.head_dim;
    uint g = h / (args.n_head / args.n_head_kv);
    uint kv_stride = args.n_head_kv * D;
    uint pos = pos_base[0] + args.pos0;
    uint qb = args.qkv_off + h * D;
    uint kb = args.qkv_off + args.n_head * D + g * D;
    uint vb = kb + kv_stride;
    // Rotation: rope_table.gk.h's angle, rope.gk.h's products.
    for (uint i = tid; i < D / 2u; i += GK_WG) {
        float p = float(pos);
        float f_hi = freqs[2u * i];
        float f_lo = freqs[2u * i + 1u];
        GK_PRECISE float a_hi = p * f_hi;
        GK_PRECISE float a_lo = gk_two_prod_err(p, f_hi, a_hi) + p * f_lo;
        float2 cs = gk_cos_sin(a_hi, a_lo);
        float q0 = qkv[qb + 2u * i];
        float q1 = qkv[qb + 2u * i + 1u];
        GK_PRECISE float qa = q0 * cs.x - q1 * cs.y;
        GK_PRECISE float qc = q0 * cs.y + q1 * cs.x;
        qs[2u * i] = qa;
        qs[2u * i + 1u] = qc;
        float k0 = qkv[kb + 2u * i];
        float k1 = qkv[kb + 2u * i + 1u];
        GK_PRECISE float ka = k0 * cs.x - k1 * cs.y;
        GK_PRECISE float kc2 = k0 * cs.y + k1 * cs.x;
        ks[2u * i] = ka;
        ks[2u * i + 1u] = kc2;
    }
    for (uint d = tid; d < D; d += GK_WG) vs[d] = qkv[vb + d];
    GK_BARRIER();
    if (h % (args.n_head / args.n_head_kv) == 0u) {
        for (uint d = tid; d < D; d += GK_WG) {
            kc[pos * kv_stride + g * D + d] = ks[d];
            vc[pos * kv_stride + g * D + d] = vs[d];
            if (args.store_rows != 0u) {
                rows[args.rows_off + g * D + d] = ks[d];
                rows[args.rows_off + args.rows_v_off + g * D + d] = vs[d];
            }
        }
    }

    uint lo = (args.window > 0u && pos + 1u > args.window) ? pos + 1u - args.window : 0u;
    uint nk = gk_min(pos + 1u - lo, GK_ATTS_KEYS);
    // 1. Scores, and this thread's max (key pos from ks).
    float m = -3.0e38f;
    for (uint j = tid; j < nk; j += GK_WG) {
        uint key = lo + j;
        float dot = 0.0f;
        if (key == pos) {
            for (uint d = 0u; d < D; ++d) dot = gk_fma(qs[d], ks[d], dot);
        } else {
            uint kr = key * kv_stride + g * D;
            for (uint d = 0u; d < D; ++d) dot = gk_fma(qs[d], kc[kr + d], dot);
        }
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
        for (uint j = kp; j < nk; j += kparts) {
            uint key = lo + j;
            float v = key == pos ? vs[d] : vc[key * kv_stride + g * D + d];
            acc = gk_fma(sc[j], v, acc);
        }
    }
    vp[tid] = acc;
    GK_BARRIER();
    if (tid < D) {
        float o = 0.0f;
        for (uint k = 0u; k < kparts; ++k) o += vp[k * D + tid];
        attn_out[args.out_off + h * D + tid] = gk_div(o, lsum);
    }
}
GK_KERNEL_END
#endif
