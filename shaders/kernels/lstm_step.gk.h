// One time step of a bidirectional LSTM, both directions in one dispatch (kokoro/bilstm.h's
// recurrence): the input projection of every step, xw [2, T, 4H] (x W + Wb + Rb, one matmul for
// the whole sequence), comes in; this step adds h_prev R and applies the gates, in the file's
// ONNX order i, o, f, c:
//     g = xw[d, t] + h_prev R[d];  i, o, f = logistic(g_i, g_o, g_f);  c~ = tanh(g_c)
//     c[d] = c[d] f + i c~;  h = tanh(c[d]) o
// Step s runs t = s forwards (d = 0) and t = T - 1 - s backwards (d = 1); h goes to hs [T, 2H]
// at row t, columns d H .. d H + H, which is also where the next step reads its h_prev, so the
// output rows are the ping-pong and no other state is needed but c [2, H] (each unit's own).
// R [2, H, 4H] (row k: the 4H gate columns h_prev[k] multiplies). Step 0 reads h_prev = 0 and
// c = 0 (c need not be cleared). Dispatch: (ceil(H / WG), 2, 1), one invocation a hidden unit;
// h_prev is staged in shared memory (H at most LSTM_MAX_HIDDEN).
#include "../gk/gk.h"

#define LSTM_MAX_HIDDEN 1024
#define GK_BUFFERS(B) B(0, ro, float, xw) B(1, ro, float, r) B(2, rw, float, hs) \
    B(3, rw, float, c)
#define GK_ARGS(A) A(uint, steps) A(uint, hidden) A(uint, step)
#define GK_SHARED(S) S(float, hp, LSTM_MAX_HIDDEN)
#define GK_WG 64

#ifdef GK_BODY
GK_INLINE float lstm_logistic(float v) {
    // 1 / (1 + exp(-v)), with exp's argument clamped where the result is 0 or 1 in float
    GK_PRECISE float e = exp(gk_min(-v, 88.0f));
    return gk_div(1.0f, 1.0f + e);
}

GK_KERNEL(lstm_step, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint h = args.hidden;
    uint d = GK_GROUP_ID.y;
    uint t = d == 0u ? args.step : args.steps - 1u - args.step;
    uint first = args.step == 0u ? 1u : 0u;
    uint prev = d == 0u ? t - 1u : t + 1u;          // the row the previous step wrote
    for (uint k = GK_LOCAL_ID; k < h; k += GK_WG)
        hp[k] = first == 1u ? 0.0f : hs[prev * 2u * h + d * h + k];
    GK_BARRIER();
    uint j = GK_GROUP_ID.x * GK_WG + GK_LOCAL_ID;
    if (j < h) {
        uint g4 = 4u * h;
        uint xb = (d * args.steps + t) * g4;
        GK_PRECISE float gi = xw[xb + j];
        GK_PRECISE float go = xw[xb + h + j];
        GK_PRECISE float gf = xw[xb + 2u * h + j];
        GK_PRECISE float gc = xw[xb + 3u * h + j];
        uint rb = d * h * g4;
        for (uint k = 0u; k < h; ++k) {
            float v = hp[k];
            uint row = rb + k * g4;
            gi = gi + v * r[row + j];
            go = go + v * r[row + h + j];
            gf = gf + v * r[row + 2u * h + j];
            gc = gc + v * r[row + 3u * h + j];
        }
        float i = lstm_logistic(gi);
        float o = lstm_logistic(go);
        float f = lstm_logistic(gf);
        float cand = gk_tanh(gc);
        GK_PRECISE float c_old = first == 1u ? 0.0f : c[d * h + j];
        GK_PRECISE float c_new = c_old * f + i * cand;
        c[d * h + j] = c_new;
        hs[t * 2u * h + d * h + j] = gk_tanh(c_new) * o;
    }
}
GK_KERNEL_END
#endif
