// The GGUF reader on hand-built files: what it reads from valid ones, and the error it
// gives, with the field and offset named, for each way a file can be wrong.
#include <cstring>
#include <string>

#include "check.h"
#include "core/errors.h"
#include "core/gguf.h"
#include "gguf_builder.h"

using namespace dasllama;
using gguf_test::Builder;
using gguf_test::Bytes;

namespace {

std::shared_ptr<GGUFFile> open_bytes(const Bytes& b) {
    auto keep = std::make_shared<Bytes>(b);
    return GGUFFile::open_source(ByteSource::wrap(keep->data(), keep->size(), keep, "test.gguf"));
}

// The error message opening `b` gives, or "" when it opens.
std::string error_of(const Bytes& b) {
    try {
        open_bytes(b);
    } catch (const GGUFError& e) {
        return e.what();
    }
    return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

Bytes f32_bytes(size_t n) {
    Bytes b(n * 4);
    for (size_t i = 0; i < n; ++i) {
        const float v = static_cast<float>(i) * 0.5f;
        std::memcpy(b.data() + 4 * i, &v, 4);
    }
    return b;
}

Builder small_model() {
    Builder b;
    b.str("general.architecture", "llama").u32("llama.block_count", 2).f32("llama.eps", 1e-5f);
    b.strings("tokenizer.ggml.tokens", {"a", "bb", ""}).floats("tokenizer.ggml.scores", {1, 2, 3});
    b.nested("test.nested", 3);
    b.tensor("token_embd.weight", {8, 3}, 0, f32_bytes(24));
    b.tensor("output_norm.weight", {8}, 0, f32_bytes(8));
    return b;
}

}  // namespace

TEST(reads_metadata_and_tensors) {
    auto f = open_bytes(small_model().build());
    CHECK(f->version() == 3);
    CHECK(f->metadata().size() == 6);
    CHECK(f->as_string(f->find("general.architecture")->value) == "llama");
    CHECK(f->as_int(f->find("llama.block_count")->value) == 2);
    CHECK(f->as_float(f->find("llama.eps")->value) == 1e-5f);
    auto tokens = f->array_strings(f->find("tokenizer.ggml.tokens")->value);
    REQUIRE(tokens.size() == 3);
    CHECK(tokens[0] == "a" && tokens[1] == "bb" && tokens[2].empty());
    auto nested = f->array_items(f->find("test.nested")->value);
    REQUIRE(nested.size() == 3);
    CHECK(nested[2].count == 3);
    int32_t last;
    std::memcpy(&last, f->array_data(nested[2]) + 8, 4);
    CHECK(last == 22);
    const GGUFTensor* t = f->find_tensor("token_embd.weight");
    REQUIRE(t != nullptr);
    CHECK(t->ne[0] == 8 && t->ne[1] == 3 && t->nbytes == 96 && t->offset % 32 == 0);
    float v;
    std::memcpy(&v, f->tensor_data(*t) + 4 * 5, 4);
    CHECK(v == 2.5f);
    CHECK(f->find_tensor("missing") == nullptr);
    CHECK(f->find("missing") == nullptr);
}

TEST(accepts_v2_and_custom_alignment) {
    Builder b = small_model();
    b.version = 2;
    CHECK(open_bytes(b.build())->version() == 2);
    Builder a;
    a.alignment = 64;
    a.u32("general.alignment", 64);
    a.tensor("x", {4}, 0, f32_bytes(4)).tensor("y", {4}, 0, f32_bytes(4));
    auto f = open_bytes(a.build());
    CHECK(f->alignment() == 64);
    CHECK(f->find_tensor("y")->offset % 64 == 0);
}

TEST(rejects_bad_header) {
    Bytes good = small_model().build();
    Bytes b = good;
    b[0] = 'X';
    CHECK(contains(error_of(b), "magic at offset 0"));
    for (uint32_t v : {1u, 4u}) {
        b = good;
        std::memcpy(b.data() + 4, &v, 4);
        CHECK(contains(error_of(b), "version at offset 4"));
    }
    b = good;
    const uint64_t huge = 1ull << 60;
    std::memcpy(b.data() + 16, &huge, 8);
    CHECK(contains(error_of(b), "metadata entry count at offset 16"));
    b = good;
    std::memcpy(b.data() + 8, &huge, 8);
    CHECK(contains(error_of(b), "tensor count at offset 8"));
    for (size_t cut : {0, 3, 7, 20, 40, 100}) {
        Bytes t(good.begin(), good.begin() + cut);
        CHECK(!error_of(t).empty());
    }
}

TEST(rejects_bad_values) {
    CHECK(contains(error_of(Builder().key("k", static_cast<gguf_test::Type>(13)).build()),
                   "unknown value type id 13"));
    Builder b;
    b.key("flag", gguf_test::BOOL);
    gguf_test::put<uint8_t>(b.kv, 2);
    CHECK(contains(error_of(b.build()), "metadata 'flag'"));
    Builder s;
    s.key("s", gguf_test::STRING);
    gguf_test::put<uint64_t>(s.kv, 1ull << 40);
    CHECK(contains(error_of(s.build()), "string length"));
    Builder a;
    a.key("arr", gguf_test::ARRAY);
    gguf_test::put<uint32_t>(a.kv, gguf_test::U64);
    gguf_test::put<uint64_t>(a.kv, 1ull << 61);
    CHECK(contains(error_of(a.build()), "cannot fit"));
    Builder dup;
    dup.u32("k", 1).u32("k", 2);
    CHECK(contains(error_of(dup.build()), "duplicate key"));
    Builder al;
    al.u32("general.alignment", 48);
    CHECK(contains(error_of(al.build()), "not a power of two"));
    Builder deep;
    deep.key("deep", gguf_test::ARRAY);
    for (int i = 0; i < 20; ++i) {
        gguf_test::put<uint32_t>(deep.kv, gguf_test::ARRAY);
        gguf_test::put<uint64_t>(deep.kv, 1);
    }
    gguf_test::put<uint32_t>(deep.kv, gguf_test::U8);
    gguf_test::put<uint64_t>(deep.kv, 0);
    CHECK(contains(error_of(deep.build()), "nested deeper"));
}

TEST(rejects_bad_tensors) {
    CHECK(contains(error_of(Builder().tensor("t", {4}, 77, f32_bytes(4)).build()),
                   "unknown ggml type id 77"));
    CHECK(contains(error_of(Builder().tensor("t", {1, 1, 1, 1, 1}, 0, f32_bytes(1)).build()),
                   "n_dims"));
    CHECK(contains(error_of(Builder().tensor("t", {1ull << 40, 1ull << 40}, 0, {}).build()),
                   "overflows"));
    CHECK(contains(error_of(Builder().tensor("t", {33}, 2, Bytes(40)).build()),
                   "not a multiple of Q4_0's block size 32"));
    CHECK(contains(error_of(Builder().tensor("t", {64}, 0, f32_bytes(8)).build()),
                   "lies outside"));
    Builder dup;
    dup.tensor("t", {4}, 0, f32_bytes(4)).tensor("t", {4}, 0, f32_bytes(4));
    CHECK(contains(error_of(dup.build()), "duplicate tensor name"));

    // Point the second tensor's offset into the first one's data.
    Builder ov;
    ov.tensor("a", {16}, 0, f32_bytes(16)).tensor("b", {16}, 0, f32_bytes(16));
    Bytes file = ov.build();
    std::vector<gguf_test::Field> fields;
    gguf_test::map_fields(file, fields);
    uint64_t last_offset_field = 0;
    for (const auto& fd : fields)
        if (fd.kind == gguf_test::FieldKind::Offset) last_offset_field = fd.offset;
    const uint64_t overlap = 32;
    std::memcpy(file.data() + last_offset_field, &overlap, 8);
    CHECK(contains(error_of(file), "overlaps tensor 'a'"));
    const uint64_t misaligned = 65;
    std::memcpy(file.data() + last_offset_field, &misaligned, 8);
    CHECK(contains(error_of(file), "not a multiple of the alignment"));
}

TEST(value_access_checks_types) {
    auto f = open_bytes(small_model().build());
    CHECK_THROWS_AS(f->as_int(f->find("general.architecture")->value), GGUFError);
    CHECK_THROWS_AS(f->as_string(f->find("llama.block_count")->value), GGUFError);
    CHECK_THROWS_AS(f->array_strings(f->find("tokenizer.ggml.scores")->value), GGUFError);
}

TEST(missing_file_names_the_path) {
    try {
        GGUFFile::open("/nonexistent/model.gguf");
        CHECK(false);
    } catch (const GGUFError& e) {
        CHECK(contains(e.what(), "/nonexistent/model.gguf"));
    }
}
