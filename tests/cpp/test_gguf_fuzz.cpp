// Mutation fuzzing of the GGUF reader. Each seed (hand-built files here, plus real model files
// named in DASLLAMA_FUZZ_SEEDS, colon-separated) is mutated many times: bit flips in the
// header, truncation at every region, interesting values written into the counts, lengths,
// type ids, dimensions and offsets the header holds, and header bytes copied over each other.
// Every mutant must open cleanly or throw GGUFError, never anything else; built with the
// sanitizers (the asan preset), any out-of-bounds read aborts the run. Allocation is measured
// by counting operator new: opening a mutant may hold at most kMaxAllocationPerFileByte bytes
// per file byte plus kFixedAllocationSlack.
//
// DASLLAMA_FUZZ_ITERATIONS sets the number of mutants per seed (default 1000).
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <random>
#include <sstream>
#include <string>

#include "check.h"
#include "core/errors.h"
#include "core/gguf.h"
#include "gguf_builder.h"

// ---- allocation accounting ------------------------------------------------------------------

namespace {
std::atomic<uint64_t> g_live{0}, g_peak{0};
constexpr size_t kHeader = 16;  // keeps the size in front of each block, max_align_t aligned
}  // namespace

void* operator new(size_t n) {
    auto* p = static_cast<unsigned char*>(std::malloc(n + kHeader));
    if (!p) throw std::bad_alloc();
    std::memcpy(p, &n, sizeof n);
    const uint64_t live = g_live += n;
    uint64_t peak = g_peak.load();
    while (live > peak && !g_peak.compare_exchange_weak(peak, live)) {}
    return p + kHeader;
}
void operator delete(void* p) noexcept {
    if (!p) return;
    auto* base = static_cast<unsigned char*>(p) - kHeader;
    size_t n;
    std::memcpy(&n, base, sizeof n);
    g_live -= n;
    std::free(base);
}
void operator delete(void* p, size_t) noexcept { operator delete(p); }
void* operator new[](size_t n) { return operator new(n); }
void operator delete[](void* p) noexcept { operator delete(p); }
void operator delete[](void* p, size_t) noexcept { operator delete(p); }

using namespace dasllama;
using gguf_test::Builder;
using gguf_test::Bytes;
using gguf_test::Field;
using gguf_test::FieldKind;

