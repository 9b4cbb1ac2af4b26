// The seat "batch" of a batching engine on a model opened on a GPU: a step served by the
// model's device-resident forward pass over device K/V slots of its own (GpuForward::run_batch,
// a DeviceKVPool of the engine's slots and n_ctx), or declined with a reason and run on the
// CPU chain over the host pool.
//
// The device slot may run ahead of the host slot, as the model's single-sequence seats do: a
// slot's host cache holds a prefix of its positions and its device cache another, and one of
// them holds them all. Before the device serves a sequence the host rows it lacks go up
// (uploads); before the CPU does, the device rows the host lacks come down (sync_host). So
// steps may move between the two at any boundary with nothing recomputed.
//
// Declines: knob (DASLLAMA_SEAT_BATCH=0, set_seat_enabled("batch", false)), device/shape/memory
// (the model has no device forward pass; sliding-window rings, whose host layout the device
// slots do not share; or the pool cannot be placed),
// shape (a step of more rows than the device forward pass holds, or one it refuses), gpu_error
// (a submit failed; the CPU runs the step from the rows both sides still hold, which a lost
// device may not give back). reason() says why the last decline happened.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "gpu/seat.h"

namespace dasllama {
class KVCache;
class LLMModel;
struct DeviceKVPool;
}

namespace dasllama::serve {

class BatchSeat {
public:
    // On a model opened on the CPU the seat is absent (present() false) and serve() is never
    // called. Never throws for a pool that cannot be placed: the seat declines instead.
    BatchSeat(LLMModel& model, int n_slots, int64_t n_ctx, bool sliding_rings);
    ~BatchSeat();
    BatchSeat(const BatchSeat&) = delete;
    BatchSeat& operator=(const BatchSeat&) = delete;

    bool present() const { return present_; }

    // One sequence of a step: n rows at positions pos0.. of `slot`, whose host cache is `host`.
    struct Rows {
        int slot;
        KVCache* host;
        int64_t pos0, n;
        bool want_logits;
    };
    // Runs the step on the device and writes the wanted logits in sequence order (true), or
    // declines it (false: counted, reason() set, no state changed).
    bool serve(const int32_t* ids, const std::vector<Rows>& seqs, float* logits);

    // Before a CPU step of `slot`: the host cache gets the device's rows [host n_past, upto).
    void sync_host(int slot, KVCache& host, int64_t upto);
    // The slot's positions >= n are forgotten (a new sequence reuses the first n).
    void forget(int slot, int64_t n);
    // Whether the device slot holds positions [0, n).
    bool holds(int slot, int64_t n) const;

    const gpu::SeatStats& stats() const { return stats_; }
    const std::string& reason() const { return reason_; }
    uint64_t device_kv_bytes() const;

private:
    bool decline(gpu::Decline why, std::string reason);

    LLMModel& model_;
    bool present_ = false;
    std::unique_ptr<DeviceKVPool> pool_;
    gpu::Decline absent_ = gpu::Decline::device;  // why pool_ is null
    std::string absent_why_;
    std::vector<int64_t> device_len_;  // per slot: positions [0, len) held on the device
    gpu::SeatStats stats_;
    std::string reason_;
};

}  // namespace dasllama::serve
