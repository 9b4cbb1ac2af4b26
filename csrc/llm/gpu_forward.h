// The forward pass of a dense text model resident on a GPU: weights uploaded once, the K/V
// cache on the device (f16), and each call recorded as one command buffer of all layers,
// submitted once. The token ids and the position are read from mapped memory, so a call of the
// same shape as the last one (decode: one token, last logits) submits the last recording again
// instead of recording ~6 dispatches a layer anew. Same architecture rules as llm/forward.cpp (llama, qwen2, qwen3, gemma3);
// every kernel is a stamp of shaders/kernels.
//
// The device cache may run ahead of the host cache: read_kv()/write_kv() move rows between
// them, so the model can hand work to the CPU (or back) at any position.
//
// run_batch() runs the rows of several sequences in one call (a batching engine's step,
// serve/batch_engine.h), each over its own slot of a DeviceKVPool: the products over all rows,
// the rope, K/V store and attention per sequence. Each sequence's position is read from mapped
// memory of its own, so a step of the same slots and row counts as the last submits the last
// recording again, as single-sequence decode does.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "gpu/device.h"
#include "llm/gpu_weights.h"
#include "llm/model_config.h"

namespace dasllama {

using gpu::ProjectionInput;

// The prefill attention stamp on cooperative matrices for a call of `n` query rows, or "" for
// the portable one: n above the decode attention's rows, `coopmat` (the device offers them and
// the call is not in f32 precision), head_dim = head_dim_v with a stamp of that size
// (attention_prefill_cm_<d>), and the knob vulkan.attention.prefill_coopmat on. A pure function
// of its arguments, this build's stamps and the knob.
std::string prefill_attention_coopmat(int64_t n, int64_t head_dim, int64_t head_dim_v,
                                      bool coopmat);

// Whether a call of `n` token rows forms the gated FFN activation in a pass of its own
// (eltwise_glu_*, in place over the gate half) before the down projection, which then reads it
// plain: one-token decode only (the gate halves of several rows are not contiguous), and the
// knob vulkan.llm.decode_glu_pass on. The down projection's subgroups otherwise each form the
// activation of every column again. A pure function of n and the knob; the forward skips the
// pass all the same where the down projection takes the integer-dot path, whose quantizer
// forms the activation once itself.
bool decode_glu_pass(int64_t n);

// The key chunks a decode call of `n` query rows of `n_head` heads over `n_keys` cached keys
// (the call's own included) splits each head's attention into (attention_decode_split, then
// attention_merge), or 0 for the one-workgroup-a-head attention_decode: by default 8 chunks
// where heads x rows make fewer than 8 workgroups, and from 1024 keys at least the power of two
// that leaves at most 256 keys a chunk (64 at most); the knob vulkan.attention.decode_split
// forces (1: never split, 2..64 chunks). A pure function of its arguments and the knob.
int64_t decode_attention_splits(int64_t n, int64_t n_head, int64_t n_keys = 0);

// Rows the device K/V caches are allocated to (a multiple of the coopmat attention's 16-key
// granules, which read whole granules).
int64_t device_cache_rows(int64_t n_ctx);

// The device K/V of a batching engine's slots: per layer one K and one V buffer (f16) of
// n_slots x slot_rows rows, slot s's positions from row s * slot_rows.
struct DeviceKVPool {
    std::shared_ptr<gpu::Device> device;  // outlives the buffers below
    // Unique in the process: a recording names its pool by this, never by an address that a
    // later pool may reuse once this one is freed.
    uint64_t id = 0;
    int n_slots = 0;
    int64_t n_ctx = 0, slot_rows = 0;
    std::vector<std::unique_ptr<gpu::Buffer>> k, v;  // per layer
    uint64_t bytes = 0;
};

// One sequence of a batched call: n rows at positions pos0.. of slot `slot` (whose cache must
// hold [0, pos0)); want_logits: its last row's logits are returned.
struct DeviceRows {
    int slot = 0;
    int64_t pos0 = 0, n = 0;
    bool want_logits = false;
};

class GpuForward {
public:
    // Throws DeviceError (memory included) when the weights or buffers cannot be placed.
    GpuForward(const ModelConfig& cfg, const ModelWeights& w, std::shared_ptr<gpu::Device> device,
               int64_t n_ctx, int64_t max_batch);
    ~GpuForward();

