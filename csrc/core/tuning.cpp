// The knob registry (core/tuning.h). Knobs are defined during static initialization, from any
// translation unit, so the registry is a function-local static (constructed on first use,
// whatever the order of initialization). Each knob is held by a unique pointer, so its address
// never moves and a kernel may keep a reference.
#include "core/tuning.h"

#include <map>
#include <memory>
#include <mutex>

namespace dasllama::tuning {

namespace {

struct Registry {
    std::mutex mutex;
    std::map<std::string, std::unique_ptr<Knob>, std::less<>> knobs;
};

Registry& registry() {
    static Registry r;
    return r;
}

std::atomic<uint64_t> g_generation{0};

std::string range_text(int64_t min, int64_t max) {
    return "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
}

Knob& find(Registry& r, std::string_view name) {
    const auto it = r.knobs.find(name);
    if (it == r.knobs.end()) {
        std::string known;
        for (const auto& [n, k] : r.knobs) known += (known.empty() ? "" : ", ") + n;
        throw TuningError("tuning: no knob named '" + std::string(name) + "' (known: " +
                          (known.empty() ? "none" : known) + ")");
    }
    return *it->second;
}

}  // namespace

Knob::Knob(std::string name, int64_t default_value, int64_t min, int64_t max,
           std::string description)
    : name_(std::move(name)), description_(std::move(description)), default_(default_value),
      min_(min), max_(max), value_(default_value) {}

KnobInfo Knob::info() const { return {name_, get(), default_, min_, max_, description_}; }

const Knob& define(std::string name, int64_t default_value, int64_t min, int64_t max,
                   std::string description) {
    if (name.empty() || min > max || default_value < min || default_value > max)
        throw TuningError("tuning: knob '" + name + "' has default " +
                          std::to_string(default_value) + " outside its range " +
                          range_text(min, max));
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    if (r.knobs.count(name)) throw TuningError("tuning: knob '" + name + "' defined twice");
    auto knob = std::make_unique<Knob>(name, default_value, min, max, std::move(description));
    const Knob& out = *knob;
    r.knobs.emplace(std::move(name), std::move(knob));
    return out;
}

int64_t get(std::string_view name) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    return find(r, name).get();
}

void set(std::string_view name, int64_t value) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    Knob& k = find(r, name);
    if (value < k.min_ || value > k.max_)
        throw TuningError("tuning: " + std::to_string(value) + " is outside the range " +
                          range_text(k.min_, k.max_) + " of knob '" + k.name_ + "'");
    k.value_.store(value, std::memory_order_relaxed);
    g_generation.fetch_add(1, std::memory_order_relaxed);
}

void reset(std::string_view name) {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    Knob& k = find(r, name);
    k.value_.store(k.default_, std::memory_order_relaxed);
    g_generation.fetch_add(1, std::memory_order_relaxed);
}

void reset_all() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (auto& [name, k] : r.knobs) k->value_.store(k->default_, std::memory_order_relaxed);
    g_generation.fetch_add(1, std::memory_order_relaxed);
}

uint64_t generation() { return g_generation.load(std::memory_order_relaxed); }

std::vector<KnobInfo> list() {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    std::vector<KnobInfo> out;
    for (const auto& [name, k] : r.knobs) out.push_back(k->info());
    return out;  // std::map keeps them sorted by name
}

}  // namespace dasllama::tuning
