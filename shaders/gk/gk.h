// The entry of the kernel template layer. A stamp is compiled with exactly one home defined:
//   GK_HOME_VULKAN  GLSL for glslc (Vulkan, SPIR-V embedded at build time)
//   GK_HOME_METAL   MSL, flattened by the C preprocessor at build time
//   GK_HOME_HOST    C++ on the host: only the argument lists, to build the argument structs
// A kernel file (shaders/kernels/NAME.gk.h) defines GK_BUFFERS, GK_ARGS, GK_SHARED and GK_WG,
// then writes its body inside `#ifdef GK_BODY` with GK_KERNEL(...) { ... } GK_KERNEL_END.
#if defined(GK_HOME_VULKAN)
#include "gk_glsl.h"
#elif defined(GK_HOME_METAL)
#include "gk_msl.h"
#elif defined(GK_HOME_HOST)
#include "gk_host.h"
#else
#error "define one of GK_HOME_VULKAN, GK_HOME_METAL, GK_HOME_HOST"
#endif

#ifndef GK_HOME_HOST
#define GK_BODY 1
#include "math.h"
#include "reduce.h"
#include "formats.h"
#include "half.h"
#endif
