#include "gpu/matrix.h"

#include <algorithm>
#include <cctype>
#include <cstdint>

#include "core/errors.h"
#include "core/tuning.h"
#include "gk_args.h"

namespace dasllama::gpu {

namespace {

// Formats with matvec/matmul/get_rows stamps (shaders/stamps.txt).
constexpr const char* kDeviceFormats[] = {"F32", "F16", "Q4_0", "Q4_1", "Q5_0", "Q5_1",
                                          "Q8_0", "Q4_K", "Q5_K", "Q6_K"};
// Workgroups a dispatch may have in x on every device (Vulkan's required minimum).
constexpr uint32_t kMaxGroups = 65535;

// Where a projection turns from the matrix-vector stamps (each weight read once per token row)
// to the tiled matrix stamps (weights reused across a tile of rows): the knee depends on the
// GPU's bandwidth and launch costs. Both compute the same sums in other orders: results agree
// to rounding whichever is chosen.
const tuning::Knob& kMatvecMaxTokens = tuning::define(
    "vulkan.project.matvec_max_tokens", kMatvecTokenLimit, 1, kMatvecTokenLimit,
    "token rows at or below which projections use the matrix-vector kernels");

// Whether many-row projections use the cooperative-matrix stamps where the device offers them
// and the build has them (1), or the portable tiled stamps (0). The coopmat stamps round their
// operands to float16, so results differ from the portable path by that rounding (~1e-3).
const tuning::Knob& kCoopmat = tuning::define(
    "vulkan.project.coopmat", 1, 0, 1,
    "1: prefill projections on cooperative matrices where the device has them; 0: portable");

// Which many-row projections read their input as a float16 panel staged once (mm_stage) on the
// matmul_<fmt>_coopmat_xh stamps: 0 none; 1 those with a norm or gate input stage (formed once
// per token row instead of once per row tile of each product; q, k and v share one panel);
// 2 every input (a plain one too: one more dispatch, then 16-byte loads of halves). Measured on
// an H200, pp512 GPU time: SmolLM2-135M 14.2 ms (0), 7.2 ms (1), 6.4 ms (2); Gemma-3-270M
// 13.1, 7.2 and 6.2 ms. The products themselves ran 3x faster on a panel (SmolLM2's 576 x 1536
// down projection 179 us from float32 x with its gate, 32 us from the panel plus 8 us staging).
const tuning::Knob& kCoopmatStaged = tuning::define(
    "vulkan.project.coopmat_staged", 2, 0, 2,
    "prefill projections on staged float16 input panels: 0 off, 1 normed/gated inputs, 2 all");

// The staged products' tile shapes: they mirror the defines of the _xh stamps in
// shaders/stamps.txt (the default one is the template's own). Indexed by the knob
// vulkan.project.coopmat_tile (entry k - 1 for k >= 1).
constexpr StagedTile kStagedTileTable[] = {{"_r32", 32, 32},
                                           {"", GK_MMC_TILE_ROWS, GK_MMC_TILE_TOKS},
                                           {"_t64", 64, 64},
                                           {"_t128", 128, 128}};
constexpr size_t kStagedTileCount = sizeof(kStagedTileTable) / sizeof(kStagedTileTable[0]);
// The entries of the automatic ladder: 128 x 128 (only for rows at least
// coopmat_large_min_cols wide, from coopmat_large_fill_groups workgroups), then 64 x 64,
// 64 x 32, 32 x 32 (from coopmat_fill_groups, largest first; the smallest whatever it makes).
constexpr size_t kLargeTile = 3;
constexpr size_t kFallbackTile = 2;  // where a build lacks the large tile's stamp for a format
constexpr size_t kSmallLadder[] = {2, 1, 0};
// Workgroups from which a staged product takes a larger tile. Measured on an H200 (132 SMs) at
// 512 tokens: 64 x 64 tiles won from 256 workgroups (2048-3072 rows: Gemma-3's 2048-row gate,
// 99 us against 117 us on 64 x 32), 64 x 32 at 240-256 (960-1024 rows), and 32 x 32 below (576
// and 640 rows: SmolLM2's down projection 22.8 us against 32.3 us).
const tuning::Knob& kCoopmatFillGroups = tuning::define(
    "vulkan.project.coopmat_fill_groups", 192, 1, int64_t(1) << 20,
    "workgroups a staged prefill product's tile must make to be chosen over a smaller one");
const tuning::Knob& kCoopmatTile = tuning::define(
    "vulkan.project.coopmat_tile", 0, 0, int64_t(kStagedTileCount),
    "staged prefill product tiles: 0 by shape, 1 32x32, 2 64x32, 3 64x64, 4 128x128");
// The 128 x 128 tile (eight subgroups, each 64 rows x 32 tokens, K steps of 64: four times the
// products per loaded fragment of 64 x 64, half the barriers a K walk): it needs long rows to
// amortize its prologue and epilogue, and it wins with fewer workgroups than the SMs. Measured
// on an H200 at 512 tokens (an 8B Q4_K, 4096 wide): its 4096-row products (128 workgroups)
// 530-590 us against 880-1330 us on 128 x 64 tiles (256) and 1200-1740 us on 64 x 64 (512); the
// 28672-row gate/up 1126 us (107 TFLOP/s) against 1955 us on 64 x 64; the 8B's pp512 GPU time
// 78 ms against 98 ms on 128 x 64 and 128 x 128 tiles of K steps of 32. Against it, 128 x 128
// on four subgroups (each 64 x 64) and 128 x 64 tiles lost by 10-40%. A 1B's (2048 wide)
// 16384-row gate/up: 341 us against 524 us on 64 x 64; its 2048-3072-row products (64-96
// workgroups of 128 x 128) stay on 64 x 64 (qkv 93 us against 77-122 us). 64 x 64 with K
// steps of 64 ran its 2048 x 8192 down projection 8% faster than 64 x 64 but its other products
// slower (not a rung). The small models' products (576-640 columns) stay on the 64-row tiles.
const tuning::Knob& kCoopmatLargeMinCols = tuning::define(
    "vulkan.project.coopmat_large_min_cols", 2048, 1, int64_t(1) << 30,
    "columns from which staged prefill products may take the 128 x 128 tile");
const tuning::Knob& kCoopmatLargeFillGroups = tuning::define(
    "vulkan.project.coopmat_large_fill_groups", 128, 1, int64_t(1) << 20,
    "workgroups a staged prefill product's 128 x 128 tile must make to be chosen");

// Rows from which decode projections take the tall matrix-vector stamps: where staging the
// token row once per workgroup of GK_MATVEC_ROWS rows costs more than the rows' own reads.
const tuning::Knob& kTallMinRows = tuning::define(
    "vulkan.project.tall_min_rows", 16384, 1, int64_t(1) << 31,
    "rows from which matrix-vector projections use the tall stamps (many rows a workgroup)");

// Whether decode projections of the block formats take the subgroup stamps (no workgroup
// memory, no barrier) where their input allows it: 1 one row a subgroup (matvec_sub_<fmt>);
// 2 two rows (matvec_sub2_<fmt>) where a row fits what a lane decodes ahead for two rows
// (GK_MATVEC_SUB_PREFETCH_COLS_2), four rows for wide ones (matvec_split4_<fmt>,
// matvec_sub4_<fmt>: the knobs below), one row between; 0 the staged stamps. Measured on an
// H200, alone: a 576 x 576 Q4_1 product 7.5 us staged, 5.2 us on either form; 3072 x 576 with
// its RMSNorm 13.3, 10.1 and 9.3 us; SmolLM2's decode step 1.96 ms staged, 1.66 ms with two
// rows a subgroup.
const tuning::Knob& kMatvecSub = tuning::define(
    "vulkan.project.matvec_sub", 2, 0, 2,
    "decode projections of block formats on the subgroup matvec stamps: rows a subgroup (0 off)");
// The widest rows the subgroup stamps take (past it, the staged stamps). Wide rows with a gated
// input form every activation once a subgroup (once for four rows on matvec_sub4) instead of
// once a workgroup of four rows; 16384 takes the FFN-down rows of 1B-8B models (8192-14336).
const tuning::Knob& kMatvecSubMaxCols = tuning::define(
    "vulkan.project.matvec_sub_max_cols", 16384, 16, int64_t(1) << 30,
    "widest rows of the subgroup matvec stamps");
// Under form 2, four rows at once, so that the token row's strided 16-byte loads (and the norm
// weight's) serve four rows' weights instead of one or two: matvec_split4_<fmt> (four rows a
// workgroup, its subgroups splitting the units: short chains, many workgroups) for rows at
// least split_min_cols wide in matrices of at most split_max_rows rows, else matvec_sub4_<fmt>
// (four rows a subgroup) for rows at least sub4_min_cols wide in matrices of at least
// sub4_min_rows rows (fewer make too few workgroups: Gemma-3's 640 x 2048 down projection ran
// 17.9 us on it against 10.0 us one row a subgroup). 2^30 turns a form off. Measured on an
// H200, a decode step: SmolLM2-135M 1.41 ms before these forms, 1.30 ms with split4 for every
// product; Gemma-3-270M 1.59 and 1.52 ms; a 1B Q8_0 (2048 wide, FFN 8192) 3.15 ms, 1.71 ms
// with sub4 for its wide rows, 1.52 ms with split4 for all, 1.42 ms with split4 up to 4096
// rows and sub4 past them (its 16384-row gate/up 33 us on sub4 against 35 us, its 2048-8192
// column products 7-16 us on split4 against 11-26 us); an 8B Q4_K 6.93 ms on sub4, 6.20 ms so.
// The 8B Q4_K step again (6.19 ms, medians over its 32 layers): qkv 26 us (0.54 TB/s), the
// output projection 15.5 us (0.61), gate/up 89 us (0.74), down 37 us (0.89), the head 142 us
// (0.80), against about 4.3 TB/s; every other pick measured slower (split4 for all 6.40 ms,
// sub4 for all 6.95, one row a subgroup 12.5, the staged stamps 13.4). A factored K-quant
// decode in these stamps (raw quants, then d * sum(q x) - m * sum(x), sum(x) shared by the
// four rows: two operations less per weight) ran 6.55 ms (gate/up 100 us), so the products
// are bound by neither the arithmetic per weight nor the grid size alone.
constexpr int64_t kFormOff = int64_t(1) << 30;
const tuning::Knob& kMatvecSub4MinCols = tuning::define(
    "vulkan.project.matvec_sub4_min_cols", 1025, 16, kFormOff,
    "rows at least this wide may take four rows a subgroup (matvec_sub4)");
const tuning::Knob& kMatvecSub4MinRows = tuning::define(
    "vulkan.project.matvec_sub4_min_rows", 2048, 1, kFormOff,
    "matrices of at least this many rows may take four rows a subgroup (matvec_sub4)");
const tuning::Knob& kMatvecSplitMinCols = tuning::define(
    "vulkan.project.matvec_split_min_cols", 16, 16, kFormOff,
    "rows at least this wide take four rows a workgroup split over its subgroups (matvec_split4)");
const tuning::Knob& kMatvecSplitMaxRows = tuning::define(
    "vulkan.project.matvec_split_max_rows", 4096, 1, kFormOff,
    "matrices of at most this many rows may take matvec_split4");

// The integer-dot decode products of the K-quants (matvec_q8.gk.h): the input quantized once to
// q8_1 (quant_q8_1, one more dispatch and barrier for every input, shared by the products that
// read it), then 8-bit codes against the weights' nibbles in integer multiply-adds. Measured on
// an H200, the 8B Q4_K decode step (gpu_decode_profile.py, medians over its 32 layers): 6.17 ms
// on the float forms, 4.60 ms here (4.77 ms one row a subgroup, 4.57 ms four): qkv 26.3 ->
// 12.7 us (0.54 -> 1.12 TB/s), the attention output 15.5 -> 10.7 us, gate/up 89 -> 36 us
// (1.83 TB/s), down 37 -> 23 us, the head 143 -> 57 us (1.98 TB/s); the products 5.55 ms ->
// 2.72 ms of the step, quant_q8_1 1.31 ms (129 calls, about 10 us each), 0.79 ms since four
// threads share a block (6.1 us a call; the step 3.94 ms), and the gated activation formed by
// the quantizer instead of its own pass: 3.90 ms. Four items a lane loaded together (GK_Q8_U 4)
// instead of two: the products 21.0 -> 21.1 us a call, one row a subgroup then 24.3 us.
// Gemma-3-270M's 2048-wide down projection lost (a step 1.55 -> 1.89 ms with 1024 here): the
// quantization costs more than a small product saves, hence the width from which it is taken.
const tuning::Knob& kMatvecQ8 = tuning::define(
    "vulkan.project.matvec_q8", 1, 0, 1,
    "1: one-token K-quant decode products on the integer-dot stamps against a q8_1 input");
const tuning::Knob& kMatvecQ8MinCols = tuning::define(
    "vulkan.project.matvec_q8_min_cols", 4096, 256, kFormOff,
    "narrowest rows of the integer-dot decode products");
const tuning::Knob& kMatvecQ8RowsLog2 = tuning::define(
    "vulkan.project.matvec_q8_rows_log2", 1, 0, 2,
    "log2 of the rows a subgroup of the integer-dot decode products sums at once");
// Subgroups a workgroup of the integer-dot stamps has on 32-wide subgroups (GK_WG / 32): the
// dispatch gives each workgroup this many times the rows of one subgroup (GK_Q8_WG_ROWS).
constexpr uint32_t kQ8GroupSubgroups = 4;
// Values of one q8_1 block (quant_q8_1.gk.h's GK_Q8_BLOCK) and of one K-quant block.
constexpr int64_t kQ8Block = 32;
constexpr int64_t kKQuantBlock = 256;
// Blocks a workgroup of quant_q8_1 quantizes (GK_Q8_WG_BLOCKS).
constexpr int64_t kQ8WgBlocks = 32;

// The subgroup stamps read the token row (and the RMSNorm weight, or the up half of a gated
// row) in 16-byte pieces: every element offset they read at must be a multiple of this.
constexpr uint32_t kSubAlign = 4;
// Input modes the subgroup stamps know (mm_input.h: plain, RMSNorm, the activations); the
// LayerNorm modes (8..11) need a mean as well and stay on the staged stamps.
constexpr uint32_t kSubMaxMode = 6;

// The subgroup stamp a projection takes, or "" for none.
std::string sub_stamp(const DeviceMatrix& m, uint32_t x_off, uint32_t x_stride,
                      const ProjectionInput& in) {
    const int64_t form = kMatvecSub.get();
    if (form == 0 || m.format == "f32" || m.format == "f16" || m.cols > kMatvecSubMaxCols.get())
        return "";
    if (in.mode > kSubMaxMode || x_off % kSubAlign || x_stride % kSubAlign) return "";
    // Modes 1-3 read aux_off as a vector offset (norm weight, up half); mode 6 element-wise.
    if (in.mode >= 1 && in.mode <= 3 && in.aux_off % kSubAlign) return "";
    const std::string name = matvec_sub_family(MatvecSubKnobs::now(), m.rows, m.cols) + m.format;
    return find_stamp(name) ? name : "";
}

size_t round_up4(size_t n) { return (n + 3) & ~size_t(3); }

// Workgroups of a subgroup stamp's dispatch cover this many rows each.
uint32_t sub_group_rows(const std::string& name) {
    if (name.rfind("matvec_split4_", 0) == 0) return GK_MATVEC_SPLIT4_ROWS;
    if (name.rfind("matvec_sub4_", 0) == 0) return GK_MATVEC_SUB4_ROWS;
    if (name.rfind("matvec_sub2_", 0) == 0) return GK_MATVEC_SUB2_ROWS;
    return GK_MATVEC_SUB_ROWS;
}
uint32_t ceil_div(int64_t a, int64_t b) { return uint32_t((a + b - 1) / b); }

// project() fills one argument block for matvec, matmul and matmul_coopmat: their ARGS lists
// are the same.
static_assert(sizeof(gk_args::matvec) == sizeof(gk_args::matmul) &&
              sizeof(gk_args::matvec) == sizeof(gk_args::matmul_coopmat),
              "matvec, matmul and matmul_coopmat must share one argument layout");

}  // namespace

MatvecSubKnobs MatvecSubKnobs::now() {
    return {kMatvecSub.get(), kMatvecSub4MinCols.get(), kMatvecSub4MinRows.get(),
            kMatvecSplitMinCols.get(), kMatvecSplitMaxRows.get()};
}

MatvecQ8Knobs MatvecQ8Knobs::now() {
    return {kMatvecQ8.get(), kMatvecQ8MinCols.get(), kMatvecQ8RowsLog2.get()};
}

uint32_t matvec_q8_rows(const MatvecQ8Knobs& k, const std::string& format, int64_t rows,
                        int64_t cols, int64_t n_tok, uint32_t in_mode) {
    if (k.on <= 0 || (format != "q4_k" && format != "q6_k")) return 0;
    if (n_tok < 1 || n_tok > kMatvecQ8MaxTokens || rows < 1) return 0;
    if (cols < k.min_cols || cols % kKQuantBlock != 0 || cols > int64_t(UINT32_MAX / 16))
        return 0;
    if (in_mode >= 8) return 0;  // the LayerNorm modes: quant_q8_1 has no mean pass
    return uint32_t(1) << std::min<int64_t>(std::max<int64_t>(k.rows_log2, 0), 2);
}

std::string matvec_q8_stamp(const DeviceMatrix& m, int64_t n_tok, uint32_t in_mode, bool exact) {
    if (exact || n_tok > kMatvecMaxTokens.get()) return "";
    const uint32_t r = matvec_q8_rows(MatvecQ8Knobs::now(), m.format, m.rows, m.cols, n_tok,
                                      in_mode);
    if (r == 0) return "";
    const std::string name = "matvec_q8r" + std::to_string(r) + "_" + m.format;
    const StampInfo* st = find_stamp(name);
    const StampInfo* q = find_stamp("quant_q8_1");
    return st && st->spirv && q && q->spirv ? name : "";
}

size_t q8_bytes(int64_t cols, int64_t n_tok) {
    return size_t(n_tok) * size_t(cols) + size_t(n_tok) * size_t(cols / kQ8Block) * 4;
}

void quantize_q8(Encoder& e, Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t cols,
                 int64_t n_tok, const ProjectionInput& in, Buffer& q8, Buffer& unused) {
    gk_args::quant_q8_1 a{};
    a.cols = uint32_t(cols);
    a.n_tok = uint32_t(n_tok);
    a.x_off = x_off;
    a.x_stride = x_stride;
    a.ds_off = uint32_t(n_tok * cols / 4);
    a.in_mode = in.mode;
    a.aux_off = in.aux_off;
    a.eps = in.eps;
    e.dispatch(require_stamp("quant_q8_1"), {&x, &q8, in.aux ? in.aux : &unused}, a,
               ceil_div(cols / kQ8Block, kQ8WgBlocks), uint32_t(n_tok));
}

void project_q8(Encoder& e, const DeviceMatrix& m, const std::string& stamp, Buffer& q8,
                Buffer& y, uint32_t y_off, uint32_t y_stride, int64_t n_tok, bool accumulate) {
    const StampInfo& st = require_stamp(stamp);
    const uint32_t r = uint32_t(stamp[std::string("matvec_q8r").size()] - '0');
    for (const DeviceMatrix::Split& s : m.splits) {
        gk_args::matvec_q8 a{};
        a.rows = uint32_t(s.rows);
        a.cols = uint32_t(m.cols);
        a.n_tok = uint32_t(n_tok);
        a.ds_off = uint32_t(n_tok * m.cols / 4);
        a.y_off = y_off + uint32_t(s.row0);
        a.y_stride = y_stride;
        a.accumulate = accumulate ? 1u : 0u;
        e.dispatch(st, {s.buffer.get(), &q8, &y}, a,
                   std::min(kMaxGroups, ceil_div(s.rows, int64_t(kQ8GroupSubgroups * r))));
    }
}

std::string matvec_sub_family(const MatvecSubKnobs& k, int64_t rows, int64_t cols) {
    if (k.form <= 0) return "";
    if (k.form == 1) return "matvec_sub_";
    if (cols >= k.split_min_cols && rows <= k.split_max_rows) return "matvec_split4_";
    if (cols >= k.sub4_min_cols && rows >= k.sub4_min_rows) return "matvec_sub4_";
    return cols <= int64_t(GK_MATVEC_SUB_PREFETCH_COLS_2) ? "matvec_sub2_" : "matvec_sub_";
}

std::string device_format(const TypeTraits& type) {
    for (const char* f : kDeviceFormats) {
        if (std::string(type.name) == f) {
            std::string s = f;
            for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
            return s;
        }
    }
    return "";
}

DeviceMatrix upload_matrix(Device& dev, const TypeTraits& type, int64_t cols,
                           std::initializer_list<HostRows> parts, const char* label,
                           uint64_t& bytes) {
    DeviceMatrix d;
    d.format = device_format(type);
    if (d.format.empty())
        throw Error(std::string(label) + ": format " + type.name + " has no GPU kernel");
    d.cols = cols;
    d.row_bytes = cols / type.block_size * type.type_size;
    for (const HostRows& p : parts) d.rows += p.rows;
    const uint64_t range = dev.info().max_storage_range;
    const int64_t per_split = std::max<int64_t>(
        1, int64_t(std::min<uint64_t>(range, uint64_t(1) << 40) / uint64_t(d.row_bytes)));
    for (int64_t r0 = 0; r0 < d.rows; r0 += per_split) {
        DeviceMatrix::Split s;
        s.row0 = r0;
        s.rows = std::min(per_split, d.rows - r0);
        s.buffer = dev.alloc(round_up4(size_t(s.rows * d.row_bytes)), label);
        // Copy the stretch of each part that falls in [r0, r0 + rows).
        int64_t part_row0 = 0;
        for (const HostRows& p : parts) {
            const int64_t lo = std::max(r0, part_row0);
            const int64_t hi = std::min(r0 + s.rows, part_row0 + p.rows);
            if (lo < hi)
                dev.upload(*s.buffer, size_t((lo - r0) * d.row_bytes),
                           p.data + (lo - part_row0) * d.row_bytes,
                           size_t((hi - lo) * d.row_bytes));
            part_row0 += p.rows;
        }
        bytes += uint64_t(s.rows * d.row_bytes);
        d.splits.push_back(std::move(s));
    }
    return d;
}

std::unique_ptr<Buffer> upload_floats(Device& dev, const std::vector<float>& v,
                                      const char* label, uint64_t& bytes) {
    if (v.empty()) return nullptr;
    auto buf = dev.alloc(v.size() * sizeof(float), label);
    dev.upload(*buf, 0, v.data(), v.size() * sizeof(float));
    bytes += v.size() * sizeof(float);
    return buf;
}

bool staged_panel(const std::string& format, int64_t cols, int64_t n_tok, uint32_t in_mode,
                  bool coopmat) {
    const int64_t staged = kCoopmatStaged.get();
    if (staged == 0 || (staged == 1 && in_mode == 0)) return false;
    if (n_tok <= kMatvecMaxTokens.get() || !coopmat || kCoopmat.get() == 0 || format == "f32")
        return false;
    if (cols <= 0 || cols % kStageAlign != 0 || cols > int64_t(UINT32_MAX / 2)) return false;
    for (size_t i : kSmallLadder) {  // the larger tiles fall back to these where missing
        const StampInfo* st =
            find_stamp("matmul_" + format + "_coopmat_xh" + kStagedTileTable[i].suffix);
        if (!st || !st->spirv) return false;
    }
    const StampInfo* stage = find_stamp("mm_stage");
    return stage && stage->spirv;
}

void stage_input(Encoder& e, Buffer& x, uint32_t x_off, uint32_t x_stride, int64_t cols,
                 int64_t n_tok, const ProjectionInput& in, Buffer& panel, Buffer& unused) {
    gk_args::mm_stage a{};
    a.cols = uint32_t(cols);
    a.n_tok = uint32_t(n_tok);
    a.x_off = x_off;
    a.x_stride = x_stride;
    a.y_off = 0;
    a.y_stride = uint32_t(cols);
    a.in_mode = in.mode;
    a.aux_off = in.aux_off;
    a.eps = in.eps;
    e.dispatch(require_stamp("mm_stage"), {&x, &panel, in.aux ? in.aux : &unused}, a,
               uint32_t(n_tok));
}

StagedTile staged_tile(int64_t rows, int64_t cols, int64_t n_tok) {
    const int64_t forced = kCoopmatTile.get();
    if (forced > 0) return kStagedTileTable[size_t(forced) - 1];
    auto groups = [&](size_t i) {
        const StagedTile& t = kStagedTileTable[i];
        return int64_t(ceil_div(rows, t.rows)) * int64_t(ceil_div(n_tok, t.toks));
    };
    if (cols >= kCoopmatLargeMinCols.get() && groups(kLargeTile) >= kCoopmatLargeFillGroups.get())
        return kStagedTileTable[kLargeTile];
    const int64_t want = kCoopmatFillGroups.get();
    for (size_t i : kSmallLadder)
        if (i == 0 || groups(i) >= want) return kStagedTileTable[i];
    return kStagedTileTable[0];
}

void project_staged(Encoder& e, const DeviceMatrix& m, Buffer& panel, Buffer& y, uint32_t y_off,
                    uint32_t y_stride, int64_t n_tok, bool accumulate, Buffer& unused) {
    StagedTile tile = staged_tile(m.rows, m.cols, n_tok);
    const std::string base = "matmul_" + m.format + "_coopmat_xh";
    const StampInfo* found = find_stamp(base + tile.suffix);
    if (!found || !found->spirv) {  // a tile this build has no stamp of: the 64 x 64 one
        tile = kStagedTileTable[kFallbackTile];
        found = &require_stamp(base + tile.suffix);
    }
    const StampInfo& st = *found;
    for (const DeviceMatrix::Split& s : m.splits) {
        gk_args::matmul_coopmat a{};
        a.rows = uint32_t(s.rows);
        a.cols = uint32_t(m.cols);
        a.n_tok = uint32_t(n_tok);
        a.x_off = 0;
        a.x_stride = uint32_t(m.cols);
        a.y_off = y_off + uint32_t(s.row0);
        a.y_stride = y_stride;
        a.accumulate = accumulate ? 1u : 0u;
        a.in_mode = 0;  // the panel holds the input stage's output
        e.dispatch(st, {s.buffer.get(), &panel, &y, &unused}, a,
                   ceil_div(s.rows, tile.rows), ceil_div(n_tok, tile.toks));
    }
}

const StampInfo& require_stamp(const std::string& name) {
    const StampInfo* s = find_stamp(name);
    if (!s || !s->spirv) throw DeviceError("GPU: this build has no kernel stamp " + name);
    return *s;
}

uint32_t stride_groups(int64_t items, int64_t per_group) {
    return std::max<uint32_t>(1, std::min<uint32_t>(ceil_div(items, per_group), kMaxGroups));
}

void project(Encoder& e, const DeviceMatrix& m, Buffer& x, uint32_t x_off, uint32_t x_stride,
             Buffer& y, uint32_t y_off, uint32_t y_stride, int64_t n_tok, bool accumulate,
             Buffer& unused, bool coopmat, const ProjectionInput& in) {
    const bool vec = n_tok <= kMatvecMaxTokens.get();
    std::string name = (vec ? "matvec_" : "matmul_") + m.format;
    // The cooperative-matrix stamps are in the table only when the build could compile them.
    // They round their operands to float16: F32 weights (a model's exact lane) never take them.
    const bool cm = !vec && coopmat && kCoopmat.get() != 0 && m.format != "f32" &&
                    find_stamp(name + "_coopmat");
    if (cm) name += "_coopmat";
    // Many narrow rows (an output projection over a large vocabulary) stream fastest through
    // the tall stamps (an H200: 198 us for Gemma-3's 262144 x 640 Q8_0 head, 394 us on the
    // subgroup stamps, before the tall stamps took 4 rows a subgroup at once); the other decode
    // products of the block formats through the subgroup stamps where their input allows.
    const bool tall = vec && m.rows >= kTallMinRows.get() && m.cols < GK_MATVEC_CHUNK;
    const std::string sub_name = vec && !tall ? sub_stamp(m, x_off, x_stride, in) : "";
    const bool sub = !sub_name.empty();
    if (tall) name = "matvec_tall_" + m.format;
    if (sub) name = sub_name;
    const uint32_t sub_rows = sub_group_rows(name);
    const StampInfo& st = require_stamp(name);
    const uint32_t tile_rows = cm ? GK_MMC_TILE_ROWS : GK_MATMUL_TILE_ROWS;
    const uint32_t tile_toks = cm ? GK_MMC_TILE_TOKS : GK_MATMUL_TILE_TOKS;
    Buffer* aux = in.aux ? in.aux : &unused;
    for (const DeviceMatrix::Split& s : m.splits) {
        gk_args::matvec a{};
        a.rows = uint32_t(s.rows);
        a.cols = uint32_t(m.cols);
        a.n_tok = uint32_t(n_tok);
        a.x_off = x_off;
        a.x_stride = x_stride;
        a.y_off = y_off + uint32_t(s.row0);
        a.y_stride = y_stride;
        a.accumulate = accumulate ? 1u : 0u;
        a.in_mode = in.mode;
        a.aux_off = in.aux_off;
        a.eps = in.eps;
        if (sub)  // its workgroups stride over row groups past the dispatch limit
            e.dispatch(st, {s.buffer.get(), &x, &y, aux}, a,
                       std::min(kMaxGroups, ceil_div(s.rows, sub_rows)));
        else if (vec)
            e.dispatch(st, {s.buffer.get(), &x, &y, aux}, a,
                       ceil_div(s.rows, tall ? GK_MATVEC_TALL_ROWS : GK_MATVEC_ROWS));
        else
            e.dispatch(st, {s.buffer.get(), &x, &y, aux}, a, ceil_div(s.rows, tile_rows),
                       ceil_div(n_tok, tile_toks));
    }
}

}  // namespace dasllama::gpu
