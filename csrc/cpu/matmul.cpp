// Matmul entry points: weight preparation, the variant list, and the split of one product
// over the thread pool. The kernels themselves are in matmul_generic.cpp and the ISA files.
//
// Work split: the rows are cut into chunks and tokens into blocks of the token tile; threads
// take (token block, row chunk) tasks from an atomic counter, so a thread slowed by another
// process does not hold up the rest. Tasks run token block by token block: the quantized
// activations of one block stay in cache while all rows pass over them.
#include "cpu/matmul.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "core/errors.h"
#include "core/thread_pool.h"
#include "core/tuning.h"
#include "cpu/dispatch.h"
#include "cpu/kernels_matmul.h"

namespace dasllama::cpu {

namespace {

using mm::Kernels;

const Kernels kGeneric{"generic",
                       mm::quantize_act_generic,
                       mm::gemm_generic,
                       mm::gemm_f32_generic,
                       mm::gemm_q8_0_f32_generic,
                       mm::dequantize_q8_0_generic,
                       mm::dequantize_f16_generic};

const Variants<Kernels>& variants() {
    static const Variants<Kernels> list{
#if defined(DASLLAMA_X86)
        mm::kernels_avx512(), mm::kernels_avx2(),
#endif
#if defined(DASLLAMA_ARM64)
        mm::kernels_neon(),
#endif
        &kGeneric};
    return list;
}

const Kernels& active() {
    static const Kernels& chosen = variants().best();
    return chosen;
}

// Tokens per prefill task. Wider tiles reuse each weight row over more tokens; narrower ones
// keep the block's quantized activations in L1/L2 and make more tasks to share. The best width
// depends on the cache sizes: `dasllama bench tune` races candidates and records the winner.
// Any width gives the same results (each output is one row against one token).
const tuning::Knob& kTokenTile = tuning::define(
    "cpu.matmul.token_tile", 64, 4, 1024, "tokens per prefill matmul task (token block width)");

// Packed rows plus the mapping the unpacked view needs. Large buffers are 2 MiB aligned and,
// on Linux, asked for transparent huge pages: decode streams each matrix once per token, and
// with 4 KiB pages every page costs a TLB walk and stops the hardware prefetcher at its edge
// (the 262144-row output matrix of a large vocabulary ran at half the memory speed).
struct PackedOwner {
    uint8_t* data = nullptr;
    std::shared_ptr<const void> keep_alive;
    explicit PackedOwner(size_t n) {
        constexpr size_t kHuge = size_t(2) << 20;
        const size_t align = n >= kHuge ? kHuge : 64;
        const size_t size = (n + align - 1) / align * align;
        data = static_cast<uint8_t*>(std::aligned_alloc(align, size));
        if (!data) throw std::bad_alloc();
#if defined(__linux__)
        if (align == kHuge) ::madvise(data, size, MADV_HUGEPAGE);  // a hint: failure is harmless
#endif
    }
    ~PackedOwner() { std::free(data); }
    PackedOwner(const PackedOwner&) = delete;
    PackedOwner& operator=(const PackedOwner&) = delete;
};

// Grow-only scratch, 64-byte aligned, one per thread: no allocation once warm.
uint8_t* scratch(std::vector<uint8_t>& buf, size_t n) {
    if (buf.size() < n + 64) buf.resize(n + 64);
    const auto p = reinterpret_cast<uintptr_t>(buf.data());
    return buf.data() + ((64 - p % 64) % 64);
}

int64_t row_chunk(int64_t rows, int n_threads) {
    // About four chunks per thread, a multiple of 16 rows (the kernels' row tiles divide it).
    int64_t chunk = (rows + 4 * n_threads - 1) / (4 * n_threads);
    chunk = (chunk + 15) / 16 * 16;
    return std::max<int64_t>(chunk, 16);
}

// Products of fewer multiply-adds than this run on the calling thread: waking a worker and
// waiting for its share costs about a microsecond, what a share of such a product saves (a
// frame's 1024 x 32 input projection of Pocket TTS is ~3 us on one core).
constexpr int64_t kInlineMacs = int64_t(1) << 16;

// Runs job(thread, n_threads) on the pool, or as job(0, 1) on the caller for a product of
// fewer than kInlineMacs multiply-adds. Either way every task of the job runs once.
template <class Job>
void run_sized(ThreadPool& pool, int64_t macs, const Job& job) {
    if (macs < kInlineMacs)
        job(0, 1);
    else
        pool.run(job);
}

// Runs body(r0, r1, t0, t1) over all (token block, row chunk) tasks of a product of rows x
// cols weights on the pool.
template <class Body>
void parallel_tiles(ThreadPool& pool, int64_t rows, int64_t cols, int64_t n_tokens,
                    const Body& body) {
    const int64_t chunk = row_chunk(rows, pool.size());
    const int64_t n_chunks = (rows + chunk - 1) / chunk;
    const int64_t tile = kTokenTile.get();  // read once: one width for the whole product
    const int64_t n_blocks = (n_tokens + tile - 1) / tile;
    const int64_t n_tasks = n_chunks * n_blocks;
    std::atomic<int64_t> next{0};
    run_sized(pool, rows * cols * n_tokens, [&](int, int) {
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            const int64_t tb = task / n_chunks, rc = task % n_chunks;
            const int64_t r0 = rc * chunk, t0 = tb * tile;
            body(r0, std::min(rows, r0 + chunk), t0, std::min(n_tokens, t0 + tile));
        }
    });
}

// Float path. Float32 rows go to the float kernel as they are; Q8_0 rows against a few tokens
// (decode) are widened inside the kernel; otherwise rows are dequantized a few at a time into
// a per-thread buffer, once for the whole token block, and the float kernel runs over them.
constexpr int64_t kQ8DirectTokens = 4;  // at most this many tokens: Q8_0 widened in registers
constexpr int64_t kDequantRows = 16;    // rows per dequantized pass

// Rows [r0, r1) of W times tokens [t0, t1) of x (rows ldx floats apart) into y.
void f32_rows(const Kernels& k, const WeightMatrix& w, const float* x, int64_t ldx, int64_t r0,
              int64_t r1, int64_t t0, int64_t t1, float* y) {
    const int64_t rows = w.rows, cols = w.cols, nt = t1 - t0;
    const float* xt = x + t0 * ldx;
    float* yt = y + t0 * rows;
    const bool aligned = reinterpret_cast<uintptr_t>(w.data) % alignof(float) == 0;
    if (w.type->type == GgmlType::F32 && aligned) {
        k.gemm_f32(reinterpret_cast<const float*>(w.data) + r0 * cols, cols, r1 - r0, cols, xt,
                   ldx, nt, yt + r0, rows);
        return;
    }
    const bool q8 = w.type->type == GgmlType::Q8_0;
    if (q8 && nt <= kQ8DirectTokens) {
        k.gemm_q8_0_f32(w.data + r0 * w.row_bytes, w.row_bytes, r1 - r0, cols, xt, ldx, nt,
                        yt + r0, rows);
        return;
    }
    thread_local std::vector<uint8_t> buf;
    float* deq = reinterpret_cast<float*>(scratch(buf, kDequantRows * cols * sizeof(float)));
    for (int64_t p0 = r0; p0 < r1; p0 += kDequantRows) {
        const int64_t p1 = std::min(r1, p0 + kDequantRows);
        for (int64_t r = p0; r < p1; ++r) {
            const uint8_t* src = w.data + r * w.row_bytes;
            if (q8)
                k.dequantize_q8_0(src, deq + (r - p0) * cols, cols);
            else if (w.type->type == GgmlType::F16)
                k.dequantize_f16(src, deq + (r - p0) * cols, cols);
            else
                w.type->dequantize(src, deq + (r - p0) * cols, cols);
        }
        k.gemm_f32(deq, cols, p1 - p0, cols, xt, ldx, nt, yt + p0, rows);
    }
}

void matmul_f32(const Kernels& k, const WeightMatrix& w, const float* x, int64_t ldx,
                int64_t n_tokens, float* y, ThreadPool& pool) {
    parallel_tiles(pool, w.rows, w.cols, n_tokens,
                   [&](int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
                       f32_rows(k, w, x, ldx, r0, r1, t0, t1, y);
                   });
}

void matmul_quantized(const Kernels& k, const WeightMatrix& w, const float* x, int64_t n_tokens,
                      float* y, ThreadPool& pool) {
    const auto kind = static_cast<mm::PackKind>(w.packed_kind);
    const int64_t stride = mm::act_row_bytes(mm::kFormats[kind], w.cols);
    thread_local std::vector<uint8_t> act_buf;
    uint8_t* act = scratch(act_buf, static_cast<size_t>(stride * n_tokens));
    if (n_tokens < 4 || pool.size() == 1) {
        for (int64_t t = 0; t < n_tokens; ++t)
            k.quantize_act(kind, x + t * w.cols, w.cols, act + t * stride);
    } else {
        pool.run([&](int thread, int n) {
            for (int64_t t = thread; t < n_tokens; t += n)
                k.quantize_act(kind, x + t * w.cols, w.cols, act + t * stride);
        });
    }
    parallel_tiles(pool, w.rows, w.cols, n_tokens,
                   [&](int64_t r0, int64_t r1, int64_t t0, int64_t t1) {
        k.gemm(kind, w.packed + r0 * w.packed_row_bytes, w.packed_row_bytes, r1 - r0, w.cols,
               act + t0 * stride, stride, t1 - t0, y + t0 * w.rows + r0, w.rows);
    });
}

// Decode of several matrices over one input as one pool job: the row chunks of all matrices
// handed out from one counter. Float path: each chunk as matmul_f32 computes it.
constexpr int kMaxSharedTargets = 8;

// Multiply-adds of one token through all targets.
int64_t shared_macs(const MatmulTarget* targets, int n_targets) {
    int64_t macs = 0;
    for (int i = 0; i < n_targets; ++i) macs += targets[i].w->rows * targets[i].w->cols;
    return macs;
}

void matmul_shared_decode_f32(const Kernels& k, const MatmulTarget* targets, int n_targets,
                              const float* x, ThreadPool& pool) {
    int64_t first_task[kMaxSharedTargets + 1], chunk[kMaxSharedTargets];
    first_task[0] = 0;
    for (int i = 0; i < n_targets; ++i) {
        chunk[i] = row_chunk(targets[i].w->rows, pool.size());
        first_task[i + 1] = first_task[i] + (targets[i].w->rows + chunk[i] - 1) / chunk[i];
    }
    const int64_t n_tasks = first_task[n_targets];
    std::atomic<int64_t> next{0};
    run_sized(pool, shared_macs(targets, n_targets), [&](int, int) {
        int i = 0;
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            while (task >= first_task[i + 1]) ++i;  // tasks are taken in increasing order
            const WeightMatrix& w = *targets[i].w;
            const int64_t r0 = (task - first_task[i]) * chunk[i];
            f32_rows(k, w, x, w.cols, r0, std::min(w.rows, r0 + chunk[i]), 0, 1, targets[i].y);
        }
    });
}

