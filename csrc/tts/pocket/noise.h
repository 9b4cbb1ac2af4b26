// The flow head's noise: standard-normal rows, one per generated frame, from a seeded
// generator or from rows the caller supplies (tests feed the reference's).
//
// The generator is specified here so a seed gives the same audio on every platform and
// compiler (std::normal_distribution is not): xoshiro256** (Blackman & Vigna 2018) seeded by
// four outputs of splitmix64(seed); each uniform is the top 53 bits of an output, u in [0, 1);
// normals come in pairs by Box-Muller: r = sqrt(-2 ln(1 - u1)), z = r cos(2 pi u2),
// r sin(2 pi u2), in that order.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/errors.h"

namespace dasllama::pocket {

class NoiseSource {
public:
    void seed(uint64_t seed) {
        rows_.clear();
        cursor_ = 0;
        seeded_ = true;
        has_spare_ = false;
        uint64_t x = seed;
        for (uint64_t& s : s_) {
            x += 0x9e3779b97f4a7c15ull;
            uint64_t z = x;
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            s = z ^ (z >> 31);
        }
    }

    // Rows [n, width] used in order; running out is an error.
    void set_rows(std::vector<float> rows, int64_t width) {
        rows_ = std::move(rows);
        width_ = width;
        cursor_ = 0;
        seeded_ = false;
    }

    // The next row of `width` standard normals into out.
    void next(float* out, int64_t width) {
        if (!seeded_) {
            if (width != width_ || (cursor_ + 1) * width_ > int64_t(rows_.size()))
                throw ShapeError("pocket: the supplied noise has " +
                                 std::to_string(width_ ? rows_.size() / size_t(width_) : 0) +
                                 " rows of " + std::to_string(width_) + "; frame " +
                                 std::to_string(cursor_) + " needs another row of " +
                                 std::to_string(width));
            for (int64_t i = 0; i < width; ++i) out[i] = rows_[size_t(cursor_ * width + i)];
            ++cursor_;
            return;
        }
        for (int64_t i = 0; i < width; ++i) out[i] = float(normal());
    }

private:
    static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

    uint64_t next_u64() {
        const uint64_t result = rotl(s_[1] * 5, 7) * 9;
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = rotl(s_[3], 45);
        return result;
    }

    double uniform() { return double(next_u64() >> 11) * (1.0 / 9007199254740992.0); }

    double normal() {
        if (has_spare_) {
            has_spare_ = false;
            return spare_;
        }
        const double u1 = uniform(), u2 = uniform();
        const double r = std::sqrt(-2.0 * std::log(1.0 - u1));
        const double a = 6.283185307179586 * u2;
        spare_ = r * std::sin(a);
        has_spare_ = true;
        return r * std::cos(a);
    }

    uint64_t s_[4] = {1, 2, 3, 4};
    bool seeded_ = true;
    bool has_spare_ = false;
    double spare_ = 0.0;
    std::vector<float> rows_;
    int64_t width_ = 0, cursor_ = 0;
};

}  // namespace dasllama::pocket
