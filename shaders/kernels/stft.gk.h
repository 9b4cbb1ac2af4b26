// The naive one-sided STFT of exported iSTFTNet vocoders (nn::NaiveStft): the signal x[x_off ..
// x_off + n) reflect-padded by n_fft / 2, frame f at f * hop times the window, bin k summed over
// j in order with the twiddles tw[k * n_fft + j] (cos) and tw[(bins + k) * n_fft + j] (sin) the
// host computes as the CPU does; out[out_off + k * frames + f] = sqrt(re^2 + im^2) and
// out[out_off + (bins + k) * frames + f] = atan(im / re) moved to the graph's quadrants.
// Every product and sum is its own float32 rounding in the CPU's order; the square root and
// the arctangent are the native ones (a few ulp). Dispatch: a grid-stride loop over bins * frames.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, float, x) B(1, ro, float, window) B(2, ro, float, tw) \
    B(3, wo, float, spec)
#define GK_ARGS(A) A(uint, n) A(uint, n_fft) A(uint, hop) A(uint, bins) A(uint, frames) \
    A(uint, x_off) A(uint, out_off)
#define GK_SHARED(S)
#define GK_WG 256

#ifdef GK_BODY
GK_KERNEL(stft, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint total = args.bins * args.frames;
    uint step = GK_NUM_GROUPS.x * GK_WG;
    int pad = int(args.n_fft / 2u);
    int n = int(args.n);
    for (uint idx = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID; idx < total; idx += step) {
        uint k = idx / args.frames;
        uint f = idx - k * args.frames;
        GK_PRECISE float re = 0.0f;
        GK_PRECISE float im = 0.0f;
        for (uint j = 0u; j < args.n_fft; ++j) {
            int i = int(f * args.hop + j) - pad;
            if (i < 0) i = -i;
            if (i >= n) i = 2 * (n - 1) - i;
            GK_PRECISE float v = x[args.x_off + uint(i)] * window[j];
            GK_PRECISE float pr = tw[k * args.n_fft + j] * v;
            GK_PRECISE float pi = tw[(args.bins + k) * args.n_fft + j] * v;
            re = re + pr;
            im = im + pi;
        }
        GK_PRECISE float rr = re * re;
        GK_PRECISE float ii = im * im;
        spec[args.out_off + idx] = sqrt(rr + ii);
        // im / re as the CPU divides (0 / 0 stays NaN, x / 0 infinite).
        GK_PRECISE float q = re != 0.0f ? gk_div(im, re) : im / re;
        float a = atan(q);
        const float PI = 3.14159265358979323846f;
        GK_PRECISE float quad = re < 0.0f ? (im > 0.0f ? a + PI : a - PI) : a;
        spec[args.out_off + (args.bins + k) * args.frames + f] = quad;
    }
}
GK_KERNEL_END
#endif
