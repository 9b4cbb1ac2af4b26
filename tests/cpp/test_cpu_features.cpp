// The CPU feature probe: its flags agree with each other, with the level it reports and with
// the compiler's own probe; the DASLLAMA_CPU_ISA cap follows its documented rule.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "check.h"
#include "core/cpu_features.h"

using dasllama::cap_isa;
using dasllama::cpu_features;
using dasllama::CpuFeatures;

TEST(probe_is_one_object_across_threads) {
    const CpuFeatures* seen[4] = {};
    std::vector<std::thread> threads;
    for (auto& s : seen) threads.emplace_back([&s] { s = &cpu_features(); });
    for (auto& t : threads) t.join();
    for (const CpuFeatures* s : seen) CHECK(s == &cpu_features());

    const CpuFeatures& f = cpu_features();
    std::printf("  isa=%s best=%s request='%s' | avx2=%d fma=%d f16c=%d bmi2=%d avx512 f=%d bw=%d "
                "vl=%d dq=%d vnni=%d bf16=%d fp16=%d | amx tile=%d int8=%d bf16=%d usable=%d | "
                "neon=%d dotprod=%d fp16=%d i8mm=%d\n",
                f.isa().c_str(), f.best_isa().c_str(), f.isa_request.c_str(), f.avx2, f.fma,
                f.f16c, f.bmi2, f.avx512f, f.avx512bw, f.avx512vl, f.avx512dq, f.avx512_vnni,
                f.avx512_bf16, f.avx512_fp16, f.amx_tile, f.amx_int8, f.amx_bf16, f.amx_usable,
                f.neon, f.dotprod, f.fp16, f.i8mm);
}

TEST(flags_imply_their_prerequisites) {
    const CpuFeatures& f = cpu_features();
    // Vector extensions need the OS to save YMM state, which `avx` includes.
    CHECK(!f.avx2 || f.avx);
    CHECK(!f.fma || f.avx);
    CHECK(!f.f16c || f.avx);
    CHECK(!f.avx512f || (f.avx2 && f.fma));  // every AVX-512 CPU has AVX2 + FMA
    for (bool ext : {f.avx512bw, f.avx512vl, f.avx512dq, f.avx512_vnni, f.avx512_bf16,
                     f.avx512_fp16})
        CHECK(!ext || f.avx512f);
    CHECK(!f.amx_int8 || f.amx_tile);
    CHECK(!f.amx_bf16 || f.amx_tile);
    CHECK(!f.amx_usable || f.amx_tile);
    CHECK(!f.dotprod || f.neon);
    CHECK(!f.fp16 || f.neon);
    CHECK(!f.i8mm || f.neon);
#if defined(__x86_64__) || defined(_M_X64)
    CHECK(f.sse42 || !f.avx2);
    CHECK(!f.neon && !f.dotprod && !f.fp16 && !f.i8mm);
#elif defined(__aarch64__)
    CHECK(f.neon);
    CHECK(!f.sse42 && !f.avx && !f.avx2 && !f.avx512f && !f.amx_tile);
#endif
}

TEST(level_matches_flags) {
    const CpuFeatures& f = cpu_features();
    const std::string best = f.best_isa();
    CHECK(f.allows("generic"));
    CHECK(f.allows(f.isa()));
    CHECK(!f.allows("no_such_level"));
    if (f.allows("avx2")) CHECK(f.avx && f.avx2 && f.fma && f.f16c && f.bmi2);
    if (f.allows("avx512"))
        CHECK(f.avx512f && f.avx512bw && f.avx512vl && f.avx512dq && f.avx512_vnni);
    if (f.allows("amx")) CHECK(f.amx_tile && f.amx_int8 && f.amx_bf16 && f.amx_usable);
    if (f.allows("neon_dotprod")) CHECK(f.dotprod && f.fp16);
    // Conversely, the flags of a level make best_isa() at least that level.
    if (f.avx2 && f.fma && f.f16c && f.bmi2) CHECK(best != "generic");
    if (f.neon) CHECK(best == "neon" || best == "neon_dotprod");
    if (const char* env = std::getenv("DASLLAMA_CPU_ISA")) {
        CHECK(f.isa_request == env);
        CHECK(f.isa() == cap_isa(best, env));
    } else {
        CHECK(f.isa_request.empty());
        CHECK(f.isa() == best);
    }
}

#if (defined(__x86_64__) || defined(_M_X64)) && defined(__GNUC__)
// libgcc / compiler-rt probe cpuid and XCR0 independently of ours.
TEST(flags_agree_with_compiler_probe) {
    const CpuFeatures& f = cpu_features();
    __builtin_cpu_init();
    CHECK(f.sse42 == bool(__builtin_cpu_supports("sse4.2")));
    CHECK(f.avx == bool(__builtin_cpu_supports("avx")));
    CHECK(f.avx2 == bool(__builtin_cpu_supports("avx2")));
    CHECK(f.fma == bool(__builtin_cpu_supports("fma")));
    CHECK(f.bmi2 == bool(__builtin_cpu_supports("bmi2")));
    CHECK(f.avx512f == bool(__builtin_cpu_supports("avx512f")));
    CHECK(f.avx512bw == bool(__builtin_cpu_supports("avx512bw")));
    CHECK(f.avx512vl == bool(__builtin_cpu_supports("avx512vl")));
    CHECK(f.avx512dq == bool(__builtin_cpu_supports("avx512dq")));
    CHECK(f.avx512_vnni == bool(__builtin_cpu_supports("avx512vnni")));
    CHECK(f.avx512_bf16 == bool(__builtin_cpu_supports("avx512bf16")));
}
#endif

TEST(cap_rule) {
#if defined(__x86_64__) || defined(_M_X64)
    CHECK(cap_isa("avx512", "avx2") == "avx2");
    CHECK(cap_isa("avx512", "generic") == "generic");
    CHECK(cap_isa("avx2", "amx") == "avx2");          // a cap never raises the level
    CHECK(cap_isa("avx512", "avx3") == "avx512");     // unknown: ignored
    CHECK(cap_isa("avx512", "neon") == "avx512");     // another architecture's level: ignored
    CHECK(cap_isa("amx", "") == "amx");
#elif defined(__aarch64__)
    CHECK(cap_isa("neon_dotprod", "neon") == "neon");
    CHECK(cap_isa("neon_dotprod", "generic") == "generic");
    CHECK(cap_isa("neon", "neon_dotprod") == "neon");
    CHECK(cap_isa("neon_dotprod", "avx2") == "neon_dotprod");
#endif
    CHECK(cap_isa("generic", "bogus") == "generic");
}
