// The Vulkan home on lavapipe (or the first device when lavapipe is absent), under the
// validation layer: transfers, the self-test stamp, re-submission, profiling, a destroyed
// buffer, and the errors. Without a Vulkan device it passes, saying why, unless CI is set.
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "check.h"
#include "core/errors.h"
#include "gk_args.h"
#include "gpu/device.h"
#if DASLLAMA_VULKAN
#include "gpu/vulkan/vk_device.h"
#include "gpu/vulkan/vk_encoder.h"
#endif

using namespace dasllama;
using namespace dasllama::gpu;

namespace {

// The self-test stamp's argument block, generated from its template: {n, a, x_off, y_off}.
using AxpyArgs = gk_args::selftest_axpy;

std::shared_ptr<Device> lavapipe_or_any() {
    if (list_devices().empty()) return nullptr;
    try {
        return open_device("vulkan:llvmpipe");
    } catch (const DeviceError&) {
        return open_device("vulkan:0");
    }
}

bool in_ci() {
    const char* ci = std::getenv("CI");
    return ci && (std::string(ci) == "true" || std::string(ci) == "1");
}

bool skip(const char* test) {
    if (!list_devices().empty()) return false;
    std::fprintf(stderr, "%s: no Vulkan device (%s)\n", test, unavailable_reason().c_str());
    CHECK_MSG(!in_ci(), "CI needs a Vulkan device");
    return true;
}

// The whole program runs under the validation layer unless the caller said otherwise; set
// before main, so before the instance is made. Not in AddressSanitizer builds: the layer
// leaks memory of its own, which LeakSanitizer would report.
#if !defined(__SANITIZE_ADDRESS__) && !defined(_WIN32)
[[maybe_unused]] const bool validation_asked = setenv("DASLLAMA_VULKAN_VALIDATION", "1", 0) == 0;
#endif

}  // namespace

TEST(round_trip_of_odd_sizes) {
    if (skip("round_trip_of_odd_sizes")) return;
    auto dev = lavapipe_or_any();
    for (size_t n : {size_t(1), size_t(3), size_t(4097), size_t(3) << 20}) {
        std::vector<unsigned char> src(n), back(n, 0xAA);
        for (size_t i = 0; i < n; ++i) src[i] = static_cast<unsigned char>(i * 131 + 7);
        auto buf = dev->alloc(n + 5, "round trip");
        dev->upload(*buf, 5, src.data(), n);
        dev->download(*buf, 5, back.data(), n);
        CHECK_MSG(src == back, std::to_string(n));
        auto host = dev->alloc_host(n, "host round trip");
        REQUIRE(host->mapped() != nullptr);
        dev->upload(*host, 0, src.data(), n);
        CHECK(std::memcmp(host->mapped(), src.data(), n) == 0);
    }
}

TEST(axpy_resubmit_and_profile) {
    if (skip("axpy_resubmit_and_profile")) return;
    auto dev = lavapipe_or_any();
    const StampInfo* axpy = find_stamp("gk_selftest_axpy");
    REQUIRE(axpy != nullptr);
    const uint32_t n = 1001;
    std::vector<float> x(n + 3), y(n + 7);
    for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f + static_cast<float>(i % 17);
    for (size_t i = 0; i < y.size(); ++i) y[i] = -1.0f + static_cast<float>(i % 5);
    auto bx = dev->alloc(x.size() * 4, "x");
    auto by = dev->alloc(y.size() * 4, "y");
    auto params = dev->alloc_host(sizeof(AxpyArgs), "params");
    dev->upload(*bx, 0, x.data(), x.size() * 4);
    dev->upload(*by, 0, y.data(), y.size() * 4);
    dev->set_profiling(true);
    auto enc = dev->encoder();
    const AxpyArgs args{n, 2.0f, 3, 7};
    enc->dispatch(*axpy, {bx.get(), by.get()}, args, (n + 63) / 64);
    enc->barrier();
    enc->dispatch(*axpy, {bx.get(), by.get()}, args, (n + 63) / 64);
    CHECK(enc->dispatches() == 2);
    for (int rep = 0; rep < 3; ++rep) dev->submit(*enc);
    std::vector<float> out(y.size());
    dev->download(*by, 0, out.data(), out.size() * 4);
    double max_err = 0;
    for (uint32_t i = 0; i < n; ++i) {
        const float want = y[7 + i] + 6 * 2.0f * x[3 + i];
        max_err = std::max(max_err, static_cast<double>(std::fabs(out[7 + i] - want)));
    }
    for (int i = 0; i < 7; ++i) CHECK(out[i] == y[i]);
    CHECK_MSG(max_err == 0.0, std::to_string(max_err));
    auto prof = dev->last_profile();
    REQUIRE(prof.size() == 2);
    CHECK(prof[0].stamp == "gk_selftest_axpy" && prof[0].microseconds >= 0);
    CHECK_THROWS_AS(enc->barrier(), DeviceError);
    // A buffer destroyed after recording: submitting again must refuse, not crash.
    bx.reset();
    CHECK_THROWS_AS(dev->submit(*enc), DeviceError);
}

