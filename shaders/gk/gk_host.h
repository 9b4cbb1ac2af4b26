// The host's view of a kernel file: its lists become a C++ argument struct whose layout equals
// the kernel's push-constant block (4-byte scalars only, so std430 adds no padding).
#ifndef GK_HOST_H
#define GK_HOST_H
#include <cstdint>

#define GK_HOST_ARG(type, name) gk_host_##type name;
#define GK_HOST_COUNT_BUFFER(slot, access, type, name) +1
using gk_host_uint = uint32_t;
using gk_host_int = int32_t;
using gk_host_float = float;
#endif
