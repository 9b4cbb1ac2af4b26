// Seats: a model stage that a GPU may serve. A seat serves a call or declines it with a reason,
// and the CPU chain takes over with nothing lost; the counters make either visible.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace dasllama::gpu {

enum class Decline { knob, shape, device, memory, gpu_error };
constexpr int kDeclineKinds = 5;

const char* decline_name(Decline d);

struct SeatStats {
    uint64_t served = 0;
    uint64_t dispatches = 0;  // kernel dispatches run for served calls
    uint64_t replays = 0;     // served calls that submitted an earlier recording again
    uint64_t uploads = 0;     // host-to-device transfers of state (K/V rows) the seat needed
    std::array<uint64_t, kDeclineKinds> declined{};
    void decline(Decline d) { ++declined[size_t(d)]; }
};

// The knob of seat `name`: DASLLAMA_SEAT_<NAME>=0 turns it off (anything else, or unset, on).
bool seat_enabled_by_env(const std::string& name);

}  // namespace dasllama::gpu
