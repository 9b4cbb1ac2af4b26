#include "serve/batch_seat.h"

#include <algorithm>

#include "core/errors.h"
#include "llm/gpu_forward.h"
#include "llm/kv_cache.h"
#include "llm/model.h"

namespace dasllama::serve {

BatchSeat::BatchSeat(LLMModel& model, int n_slots, int64_t n_ctx, bool sliding_rings)
    : model_(model), device_len_(size_t(std::max(n_slots, 0)), 0) {
    present_ = model.device_name() != "cpu";
    if (!present_) return;
    model_.with_gpu_parts([&](const LLMModel::GpuParts& p) {
        if (!p.forward) {
            absent_ = p.absent;
            absent_why_ = "the model has no device forward pass: " + p.absent_why;
        } else if (sliding_rings) {
            absent_ = gpu::Decline::shape;
            absent_why_ = "sliding-window rings: the device slots keep every position";
        } else {
            try {
                pool_ = p.forward->make_kv_pool(n_slots, n_ctx);
            } catch (const ShapeError& e) {
                absent_ = gpu::Decline::shape;
                absent_why_ = e.what();
            } catch (const DeviceError& e) {
                absent_ = gpu::Decline::memory;
                absent_why_ = e.what();
            }
        }
        return 0;
    });
}

BatchSeat::~BatchSeat() = default;

uint64_t BatchSeat::device_kv_bytes() const { return pool_ ? pool_->bytes : 0; }

bool BatchSeat::holds(int slot, int64_t n) const {
    return pool_ && device_len_[size_t(slot)] >= n;
}

void BatchSeat::forget(int slot, int64_t n) {
    int64_t& len = device_len_[size_t(slot)];
    len = std::min(len, n);
}

bool BatchSeat::decline(gpu::Decline why, std::string reason) {
    stats_.decline(why);
    reason_ = std::move(reason);
    return false;
}

bool BatchSeat::serve(const int32_t* ids, const std::vector<Rows>& seqs, float* logits) {
    return model_.with_gpu_parts([&](const LLMModel::GpuParts& p) {
        if (!p.seat_on) return decline(gpu::Decline::knob, "the seat is off (its knob)");
        if (!pool_) return decline(absent_, absent_why_);
        int64_t rows = 0;
        for (const Rows& q : seqs) rows += q.n;
        if (rows > p.forward->max_batch())
            return decline(gpu::Decline::shape,
                           "a step of " + std::to_string(rows) + " rows; the device forward "
                           "pass holds " + std::to_string(p.forward->max_batch()));
        const ModelConfig& cfg = model_.config();
        // Rows at and past each sequence's pos0 may be half written; the rest stand.
        auto failed = [&](gpu::Decline why, const char* what) {
            for (const Rows& q : seqs) forget(q.slot, q.pos0);
            return decline(why, what);
        };
        std::vector<DeviceRows> dev(seqs.size());
        std::vector<float> k, v;
        try {
            for (size_t i = 0; i < seqs.size(); ++i) {
                const Rows& q = seqs[i];
                int64_t& len = device_len_[size_t(q.slot)];
                if (len < q.pos0) {  // the CPU ran these rows: they go up first
                    const int64_t n = q.pos0 - len;
                    k.resize(size_t(n * cfg.k_dim()));
                    v.resize(size_t(n * cfg.v_dim()));
                    for (int il = 0; il < int(cfg.n_layer); ++il) {
                        q.host->read_layer_rows(il, len, n, k.data(), v.data());
                        p.forward->write_kv(*pool_, q.slot, il, len, n, k.data(), v.data());
                    }
                    stats_.uploads += 1;
                    len = q.pos0;
                }
                dev[i] = DeviceRows{q.slot, q.pos0, q.n, q.want_logits};
            }
        } catch (const DeviceError& e) {
            return failed(gpu::Decline::gpu_error, e.what());
        }
        try {
            p.forward->run_batch(ids, dev.data(), int(dev.size()), *pool_, logits, p.exact);
        } catch (const DeviceError& e) {
            return failed(gpu::Decline::gpu_error, e.what());
        } catch (const ShapeError& e) {  // refused before anything was submitted
            return failed(gpu::Decline::shape, e.what());
        }
        for (const Rows& q : seqs) device_len_[size_t(q.slot)] = q.pos0 + q.n;
        stats_.served += 1;
        stats_.dispatches += p.forward->last_dispatches();
        stats_.replays += p.forward->last_replayed() ? 1 : 0;
        return true;
    });
}

void BatchSeat::sync_host(int slot, KVCache& host, int64_t upto) {
    const int64_t have = host.n_past();
    if (have >= upto) return;
    if (!holds(slot, upto))
        throw Error("batch seat: slot " + std::to_string(slot) + " holds positions [0, " +
                    std::to_string(have) + ") on the host and [0, " +
                    std::to_string(device_len_[size_t(slot)]) + ") on the device, not " +
                    std::to_string(upto));
    model_.with_gpu_parts([&](const LLMModel::GpuParts& p) {
        std::vector<float> k, v;
        for (int il = 0; il < int(model_.config().n_layer); ++il) {
            p.forward->read_kv(*pool_, slot, il, have, upto - have, k, v);
            host.kv_cache_append_rows(il, have, upto - have, k.data(), v.data());
        }
        return 0;
    });
}

}  // namespace dasllama::serve
