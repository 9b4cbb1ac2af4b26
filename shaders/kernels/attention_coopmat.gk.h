// Prefill attention on cooperative matrices: the function of attention.gk.h (causal softmax
// attention over the f16 K/V cache, grouped-query, optionally windowed; same buffers, arguments
// and positions) for a stamp's one head size GK_ACM_D (= head_dim = head_dim_v: 64, 128, 256).
// Vulkan only, like matmul_coopmat.gk.h; the host picks it for prompt calls on devices with
// 16 x 16 x 16 float16 products on subgroups of 32.
//
// One workgroup of four subgroups holds 16 query rows of one head; its subgroups take the
// 16-key granules in turn (granule i: subgroup i % 4), so a head's short query tiles still
// occupy four subgroups. Scores S = Q K^T come from 16 x 16 x 16 products: Q (rounded to
// float16) from workgroup memory, K^T loaded straight from the cache (column-major: a key's
// values contiguous). Two passes over the keys instead of an online softmax (accumulators
// cannot be rescaled row by row in place): the first finds each query's maximum score (the
// four subgroups' maxima combined), the second forms the weights p = exp(s - max) (rounded to
// float16, summed in float32 for the denominator) and adds P V, V loaded straight from the cache
// (row-major), into GK_ACM_D / 16 accumulators per subgroup; the four subgroups' sums are added
// at the end in a fixed order. The scores are computed twice; their products are cheap here.
// Lanes 0-15 of a subgroup each own one query row of the softmax (through a 16 x 16 staging
// area per subgroup).
//
// Granules read keys kb .. kb + 15 whole, also past the last visible key: the host allocates the
// caches to a multiple of 16 rows and zero-fills them, so those rows hold finite values (zeros or
// earlier calls' keys), whose weights are exactly zero.
// GK_ACM_ALL_KEYS=1 stamps the bidirectional form (an encoder's self-attention): every query
// sees keys 0 .. pos_base[0] + pos0, whatever its row.
// Dispatch: gx = n_head, gy = ceil(n_tok / 16). Limits: head_dim = head_dim_v = GK_ACM_D; the
// cache rows, k_off and v_off multiples of eight halves (16-byte aligned loads).
#include "../gk/gk.h"

#ifndef GK_ACM_D
#define GK_ACM_D 64u
#endif
#ifndef GK_ACM_ALL_KEYS
#define GK_ACM_ALL_KEYS 0
#endif
#define GK_WG 128
#define GK_ACM_SG 4u                                 // subgroups (of 32) a workgroup has
#define GK_ACM_Q 16u                                 // query rows a workgroup holds
#define GK_ACM_KG 16u                                // keys a granule holds
#define GK_ACM_QS4 ((GK_ACM_D + 8u) / 4u)            // Q row stride in half4: padded by eight
#define GK_ACM_PS4 ((GK_ACM_KG + 8u) / 4u)           // P row stride in half4
#define GK_ACM_NONE -3.0e38f                         // stands for -infinity (as attention.gk.h)

#define GK_BUFFERS(B) B(0, ro, float, q) B(1, ro, uint, kc) B(2, ro, uint, vc) \
    B(3, wo, float, attn_out) B(4, ro, uint, pos_base)
#define GK_ARGS(A) A(uint, n_tok) A(uint, n_head) A(uint, n_head_kv) A(uint, head_dim) \
    A(uint, head_dim_v) A(uint, pos0) A(uint, window) A(uint, q_off) A(uint, q_stride) \
    A(uint, k_off) A(uint, v_off) A(uint, out_off) A(uint, out_stride) A(float, scale)
// q_s: the query tile (float16); per subgroup: s_s one granule's scores (later a tile of its
// output sums), p_s their weights (float16); m_s / l_s each row's partial maximum and sum.
#define GK_SHARED(S) S(half4, q_s, GK_ACM_Q * GK_ACM_QS4) \
    S(float, s_s, GK_ACM_SG * GK_ACM_Q * GK_ACM_KG) \
    S(half4, p_s, GK_ACM_SG * GK_ACM_Q * GK_ACM_PS4) \
    S(float, m_s, GK_ACM_SG * GK_ACM_Q) S(float, l_s, GK_ACM_SG * GK_ACM_Q)

