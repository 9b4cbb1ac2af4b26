// The CPU feature probe: which instruction sets this process may use, probed once.
//
// Every flag means "usable here": the CPU reports it AND the OS saves the registers it needs
// (XCR0 on x86-64: YMM for AVX*, opmask/ZMM for AVX-512, tile state for AMX). Flags of the
// other architecture are false.
//
// ISA levels are what kernel dispatch (cpu/dispatch.h) chooses between. A level is the compile
// flags of the *_<level>.cpp files (DASLLAMA_ISA_FLAGS_* in CMakeLists.txt), so it is usable
// only when every feature those flags let the compiler emit is present:
//
//   x86-64: generic < avx2   (avx avx2 fma f16c bmi2)
//                   < avx512 (+ avx512f bw vl dq vnni)
//                   < amx    (+ amx_tile amx_int8 amx_bf16, and the kernel granted tile state)
//   arm64:  generic < neon   (baseline AdvSIMD; the generic files already use it)
//                   < neon_dotprod (+ dotprod fp16: the _neon files are built +dotprod+fp16)
//
// DASLLAMA_CPU_ISA=<level>, read once at the probe, caps the level (to rule out a suspect
// kernel, or in tests); it never raises it. A value that is not a level of this architecture
// is ignored: isa() stays at the probed level, and isa_request still shows what was asked.
//
// AMX on Linux: a process must ask the kernel for tile state (arch_prctl ARCH_REQ_XCOMP_PERM)
// before its first tile instruction. The probe asks when the CPU and XCR0 offer AMX, unless
// DASLLAMA_CPU_ISA caps below amx (the grant enlarges every signal frame, so it is not asked
// for needlessly); amx_usable records the answer.
#pragma once

#include <string>
#include <string_view>

namespace dasllama {

struct CpuFeatures {
    // x86-64
    bool sse42 = false, avx = false, avx2 = false, fma = false, f16c = false, bmi2 = false;
    bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
    bool avx512_vnni = false, avx512_bf16 = false, avx512_fp16 = false;
    bool amx_tile = false, amx_int8 = false, amx_bf16 = false;
    bool amx_usable = false;  // the kernel granted tile state (always asked first on Linux)
    // arm64
    bool neon = false, dotprod = false, fp16 = false, i8mm = false;

    std::string isa_request;  // DASLLAMA_CPU_ISA as given; "" when unset

    // The best level the hardware and OS allow, ignoring isa_request.
    std::string best_isa() const;
    // The level dispatch uses: best_isa() capped by isa_request. One of "generic", "avx2",
    // "avx512", "amx" (x86-64) or "generic", "neon", "neon_dotprod" (arm64).
    std::string isa() const;
    // Whether code built for `level` may run: it is on this architecture's ladder at or
    // below isa(). Unknown levels are not allowed.
    bool allows(std::string_view level) const;
};

// Probed on first call (thread-safe), the same object afterwards.
const CpuFeatures& cpu_features();

// The rule behind isa(), exposed for tests: `probed` capped by `request`; a request that
// names no level of this architecture leaves `probed` as it is.
std::string cap_isa(std::string_view probed, std::string_view request);

}  // namespace dasllama