    // Runs ids at positions pos0.. (the device cache must hold [0, pos0)) and writes logits as
    // Forward::run does: n x n_vocab when all_logits, else the last row's n_vocab. `exact`
    // (the model's f32 precision) keeps every product in float32: no cooperative-matrix
    // stamps, which round their operands to float16.
    void run(const int32_t* ids, int64_t n, int64_t pos0, bool all_logits, float* logits,
             bool exact = false);

    // Rows [pos0, pos0 + n) of one layer as float32, [n][n_head_kv * head_dim(_v)].
    void read_kv(int layer, int64_t pos0, int64_t n, std::vector<float>& k, std::vector<float>& v);
    void write_kv(int layer, int64_t pos0, int64_t n, const float* k, const float* v);

    // A pool of n_slots slots of n_ctx positions each. Throws DeviceError when it cannot be
    // placed (memory included).
    std::unique_ptr<DeviceKVPool> make_kv_pool(int n_slots, int64_t n_ctx);
    // Runs the rows of n_seqs sequences, ids in sequence order, and writes the logits of each
    // sequence that wants them, in order (one n_vocab row each). Throws ShapeError when the
    // rows exceed max_batch() or a sequence runs past its slot's n_ctx, std::invalid_argument
    // for a slot outside the pool.
    void run_batch(const int32_t* ids, const DeviceRows* seqs, int n_seqs, DeviceKVPool& pool,
                   float* logits, bool exact = false);
    // Rows [pos0, pos0 + n) of one layer of a pool slot, as read_kv / write_kv.
    void read_kv(DeviceKVPool& pool, int slot, int layer, int64_t pos0, int64_t n,
                 std::vector<float>& k, std::vector<float>& v);
    void write_kv(DeviceKVPool& pool, int slot, int layer, int64_t pos0, int64_t n,
                  const float* k, const float* v);
    int64_t max_batch() const { return max_batch_; }

