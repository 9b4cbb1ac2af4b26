// Weight matrices resident on a GPU and the products against them, for every model: a matrix
// is kept as its raw GGUF blocks (the kernels decode them in place), split by rows into several
// buffers where one storage binding cannot address it all (lavapipe stops at 128 MiB; a
// 262k-token embedding is larger), and projected with the matvec stamps (a few token rows) or
// the tiled matmul stamps (many), one dispatch per split.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/formats.h"
#include "gpu/device.h"

namespace dasllama::gpu {

struct DeviceMatrix {
    struct Split {
        std::unique_ptr<Buffer> buffer;
        int64_t row0 = 0, rows = 0;
    };
    std::string format;  // stamp suffix: "q4_0", "q6_k", "f16", ...
    int64_t rows = 0, cols = 0, row_bytes = 0;
    std::vector<Split> splits;
    bool empty() const { return splits.empty(); }
};

// The stamp suffix of a GGUF type the matrix kernels read, or "" when they cannot.
std::string device_format(const TypeTraits& type);

// A run of consecutive rows of one matrix in host memory (row r at data + r * row_bytes).
struct HostRows {
    const uint8_t* data;
    int64_t rows;
};

// Uploads the row-wise concatenation of `parts` (all of `type`, `cols` wide): one matrix, as
// many splits as the device's storage range needs. Adds the bytes uploaded to `bytes`. Throws
// Error for a format without kernels, DeviceError when memory runs out.
DeviceMatrix upload_matrix(Device& dev, const TypeTraits& type, int64_t cols,
                           std::initializer_list<HostRows> parts, const char* label,
                           uint64_t& bytes);

// The knobs of the decode products' subgroup form (vulkan.project.matvec_sub,
// .matvec_sub4_min_cols, .matvec_sub4_min_rows, .matvec_split_min_cols, .matvec_split_max_rows).
struct MatvecSubKnobs {
    int64_t form, sub4_min_cols, sub4_min_rows, split_min_cols, split_max_rows;
    static MatvecSubKnobs now();  // as set
};
// The subgroup stamp family of a product of `rows` x `cols`: "" (form 0: the staged stamps),
// "matvec_sub_" (form 1; form 2 rows too wide for two), "matvec_sub2_" (form 2, rows up to
// GK_MATVEC_SUB_PREFETCH_COLS_2), "matvec_sub4_" or "matvec_split4_" (form 2, wide rows, by the
// knobs' widths and row counts; split4 first). Pure: the format, alignment and width limits that
// keep a product off the subgroup stamps are checked apart from it.
std::string matvec_sub_family(const MatvecSubKnobs& k, int64_t rows, int64_t cols);

// A float32 vector as a buffer (nullptr for an empty one).
std::unique_ptr<Buffer> upload_floats(Device& dev, const std::vector<float>& v,
                                      const char* label, uint64_t& bytes);

// What a projection reads as its input (shaders/kernels/mm_input.h): x as is, x RMS-normed
// with a weight, or the gated activation of a [gate | up] row.
struct ProjectionInput {
    uint32_t mode = 0;        // 0 plain, 1 RMSNorm, 2 SiLU-gated, 3 GELU-gated
    Buffer* aux = nullptr;    // the norm weight (mode 1)
    uint32_t aux_off = 0;     // mode 1: first weight element; modes 2/3: where the up half starts
    float eps = 0.0f;         // mode 1
};

// The most token rows the matrix-vector stamps take (GK_MATVEC_MAX_TOK). Projections of at
// most the knob vulkan.project.matvec_max_tokens rows (default: this) use them, larger ones
// the tiled matrix stamps.
constexpr int64_t kMatvecTokenLimit = 8;

// y[y_off + t * y_stride + r] (+)= sum_k W[r, k] * in(x)[x_off + t * x_stride + k] for
// t < n_tok, recorded into `e`; `unused` is bound where the input stage needs no buffer.
// Uses the cooperative-matrix stamps for many rows when `coopmat` (the device offers them), this
// build has them and the knob vulkan.project.coopmat is 1.
void project(Encoder& e, const DeviceMatrix& m, Buffer& x, uint32_t x_off, uint32_t x_stride,
             Buffer& y, uint32_t y_off, uint32_t y_stride, int64_t n_tok, bool accumulate,
             Buffer& unused, bool coopmat, const ProjectionInput& in = ProjectionInput());

// Whether a projection of `n_tok` token rows through a `format` matrix `cols` wide, whose input
// stage is `in_mode` (mm_input.h), reads its input as a float16 panel staged once by
// stage_input() (the matmul_<fmt>_coopmat_xh stamps) rather than forming it from float32 x in
// every row tile: only where project() would take the cooperative-matrix stamps (`coopmat`: the
// device offers them; many rows; not F32), cols is a multiple of kStageAlign, this build has the
// stamp, and the knob vulkan.project.coopmat_staged allows it (0 never; 1 inputs with a norm or
// gate stage, mode != 0; 2 every input). A pure function of its arguments and the knobs.
bool staged_panel(const std::string& format, int64_t cols, int64_t n_tok, uint32_t in_mode,
                  bool coopmat);

// What the staged panel's rows, offsets and strides are multiples of (halves): the _xh stamps
// and mm_stage move eight halves at once.
constexpr int64_t kStageAlign = 8;

// panel[t * cols + k] (halves) = half(in(x)[x_off + t * x_stride + k]) for t < n_tok, k < cols
// (the mm_stage stamp); `panel` holds at least n_tok * cols halves. cols % kStageAlign == 0.
void stage_input(Encoder& e, Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t cols,
                 int64_t n_tok, const ProjectionInput& in, Buffer& panel, Buffer& unused);

// A tile shape of the staged products: stamp matmul_<fmt>_coopmat_xh<suffix> computes tiles of
// `rows` weight rows x `toks` token rows.
struct StagedTile {
    const char* suffix;
    uint32_t rows, toks;
};

// The tile shape a staged product of `rows` weight rows `cols` wide and `n_tok` token rows
// takes: 128 x 128 for rows at least vulkan.project.coopmat_large_min_cols wide where it makes
// vulkan.project.coopmat_large_fill_groups workgroups; else the largest of 64 x 64, 64 x 32 and
// 32 x 32 that still makes vulkan.project.coopmat_fill_groups workgroups, else the smallest:
// narrow outputs need small tiles to occupy the GPU, wide ones gain from reusing each loaded
// tile longer. The knob vulkan.project.coopmat_tile forces one (1: 32 x 32, 2: 64 x 32,
// 3: 64 x 64, 4: 128 x 128). A pure function of its arguments and the knobs.
StagedTile staged_tile(int64_t rows, int64_t cols, int64_t n_tok);

// project() of a staged panel (rows m.cols halves apart, as stage_input() wrote them) on the
// matmul_<fmt>_coopmat_xh stamps of staged_tile() (the 64 x 64 one where this build lacks the
// tile's stamp for the format); staged_panel() must have said yes for this matrix.
void project_staged(Encoder& e, const DeviceMatrix& m, Buffer& panel, Buffer& y, uint32_t y_off,
                    uint32_t y_stride, int64_t n_tok, bool accumulate, Buffer& unused);

// The integer-dot decode products (matvec_q8r<R>_<fmt>, shaders/kernels/matvec_q8.gk.h): the
// projection's input is quantized once to q8_1 blocks (quantize_q8()) and the K-quant weights
// are dotted with it in integer arithmetic. The knobs: vulkan.project.matvec_q8 (0 off, 1 on),
// .matvec_q8_min_cols (the narrowest rows that take it), .matvec_q8_rows_log2 (rows a subgroup).
struct MatvecQ8Knobs {
    int64_t on, min_cols, rows_log2;
    static MatvecQ8Knobs now();  // as set
};
// Rows a subgroup (1, 2 or 4) of the integer-dot product of a `format` matrix `rows` x `cols`
// against `n_tok` token rows whose input stage is `in_mode`, or 0 where it does not apply: the
// knob is on, the format is q4_k or q6_k, 1 <= n_tok <= kMatvecQ8MaxTokens, cols is at least
// min_cols, and the input stage is one quant_q8_1 forms (modes 0-7: not the LayerNorms). Pure:
// whether this build has the stamp is checked apart from it (matvec_q8_stamp()).
uint32_t matvec_q8_rows(const MatvecQ8Knobs& k, const std::string& format, int64_t rows,
                        int64_t cols, int64_t n_tok, uint32_t in_mode);
// The most token rows the integer-dot stamps take (GK_Q8_MAX_TOK).
constexpr int64_t kMatvecQ8MaxTokens = 8;
// The stamp of matvec_q8_rows() under the knobs as set, or "" for none (also where this build
// lacks the stamp, or `exact`: a model's exact lane keeps float inputs).
std::string matvec_q8_stamp(const DeviceMatrix& m, int64_t n_tok, uint32_t in_mode, bool exact);
// Bytes of the q8_1 form of n_tok rows of `cols` values (cols % 32 == 0): the codes, then one
// (d, s) word a block.
size_t q8_bytes(int64_t cols, int64_t n_tok);
// q8[...] = the q8_1 form of in(x)[x_off + t * x_stride + k], t < n_tok, k < cols (the
// quant_q8_1 stamp); `q8` holds at least q8_bytes(cols, n_tok).
void quantize_q8(Encoder& e, Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t cols,
                 int64_t n_tok, const ProjectionInput& in, Buffer& q8, Buffer& unused);
// project() of a quantized input (as quantize_q8() wrote it for m.cols and n_tok) on `stamp`
// (matvec_q8_stamp()).
void project_q8(Encoder& e, const DeviceMatrix& m, const std::string& stamp, Buffer& q8,
                Buffer& y, uint32_t y_off, uint32_t y_stride, int64_t n_tok, bool accumulate);

// The stamp `name` of this build; DeviceError naming it when the build lacks it.
const StampInfo& require_stamp(const std::string& name);

// Groups of a grid-stride kernel: enough for one sweep of `items`, at least 1, at most the
// 65535 every device allows in x.
uint32_t stride_groups(int64_t items, int64_t per_group);

}  // namespace dasllama::gpu
