// The overlap-add of a streaming ConvTranspose1d (pocket::StreamConvTr1d) with stride s and
// kernel K, s <= K <= 2s: T input rows give T * s output rows of C channels, and the last
// K - s rows of the overlap wait in `tail` for the next call. Output row r < T * s + K - s gets
//   (r < K - s ? tail[r] : 0) + term(r / s - 1, r % s + s) + term(r / s, r % s)  (+ bias[c]
// for r < T * s), terms of inputs t outside [0, T) or taps outside [0, K) left out, in that
// order (the CPU's). Rows from T * s on are the new tail: the host copies them into `tail`.
//   dense      (GK_CONVTR_DEPTHWISE=0): term(t, k) = z[z_off + (t * K + k) * C + c], z the
//              product of the input with the weight repacked to rows (k, c) (a matmul stamp)
//   depthwise  (GK_CONVTR_DEPTHWISE=1): term(t, k) = w[c * K + k] * z[z_off + t * C + c],
//              z the input itself (Mimi's upsampling, groups = C)
// Output element (r, c) is y[out_off + r * C + c] (`out` is a GLSL keyword).
// Dispatch: a grid-stride loop over (T * s + K - s) * C elements.
#include "../gk/gk.h"

#ifndef GK_CONVTR_DEPTHWISE
#define GK_CONVTR_DEPTHWISE 0
#endif

#define GK_BUFFERS(B) B(0, ro, float, z) B(1, ro, float, w) B(2, ro, float, tail) \
    B(3, ro, float, bias) B(4, wo, float, y)
// taps is K (`kernel` is an MSL keyword).
#define GK_ARGS(A) A(uint, n_in) A(uint, channels) A(uint, stride) A(uint, taps) \
    A(uint, z_off) A(uint, out_off) A(uint, has_bias)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(conv_tr, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint C = args.channels;
    uint S = args.stride;
    uint K = args.taps;
    uint n_out = args.n_in * S;
    uint total = (n_out + K - S) * C;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint r = idx / C;
        uint c = idx - r * C;
        uint t1 = r / S;
        uint k1 = r - t1 * S;
        GK_PRECISE float v = r < K - S ? tail[r * C + c] : 0.0f;
        // The earlier input first: tap k1 + s of input t1 - 1.
        if (t1 >= 1u && t1 - 1u < args.n_in && k1 + S < K) {
#if GK_CONVTR_DEPTHWISE
            v = v + w[c * K + k1 + S] * z[args.z_off + (t1 - 1u) * C + c];
#else
            v = v + z[args.z_off + ((t1 - 1u) * K + k1 + S) * C + c];
#endif
        }
        if (t1 < args.n_in) {
#if GK_CONVTR_DEPTHWISE
            v = v + w[c * K + k1] * z[args.z_off + t1 * C + c];
#else
            v = v + z[args.z_off + (t1 * K + k1) * C + c];
#endif
        }
        if (args.has_bias != 0u && r < n_out) v = v + bias[c];
        y[args.out_off + idx] = v;
    }
}
GK_KERNEL_END
#endif
