// Causal softmax attention over the f16 K/V cache, grouped-query, optionally windowed
// (cpu::attention). Query token t < n_tok sits at position p0 + t, p0 = pos_base[0] + pos0
// (the base is read from memory so that one recorded command buffer serves every decode step);
// head h reads q[q_off + t * q_stride + h * head_dim] and kv head g = h / (n_head / n_head_kv);
// it sees the keys p with lo <= p <= p0 + t, lo = p0 + t - window + 1 when window > 0 (clamped at 0),
// else 0. Key p of head g is f16 element k_off + p * n_head_kv * head_dim + g * head_dim + d
// of kc (vc alike with head_dim_v); attn_out[out_off + t * out_stride + h * head_dim_v + d]
// gets the softmax(scale * q.k)-weighted sum of the values. (The output buffer is attn_out:
// `out` is a reserved word in GLSL.)
//
// One workgroup holds TQ queries of one head (decode: TQ = 1; prefill: GK_ATTN_PREFILL) and
// streams the keys in blocks of 128, one key per thread: the thread reads its key's row from
// the cache once and scores it against every query of the tile (held in workgroup memory),
// then the block's weights are formed with an online softmax (Milakov & Gimelshein 2018:
// running max, rescaled sums) and the values accumulated: thread (part kp, pair dp) sums value
// pair dp of the keys j = kp (mod kparts), kparts = 128 / (head_dim_v / 2) rounded down, for
// every query; the parts are added at the end in a fixed order.
// Dispatch: gx = n_head, gy = ceil(n_tok / TQ). Limits: head_dim and head_dim_v even and at
// most 256; k_off and v_off even; n_head a multiple of n_head_kv.
#include "../gk/gk.h"

// GK_ATTN_PREFILL=TQ: the query rows a prefill workgroup holds (4, 8 or 16); 0: decode.
#ifndef GK_ATTN_PREFILL
#define GK_ATTN_PREFILL 0
#endif
// GK_ATTN_SPLIT=1 (decode only, stamp attention_decode_split): the visible keys of a query are
// cut into gz = GK_NUM_GROUPS.z consecutive chunks, workgroup z taking chunk z, so a few heads
// still make many workgroups; each writes its chunk's unnormalised value sums, weight sum and
// running max to attn_out at ((t * n_head + h) * gz + z) * (head_dim_v + 2) (sums, then the
// weight sum, then the max; an empty chunk writes zeros and GK_ATTN_NONE), and
// attention_merge.gk.h adds the chunks. out_off and out_stride are unused then.
#ifndef GK_ATTN_SPLIT
#define GK_ATTN_SPLIT 0
#endif
#if GK_ATTN_SPLIT && GK_ATTN_PREFILL
#error "GK_ATTN_SPLIT is a decode form (GK_ATTN_PREFILL=0)"
#endif
#if GK_ATTN_PREFILL
#define GK_ATTN_TQ GK_ATTN_PREFILL
#else
#define GK_ATTN_TQ 1
#endif
#define GK_WG 128
#define GK_ATTN_KB GK_WG                          // keys per block: one per thread
#define GK_ATTN_DMAX 256                          // largest head_dim / head_dim_v
#define GK_ATTN_G (GK_WG / GK_ATTN_TQ)            // threads per query in the max stage
#define GK_ATTN_SEG (GK_ATTN_KB / GK_ATTN_G)      // scores each of them scans
// Cache reads a thread issues before using them (key pairs of a score, keys of a value sum):
// one at a time, Gemma-3's decode attention (head_dim 256, one key part) took 15.5 us a layer
// on an H200.
#define GK_ATTN_ILP 4u
// Stands for -infinity (a masked score, or no key seen yet): exp(GK_ATTN_NONE - m) is 0.
#define GK_ATTN_NONE -3.0e38f

#define GK_BUFFERS(B) B(0, ro, float, q) B(1, ro, uint, kc) B(2, ro, uint, vc) \
    B(3, wo, float, attn_out) B(4, ro, uint, pos_base)
#define GK_ARGS(A) A(uint, n_tok) A(uint, n_head) A(uint, n_head_kv) A(uint, head_dim) \
    A(uint, head_dim_v) A(uint, pos0) A(uint, window) A(uint, q_off) A(uint, q_stride) \
    A(uint, k_off) A(uint, v_off) A(uint, out_off) A(uint, out_stride) A(float, scale)
// qs: the query tile, later the value parts to add; sc: scores, then weights, then the parts'
// sums; pm: partial maxima; msh / csh: each query's running max and this block's rescale.
#define GK_SHARED(S) S(float, qs, GK_ATTN_TQ * GK_ATTN_DMAX) S(float, sc, GK_ATTN_TQ * GK_ATTN_KB) \
    S(float, pm, GK_WG) S(float, msh, GK_ATTN_TQ) S(float, csh, GK_ATTN_TQ) \
    S(float, part, GK_REDUCE_PARTS(GK_WG))