TEST(errors_name_what_is_wrong) {
    if (skip("errors_name_what_is_wrong")) return;
    auto dev = lavapipe_or_any();
    try {
        open_device("vulkan:no-such-gpu");
        CHECK(false);
    } catch (const DeviceError& e) {
        CHECK_MSG(std::string(e.what()).find("vulkan:0") != std::string::npos, e.what());
    }
    CHECK_THROWS_AS(open_device("cuda"), DeviceError);
    auto b = dev->alloc(16, "small");
    char tmp[32];
    CHECK_THROWS_AS(dev->download(*b, 8, tmp, 9), ShapeError);
    const StampInfo* axpy = find_stamp("gk_selftest_axpy");
    auto enc = dev->encoder();
    CHECK_THROWS_AS(enc->dispatch(*axpy, {b.get()}, AxpyArgs{}, 1), DeviceError);
    CHECK_THROWS_AS(enc->fill(*b, 2, 4, 0), ShapeError);
}

// The static-command-buffer case: one recording replayed while the host rewrites a mapped
// buffer between submissions; every replay sees the new contents.
TEST(replay_sees_host_writes) {
    if (skip("replay_sees_host_writes")) return;
    auto dev = lavapipe_or_any();
    const StampInfo* axpy = find_stamp("gk_selftest_axpy");
    const uint32_t n = 100;
    auto x = dev->alloc_host(n * 4, "x (host)");
    auto y = dev->alloc(n * 4, "y");
    std::vector<float> zeros(n, 0.0f), out(n);
    dev->upload(*y, 0, zeros.data(), n * 4);
    auto enc = dev->encoder();
    enc->dispatch(*axpy, {x.get(), y.get()}, AxpyArgs{n, 1.0f, 0, 0}, 2);
    float* xs = static_cast<float*>(x->mapped());
    for (int step = 1; step <= 3; ++step) {
        for (uint32_t i = 0; i < n; ++i) xs[i] = static_cast<float>(step * 1000 + i);
        dev->submit(*enc);
    }
    dev->download(*y, 0, out.data(), n * 4);
    for (uint32_t i = 0; i < n; ++i) CHECK(out[i] == 6000.0f + 3.0f * i);
}

TEST(out_of_memory_names_size_and_label) {
    if (skip("out_of_memory_names_size_and_label")) return;
    auto dev = lavapipe_or_any();
    try {
        dev->alloc(size_t(1) << 50, "huge weights");
        CHECK(false);
    } catch (const DeviceError& e) {
        const std::string m = e.what();
        CHECK_MSG(m.find("huge weights") != std::string::npos, m);
        CHECK_MSG(m.find(std::to_string(size_t(1) << 50)) != std::string::npos, m);
    }
}

#if DASLLAMA_VULKAN
// Recording the same step again allocates no descriptor set; destroying a buffer frees its sets.
TEST(descriptor_sets_are_cached_per_buffer_tuple) {
    if (skip("descriptor_sets_are_cached_per_buffer_tuple")) return;
    auto dev = lavapipe_or_any();
    auto& vd = dynamic_cast<vk::VulkanDevice&>(*dev);
    const StampInfo* axpy = find_stamp("gk_selftest_axpy");
    auto a = dev->alloc(256, "a");
    auto b = dev->alloc(256, "b");
    auto c = dev->alloc(256, "c");
    auto record = [&] {
        auto enc = dev->encoder();
        enc->dispatch(*axpy, {a.get(), b.get()}, AxpyArgs{64, 1.0f, 0, 0}, 1);
        enc->dispatch(*axpy, {a.get(), c.get()}, AxpyArgs{64, 1.0f, 0, 0}, 1);
        enc->dispatch(*axpy, {a.get(), b.get()}, AxpyArgs{64, 1.0f, 0, 0}, 1);
        dev->submit(*enc);
    };
    const size_t sets_before = vd.cache_sizes().second;
    record();
    CHECK(vd.cache_sizes().second == sets_before + 2);
    record();
    CHECK(vd.cache_sizes().second == sets_before + 2);
    c.reset();
    CHECK(vd.cache_sizes().second == sets_before + 1);
    a.reset();
    CHECK(vd.cache_sizes().second == sets_before);
}
#endif

// Registered last, so it runs after the others: the validation layer (switched on for this
// whole program above) must have reported nothing about them, and must report a command that
// is wrong on purpose (recorded, never submitted), so the check is seen to bite.
TEST(validation_layer_is_quiet_and_bites) {
    if (skip("validation_layer_is_quiet_and_bites")) return;
    const ValidationReport before = validation_report();
    if (!before.requested) {
        std::fprintf(stderr, "validation layer not asked for (DASLLAMA_VULKAN_VALIDATION)\n");
        return;
    }
    if (!before.enabled) {
        std::fprintf(stderr, "validation layer off: %s\n", before.reason.c_str());
        CHECK_MSG(!in_ci(), "CI needs the validation layer: " + before.reason);
        return;
    }
    for (const auto& e : before.errors) std::fprintf(stderr, "validation error: %s\n", e.c_str());
    CHECK(before.errors.empty());
#if DASLLAMA_VULKAN
    auto dev = lavapipe_or_any();
    auto enc = dev->encoder();
    auto& vd = dynamic_cast<vk::VulkanDevice&>(*dev);
    auto& ve = dynamic_cast<vk::VulkanEncoder&>(*enc);
    vd.fn().vkCmdDispatch(ve.command_buffer(), 1, 1, 1);  // no pipeline bound
    const ValidationReport after = validation_report();
    CHECK_MSG(after.errors.size() > before.errors.size(),
              "the layer missed a dispatch without a pipeline");
#endif
}
