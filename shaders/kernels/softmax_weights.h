// The softmax stage shared by attention_f32.gk.h and attention_step_f32.gk.h: with the scores
// sc[0..nk) in workgroup memory and their maximum mx, sc[j] becomes exp(sc[j] - mx) and lsum
// their sum (a workgroup sum through slot 1 of `part`, so a max in slot 0 may precede it).
#define GK_SOFTMAX_WEIGHTS(sc, nk, mx, lsum, part) \
    { \
        float gk_l_ = 0.0f; \
        for (uint gk_j_ = GK_LOCAL_ID; gk_j_ < (nk); gk_j_ += GK_WG) { \
            float gk_e_ = exp(sc[gk_j_] - (mx)); \
            sc[gk_j_] = gk_e_; \
            gk_l_ += gk_e_; \
        } \
        GK_WG_SUM_INTO(lsum, gk_l_, part, 1u) \
    }