#ifdef GK_BODY
// S (16 queries x 16 keys from key kb) into this subgroup's s_s, row-major; ends synchronised.
#define GK_ACM_SCORES(kb) \
    { \
        GK_CM_ACC s_ = gk_cm_zero(); \
        GK_UNROLL for (uint c_ = 0u; c_ < GK_ACM_D / 16u; ++c_) { \
            GK_CM_A a_; \
            GK_CM_B b_; \
            gk_cm_load_row_major(a_, q_s, 4u * c_, GK_ACM_QS4); \
            gk_cm_load_col_major(b_, kc, k_base + (kb) * k_row + 8u * c_, k_row); \
            s_ = gk_cm_mul_add(a_, b_, s_); \
        } \
        gk_cm_store_row_major(s_, s_s, sb, GK_ACM_KG); \
        GK_SUBGROUP_BARRIER(); \
    }

GK_KERNEL(attention_coopmat, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint lane = GK_LANE;
    uint sg = GK_SUBGROUP_ID;
    uint h = GK_GROUP_ID.x;
    uint t0 = GK_GROUP_ID.y * GK_ACM_Q;
    if (t0 >= args.n_tok) return;  // the whole workgroup leaves together
    uint g = h / (args.n_head / args.n_head_kv);
    uint n_q = gk_min(GK_ACM_Q, args.n_tok - t0);
#if GK_ACM_ALL_KEYS
    uint pos_first = pos_base[0] + args.pos0;   // every row's last key
    uint pos_last = pos_first;
#else
    uint pos_first = pos_base[0] + args.pos0 + t0;
    uint pos_last = pos_first + n_q - 1u;
#endif
    bool cut = args.window > 0u && pos_first + 1u > args.window;
    uint k_begin = cut ? pos_first + 1u - args.window : 0u;
    // This subgroup's first granule; it steps by GK_ACM_SG granules.
    uint kg0 = k_begin - k_begin % GK_ACM_KG + sg * GK_ACM_KG;
    const uint kstep = GK_ACM_SG * GK_ACM_KG;
    // Cache rows and this head's first element, in uint (f16 pair) units.
    uint k_row = args.n_head_kv * (GK_ACM_D / 2u);
    uint v_row = k_row;
    uint k_base = args.k_off / 2u + g * (GK_ACM_D / 2u);
    uint v_base = args.v_off / 2u + g * (GK_ACM_D / 2u);
    // This subgroup's staging areas.
    uint sb = sg * GK_ACM_Q * GK_ACM_KG;
    uint pb = sg * GK_ACM_Q * GK_ACM_PS4;

    for (uint i = tid; i < GK_ACM_Q * (GK_ACM_D / 4u); i += GK_WG) {
        uint qi = i / (GK_ACM_D / 4u);
        uint d4 = i - qi * (GK_ACM_D / 4u);
        float4 v = gk_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (qi < n_q) {
            uint src = args.q_off + (t0 + qi) * args.q_stride + h * GK_ACM_D + 4u * d4;
            v = gk_float4(q[src], q[src + 1u], q[src + 2u], q[src + 3u]);
        }
        q_s[qi * GK_ACM_QS4 + d4] = gk_half4(v);
    }
    GK_BARRIER();

    // Lane r < 16 owns query row r: its position, first visible key and running values.
    uint r = lane;
#if GK_ACM_ALL_KEYS
    uint pos = pos_first;
#else
    uint pos = pos_first + r;
#endif
    uint lo = args.window > 0u && pos + 1u > args.window ? pos + 1u - args.window : 0u;
    bool row_live = r < n_q;

    // 1. Each row's maximum scaled score: this subgroup's granules, then all four.
    float m_row = GK_ACM_NONE;
    for (uint kb = kg0; kb <= pos_last; kb += kstep) {
        GK_ACM_SCORES(kb)
        if (row_live) {
            for (uint j = 0u; j < GK_ACM_KG; ++j) {
                uint key = kb + j;
                if (key >= lo && key <= pos)
                    m_row = gk_max(m_row, s_s[sb + r * GK_ACM_KG + j] * args.scale);
            }
        }
        GK_SUBGROUP_BARRIER();
    }
    if (r < GK_ACM_Q) m_s[sg * GK_ACM_Q + r] = m_row;
    GK_BARRIER();
    if (r < GK_ACM_Q) {
        m_row = m_s[r];
        for (uint s2 = 1u; s2 < GK_ACM_SG; ++s2) m_row = gk_max(m_row, m_s[s2 * GK_ACM_Q + r]);
    }

    // 2. The weights and P V over this subgroup's granules.
    GK_CM_ACC o[GK_ACM_D / 16u];
    GK_UNROLL for (uint c = 0u; c < GK_ACM_D / 16u; ++c) o[c] = gk_cm_zero();
    float l_row = 0.0f;
    for (uint kb = kg0; kb <= pos_last; kb += kstep) {
        GK_ACM_SCORES(kb)
        if (r < GK_ACM_Q) {
            float p[GK_ACM_KG];
            GK_UNROLL for (uint j = 0u; j < GK_ACM_KG; ++j) {
                uint key = kb + j;
                bool seen = row_live && key >= lo && key <= pos;
                p[j] = seen ? exp(s_s[sb + r * GK_ACM_KG + j] * args.scale - m_row) : 0.0f;
                l_row += p[j];
            }
            GK_UNROLL for (uint j4 = 0u; j4 < GK_ACM_KG / 4u; ++j4)
                p_s[pb + r * GK_ACM_PS4 + j4] = gk_half4(gk_float4(p[4u * j4], p[4u * j4 + 1u],
                                                                   p[4u * j4 + 2u],
                                                                   p[4u * j4 + 3u]));
        }
        GK_SUBGROUP_BARRIER();
        GK_CM_A pa;
        gk_cm_load_row_major(pa, p_s, pb, GK_ACM_PS4);
        GK_UNROLL for (uint c = 0u; c < GK_ACM_D / 16u; ++c) {
            GK_CM_B vb;
            gk_cm_load_row_major(vb, vc, v_base + kb * v_row + 8u * c, v_row);
            o[c] = gk_cm_mul_add(pa, vb, o[c]);
        }
        GK_SUBGROUP_BARRIER();
    }
    if (r < GK_ACM_Q) l_s[sg * GK_ACM_Q + r] = l_row;

    // 3. Each 16 x 16 output tile: the four subgroups' sums through s_s, added in subgroup
    // order, divided by the row's sum (every live row sees its own key: the sum is positive).
    GK_UNROLL for (uint c = 0u; c < GK_ACM_D / 16u; ++c) {
        gk_cm_store_row_major(o[c], s_s, sb, GK_ACM_KG);
        GK_BARRIER();
        for (uint e = tid; e < GK_ACM_Q * 16u; e += GK_WG) {
            uint qi = e / 16u;
            if (qi < n_q) {
                float sum = s_s[e];
                float l = l_s[qi];
                for (uint s2 = 1u; s2 < GK_ACM_SG; ++s2) {
                    sum += s_s[s2 * GK_ACM_Q * GK_ACM_KG + e];
                    l += l_s[s2 * GK_ACM_Q + qi];
                }
                uint dst = args.out_off + (t0 + qi) * args.out_stride + h * GK_ACM_D + 16u * c +
                           e % 16u;
                attn_out[dst] = gk_div(sum, l);
            }
        }
        GK_BARRIER();
    }
}
GK_KERNEL_END
#endif
