// The Metal home's prelude: the shared vocabulary spelled in MSL 2.4. The build prepends
// `#include <metal_stdlib>` and `using namespace metal;` after flattening, so this file names
// only what the preprocessor should expand.
#define gk_float2(a, b) float2(a, b)
#define gk_float4(a, b, c, d) float4(a, b, c, d)
#define gk_uint2(a, b) uint2(a, b)
#define gk_uint4(a, b, c, d) uint4(a, b, c, d)

#define GK_LOCAL_ID gk_local_id3.x
#define GK_GROUP_ID gk_group_id
#define GK_NUM_GROUPS gk_num_groups
#define GK_LANE gk_lane
#define GK_SUBGROUP_SIZE gk_subgroup_size
#define GK_SUBGROUP_ID gk_subgroup_id
#define GK_NUM_SUBGROUPS gk_num_subgroups

#define gk_subgroup_add(x) simd_sum(x)
#define gk_subgroup_max(x) simd_max(x)
#define GK_BARRIER() threadgroup_barrier(mem_flags::mem_threadgroup)

#define gk_bits_to_float(u) as_type<float>(u)
#define gk_float_to_bits(f) as_type<uint>(f)
#define gk_unpack_half2(u) float2(as_type<half2>(u))
#define gk_pack_half2(a, b) as_type<uint>(half2(half(a), half(b)))
#define gk_fma(a, b, c) fma(a, b, c)
#define gk_rsqrt(x) rsqrt(x)
#define gk_min(a, b) min(a, b)
#define gk_max(a, b) max(a, b)
// Metal stamps are compiled without fast math, so no qualifier is needed.
#define GK_PRECISE
#define GK_UNROLL
#define GK_INLINE inline

#define GK_MSL_ACCESS_ro device const
#define GK_MSL_ACCESS_rw device
#define GK_MSL_ACCESS_wo device
#define GK_MSL_BUFFER(slot, access, type, name) GK_MSL_ACCESS_##access type* name [[buffer(slot)]],
#define GK_MSL_ARG(type, name) type name;
#define GK_MSL_SHARED(type, name, count) threadgroup type name[count];
// The argument block's slot: Metal offers 31 buffer slots, kernels bind far fewer.
#define GK_MSL_ARGS_SLOT 30

#define GK_KERNEL(kname, BUFFERS, ARGS, SHARED, WG) \
    struct GkArgs_##kname { ARGS(GK_MSL_ARG) }; \
    kernel void kname(BUFFERS(GK_MSL_BUFFER) \
                      constant GkArgs_##kname& args [[buffer(GK_MSL_ARGS_SLOT)]], \
                      uint3 gk_group_id [[threadgroup_position_in_grid]], \
                      uint3 gk_num_groups [[threadgroups_per_grid]], \
                      uint3 gk_local_id3 [[thread_position_in_threadgroup]], \
                      uint gk_lane [[thread_index_in_simdgroup]], \
                      uint gk_subgroup_size [[threads_per_simdgroup]], \
                      uint gk_subgroup_id [[simdgroup_index_in_threadgroup]], \
                      uint gk_num_subgroups [[simdgroups_per_threadgroup]]) { \
        SHARED(GK_MSL_SHARED)
#define GK_KERNEL_END }