// Integer path: x quantized once per packed kind, then the chunks as above.
void matmul_shared_decode(const Kernels& k, const MatmulTarget* targets, int n_targets,
                          const float* x, ThreadPool& pool) {
    const int64_t cols = targets[0].w->cols;
    int64_t act_offset[mm::kPackKinds];
    std::fill(act_offset, act_offset + mm::kPackKinds, int64_t(-1));
    int64_t act_bytes = 0;
    int64_t first_task[kMaxSharedTargets + 1], chunk[kMaxSharedTargets];
    first_task[0] = 0;
    for (int i = 0; i < n_targets; ++i) {
        const WeightMatrix& w = *targets[i].w;
        const int kind = w.packed_kind;
        if (act_offset[kind] < 0) {
            act_offset[kind] = act_bytes;
            act_bytes += mm::act_row_bytes(mm::kFormats[kind], cols);
        }
        chunk[i] = row_chunk(w.rows, pool.size());
        first_task[i + 1] = first_task[i] + (w.rows + chunk[i] - 1) / chunk[i];
    }
    thread_local std::vector<uint8_t> act_buf;
    uint8_t* act = scratch(act_buf, static_cast<size_t>(act_bytes));
    for (int kind = 0; kind < mm::kPackKinds; ++kind)
        if (act_offset[kind] >= 0)
            k.quantize_act(static_cast<mm::PackKind>(kind), x, cols, act + act_offset[kind]);
    const int64_t n_tasks = first_task[n_targets];
    std::atomic<int64_t> next{0};
    run_sized(pool, shared_macs(targets, n_targets), [&](int, int) {
        int i = 0;
        for (int64_t task; (task = next.fetch_add(1, std::memory_order_relaxed)) < n_tasks;) {
            while (task >= first_task[i + 1]) ++i;  // tasks are taken in increasing order
            const WeightMatrix& w = *targets[i].w;
            const int64_t r0 = (task - first_task[i]) * chunk[i];
            const int64_t r1 = std::min(w.rows, r0 + chunk[i]);
            const int64_t stride = mm::act_row_bytes(mm::kFormats[w.packed_kind], cols);
            k.gemm(static_cast<mm::PackKind>(w.packed_kind), w.packed + r0 * w.packed_row_bytes,
                   w.packed_row_bytes, r1 - r0, cols, act + act_offset[w.packed_kind], stride,
                   1, targets[i].y + r0, w.rows);
        }
    });
}

