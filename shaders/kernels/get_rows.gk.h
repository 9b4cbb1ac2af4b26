// Token embedding gather from a GGUF table:
//   rows_out[out_off + i*cols + c] = scale * dequant(table row ids[ids_off + i])[c]
// for i < n_ids, c < cols. The ids index rows of this binding (the host splits tables larger
// than a binding by rows and passes each split the ids that fall in it, rebased).
// The output binding is named rows_out because `out` is a GLSL keyword.
// One stamp per format (GK_FMT_<NAME>, see gk/formats.h).
//
// Dispatch: gx = n_ids, gy = gz = 1. A workgroup writes one row; its threads stride over the
// row's 16-element units.
#include "../gk/gk.h"

#define GK_BUFFERS(B) B(0, ro, uint, table) B(1, ro, int, ids) B(2, wo, float, rows_out)
#define GK_ARGS(A) A(uint, cols) A(uint, n_ids) A(uint, ids_off) A(uint, out_off) A(float, scale)
#define GK_SHARED(S)
#define GK_WG 64

#ifdef GK_BODY
GK_KERNEL(get_rows, GK_BUFFERS, GK_ARGS, GK_SHARED, GK_WG)
{
    uint i = GK_GROUP_ID.x;
    if (i < args.n_ids) {
        uint row = uint(ids[args.ids_off + i]);
        uint row_b = row * GK_FMT_ROW_BYTES(args.cols);
        uint n_units = GK_FMT_UNITS(args.cols);
        uint ob = args.out_off + i * args.cols;
        for (uint u = GK_LOCAL_ID; u < n_units; u += GK_WG) {
            uint k0 = u * GK_UNIT;
            uint n_valid = args.cols - k0;
            uint p = GK_FMT_UNIT_PART(u);
            float wv[16];
            GK_DECODE16(wv, table, GK_FMT_UNIT_BLOCK_BYTE(row_b, u), p, n_valid)
            // Output c is column k0 - 16p + GK_FMT_ELEM(p, c); only ragged rows end mid-unit.
            uint ub = ob + k0 - GK_UNIT * p;
            GK_UNROLL for (uint c = 0u; c < 16u; ++c)
                if (c < n_valid) rows_out[ub + GK_FMT_ELEM(p, c)] = args.scale * wv[c];
        }
    }
}
GK_KERNEL_END
#endif
