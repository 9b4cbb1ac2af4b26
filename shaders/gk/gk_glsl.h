// The Vulkan home's prelude: the shared vocabulary spelled in GLSL 4.50.
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : enable
// Cooperative matrices (VK_KHR_cooperative_matrix), for the stamps that define GK_COOPMAT: a
// Vulkan-only vocabulary (Metal's simdgroup matrices would be their own words), compiled by a
// glslang that knows the extension (shaders/stamp.py --coopmat-glslang). Declaring it makes the
// SPIR-V use the Vulkan memory model and float16 arithmetic: the device enables both with it.
#if defined(GK_COOPMAT)
#extension GL_KHR_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#endif

#define float2 vec2
#define float4 vec4
#define uint2 uvec2
#define uint3 uvec3
#define uint4 uvec4
#define int2 ivec2

#define gk_float2(a, b) vec2(a, b)
#define gk_float4(a, b, c, d) vec4(a, b, c, d)
#define gk_uint2(a, b) uvec2(a, b)
#define gk_uint4(a, b, c, d) uvec4(a, b, c, d)

#define GK_LOCAL_ID gl_LocalInvocationID.x
#define GK_GROUP_ID gl_WorkGroupID
#define GK_NUM_GROUPS gl_NumWorkGroups
#define GK_LANE gl_SubgroupInvocationID
#define GK_SUBGROUP_SIZE gl_SubgroupSize
#define GK_SUBGROUP_ID gl_SubgroupID
#define GK_NUM_SUBGROUPS gl_NumSubgroups

#define gk_subgroup_add(x) subgroupAdd(x)
#define gk_subgroup_max(x) subgroupMax(x)
// Workgroup-memory barrier: every invocation waits, and shared writes before are visible after.
#define GK_BARRIER() memoryBarrierShared(); barrier()

#define gk_bits_to_float(u) uintBitsToFloat(u)
#define gk_float_to_bits(f) floatBitsToUint(f)
#define gk_unpack_half2(u) unpackHalf2x16(u)
// Two floats rounded to float16, packed low half first (the inverse of gk_unpack_half2).
#define gk_pack_half2(a, b) packHalf2x16(vec2(a, b))
#define gk_fma(a, b, c) fma(a, b, c)
#define gk_rsqrt(x) inversesqrt(x)
#define gk_min(a, b) min(a, b)
#define gk_max(a, b) max(a, b)
// Results that both homes must round alike: no contraction or reassociation.
#define GK_PRECISE precise
#define GK_UNROLL [[unroll]]
#define GK_INLINE

#define GK_ACCESS_ro readonly
#define GK_ACCESS_rw
#define GK_ACCESS_wo writeonly
#define GK_GLSL_BUFFER(slot, access, type, name) \
    layout(std430, set = 0, binding = slot) GK_ACCESS_##access buffer GkBuffer_##name { type name[]; };
#define GK_GLSL_ARG(type, name) type name;
#define GK_GLSL_SHARED(type, name, count) shared type name[count];

#if defined(GK_COOPMAT)
// 16 x 16 x 16 tiles of one subgroup: A (16 rows x 16 k) and B (16 k x 16 columns) in float16,
// the accumulator in float32 (the host uses these stamps only on devices that list this shape).
// Loads and stores take an element offset and a stride in units of the array's element type
// (a half4 array: four halves) and must run in uniform control flow.
#define half4 f16vec4
#define gk_half4(v) f16vec4(v)
#define GK_CM_A coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseA>
#define GK_CM_B coopmat<float16_t, gl_ScopeSubgroup, 16, 16, gl_MatrixUseB>
#define GK_CM_ACC coopmat<float, gl_ScopeSubgroup, 16, 16, gl_MatrixUseAccumulator>
#define gk_cm_zero() GK_CM_ACC(0.0f)
#define gk_cm_load_row_major(m, arr, off, stride) \
    coopMatLoad(m, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define gk_cm_load_col_major(m, arr, off, stride) \
    coopMatLoad(m, arr, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define gk_cm_store_col_major(m, arr, off, stride) \
    coopMatStore(m, arr, off, stride, gl_CooperativeMatrixLayoutColumnMajor)
#define gk_cm_store_row_major(m, arr, off, stride) \
    coopMatStore(m, arr, off, stride, gl_CooperativeMatrixLayoutRowMajor)
#define gk_cm_mul_add(a, b, c) coopMatMulAdd(a, b, c)
// Workgroup memory written by one subgroup and read by the same subgroup.
#define GK_SUBGROUP_BARRIER() subgroupMemoryBarrierShared(); subgroupBarrier()
#endif

#define GK_KERNEL(kname, BUFFERS, ARGS, SHARED, WG) \
    layout(local_size_x = WG) in; \
    BUFFERS(GK_GLSL_BUFFER) \
    layout(push_constant) uniform GkArgs { ARGS(GK_GLSL_ARG) } args; \
    SHARED(GK_GLSL_SHARED) \
    void main() {
#define GK_KERNEL_END }
