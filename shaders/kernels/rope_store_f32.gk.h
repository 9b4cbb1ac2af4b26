// Rotary embedding and the K/V cache store of a fused q | k | v projection, for float32 caches
// (Pocket TTS: the backbone and Mimi's transformer): token t's row starts at
// qkv[qkv_off + t * qkv_stride] and holds q (n_head heads), k and v (n_head_kv heads each) of
// head_dim values. Pairs (2i, 2i + 1) of every q and k head are rotated (NORM, the whole head)
// at position p = pos_base[0] + pos0 + t: q in place (attention reads it there), k into the key
// cache kc[p * kv_stride + ...], v copied into vc alike, kv_stride = n_head_kv * head_dim.
// store_rows != 0 also writes token t's rotated k row to rows[rows_off + t * kv_stride ...] and
// its v row to rows[rows_off + rows_v_off + t * kv_stride ...] (a fixed place the host reads
// back whatever the position). The angle and the rotation are rope_table.gk.h's and rope.gk.h's
// (the same rounding); the position base is read from memory so one recorded command buffer
// serves every position.
// Dispatch: one thread per (token, pair) of q, k and v: a grid-stride loop over
// n_tok * (n_head + 2 n_head_kv) * head_dim / 2, any gx >= 1.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, rw, float, qkv) B(1, ro, float, freqs) B(2, ro, uint, pos_base) \
    B(3, wo, float, kc) B(4, wo, float, vc) B(5, wo, float, rows)
#define GK_ARGS(A) A(uint, n_tok) A(uint, n_head) A(uint, n_head_kv) A(uint, head_dim) \
    A(uint, pos0) A(uint, qkv_off) A(uint, qkv_stride) A(uint, store_rows) A(uint, rows_off) \
    A(uint, rows_v_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(rope_store_f32, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint half_d = args.head_dim / 2u;
    uint kv_stride = args.n_head_kv * args.head_dim;
    uint q_pairs = args.n_head * half_d;
    uint kv_pairs = args.n_head_kv * half_d;
    uint per_tok = q_pairs + 2u * kv_pairs;
    uint total = args.n_tok * per_tok;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint t = idx / per_tok;
        uint j = idx - t * per_tok;        // pair j of the row: q pairs, then k, then v
        uint row = args.qkv_off + t * args.qkv_stride;
        uint p = pos_base[0] + args.pos0 + t;
        if (j >= q_pairs + kv_pairs) {
            // v: copied as it is.
            uint e = 2u * (j - q_pairs - kv_pairs);
            float v0 = qkv[row + args.n_head * args.head_dim + kv_stride + e];
            float v1 = qkv[row + args.n_head * args.head_dim + kv_stride + e + 1u];
            vc[p * kv_stride + e] = v0;
            vc[p * kv_stride + e + 1u] = v1;
            if (args.store_rows != 0u) {
                uint r = args.rows_off + args.rows_v_off + t * kv_stride + e;
                rows[r] = v0;
                rows[r + 1u] = v1;
            }
            continue;
        }
        bool is_k = j >= q_pairs;
        uint jj = is_k ? j - q_pairs : j;
        uint i = jj % half_d;              // the pair within its head
        uint a = row + (is_k ? args.n_head * args.head_dim : 0u) + 2u * jj;
        // rope_table.gk.h's angle: positions stay below 2^24, exact in a float.
        float pos = float(p);
        float f_hi = freqs[2u * i];
        float f_lo = freqs[2u * i + 1u];
        GK_PRECISE float a_hi = pos * f_hi;
        GK_PRECISE float a_lo = gk_two_prod_err(pos, f_hi, a_hi) + pos * f_lo;
        float2 cs = gk_cos_sin(a_hi, a_lo);
        float x0 = qkv[a];
        float x1 = qkv[a + 1u];
        GK_PRECISE float ya = x0 * cs.x - x1 * cs.y;
        GK_PRECISE float yb = x0 * cs.y + x1 * cs.x;
        if (is_k) {
            uint e = 2u * jj;
            kc[p * kv_stride + e] = ya;
            kc[p * kv_stride + e + 1u] = yb;
            if (args.store_rows != 0u) {
                uint r = args.rows_off + t * kv_stride + e;
                rows[r] = ya;
                rows[r + 1u] = yb;
            }
        } else {
            qkv[a] = ya;
            qkv[a + 1u] = yb;
        }
    }
}
GK_KERNEL_END
#endif
