// The chunks of attention_decode_split (attention.gk.h, GK_ATTN_SPLIT) added into one output:
// for query t and head h, chunk z's value sums o_z, weight sum l_z and running max m_z at
// part[((t * n_head + h) * n_split + z) * (head_dim_v + 2)] (sums, l, m), M = max_z m_z and
//   attn_out[out_off + t * out_stride + h * head_dim_v + d] =
//       sum_z o_z[d] exp(m_z - M) / sum_z l_z exp(m_z - M),
// the chunks added in order (an empty chunk's m_z stands for -infinity: its terms are 0).
// Dispatch: gx = n_head, gy = n_tok; each thread takes columns d = tid, tid + WG, ...
#include "../gk/gk.h"

#define GK_WG 128

#define GK_BUFFERS(B) B(0, ro, float, part) B(1, wo, float, attn_out)
#define GK_ARGS(A) A(uint, n_tok) A(uint, n_head) A(uint, head_dim_v) A(uint, n_split) \
                   A(uint, out_off) A(uint, out_stride)
#define GK_SHARED(S)

#ifdef GK_BODY
GK_KERNEL(attention_merge, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint h = GK_GROUP_ID.x;
    uint t = GK_GROUP_ID.y;
    uint DV = args.head_dim_v;
    uint base = (t * args.n_head + h) * args.n_split * (DV + 2u);
    float m = part[base + DV + 1u];
    for (uint z = 1u; z < args.n_split; ++z) m = gk_max(m, part[base + z * (DV + 2u) + DV + 1u]);
    float l = 0.0f;
    for (uint z = 0u; z < args.n_split; ++z) {
        uint pz = base + z * (DV + 2u);
        l += part[pz + DV] * exp(part[pz + DV + 1u] - m);
    }
    // Every query sees at least its own key: some chunk has l_z > 0 at m_z = M.
    float inv = gk_div(1.0f, l);
    for (uint d = GK_LOCAL_ID; d < DV; d += GK_WG) {
        float o = 0.0f;
        for (uint z = 0u; z < args.n_split; ++z) {
            uint pz = base + z * (DV + 2u);
            o += part[pz + d] * exp(part[pz + DV + 1u] - m);
        }
        attn_out[args.out_off + t * args.out_stride + h * DV + d] = o * inv;
    }
}
GK_KERNEL_END
#endif
