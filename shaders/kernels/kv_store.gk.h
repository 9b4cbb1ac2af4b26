// Appends n_tok rows of K or V to the device cache as f16: element dst_off + t * width + j of
// the cache's f16 array (two per uint, element e in half e & 1 of uint e >> 1) takes
// src[src_off + t * src_stride + j], j < width. dst_off and width must be even: each thread
// writes one whole uint, so no two threads share a word.
// The conversion is gk_f32_to_f16_rne (gk/half.h), which rounds as the host does.
// Dispatch: a grid-stride loop over n_tok * width / 2 pairs, so any gx >= 1 is correct;
// gx = min(ceil(n_tok * width / 512), 65535) covers it in one sweep.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, src) B(1, rw, uint, cache)
#define GK_ARGS(A) A(uint, n_tok) A(uint, width) A(uint, src_off) A(uint, src_stride) \
    A(uint, dst_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(kv_store, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint pairs = args.width / 2u;
    uint total = args.n_tok * pairs;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint t = idx / pairs;
        uint jp = idx - t * pairs;
        uint s = args.src_off + t * args.src_stride + 2u * jp;
        uint lo = gk_f32_to_f16_rne(src[s]);
        uint hi = gk_f32_to_f16_rne(src[s + 1u]);
        cache[args.dst_off / 2u + t * pairs + jp] = lo | (hi << 16u);
    }
}
GK_KERNEL_END
#endif