void check_matmul(const WeightMatrix& w, int64_t n_tokens) {
    if (!w.type || !w.data) throw ShapeError("matmul: the weight matrix was not prepared");
    if (n_tokens < 0) throw ShapeError("matmul: negative n_tokens " + std::to_string(n_tokens));
}

void run_matmul(const Kernels& k, const WeightMatrix& w, const float* x, int64_t n_tokens,
                float* y, ThreadPool& pool, Precision precision) {
    check_matmul(w, n_tokens);
    if (n_tokens == 0 || w.rows == 0) return;
    if (w.cols == 0) {
        std::fill(y, y + n_tokens * w.rows, 0.0f);
        return;
    }
    if (precision == Precision::kF32 || w.packed_kind < 0)
        matmul_f32(k, w, x, w.cols, n_tokens, y, pool);
    else
        matmul_quantized(k, w, x, n_tokens, y, pool);
}

}  // namespace

WeightMatrix prepare_weight(const TypeTraits& type, int64_t rows, int64_t cols,
                            const uint8_t* data, std::shared_ptr<const void> keep_alive,
                            const ConsumedFn& consumed) {
    if (rows < 0 || cols < 0)
        throw ShapeError("prepare_weight: negative shape (" + std::to_string(rows) + ", " +
                         std::to_string(cols) + ")");
    if (!type.dequantize)
        throw FormatError(std::string("prepare_weight: no kernel for type ") + type.name);
    WeightMatrix w;
    w.type = &type;
    w.rows = rows;
    w.cols = cols;
    w.data = data;
    w.row_bytes = row_bytes(type, cols);  // throws FormatError for a partial block
    w.owner = keep_alive;
    const int kind = mm::pack_kind_of(static_cast<uint32_t>(type.type));
    if (kind < 0 || rows == 0 || cols == 0) return w;

    const auto k = static_cast<mm::PackKind>(kind);
    const int64_t prb = mm::packed_row_bytes(mm::kFormats[k], cols / mm::kFormats[k].block);
    auto owner = std::make_shared<PackedOwner>(static_cast<size_t>(prb * rows));
    owner->keep_alive = std::move(keep_alive);
    uint8_t* out = owner->data;
    // Rows are handed back in stretches of about kConsumedStretch source bytes: small enough
    // that a large matrix is never resident twice, large enough to cost nothing.
    constexpr int64_t kConsumedStretch = 4 << 20;
    const int64_t rows_per_stretch = std::max<int64_t>(1, kConsumedStretch / w.row_bytes);
    for (int64_t r0 = 0; r0 < rows; r0 += rows_per_stretch) {
        const int64_t r1 = std::min(rows, r0 + rows_per_stretch);
        for (int64_t r = r0; r < r1; ++r) mm::pack_row(k, data + r * w.row_bytes, cols, out + r * prb);
        if (consumed) consumed(data + r0 * w.row_bytes, static_cast<uint64_t>((r1 - r0) * w.row_bytes));
    }
    w.packed_kind = kind;
    w.packed = out;
    w.packed_row_bytes = prb;
    w.owner = std::move(owner);
    return w;
}

