#include "tts/pocket/gpu_admission.h"

#include <algorithm>

#include "tts/pocket/gpu_ops.h"

namespace dasllama::pocket {

namespace {

std::string str(int64_t v) { return std::to_string(v); }

std::string rows_fit(int64_t n_past, int64_t rows, int64_t capacity) {
    if (rows <= 0) return "a call of " + str(rows) + " rows";
    if (n_past < 0 || n_past + rows > capacity)
        return "positions up to " + str(n_past + rows) + " exceed the slot's " + str(capacity);
    return "";
}

}  // namespace

std::string gpu_attention_unfit(const TransformerConfig& c, int64_t keys) {
    if (c.head_dim <= 0 || c.head_dim % 2 || c.head_dim > kGpuAttnMaxHeadDim)
        return "head_dim " + str(c.head_dim) + " is not an even size up to " +
               str(kGpuAttnMaxHeadDim);
    if (c.num_kv_heads <= 0 || c.num_heads % c.num_kv_heads)
        return str(c.num_heads) + " query heads cannot share " + str(c.num_kv_heads) + " kv heads";
    const int64_t seen = c.context > 0 ? std::min(keys, c.context) : keys;
    if (seen > kGpuAttnMaxKeys)
        return "a query would see " + str(seen) + " keys, the attention kernel holds " +
               str(kGpuAttnMaxKeys);
    return "";
}

std::string gpu_prompt_unfit(const PocketConfig& c, int64_t n_past, int64_t rows,
                             int64_t capacity) {
    std::string r = rows_fit(n_past, rows, capacity);
    if (r.empty()) r = gpu_attention_unfit(c.lm, n_past + rows);
    return r;
}

std::string gpu_frames_unfit(const PocketConfig& c, int64_t n_past, int64_t frames,
                             int64_t capacity) {
    if (c.flow_type != FlowType::kLSD && c.flow_type != FlowType::kFlowMatching)
        return "the flow head's type has no GPU path (lsd and flow_matching have)";
    std::string r = rows_fit(n_past, frames, capacity);
    if (r.empty()) r = gpu_attention_unfit(c.lm, n_past + frames);
    return r;
}

std::string gpu_codec_unfit(const PocketConfig& c, int64_t n_past, int64_t frames) {
    if (frames <= 0) return "a call of " + str(frames) + " frames";
    const int64_t u = std::max<int64_t>(1, c.upsample_stride);
    std::string r = gpu_attention_unfit(c.dec_tf, n_past + frames * u);
    if (!r.empty()) return "decoder transformer: " + r;
    const SeanetConfig& p = c.dec;
    if (p.n_residual_layers > 1 && p.dilation_base != 1)
        return "dilated residual convolutions (dilation_base " + str(p.dilation_base) +
               ") have no GPU path";
    int64_t rows = frames * u;
    if (rows < p.kernel_size - 1)
        return str(rows) + " rows reach the first convolution of kernel " + str(p.kernel_size) +
               "; it needs at least " + str(p.kernel_size - 1);
    for (int64_t q : p.ratios) {
        if (q <= 0) return "an upsampling stage of ratio " + str(q);
        rows *= q;
        if (rows < p.residual_kernel_size - 1)
            return str(rows) + " rows reach a residual convolution of kernel " +
                   str(p.residual_kernel_size);
    }
    if (rows < p.last_kernel_size - 1)
        return str(rows) + " rows reach the last convolution of kernel " + str(p.last_kernel_size);
    return "";
}

}  // namespace dasllama::pocket
