// Tuning knobs: named integer choices that kernels read at run time instead of a constant
// (a tile width, a share size), so that a benchmark can race candidates and a per-box sidecar
// file (dasllama.bench.tuning) can pick the winner at start.
//
// A knob is defined once, at static initialization of the file that reads it:
//     const tuning::Knob& kTokenTile =
//         tuning::define("cpu.matmul.token_tile", 64, 4, 1024, "tokens per prefill task");
// and read in the hot path with kTokenTile.get() (one relaxed atomic load). Names are
// namespaced by device and kernel family ("cpu.matmul.*", "vulkan.matmul.*"). Every knob has a
// default and an inclusive valid range; set() refuses a value outside it, or an unknown name,
// with a TuningError naming both, and leaves the knob as it was.
//
// A knob must never change what a kernel computes, only how fast: the Python tests compare
// results across candidates. A value set while a kernel runs takes effect at its next call.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/errors.h"

namespace dasllama::tuning {

// An unknown knob name, a value outside a knob's range, or a name defined twice.
struct TuningError : Error {
    using Error::Error;
};

struct KnobInfo {
    std::string name;
    int64_t value, default_value, min, max;
    std::string description;
};

class Knob {
public:
    Knob(std::string name, int64_t default_value, int64_t min, int64_t max,
         std::string description);
    int64_t get() const { return value_.load(std::memory_order_relaxed); }
    KnobInfo info() const;

private:
    friend void set(std::string_view name, int64_t value);
    friend void reset(std::string_view name);
    friend void reset_all();
    std::string name_, description_;
    int64_t default_, min_, max_;
    std::atomic<int64_t> value_;
};

// Registers a knob; the reference stays valid for the life of the process. Throws TuningError
// for a duplicate name or a default outside [min, max] (a programming error, found at load).
const Knob& define(std::string name, int64_t default_value, int64_t min, int64_t max,
                   std::string description);

int64_t get(std::string_view name);               // TuningError: unknown name
void set(std::string_view name, int64_t value);   // TuningError: unknown name, out of range
void reset(std::string_view name);                // back to the default
void reset_all();
std::vector<KnobInfo> list();                     // every knob, sorted by name
// Counts set/reset calls: work recorded under one generation of values (a GPU command buffer)
// is stale once it changes.
uint64_t generation();

}  // namespace dasllama::tuning