void matmul(const WeightMatrix& w, const float* x, int64_t n_tokens, float* y, ThreadPool& pool,
            Precision precision) {
    run_matmul(active(), w, x, n_tokens, y, pool, precision);
}

void matmul_f32_strided(const WeightMatrix& w, const float* x, int64_t ldx, int64_t n_tokens,
                        float* y, ThreadPool& pool) {
    check_matmul(w, n_tokens);
    if (ldx < 0) throw ShapeError("matmul_f32_strided: negative ldx " + std::to_string(ldx));
    if (n_tokens == 0 || w.rows == 0) return;
    if (w.cols == 0) {
        std::fill(y, y + n_tokens * w.rows, 0.0f);
        return;
    }
    matmul_f32(active(), w, x, ldx, n_tokens, y, pool);
}

void matmul_with(std::string_view variant, const WeightMatrix& w, const float* x,
                 int64_t n_tokens, float* y, ThreadPool& pool, Precision precision) {
    run_matmul(variants().get(variant), w, x, n_tokens, y, pool, precision);
}

void matmul_shared_input(const MatmulTarget* targets, int n_targets, const float* x,
                         int64_t n_tokens, ThreadPool& pool, Precision precision) {
    bool shared = n_tokens == 1 && n_targets >= 1 && n_targets <= kMaxSharedTargets;
    bool integer = precision == Precision::kFast;
    for (int i = 0; shared && i < n_targets; ++i) {
        const WeightMatrix& w = *targets[i].w;
        check_matmul(w, n_tokens);
        shared = w.rows > 0 && w.cols > 0 && w.cols == targets[0].w->cols;
        integer = integer && w.packed_kind >= 0;
    }
    // Integer and float matrices mixed: separate calls (each takes its own path).
    if (shared && precision == Precision::kFast && !integer)
        for (int i = 0; shared && i < n_targets; ++i) shared = targets[i].w->packed_kind < 0;
    if (!shared) {
        for (int i = 0; i < n_targets; ++i)
            matmul(*targets[i].w, x, n_tokens, targets[i].y, pool, precision);
        return;
    }
    if (integer)
        matmul_shared_decode(active(), targets, n_targets, x, pool);
    else
        matmul_shared_decode_f32(active(), targets, n_targets, x, pool);
}

