// The GGUF reader: a memory-mapped, validated view of a GGUF v2/v3 file (or of a model split
// over several files). Nothing read from a file is trusted before it is checked: every count,
// length, type id, dimension and offset is validated against the bytes that are really there,
// and any violation throws GGUFError naming the file, the field and its byte offset.
//
// Metadata values stay in the mapping: the reader records where each value lies and what it
// holds, so opening a file allocates memory in proportion to its entry count, never to a size
// or count the file claims (see kMaxAllocationPerFileByte).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/byte_source.h"
#include "core/formats.h"

namespace dasllama {

enum class GGUFType : uint32_t {
    U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
    STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
const char* gguf_type_name(GGUFType t);

// The reader's limits. Stock files are far inside them; a file outside them is refused.
constexpr uint32_t kGGUFMaxDims = 4;          // ggml tensors have at most four dimensions
constexpr uint32_t kGGUFMaxArrayDepth = 8;    // nested arrays deeper than this are refused
                                              // (bounds the parser's recursion)
constexpr uint64_t kGGUFMaxNameLength = 4096;  // keys and tensor names
constexpr uint32_t kGGUFDefaultAlignment = 32;
// Opening a file allocates at most this many bytes per byte of the file (plus a small
// constant): each parsed record is a fixed-size struct a few times its smallest encoding.
constexpr uint64_t kMaxAllocationPerFileByte = 4;

// Where a validated value lies in its file. Scalars: `offset` is the value itself. Strings:
// `offset` is the 8-byte length prefix. Arrays: `offset` is the first element, `count` the
// number of elements of type `elem_type`. `end` is one past the value's last byte.
struct GGUFValue {
    GGUFType type;
    GGUFType elem_type;
    uint64_t count;
    uint64_t offset;
    uint64_t end;
};

struct GGUFEntry {
    std::string_view key;
    GGUFValue value;
    uint64_t key_offset;
};

struct GGUFTensor {
    std::string_view name;
    uint32_t n_dims;
    int64_t ne[kGGUFMaxDims];  // GGUF order: innermost (contiguous) dimension first; unused = 1
    const TypeTraits* traits;
    uint64_t offset;           // absolute byte offset of the data in its file
    uint64_t nbytes;
    uint32_t file;             // index of the file that holds the data (splits)
    int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class GGUFFile {
public:
    // Opens a file. A split model (`name-00001-of-00003.gguf`) opens all of its parts; the
    // metadata is the first part's and the tensors are the union of all parts.
    static std::shared_ptr<GGUFFile> open(const std::string& path);
    // Parses bytes that are already in memory (a single file, no splits).
    static std::shared_ptr<GGUFFile> open_source(std::shared_ptr<const ByteSource> source);

    uint32_t version() const { return version_; }
    uint32_t alignment() const { return alignment_; }
    const std::string& path() const { return sources_.front()->name(); }
    size_t file_count() const { return sources_.size(); }
    const std::shared_ptr<const ByteSource>& source(uint32_t file) const { return sources_.at(file); }

    const std::vector<GGUFEntry>& metadata() const { return entries_; }
    const GGUFEntry* find(std::string_view key) const;
    const std::vector<GGUFTensor>& tensors() const { return tensors_; }
    const GGUFTensor* find_tensor(std::string_view name) const;
    const uint8_t* tensor_data(const GGUFTensor& t) const;

    // Value access. Every call checks the value's type and throws GGUFError naming the key's
    // owner file and the offset when it does not match.
    int64_t as_int(const GGUFValue& v) const;      // any integer type (u64 > INT64_MAX refused)
    double as_float(const GGUFValue& v) const;     // f32 or f64
    bool as_bool(const GGUFValue& v) const;
    std::string_view as_string(const GGUFValue& v) const;
    // Arrays: elements of a numeric array are contiguous little-endian values at data().
    const uint8_t* array_data(const GGUFValue& v) const;
    std::vector<std::string_view> array_strings(const GGUFValue& v) const;
    std::vector<GGUFValue> array_items(const GGUFValue& v) const;  // any element type

    // Bytes the last open() allocated for its records (for the allocation-bound tests).
    uint64_t record_bytes() const;

private:
    GGUFFile() = default;
    void parse(std::shared_ptr<const ByteSource> source, uint32_t file_index);
    void open_split_parts();
    void index_entries();
    void index_tensors();

    std::vector<std::shared_ptr<const ByteSource>> sources_;
    uint32_t version_ = 0;
    uint32_t alignment_ = kGGUFDefaultAlignment;
    std::vector<GGUFEntry> entries_;     // the first file's metadata
    std::vector<GGUFTensor> tensors_;
    std::vector<uint32_t> entry_order_;  // indexes sorted by key, for lookup
    std::vector<uint32_t> tensor_order_; // indexes sorted by name
};

}  // namespace dasllama
