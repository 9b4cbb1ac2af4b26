// The CPU feature probe (see cpu_features.h): cpuid + xgetbv on x86-64, the auxiliary vector
// on arm64 Linux, sysctl on macOS arm64.
#include "core/cpu_features.h"

#include <cstdint>
#include <cstdlib>
#include <iterator>

#if defined(__x86_64__) || defined(_M_X64)
#define DASLLAMA_PROBE_X86 1
#if defined(_MSC_VER)
#include <intrin.h>
#else
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#elif defined(__aarch64__) || defined(_M_ARM64)
#define DASLLAMA_PROBE_ARM64 1
#if defined(__linux__)
#include <sys/auxv.h>
#elif defined(__APPLE__)
#include <sys/sysctl.h>
#endif
#endif

namespace dasllama {
namespace {

// The level ladder of this build's architecture, lowest first.
#if defined(DASLLAMA_PROBE_X86)
constexpr std::string_view kLadder[] = {"generic", "avx2", "avx512", "amx"};
#elif defined(DASLLAMA_PROBE_ARM64)
constexpr std::string_view kLadder[] = {"generic", "neon", "neon_dotprod"};
#else
constexpr std::string_view kLadder[] = {"generic"};
#endif

int rank(std::string_view level) {
    for (size_t i = 0; i < std::size(kLadder); ++i)
        if (kLadder[i] == level) return static_cast<int>(i);
    return -1;
}

#if defined(DASLLAMA_PROBE_X86)

struct Regs { uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0; };

Regs cpuid(uint32_t leaf, uint32_t subleaf) {
    Regs r;
#if defined(_MSC_VER)
    int v[4];
    __cpuidex(v, static_cast<int>(leaf), static_cast<int>(subleaf));
    r = {uint32_t(v[0]), uint32_t(v[1]), uint32_t(v[2]), uint32_t(v[3])};
#else
    __cpuid_count(leaf, subleaf, r.eax, r.ebx, r.ecx, r.edx);
#endif
    return r;
}

// XCR0: which register states the OS saves on a context switch. Inline asm, because the
// _xgetbv intrinsic needs -mxsave and this file is built with generic flags.
uint64_t xcr0() {
#if defined(_MSC_VER)
    return _xgetbv(0);
#else
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t(hi) << 32) | lo;
#endif
}

bool bit(uint32_t reg, int n) { return (reg >> n) & 1u; }

// Linux hands out AMX tile state on request only (since 5.16); older kernels refuse.
bool request_amx_tile_state() {
#if defined(__linux__)
    constexpr int kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023;
    constexpr int kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) != 0) return false;
    unsigned long granted = 0;
    if (syscall(SYS_arch_prctl, kArchGetXcompPerm, &granted) != 0) return false;
    return (granted >> kXfeatureXtiledata) & 1u;
#else
    return true;  // other OSes that enable tile state in XCR0 grant it to every process
#endif
}

void probe(CpuFeatures& f) {
    const uint32_t max_leaf = cpuid(0, 0).eax;
    if (max_leaf < 1) return;
    const Regs l1 = cpuid(1, 0);
    f.sse42 = bit(l1.ecx, 20);

    // XCR0 bits: 1 SSE, 2 AVX (YMM upper halves), 5-7 opmask + ZMM, 17-18 tile config + data.
    const bool osxsave = bit(l1.ecx, 27);
    const uint64_t xcr = osxsave ? xcr0() : 0;
    const bool os_ymm = (xcr & 0x6) == 0x6;
    const bool os_zmm = os_ymm && (xcr & 0xE0) == 0xE0;
    const bool os_tile = (xcr & 0x60000) == 0x60000;

    f.avx = os_ymm && bit(l1.ecx, 28);
    f.fma = f.avx && bit(l1.ecx, 12);
    f.f16c = f.avx && bit(l1.ecx, 29);
    if (max_leaf < 7) return;

    const Regs l7 = cpuid(7, 0);
    f.avx2 = f.avx && bit(l7.ebx, 5);
    f.bmi2 = bit(l7.ebx, 8);  // a scalar extension: no register state needed
    f.avx512f = os_zmm && bit(l7.ebx, 16);
    f.avx512dq = f.avx512f && bit(l7.ebx, 17);
    f.avx512bw = f.avx512f && bit(l7.ebx, 30);
    f.avx512vl = f.avx512f && bit(l7.ebx, 31);
    f.avx512_vnni = f.avx512f && bit(l7.ecx, 11);
    f.avx512_fp16 = f.avx512f && bit(l7.edx, 23);
    if (l7.eax >= 1) f.avx512_bf16 = f.avx512f && bit(cpuid(7, 1).eax, 5);
    f.amx_bf16 = os_tile && bit(l7.edx, 22);
    f.amx_tile = os_tile && bit(l7.edx, 24);
    f.amx_int8 = os_tile && bit(l7.edx, 25);

    const int cap = rank(f.isa_request);
    if (f.amx_tile && (cap < 0 || cap >= rank("amx"))) f.amx_usable = request_amx_tile_state();
}