#ifdef GK_BODY
GK_KERNEL(attention, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint tid = GK_LOCAL_ID;
    uint h = GK_GROUP_ID.x;
    uint t0 = GK_GROUP_ID.y * GK_ATTN_TQ;
    if (t0 >= args.n_tok) return;  // the whole workgroup leaves together
    uint D = args.head_dim;
    uint dh = D / 2u;
    uint DV = args.head_dim_v;
    uint dvh = DV / 2u;
    uint g = h / (args.n_head / args.n_head_kv);
    uint n_q = gk_min(uint(GK_ATTN_TQ), args.n_tok - t0);
    uint pos_first = pos_base[0] + args.pos0 + t0;
    uint pos_last = pos_first + n_q - 1u;
    // The first key any query of the tile sees (cpu::attention: p - window < k <= p).
    bool cut = args.window > 0u && pos_first + 1u > args.window;
    uint k_begin = cut ? pos_first + 1u - args.window : 0u;
    // One past the last key this workgroup reads.
    uint k_end = pos_last + 1u;
#if GK_ATTN_SPLIT
    {
        uint n_split = GK_NUM_GROUPS.z;
        uint chunk = (k_end - k_begin + n_split - 1u) / n_split;
        uint lo = gk_min(k_begin + GK_GROUP_ID.z * chunk, k_end);
        k_end = gk_min(lo + chunk, k_end);
        k_begin = lo;
    }
#endif
    // Rows of the caches as uint (f16 pair) indices.
    uint k_row = args.n_head_kv * dh;
    uint v_row = args.n_head_kv * dvh;
    uint k_base = args.k_off / 2u + g * dh;
    uint v_base = args.v_off / 2u + g * dvh;

    for (uint i = tid; i < GK_ATTN_TQ * D; i += GK_WG) {
        uint qi = i / D;
        uint d = i - qi * D;
        uint src = args.q_off + (t0 + qi) * args.q_stride + h * D + d;
        qs[qi * GK_ATTN_DMAX + d] = qi < n_q ? q[src] : 0.0f;
    }
    if (tid < GK_ATTN_TQ) msh[tid] = GK_ATTN_NONE;

    // This thread's share of the values: pair dp of key part kp.
    uint kparts = GK_WG / dvh;
    uint kp = tid / dvh;
    uint dp = tid - kp * dvh;
    float acc[2 * GK_ATTN_TQ];
    float lsum[GK_ATTN_TQ];
    GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
        acc[2u * qi] = 0.0f;
        acc[2u * qi + 1u] = 0.0f;
        lsum[qi] = 0.0f;
    }
#if GK_ATTN_TQ == 1
    float m_run = GK_ATTN_NONE;
#endif
    GK_BARRIER();

    for (uint kb = k_begin; kb < k_end; kb += GK_ATTN_KB) {
        uint nk = gk_min(uint(GK_ATTN_KB), k_end - kb);
        // 1. Scores of key kb + tid against every query of the tile.
        uint key = kb + tid;
        float dots[GK_ATTN_TQ];
        GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) dots[qi] = 0.0f;
        if (tid < nk) {
            uint row = k_base + key * k_row;
            // GK_ATTN_ILP pairs' loads at once, then their products in order (the same sums as
            // one pair at a time): a thread's key row is a chain of cache reads otherwise.
            uint p = 0u;
            for (; p + GK_ATTN_ILP <= dh; p += GK_ATTN_ILP) {
                uint kw[GK_ATTN_ILP];
                GK_UNROLL for (uint i = 0u; i < GK_ATTN_ILP; ++i) kw[i] = kc[row + p + i];
                GK_UNROLL for (uint i = 0u; i < GK_ATTN_ILP; ++i) {
                    float2 k2 = gk_unpack_half2(kw[i]);
                    uint e = 2u * (p + i);
                    GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
                        dots[qi] = gk_fma(qs[qi * GK_ATTN_DMAX + e], k2.x, dots[qi]);
                        dots[qi] = gk_fma(qs[qi * GK_ATTN_DMAX + e + 1u], k2.y, dots[qi]);
                    }
                }
            }
            for (; p < dh; ++p) {
                float2 k2 = gk_unpack_half2(kc[row + p]);
                GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
                    dots[qi] = gk_fma(qs[qi * GK_ATTN_DMAX + 2u * p], k2.x, dots[qi]);
                    dots[qi] = gk_fma(qs[qi * GK_ATTN_DMAX + 2u * p + 1u], k2.y, dots[qi]);
                }
            }
        }
        GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
            uint pos = pos_first + qi;
            bool in_window = args.window == 0u || key + args.window > pos;
            bool seen = tid < nk && qi < n_q && key <= pos && in_window;
            sc[qi * GK_ATTN_KB + tid] = seen ? dots[qi] * args.scale : GK_ATTN_NONE;
        }

        // 2. The block's max per query, the rescale of what came before, the weights.
#if GK_ATTN_TQ == 1
        float own = sc[tid];
        float block_max;
        GK_WG_MAX_INTO(block_max, own, part, 0u)
        float m_new = gk_max(m_run, block_max);
        float corr0 = exp(m_run - m_new);
        m_run = m_new;
        sc[tid] = own > -1.0e38f ? exp(own - m_new) : 0.0f;
        GK_BARRIER();
