#include "gpu/seat.h"

#include <cctype>
#include <cstdlib>

namespace dasllama::gpu {

const char* decline_name(Decline d) {
    switch (d) {
        case Decline::knob: return "knob";
        case Decline::shape: return "shape";
        case Decline::device: return "device";
        case Decline::memory: return "memory";
        case Decline::gpu_error: return "gpu_error";
    }
    return "?";
}

bool seat_enabled_by_env(const std::string& name) {
    std::string var = "DASLLAMA_SEAT_";
    for (char c : name) var += char(std::toupper(static_cast<unsigned char>(c)));
    const char* v = std::getenv(var.c_str());
    return !(v && std::string(v) == "0");
}

}  // namespace dasllama::gpu
