// Builds GGUF files in memory for the reader's tests, and maps where the fields of a valid
// file lie so the fuzz test can aim its mutations at them.
#pragma once

#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

namespace gguf_test {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put(Bytes& b, T v) {
    const size_t at = b.size();
    b.resize(at + sizeof(T));
    std::memcpy(b.data() + at, &v, sizeof(T));
}

inline void put_string(Bytes& b, const std::string& s) {
    put<uint64_t>(b, s.size());
    b.insert(b.end(), s.begin(), s.end());
}

enum Type : uint32_t { U8 = 0, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 };

struct Builder {
    uint32_t version = 3;
    uint32_t alignment = 32;
    Bytes kv, infos, data;
    uint64_t n_kv = 0, n_tensors = 0;

    Builder& key(const std::string& k, Type t) {
        put_string(kv, k);
        put<uint32_t>(kv, t);
        ++n_kv;
        return *this;
    }
    Builder& u32(const std::string& k, uint32_t v) { key(k, U32); put(kv, v); return *this; }
    Builder& i64(const std::string& k, int64_t v) { key(k, I64); put(kv, v); return *this; }
    Builder& f32(const std::string& k, float v) { key(k, F32); put(kv, v); return *this; }
    Builder& str(const std::string& k, const std::string& v) { key(k, STRING); put_string(kv, v); return *this; }
    Builder& strings(const std::string& k, const std::vector<std::string>& v) {
        key(k, ARRAY);
        put<uint32_t>(kv, STRING);
        put<uint64_t>(kv, v.size());
        for (const std::string& s : v) put_string(kv, s);
        return *this;
    }
    Builder& floats(const std::string& k, const std::vector<float>& v) {
        key(k, ARRAY);
        put<uint32_t>(kv, F32);
        put<uint64_t>(kv, v.size());
        for (float f : v) put(kv, f);
        return *this;
    }
    // An array of `outer` arrays of i32, the i-th holding i+1 values.
    Builder& nested(const std::string& k, uint32_t outer) {
        key(k, ARRAY);
        put<uint32_t>(kv, ARRAY);
        put<uint64_t>(kv, outer);
        for (uint32_t i = 0; i < outer; ++i) {
            put<uint32_t>(kv, I32);
            put<uint64_t>(kv, i + 1);
            for (uint32_t j = 0; j <= i; ++j) put<int32_t>(kv, static_cast<int32_t>(i * 10 + j));
        }
        return *this;
    }
    // A tensor with dims in GGUF order (innermost first) and its stored bytes.
    Builder& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                    const Bytes& bytes) {
        while (data.size() % alignment) data.push_back(0);
        put_string(infos, name);
        put<uint32_t>(infos, static_cast<uint32_t>(ne.size()));
        for (uint64_t d : ne) put(infos, d);
        put<uint32_t>(infos, type);
        put<uint64_t>(infos, data.size());
        data.insert(data.end(), bytes.begin(), bytes.end());
        ++n_tensors;
        return *this;
    }
    Bytes build() const {
        Bytes out;
        put<uint32_t>(out, 0x46554747);
        put<uint32_t>(out, version);
        put<uint64_t>(out, n_tensors);
        put<uint64_t>(out, n_kv);
        out.insert(out.end(), kv.begin(), kv.end());
        out.insert(out.end(), infos.begin(), infos.end());
        while (out.size() % alignment) out.push_back(0);
        out.insert(out.end(), data.begin(), data.end());
        return out;
    }
};

// A field of a valid file: where it lies, how wide it is, and what it means.
enum class FieldKind { Count, Length, TypeId, ElemType, NDims, Dim, TensorType, Offset, Scalar };
struct Field {
    uint64_t offset;
    uint32_t width;
    FieldKind kind;
};

// Walks a file that is known to be valid and lists its fields; returns the header's end.
inline uint64_t map_fields(const Bytes& f, std::vector<Field>& out) {
    uint64_t p = 0;
    auto u32 = [&](uint64_t at) { uint32_t v; std::memcpy(&v, f.data() + at, 4); return v; };
    auto u64 = [&](uint64_t at) { uint64_t v; std::memcpy(&v, f.data() + at, 8); return v; };
    auto scalar = [](uint32_t t) -> uint64_t {
        static const uint64_t sizes[] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};
        return sizes[t];
    };
    out.push_back({8, 8, FieldKind::Count});
    out.push_back({16, 8, FieldKind::Count});
    const uint64_t n_tensors = u64(8), n_kv = u64(16);
    p = 24;
    auto string = [&]() { out.push_back({p, 8, FieldKind::Length}); p += 8 + u64(p); };
    std::function<void(uint32_t)> value = [&](uint32_t t) {
        if (t == STRING) return string();
        if (t != ARRAY) { out.push_back({p, static_cast<uint32_t>(scalar(t)), FieldKind::Scalar}); p += scalar(t); return; }
        const uint32_t et = u32(p);
        out.push_back({p, 4, FieldKind::ElemType});
        out.push_back({p + 4, 8, FieldKind::Count});
        const uint64_t n = u64(p + 4);
        p += 12;
        if (et == STRING || et == ARRAY) { for (uint64_t i = 0; i < n; ++i) value(et); }
        else p += n * scalar(et);
    };
    for (uint64_t i = 0; i < n_kv; ++i) {
        string();
        out.push_back({p, 4, FieldKind::TypeId});
        const uint32_t t = u32(p);
        p += 4;
        value(t);
    }
    for (uint64_t i = 0; i < n_tensors; ++i) {
        string();
        out.push_back({p, 4, FieldKind::NDims});
        const uint32_t nd = u32(p);
        p += 4;
        for (uint32_t d = 0; d < nd; ++d, p += 8) out.push_back({p, 8, FieldKind::Dim});
        out.push_back({p, 4, FieldKind::TensorType});
        out.push_back({p + 4, 8, FieldKind::Offset});
        p += 12;
    }
    return p;
}

}  // namespace gguf_test