    gpu::Device& device() { return *device_; }
    uint64_t last_dispatches() const { return last_dispatches_; }
    bool last_replayed() const { return last_replayed_; }
    uint64_t weight_bytes() const { return weights_.bytes; }

private:
    struct RopeTab;
    // What a recording depends on besides the mapped ids and positions: for a batched call
    // also its pool and each sequence's slot, rows and whether it wants logits (layout).
    struct Shape {
        int64_t n = 0;
        bool all_logits = false, logits = false, profiled = false, exact = false;
        uint64_t knobs = 0;  // tuning::generation(): kernels read knobs when recorded
        int64_t attn_splits = 0;  // decode_attention_splits at the recorded position
        uint64_t pool = 0;                   // DeviceKVPool::id; 0: run()'s own cache
        std::vector<int64_t> layout;         // per sequence: slot, n, want_logits
        bool operator==(const Shape& o) const {
            return n == o.n && all_logits == o.all_logits && logits == o.logits &&
                   profiled == o.profiled && exact == o.exact && knobs == o.knobs &&
                   attn_splits == o.attn_splits && pool == o.pool && layout == o.layout;
        }
    };
    // The sequences of the call being recorded: rows [row0, row0 + n) of the call, whose
    // first position is read from `pos` (step_ for run(), one buffer a sequence for
    // run_batch()), over cache rows from kv_row of the K/V buffers per layer; the rows whose
    // logits are read, in order.
    struct CallSeq {
        int64_t row0 = 0, n = 0, kv_row = 0;
        gpu::Buffer* pos = nullptr;
    };
    struct Call {
        std::vector<CallSeq> seqs;
        std::vector<std::unique_ptr<gpu::Buffer>>* k = nullptr;
        std::vector<std::unique_ptr<gpu::Buffer>>* v = nullptr;
        std::vector<int64_t> out_rows;
    };
    void submit(const Shape& shape, float* logits, int64_t logit_rows);
    void record(gpu::Encoder& e, const Shape& s);
    void run_chunk(const int32_t* ids, int64_t n, int64_t pos0, bool all_logits, float* logits,
                   bool exact);
    void project(gpu::Encoder& e, const DeviceMatrix& m, gpu::Buffer& x, uint32_t x_off,
                 uint32_t x_stride, gpu::Buffer& y, uint32_t y_off, uint32_t y_stride,
                 int64_t n_tok, bool accumulate, const ProjectionInput& in = ProjectionInput()) {
        gpu::project(e, m, x, x_off, x_stride, y, y_off, y_stride, n_tok, accumulate, *dummy_,
                     coopmat_ && !recorded_.exact, in);
    }
    // How the matrices of one input read it: from float32 x (neither), one staged float16
    // panel (panel), or one q8_1 form of it (q8: the integer-dot stamp of each matrix).
    struct Staged {
        bool panel = false;
        bool q8 = false;
    };
    // The matrices of one input (q, k, v; gate, up) read it as one staged float16 panel when
    // every one of them may (gpu::staged_panel), else as one q8_1 form when every one of them
    // takes an integer-dot stamp (gpu::matvec_q8_stamp); then the panel or the quantized input
    // is recorded here, followed by a barrier.
    Staged stage(gpu::Encoder& e, std::initializer_list<const DeviceMatrix*> ms, gpu::Buffer& x,
                 uint32_t x_off, uint32_t x_stride, int64_t cols, int64_t n,
                 const ProjectionInput& in);
    // project() of one matrix of an input, from what stage() recorded.
    void project_in(gpu::Encoder& e, const Staged& staged, const DeviceMatrix& m, gpu::Buffer& x,
                    uint32_t x_off, uint32_t x_stride, gpu::Buffer& y, uint32_t y_off,
                    uint32_t y_stride, int64_t n_tok, bool accumulate,
                    const ProjectionInput& in = ProjectionInput()) {
        if (staged.panel)
            gpu::project_staged(e, m, *panel_, y, y_off, y_stride, n_tok, accumulate, *dummy_);
        else if (staged.q8)
            gpu::project_q8(e, m, gpu::matvec_q8_stamp(m, n_tok, in.mode, recorded_.exact), *q8_,
                            y, y_off, y_stride, n_tok, accumulate);
        else
            project(e, m, x, x_off, x_stride, y, y_off, y_stride, n_tok, accumulate, in);
    }
    // The block norms before a projection, as its input stage.
    ProjectionInput normed(gpu::Buffer& weight) const {
        return ProjectionInput{1u, &weight, 0u, float(cfg_.rms_eps)};
    }
    void rmsnorm(gpu::Encoder& e, gpu::Buffer& x, uint32_t x_off, gpu::Buffer& w, int64_t rows,
                 int64_t width, gpu::Buffer& y, uint32_t y_off, const char* stamp_name = "rmsnorm");
    void eltwise(gpu::Encoder& e, const char* op, gpu::Buffer& y, uint32_t y_off, gpu::Buffer& x,
                 uint32_t x_off, int64_t n, float s);
    void attention_layer(gpu::Encoder& e, int il, int64_t n);
    void head(gpu::Encoder& e);  // the logits of call_.out_rows
    void load_ids(const int32_t* ids, int64_t n);
    gpu::Buffer& grow(std::unique_ptr<gpu::Buffer>& buf, size_t bytes, const char* label, bool host);

    const ModelConfig& cfg_;
    const ModelWeights& host_w_;
    std::shared_ptr<gpu::Device> device_;
    int64_t n_ctx_, max_batch_;
    DeviceWeights weights_;
    std::vector<std::unique_ptr<RopeTab>> ropes_;
    std::vector<size_t> layer_rope_;  // index into ropes_ per layer
    std::unique_ptr<gpu::Buffer> x_, qkv_, attn_, out_, gate_up_, logits_;
    std::unique_ptr<gpu::Buffer> ids_, step_, embd_in_, logits_host_, dummy_;
    std::unique_ptr<gpu::Buffer> panel_;  // a staged float16 input panel (stage())
    std::unique_ptr<gpu::Buffer> q8_;     // a q8_1 form of an input (stage())
    std::unique_ptr<gpu::Buffer> attn_parts_;  // the chunks of a split decode attention
    std::unique_ptr<gpu::Buffer> head_rows_;   // a batched call's rows of logits, gathered
    std::vector<std::unique_ptr<gpu::Buffer>> seq_pos_;  // a batched call's positions
    std::unique_ptr<gpu::Encoder> recording_;  // the last call's command buffer
    Shape recorded_;
    Call call_;  // what record() reads besides the shape
    std::vector<std::unique_ptr<gpu::Buffer>> kc_, vc_;
    bool coopmat_ = false;
    uint64_t last_dispatches_ = 0;
    bool last_replayed_ = false;
};

}  // namespace dasllama