#else
        GK_BARRIER();
        {
            uint qi = tid / GK_ATTN_G;
            uint lane = tid - qi * GK_ATTN_G;
            float mx = GK_ATTN_NONE;
            uint first = qi * GK_ATTN_KB + lane * GK_ATTN_SEG;
            for (uint s = 0u; s < GK_ATTN_SEG; ++s) mx = gk_max(mx, sc[first + s]);
            pm[tid] = mx;
        }
        GK_BARRIER();
        if (tid < GK_ATTN_TQ) {
            float bm = GK_ATTN_NONE;
            for (uint l = 0u; l < GK_ATTN_G; ++l) bm = gk_max(bm, pm[tid * GK_ATTN_G + l]);
            float m_old = msh[tid];
            float m_new = gk_max(m_old, bm);
            msh[tid] = m_new;
            csh[tid] = exp(m_old - m_new);
        }
        GK_BARRIER();
        GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
            float s = sc[qi * GK_ATTN_KB + tid];
            sc[qi * GK_ATTN_KB + tid] = s > -1.0e38f ? exp(s - msh[qi]) : 0.0f;
        }
        GK_BARRIER();
#endif

        // 3. Values: rescale, then add this part's keys of the block.
        if (kp < kparts) {
            GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
#if GK_ATTN_TQ == 1
                float c = corr0;
#else
                float c = csh[qi];
#endif
                acc[2u * qi] *= c;
                acc[2u * qi + 1u] *= c;
                lsum[qi] *= c;
            }
            // As the scores: GK_ATTN_ILP keys' value loads at once, then added in key order.
            uint j = kp;
            for (; j + (GK_ATTN_ILP - 1u) * kparts < nk; j += GK_ATTN_ILP * kparts) {
                uint vw[GK_ATTN_ILP];
                GK_UNROLL for (uint i = 0u; i < GK_ATTN_ILP; ++i)
                    vw[i] = vc[v_base + (kb + j + i * kparts) * v_row + dp];
                GK_UNROLL for (uint i = 0u; i < GK_ATTN_ILP; ++i) {
                    float2 v2 = gk_unpack_half2(vw[i]);
                    GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
                        float w = sc[qi * GK_ATTN_KB + j + i * kparts];
                        acc[2u * qi] = gk_fma(w, v2.x, acc[2u * qi]);
                        acc[2u * qi + 1u] = gk_fma(w, v2.y, acc[2u * qi + 1u]);
                        lsum[qi] += w;
                    }
                }
            }
            for (; j < nk; j += kparts) {
                float2 v2 = gk_unpack_half2(vc[v_base + (kb + j) * v_row + dp]);
                GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
                    float w = sc[qi * GK_ATTN_KB + j];
                    acc[2u * qi] = gk_fma(w, v2.x, acc[2u * qi]);
                    acc[2u * qi + 1u] = gk_fma(w, v2.y, acc[2u * qi + 1u]);
                    lsum[qi] += w;
                }
            }
        }
        GK_BARRIER();
    }

    // 4. Add the key parts (qs and sc are free: the last block ended with a barrier).
    if (kp < kparts) {
        GK_UNROLL for (uint qi = 0u; qi < GK_ATTN_TQ; ++qi) {
            qs[(kp * GK_ATTN_TQ + qi) * DV + 2u * dp] = acc[2u * qi];
            qs[(kp * GK_ATTN_TQ + qi) * DV + 2u * dp + 1u] = acc[2u * qi + 1u];
            if (dp == 0u) sc[kp * GK_ATTN_TQ + qi] = lsum[qi];
        }
    }
    GK_BARRIER();
    if (tid < dvh) {
        for (uint qi = 0u; qi < n_q; ++qi) {
            float o0 = 0.0f;
            float o1 = 0.0f;
            float l = 0.0f;
            for (uint k = 0u; k < kparts; ++k) {
                o0 += qs[(k * GK_ATTN_TQ + qi) * DV + 2u * tid];
                o1 += qs[(k * GK_ATTN_TQ + qi) * DV + 2u * tid + 1u];
                l += sc[k * GK_ATTN_TQ + qi];
            }
#if GK_ATTN_SPLIT
            uint o = ((t0 * args.n_head + h) * GK_NUM_GROUPS.z + GK_GROUP_ID.z) * (DV + 2u);
            attn_out[o + 2u * tid] = o0;
            attn_out[o + 2u * tid + 1u] = o1;
            if (tid == 0u) {
                attn_out[o + DV] = l;
                attn_out[o + DV + 1u] = m_run;
            }
#else
            // Every query sees at least its own key, so l > 0.
            float inv = gk_div(1.0f, l);
            uint o = args.out_off + (t0 + qi) * args.out_stride + h * DV + 2u * tid;
            attn_out[o] = o0 * inv;
            attn_out[o + 1u] = o1 * inv;
#endif
        }
    }
}
GK_KERNEL_END
#endif