namespace {

// Fixed costs of an open that do not grow with the file: the parser's message strings, the
// source record, the split-name pattern.
constexpr uint64_t kFixedAllocationSlack = 64 * 1024;

struct Seed {
    std::string name;
    Bytes bytes;
    std::vector<Field> fields;
    uint64_t header_end;
};

Seed make_seed(std::string name, Bytes bytes) {
    Seed s{std::move(name), std::move(bytes), {}, 0};
    s.header_end = gguf_test::map_fields(s.bytes, s.fields);
    return s;
}

std::vector<Seed> seeds() {
    std::vector<Seed> out;
    Builder a;
    a.str("general.architecture", "llama").u32("llama.block_count", 2).f32("llama.eps", 1e-5f);
    a.strings("tokenizer.ggml.tokens", {"<s>", "</s>", "a", "bb", "ccc"});
    a.floats("tokenizer.ggml.scores", {0, 0, -1, -2, -3}).nested("test.nested", 4);
    a.i64("test.i64", -5).tensor("token_embd.weight", {32, 5}, 8, Bytes(5 * 34, 1));
    a.tensor("blk.0.ffn.weight", {256, 2}, 12, Bytes(2 * 144, 2));
    a.tensor("output_norm.weight", {32}, 0, Bytes(128, 0));
    out.push_back(make_seed("built-v3", a.build()));
    Builder b = a;
    b.version = 2;
    out.push_back(make_seed("built-v2", b.build()));
    Builder c;
    c.alignment = 64;
    c.u32("general.alignment", 64).tensor("x", {16, 2}, 1, Bytes(64, 3)).tensor("y", {32}, 30, Bytes(64, 4));
    out.push_back(make_seed("built-align64", c.build()));

    if (const char* env = std::getenv("DASLLAMA_FUZZ_SEEDS")) {
        std::stringstream list(env);
        std::string path;
        while (std::getline(list, path, ':')) {
            if (path.empty()) continue;
            std::ifstream in(path, std::ios::binary);
            if (!in) {
                std::fprintf(stderr, "DASLLAMA_FUZZ_SEEDS: cannot read %s\n", path.c_str());
                std::exit(EXIT_FAILURE);
            }
            Bytes bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
            out.push_back(make_seed(path, std::move(bytes)));
        }
    }
    return out;
}

// Touches everything an open file offers, so a bad record would be read here under ASan.
void walk(const GGUFFile& f) {
    for (const GGUFEntry& e : f.metadata()) {
        if (e.value.type == GGUFType::ARRAY) {
            for (const GGUFValue& item : f.array_items(e.value))
                if (item.type == GGUFType::STRING) (void)f.as_string(item).size();
        } else if (e.value.type == GGUFType::STRING) {
            (void)f.as_string(e.value).size();
        }
    }
    volatile uint8_t sink = 0;
    for (const GGUFTensor& t : f.tensors())
        if (t.nbytes) sink = sink ^ f.tensor_data(t)[0] ^ f.tensor_data(t)[t.nbytes - 1];
}

const uint64_t kInteresting[] = {0, 1, 2, 3, 4, 5, 7, 8, 12, 13, 31, 32, 33, 64, 255, 256,
                                 0xFFFF, 0xFFFFFFFFull, 0x100000000ull, 0x7FFFFFFFFFFFFFFFull,
                                 0x8000000000000000ull, 0xFFFFFFFFFFFFFFFFull};

struct Outcome {
    uint64_t opened = 0, rejected = 0;
    uint64_t most_allocated = 0;  // the largest peak of one open, in bytes
};

void try_open(const Seed& seed, const uint8_t* data, uint64_t size, Outcome& out,
              const char* how, uint64_t iteration) {
    const uint64_t before = g_live.load();
    g_peak = before;
    try {
        auto f = GGUFFile::open_source(ByteSource::wrap(data, size, nullptr, "mutant.gguf"));
        walk(*f);
        ++out.opened;
    } catch (const GGUFError&) {
        ++out.rejected;
    } catch (const std::exception& e) {
        check::fail(__FILE__, __LINE__, seed.name + " mutant " + std::to_string(iteration) +
                                            " (" + how + ") threw a non-GGUF error: " + e.what());
    }
    const uint64_t used = g_peak.load() - before;
    out.most_allocated = std::max(out.most_allocated, used);
    const uint64_t bound = kMaxAllocationPerFileByte * size + kFixedAllocationSlack;
    if (used > bound)
        check::fail(__FILE__, __LINE__, seed.name + " mutant " + std::to_string(iteration) +
                                            " (" + how + ") allocated " + std::to_string(used) +
                                            " bytes for a " + std::to_string(size) + "-byte file");
}

void fuzz_seed(Seed& seed, uint64_t iterations, std::mt19937_64& rng, Outcome& out) {
    Bytes& b = seed.bytes;
    const uint64_t size = b.size();
    auto below = [&](uint64_t n) { return n ? rng() % n : 0; };
    for (uint64_t it = 0; it < iterations; ++it) {
        switch (it % 4) {
            case 0: {  // a few bit flips inside the header; flipping again restores them
                uint64_t at[8];
                uint8_t mask[8];
                const int flips = 1 + static_cast<int>(below(8));
                for (int i = 0; i < flips; ++i) {
                    at[i] = below(seed.header_end);
                    mask[i] = static_cast<uint8_t>(1u << below(8));
                    b[at[i]] ^= mask[i];
                }
                try_open(seed, b.data(), size, out, "bit flips", it);
                for (int i = 0; i < flips; ++i) b[at[i]] ^= mask[i];
                break;
            }
            case 1: {  // truncation: mostly inside the header, sometimes in the data
                const uint64_t cut = below(3) ? below(seed.header_end + 1) : below(size);
                try_open(seed, b.data(), cut, out, "truncation", it);
                break;
            }
            case 2: {  // an interesting value written into a field
                const Field& f = seed.fields[below(seed.fields.size())];
                uint64_t v = kInteresting[below(sizeof kInteresting / sizeof kInteresting[0])];
                if (below(4) == 0) v = rng();
                if (f.kind == FieldKind::Offset && below(2)) v = below(size) & ~uint64_t{31};
                uint8_t saved[8];
                std::memcpy(saved, b.data() + f.offset, f.width);
                std::memcpy(b.data() + f.offset, &v, f.width);
                try_open(seed, b.data(), size, out, "field value", it);
                std::memcpy(b.data() + f.offset, saved, f.width);
                break;
            }
            case 3: {  // a run of header bytes copied over another place in the header
                const uint64_t len = 1 + below(32);
                if (seed.header_end <= len) break;
                const uint64_t from = below(seed.header_end - len), to = below(seed.header_end - len);
                Bytes saved(b.begin() + to, b.begin() + to + len);
                std::memmove(b.data() + to, b.data() + from, len);
                try_open(seed, b.data(), size, out, "byte run", it);
                std::copy(saved.begin(), saved.end(), b.begin() + to);
                break;
            }
        }
    }
}

}  // namespace

TEST(fuzz_mutants_open_or_raise_gguf_error) {
    std::vector<Seed> all = seeds();
    const char* env = std::getenv("DASLLAMA_FUZZ_ITERATIONS");
    const uint64_t per_seed = env ? std::strtoull(env, nullptr, 10) : 1000;
    std::mt19937_64 rng(20261130);
    Outcome sum;
    for (Seed& s : all) {
        Outcome out;
        // Seed files must themselves open (a negative control for the mutation counts).
        try_open(s, s.bytes.data(), s.bytes.size(), out, "unmutated", 0);
        REQUIRE(out.opened == 1);
        fuzz_seed(s, per_seed, rng, out);
        std::printf("  %s (%llu bytes): %llu mutants, %llu opened, %llu rejected; "
                    "largest allocation of one open %llu bytes\n", s.name.c_str(),
                    static_cast<unsigned long long>(s.bytes.size()),
                    static_cast<unsigned long long>(per_seed),
                    static_cast<unsigned long long>(out.opened - 1),
                    static_cast<unsigned long long>(out.rejected),
                    static_cast<unsigned long long>(out.most_allocated));
        sum.opened += out.opened - 1;
        sum.rejected += out.rejected;
    }
    std::printf("  total %llu mutants: %llu opened, %llu rejected with GGUFError\n",
                static_cast<unsigned long long>(sum.opened + sum.rejected),
                static_cast<unsigned long long>(sum.opened),
                static_cast<unsigned long long>(sum.rejected));
    CHECK(sum.rejected > 0);
}