#elif defined(DASLLAMA_PROBE_ARM64)

#if defined(__APPLE__)
bool sysctl_flag(const char* name) {
    int value = 0;
    size_t size = sizeof(value);
    return sysctlbyname(name, &value, &size, nullptr, 0) == 0 && value != 0;
}
#endif

void probe(CpuFeatures& f) {
    f.neon = true;  // AdvSIMD is part of the arm64 baseline
#if defined(__linux__)
    // Bit numbers from the kernel's uapi asm/hwcap.h, spelled out for older libc headers.
    constexpr unsigned long kHwcapFphp = 1ul << 9, kHwcapAsimdhp = 1ul << 10;
    constexpr unsigned long kHwcapAsimddp = 1ul << 20, kHwcap2I8mm = 1ul << 13;
    const unsigned long hw = getauxval(AT_HWCAP), hw2 = getauxval(AT_HWCAP2);
    f.dotprod = (hw & kHwcapAsimddp) != 0;
    f.fp16 = (hw & kHwcapFphp) && (hw & kHwcapAsimdhp);  // scalar and vector half arithmetic
    f.i8mm = (hw2 & kHwcap2I8mm) != 0;
#elif defined(__APPLE__)
    f.dotprod = sysctl_flag("hw.optional.arm.FEAT_DotProd");
    f.fp16 = sysctl_flag("hw.optional.arm.FEAT_FP16");
    f.i8mm = sysctl_flag("hw.optional.arm.FEAT_I8MM");
#endif
}

#else

void probe(CpuFeatures&) {}

#endif

}  // namespace

std::string cap_isa(std::string_view probed, std::string_view request) {
    const int cap = rank(request);
    if (cap < 0 || cap >= rank(probed)) return std::string(probed);
    return std::string(request);
}

std::string CpuFeatures::best_isa() const {
#if defined(DASLLAMA_PROBE_X86)
    const bool l_avx2 = avx && avx2 && fma && f16c && bmi2;
    const bool l_avx512 = l_avx2 && avx512f && avx512bw && avx512vl && avx512dq && avx512_vnni;
    const bool l_amx = l_avx512 && amx_tile && amx_int8 && amx_bf16 && amx_usable;
    return l_amx ? "amx" : l_avx512 ? "avx512" : l_avx2 ? "avx2" : "generic";
#elif defined(DASLLAMA_PROBE_ARM64)
    return neon && dotprod && fp16 ? "neon_dotprod" : neon ? "neon" : "generic";
#else
    return "generic";
#endif
}

std::string CpuFeatures::isa() const { return cap_isa(best_isa(), isa_request); }

bool CpuFeatures::allows(std::string_view level) const {
    const int r = rank(level);
    return r >= 0 && r <= rank(isa());
}

const CpuFeatures& cpu_features() {
    static const CpuFeatures features = [] {
        CpuFeatures f;
        if (const char* env = std::getenv("DASLLAMA_CPU_ISA")) f.isa_request = env;
        probe(f);
        return f;
    }();
    return features;
}

}  // namespace dasllama
