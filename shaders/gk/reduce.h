// Workgroup reductions. Each subgroup reduces in registers, its lane 0 writes one partial, one
// barrier, then every thread sums the partials in the same order, so all threads hold the same
// value bit for bit. Two alternating slots let consecutive reductions follow each other with no
// second barrier: a slot is written again only after another reduction's barrier.
//
// `part` is a shared float array of GK_REDUCE_PARTS(WG) elements; `slot` is 0 or 1.

// The smallest subgroup a device may run a kernel with (lavapipe: 8; some GPUs: 4).
#define GK_MIN_SUBGROUP 4u
#define GK_REDUCE_PARTS(wg) (2u * ((wg) / GK_MIN_SUBGROUP))

#define GK_WG_SUM_INTO(out, x, part, slot) \
    { \
        float gk_partial_ = gk_subgroup_add(x); \
        uint gk_base_ = (slot) * (GK_REDUCE_PARTS(GK_WG) / 2u); \
        if (GK_LANE == 0u) part[gk_base_ + GK_SUBGROUP_ID] = gk_partial_; \
        GK_BARRIER(); \
        out = 0.0f; \
        for (uint gk_i_ = 0u; gk_i_ < GK_NUM_SUBGROUPS; ++gk_i_) out += part[gk_base_ + gk_i_]; \
    }

#define GK_WG_MAX_INTO(out, x, part, slot) \
    { \
        float gk_partial_ = gk_subgroup_max(x); \
        uint gk_base_ = (slot) * (GK_REDUCE_PARTS(GK_WG) / 2u); \
        if (GK_LANE == 0u) part[gk_base_ + GK_SUBGROUP_ID] = gk_partial_; \
        GK_BARRIER(); \
        out = part[gk_base_]; \
        for (uint gk_i_ = 1u; gk_i_ < GK_NUM_SUBGROUPS; ++gk_i_) out = gk_max(out, part[gk_base_ + gk_i_]); \
    }