std::vector<std::string> matmul_variants() { return variants().names(); }

void get_row(const WeightMatrix& w, int64_t r, float* out) {
    if (!w.type || !w.data) throw ShapeError("get_row: the weight matrix was not prepared");
    if (r < 0 || r >= w.rows)
        throw ShapeError("get_row: row " + std::to_string(r) + " outside [0, " +
                         std::to_string(w.rows) + ")");
    // From the packed copy when there is one (the same floats: unpack_row is dequantize's
    // inverse of the packing): the file's pages were let go after packing, and reading rows
    // from them would fault them back in, page by page, until a tied embedding (the logits'
    // matrix, already packed) sat in memory twice.
    if (w.packed_kind >= 0 && w.packed) {
        mm::unpack_row(static_cast<mm::PackKind>(w.packed_kind), w.packed + r * w.packed_row_bytes,
                       w.cols, out);
        return;
    }
    w.type->dequantize(w.data + r * w.row_bytes, out, w.cols);
}

std::vector<float> quantized_activations(const WeightMatrix& w, const float* x,
                                         int64_t n_tokens) {
    std::vector<float> out(x, x + n_tokens * w.cols);
    if (w.packed_kind < 0) return out;
    const auto kind = static_cast<mm::PackKind>(w.packed_kind);
    const mm::PackFormat& f = mm::kFormats[kind];
    const int64_t nb = w.cols / f.block;
    std::vector<uint8_t> act(static_cast<size_t>(mm::act_row_bytes(f, w.cols)));
    for (int64_t t = 0; t < n_tokens; ++t) {
        mm::quantize_act_generic(kind, x + t * w.cols, w.cols, act.data());
        const uint8_t* grp = act.data();
        for (int64_t b0 = 0; b0 < nb;) {
            const mm::GroupShape g = mm::group_at(f, nb, b0);
            for (int i = 0; i < g.r; ++i)
                for (int e = 0; e < f.block; ++e) {
                    const mm::Slot s = mm::slot_of(g, i, e);
                    float da;
                    std::memcpy(&da, grp + g.chunks * 64 + 4 * s.lane, 4);
                    const auto q = static_cast<int8_t>(grp[s.chunk * 64 + 4 * s.lane + s.byte]);
                    out[t * w.cols + (b0 + i) * f.block + e] = da * static_cast<float>(q);
                }
            grp += mm::act_group_bytes(g);
            b0 += g.r;
        }
    }
    return out;
}

}  // namespace dasllama::cpu
