// The exporter's inverse STFT of the iSTFTNet generator (nn::BasisIstft after conv_post), in two
// stamps over the same buffers:
//   GK_ISTFT_STAGE 0  from conv_post's rows post[post_off + r * frames + f] (r < 2 bins,
//                     channel-major): mag = exp(row k), phase = sin(row bins + k), and
//                     spec[k, f] = mag cos(phase), spec[bins + k, f] = mag sin(phase).
//                     A grid-stride loop over bins * frames.
//   GK_ISTFT_STAGE 1  audio[out_off + i], i < samples: the transposed convolution of spec with
//                     the exported basis [2 bins, n_fft] (stride hop) at full position
//                     p = n_fft / 2 + i, divided by wsum[p] where p < wsum_len and wsum[p] >
//                     FLT_MIN, times scale (n_fft / hop). A grid-stride loop over samples.
// The sums gather per output in float32 (the CPU's matmul and overlap-add sum in their order).
#include "../gk/gk.h"

#ifndef GK_ISTFT_STAGE
#define GK_ISTFT_STAGE 0
#endif

#define GK_BUFFERS(B) B(0, ro, float, post) B(1, rw, float, spec) B(2, ro, float, basis) \
    B(3, ro, float, wsum) B(4, wo, float, audio)
#define GK_ARGS(A) A(uint, bins) A(uint, frames) A(uint, n_fft) A(uint, hop) A(uint, samples) \
    A(uint, wsum_len) A(float, scale) A(uint, post_off) A(uint, out_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(istft, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint step = GK_NUM_GROUPS.x * GK_WG;
    uint nb = args.bins;
    uint F = args.frames;
#if GK_ISTFT_STAGE == 0
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < nb * F; idx += step) {
        uint k = idx / F;
        uint f = idx - k * F;
        float m = exp(post[args.post_off + idx]);
        float ph = gk_cos_sin(post[args.post_off + (nb + k) * F + f], 0.0f).y;
        float2 cs = gk_cos_sin(ph, 0.0f);
        GK_PRECISE float re = m * cs.x;
        GK_PRECISE float im = m * cs.y;
        spec[idx] = re;
        spec[(nb + k) * F + f] = im;
    }
#else
    uint N = args.n_fft;
    uint H = args.hop;
    for (uint i = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; i < args.samples; i += step) {
        uint p = N / 2u + i;
        // Frames f with 0 <= p - f hop < n_fft.
        uint f_hi = gk_min(p / H, F - 1u);
        uint f_lo = p + 1u > N ? (p + 1u - N + H - 1u) / H : 0u;
        float v = 0.0f;
        for (uint f = f_lo; f <= f_hi; ++f) {
            uint t = p - f * H;
            for (uint k = 0u; k < 2u * nb; ++k) v = gk_fma(basis[k * N + t], spec[k * F + f], v);
        }
        GK_PRECISE float r = v;
        if (p < args.wsum_len && wsum[p] > 1.17549435e-38f) r = gk_div(r, wsum[p]);
        r = r * args.scale;
        audio[args.out_off + i] = r;
    }
#endif
}
GK_KERNEL_END
#endif
