#include "core/gguf.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "core/errors.h"

namespace dasllama {

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
// Smallest encodings, used to bound counts by the bytes that remain before trusting them.
constexpr uint64_t kMinEntryBytes = 8 + 1 + 4 + 1;          // key length, 1-byte key, type, u8
constexpr uint64_t kMinTensorInfoBytes = 8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, 1 dim, type, offset
constexpr uint64_t kMinArrayBytes = 4 + 8;                  // element type, count
constexpr uint64_t kStringPrefixBytes = 8;

uint64_t scalar_size(GGUFType t) {
    switch (t) {
        case GGUFType::U8: case GGUFType::I8: case GGUFType::BOOL: return 1;
        case GGUFType::U16: case GGUFType::I16: return 2;
        case GGUFType::U32: case GGUFType::I32: case GGUFType::F32: return 4;
        case GGUFType::U64: case GGUFType::I64: case GGUFType::F64: return 8;
        default: return 0;
    }
}

template <typename T>
T load(const uint8_t* p) {
    T v;
    std::memcpy(&v, p, sizeof(T));  // GGUF is little-endian, as are the hosts we build for
    return v;
}

// Reads one file front to back. Every read names the field it is reading, so a failure
// can say what was wrong and where.
class Parser {
public:
    explicit Parser(const ByteSource& src) : src_(src), data_(src.data()), size_(src.size()) {}

    [[noreturn]] void fail(const std::string& field, uint64_t offset, const std::string& what) const {
        throw GGUFError(src_.name() + ": " + field + " at offset " + std::to_string(offset) +
                        ": " + what);
    }

    uint64_t pos() const { return pos_; }
    uint64_t remaining() const { return size_ - pos_; }

    void need(uint64_t n, const std::string& field) const {
        if (n > remaining())
            fail(field, pos_, "needs " + std::to_string(n) + " bytes but the file has " +
                                  std::to_string(remaining()) + " left");
    }

    template <typename T>
    T read(const std::string& field) {
        need(sizeof(T), field);
        T v = load<T>(data_ + pos_);
        pos_ += sizeof(T);
        return v;
    }

    // A length-prefixed string; returns a view into the mapping.
    std::string_view read_string(const std::string& field, uint64_t max_length) {
        const uint64_t at = pos_;
        const uint64_t len = read<uint64_t>(field);  // no string built unless it fails
        if (len > remaining())
            fail(field, at, "string length " + std::to_string(len) + " exceeds the " +
                                std::to_string(remaining()) + " bytes left");
        if (len > max_length)
            fail(field, at, "string length " + std::to_string(len) + " exceeds the limit of " +
                                std::to_string(max_length));
        std::string_view s(reinterpret_cast<const char*>(data_ + pos_), len);
        pos_ += len;
        return s;
    }

    GGUFType read_type(const std::string& field) {
        const uint64_t at = pos_;
        const uint32_t id = read<uint32_t>(field);
        if (id > static_cast<uint32_t>(GGUFType::F64))
            fail(field, at, "unknown value type id " + std::to_string(id));
        return static_cast<GGUFType>(id);
    }

    // Validates one value of type t and moves past it.
    GGUFValue read_value(GGUFType t, const std::string& field, uint32_t depth) {
        GGUFValue v{t, GGUFType::U8, 0, pos_, 0};
        if (t == GGUFType::STRING) {
            read_string(field, UINT64_MAX);
        } else if (t == GGUFType::ARRAY) {
            if (depth >= kGGUFMaxArrayDepth)
                fail(field, pos_, "arrays nested deeper than " +
                                      std::to_string(kGGUFMaxArrayDepth) + " levels");
            v.elem_type = read_type(field + " element type");
            const uint64_t count_at = pos_;
            v.count = read<uint64_t>(field + " element count");
            v.offset = pos_;
            const uint64_t min_elem = v.elem_type == GGUFType::STRING ? kStringPrefixBytes
                                      : v.elem_type == GGUFType::ARRAY ? kMinArrayBytes
                                                                       : scalar_size(v.elem_type);
            if (v.count > remaining() / min_elem)
                fail(field, count_at, "array of " + std::to_string(v.count) + " " +
                                          gguf_type_name(v.elem_type) +
                                          " elements cannot fit in the " +
                                          std::to_string(remaining()) + " bytes left");
            if (v.elem_type == GGUFType::STRING || v.elem_type == GGUFType::ARRAY) {
                for (uint64_t i = 0; i < v.count; ++i)
                    read_value(v.elem_type, field, depth + 1);
            } else if (v.elem_type == GGUFType::BOOL) {
                for (uint64_t i = 0; i < v.count; ++i) read_bool(field);
            } else {
                pos_ += v.count * min_elem;
            }
        } else if (t == GGUFType::BOOL) {
            read_bool(field);
        } else {
            need(scalar_size(t), field);
            pos_ += scalar_size(t);
        }
        v.end = pos_;
        return v;
    }

    void align_to(uint64_t alignment) {
        const uint64_t rem = pos_ % alignment;
        pos_ = rem ? pos_ + (alignment - rem) : pos_;
    }

private:
    void read_bool(const std::string& field) {
        const uint64_t at = pos_;
        const uint8_t b = read<uint8_t>(field);
        if (b > 1) fail(field, at, "bool value " + std::to_string(b) + " is neither 0 nor 1");
    }

    const ByteSource& src_;
    const uint8_t* data_;
    uint64_t size_;
    uint64_t pos_ = 0;
};

struct ParsedFile {
    uint32_t version = 0;
    uint32_t alignment = kGGUFDefaultAlignment;
    std::vector<GGUFEntry> entries;
    std::vector<GGUFTensor> tensors;
};

// A name from the file, quoted for a message: bytes outside printable ASCII are escaped, so
// a damaged name cannot make the message itself invalid text.
std::string quoted(std::string_view s) {
    constexpr size_t kShown = 200;  // a long name is cut, its length still visible in the file
    std::string out = "'";
    for (size_t i = 0; i < s.size() && i < kShown; ++i) {
        const auto c = static_cast<unsigned char>(s[i]);
        if (c >= 0x20 && c < 0x7F && c != '\\') {
            out += static_cast<char>(c);
        } else {
            char esc[8];
            std::snprintf(esc, sizeof esc, "\\x%02x", c);
            out += esc;
        }
    }
    return out + (s.size() > kShown ? "...'" : "'");
}

void read_alignment(const ByteSource& src, const GGUFEntry& e, uint32_t* alignment) {
    if (e.value.type != GGUFType::U32)
        throw GGUFError(src.name() + ": general.alignment at offset " +
                        std::to_string(e.key_offset) + ": must be a u32, not " +
                        gguf_type_name(e.value.type));
    const uint32_t a = load<uint32_t>(src.data() + e.value.offset);
    if (a == 0 || (a & (a - 1)) != 0)
        throw GGUFError(src.name() + ": general.alignment at offset " +
                        std::to_string(e.value.offset) + ": " + std::to_string(a) +
                        " is not a power of two");
    *alignment = a;
}

GGUFTensor read_tensor_info(Parser& p, uint64_t index, uint32_t alignment) {
    const std::string field = "tensor info " + std::to_string(index);
    GGUFTensor t{};
    const uint64_t name_at = p.pos();
    t.name = p.read_string(field + " name", kGGUFMaxNameLength);
    if (t.name.empty()) p.fail(field + " name", name_at, "empty tensor name");
    const std::string named = "tensor " + quoted(t.name);
    const uint64_t dims_at = p.pos();
    t.n_dims = p.read<uint32_t>(named + " n_dims");
    if (t.n_dims == 0 || t.n_dims > kGGUFMaxDims)
        p.fail(named + " n_dims", dims_at, std::to_string(t.n_dims) + " is not in 1.." +
                                               std::to_string(kGGUFMaxDims));
    int64_t elements = 1;
    for (uint32_t d = 0; d < kGGUFMaxDims; ++d) t.ne[d] = 1;
    for (uint32_t d = 0; d < t.n_dims; ++d) {
        const uint64_t at = p.pos();
        const uint64_t ne = p.read<uint64_t>(named + " dimension " + std::to_string(d));
        if (ne > static_cast<uint64_t>(INT64_MAX) ||
            (ne != 0 && static_cast<uint64_t>(elements) > static_cast<uint64_t>(INT64_MAX) / ne))
            p.fail(named + " dimension " + std::to_string(d), at,
                   "element count overflows 64 bits (dimension " + std::to_string(ne) + ")");
        t.ne[d] = static_cast<int64_t>(ne);
        elements *= t.ne[d];
    }
    const uint64_t type_at = p.pos();
    const uint32_t type_id = p.read<uint32_t>(named + " type");
    t.traits = type_traits(type_id);
    if (!t.traits) p.fail(named + " type", type_at, "unknown ggml type id " + std::to_string(type_id));
    if (t.ne[0] % t.traits->block_size != 0)
        p.fail(named + " dimension 0", dims_at + 4,
               "row length " + std::to_string(t.ne[0]) + " is not a multiple of " +
                   t.traits->name + "'s block size " + std::to_string(t.traits->block_size));
    const uint64_t blocks = static_cast<uint64_t>(elements / t.traits->block_size);
    if (blocks > static_cast<uint64_t>(INT64_MAX) / static_cast<uint64_t>(t.traits->type_size))
        p.fail(named + " type", type_at, "byte size overflows 64 bits");
    t.nbytes = blocks * static_cast<uint64_t>(t.traits->type_size);
    const uint64_t offset_at = p.pos();
    t.offset = p.read<uint64_t>(named + " offset");
    if (t.offset % alignment != 0)
        p.fail(named + " offset", offset_at, std::to_string(t.offset) +
                                                 " is not a multiple of the alignment " +
                                                 std::to_string(alignment));
    return t;
}

ParsedFile parse_file(const ByteSource& src, uint32_t file_index) {
    Parser p(src);
    ParsedFile out;
    if (p.read<uint32_t>("magic") != kMagic) p.fail("magic", 0, "not a GGUF file");
    out.version = p.read<uint32_t>("version");
    if (out.version != 2 && out.version != 3)
        p.fail("version", 4, "GGUF version " + std::to_string(out.version) +
                                 " is not supported (2 and 3 are)");
    const uint64_t tensor_count = p.read<uint64_t>("tensor count");
    const uint64_t entry_count = p.read<uint64_t>("metadata entry count");
    if (entry_count > p.remaining() / kMinEntryBytes)
        p.fail("metadata entry count", 16, std::to_string(entry_count) +
                                               " entries cannot fit in the " +
                                               std::to_string(p.remaining()) + " bytes left");
    out.entries.reserve(entry_count);
    for (uint64_t i = 0; i < entry_count; ++i) {
        const std::string field = "metadata entry " + std::to_string(i);
        GGUFEntry e{};
        e.key_offset = p.pos();
        e.key = p.read_string(field + " key", kGGUFMaxNameLength);
        if (e.key.empty()) p.fail(field + " key", e.key_offset, "empty key");
        const std::string named = "metadata " + quoted(e.key);
        const GGUFType t = p.read_type(named + " type");
        e.value = p.read_value(t, named, 0);
        if (e.key == "general.alignment") read_alignment(src, e, &out.alignment);
        out.entries.push_back(e);
    }
    if (tensor_count > p.remaining() / kMinTensorInfoBytes)
        p.fail("tensor count", 8, std::to_string(tensor_count) +
                                      " tensor infos cannot fit in the " +
                                      std::to_string(p.remaining()) + " bytes left");
    out.tensors.reserve(tensor_count);
    for (uint64_t i = 0; i < tensor_count; ++i) {
        out.tensors.push_back(read_tensor_info(p, i, out.alignment));
        out.tensors.back().file = file_index;
    }

    // The data section starts at the next alignment boundary after the tensor infos.
    p.align_to(out.alignment);
    const uint64_t data_start = p.pos();
    const uint64_t size = src.size();
    std::vector<uint32_t> by_offset(out.tensors.size());
    for (uint32_t i = 0; i < by_offset.size(); ++i) {
        GGUFTensor& t = out.tensors[i];
        by_offset[i] = i;
        if (data_start > size || t.offset > size - data_start ||
            t.nbytes > size - data_start - t.offset)
            throw GGUFError(src.name() + ": tensor " + quoted(t.name) + " data at offset " +
                            std::to_string(data_start) + "+" + std::to_string(t.offset) +
                            " (" + std::to_string(t.nbytes) + " bytes) lies outside the " +
                            std::to_string(size) + "-byte file");
        t.offset += data_start;
    }
    std::sort(by_offset.begin(), by_offset.end(), [&](uint32_t a, uint32_t b) {
        return out.tensors[a].offset < out.tensors[b].offset;
    });
    for (size_t i = 1; i < by_offset.size(); ++i) {
        const GGUFTensor& a = out.tensors[by_offset[i - 1]];
        const GGUFTensor& b = out.tensors[by_offset[i]];
        if (a.offset + a.nbytes > b.offset)
            throw GGUFError(src.name() + ": tensor " + quoted(b.name) + " data at offset " +
                            std::to_string(b.offset) + " overlaps tensor " + quoted(a.name) +
                            " (" + std::to_string(a.offset) + ".." +
                            std::to_string(a.offset + a.nbytes) + ")");
    }
    return out;
}

template <typename Item, typename Key>
std::vector<uint32_t> sorted_index(const std::vector<Item>& items, Key key) {
    std::vector<uint32_t> order(items.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](uint32_t a, uint32_t b) { return key(items[a]) < key(items[b]); });
    return order;
}

template <typename Item, typename Key>
const Item* lookup(const std::vector<Item>& items, const std::vector<uint32_t>& order,
                   std::string_view want, Key key) {
    auto it = std::lower_bound(order.begin(), order.end(), want,
                               [&](uint32_t i, std::string_view w) { return key(items[i]) < w; });
    if (it == order.end() || key(items[*it]) != want) return nullptr;
    return &items[*it];
}

const std::string_view entry_key(const GGUFEntry& e) { return e.key; }
const std::string_view tensor_name(const GGUFTensor& t) { return t.name; }

}  // namespace

const char* gguf_type_name(GGUFType t) {
    static const char* const names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32",
                                        "bool", "string", "array", "u64", "i64", "f64"};
    const uint32_t i = static_cast<uint32_t>(t);
    return i < sizeof(names) / sizeof(names[0]) ? names[i] : "unknown";
}

std::shared_ptr<GGUFFile> GGUFFile::open_source(std::shared_ptr<const ByteSource> source) {
    std::shared_ptr<GGUFFile> f(new GGUFFile());
    f->parse(std::move(source), 0);
    f->index_entries();
    f->index_tensors();
    return f;
}

std::shared_ptr<GGUFFile> GGUFFile::open(const std::string& path) {
    std::shared_ptr<GGUFFile> f(new GGUFFile());
    f->parse(ByteSource::map_file(path), 0);
    f->index_entries();
    f->open_split_parts();  // reads split.count through the entry index
    f->index_tensors();
    return f;
}

void GGUFFile::parse(std::shared_ptr<const ByteSource> source, uint32_t file_index) {
    ParsedFile parsed = parse_file(*source, file_index);
    sources_.push_back(std::move(source));
    if (file_index == 0) {
        version_ = parsed.version;
        alignment_ = parsed.alignment;
        entries_ = std::move(parsed.entries);
        tensors_ = std::move(parsed.tensors);
        return;
    }
    // A later part of a split: its own split.no must name its place.
    const ByteSource& src = *sources_.back();
    for (const GGUFEntry& e : parsed.entries) {
        if (e.key != "split.no") continue;
        if (scalar_size(e.value.type) == 0 || e.value.type == GGUFType::F32 ||
            e.value.type == GGUFType::F64 || e.value.type == GGUFType::BOOL)
            throw GGUFError(src.name() + ": split.no at offset " +
                            std::to_string(e.key_offset) + ": must be an integer");
        uint64_t no = 0;
        std::memcpy(&no, src.data() + e.value.offset, scalar_size(e.value.type));
        if (no != file_index)
            throw GGUFError(src.name() + ": split.no at offset " +
                            std::to_string(e.value.offset) + ": is " + std::to_string(no) +
                            ", expected " + std::to_string(file_index));
    }
    tensors_.insert(tensors_.end(), parsed.tensors.begin(), parsed.tensors.end());
}

void GGUFFile::open_split_parts() {
    const GGUFEntry* count_entry = find("split.count");
    if (!count_entry) return;
    const int64_t count = as_int(count_entry->value);
    if (count < 1 || count > 99999)
        throw GGUFError(path() + ": split.count at offset " +
                        std::to_string(count_entry->value.offset) + ": " +
                        std::to_string(count) + " is not in 1..99999");
    if (count == 1) return;
    // Parts are named like llama.cpp's gguf-split writes them: PREFIX-00001-of-00003.gguf.
    const std::string first = path();
    const std::string_view suffix_pattern = "-00000-of-00000.gguf";
    const size_t n = first.size(), k = suffix_pattern.size();
    auto digits = [&](size_t at) {
        for (size_t i = at; i < at + 5; ++i)
            if (first[i] < '0' || first[i] > '9') return false;
        return true;
    };
    if (n < k || first.compare(n - 14, 4, "-of-") != 0 || first.compare(n - 5, 5, ".gguf") != 0 ||
        first[n - k] != '-' || !digits(n - k + 1) || !digits(n - 10))
        throw GGUFError(first + ": split.count is " + std::to_string(count) +
                        " but the name does not end in -00001-of-NNNNN.gguf");
    const std::string prefix = first.substr(0, n - k);
    const std::string part = first.substr(n - k + 1, 5), total = first.substr(n - 10, 5);
    if (std::stoll(part) != 1)
        throw GGUFError(first + ": is part " + part + " of a split model; open part 00001");
    if (std::stoll(total) != count)
        throw GGUFError(first + ": the name says " + total + " parts but split.count is " +
                        std::to_string(count));
    for (int64_t i = 1; i < count; ++i) {
        char suffix[64];
        std::snprintf(suffix, sizeof suffix, "-%05lld-of-%05lld.gguf",
                      static_cast<long long>(i + 1), static_cast<long long>(count));
        parse(ByteSource::map_file(prefix + suffix), static_cast<uint32_t>(i));
    }
    if (const GGUFEntry* total = find("split.tensors.count")) {
        if (as_int(total->value) != static_cast<int64_t>(tensors_.size()))
            throw GGUFError(first + ": split.tensors.count at offset " +
                            std::to_string(total->value.offset) + " is " +
                            std::to_string(as_int(total->value)) + " but the parts hold " +
                            std::to_string(tensors_.size()) + " tensors");
    }
}

void GGUFFile::index_entries() {
    entry_order_ = sorted_index(entries_, entry_key);
    for (size_t i = 1; i < entry_order_.size(); ++i) {
        const GGUFEntry& e = entries_[entry_order_[i]];
        if (e.key == entries_[entry_order_[i - 1]].key)
            throw GGUFError(path() + ": metadata " + quoted(e.key) + " at offset " +
                            std::to_string(e.key_offset) + ": duplicate key");
    }
}

void GGUFFile::index_tensors() {
    tensor_order_ = sorted_index(tensors_, tensor_name);
    for (size_t i = 1; i < tensor_order_.size(); ++i) {
        const GGUFTensor& t = tensors_[tensor_order_[i]];
        if (t.name == tensors_[tensor_order_[i - 1]].name)
            throw GGUFError(sources_[t.file]->name() + ": tensor " + quoted(t.name) +
                            ": duplicate tensor name");
    }
}

const GGUFEntry* GGUFFile::find(std::string_view key) const {
    return lookup(entries_, entry_order_, key, entry_key);
}

const GGUFTensor* GGUFFile::find_tensor(std::string_view name) const {
    return lookup(tensors_, tensor_order_, name, tensor_name);
}

const uint8_t* GGUFFile::tensor_data(const GGUFTensor& t) const {
    return sources_.at(t.file)->data() + t.offset;
}

uint64_t GGUFFile::record_bytes() const {
    return entries_.capacity() * sizeof(GGUFEntry) + tensors_.capacity() * sizeof(GGUFTensor) +
           (entry_order_.capacity() + tensor_order_.capacity()) * sizeof(uint32_t);
}

// ---- value access -------------------------------------------------------------------------

namespace {

// The end of a value that starts at pos (validated already, so no checks here).
uint64_t skip_value(const uint8_t* base, GGUFType t, uint64_t pos) {
    if (t == GGUFType::STRING) return pos + kStringPrefixBytes + load<uint64_t>(base + pos);
    if (t != GGUFType::ARRAY) return pos + scalar_size(t);
    const auto elem = static_cast<GGUFType>(load<uint32_t>(base + pos));
    const uint64_t count = load<uint64_t>(base + pos + 4);
    pos += kMinArrayBytes;
    if (elem != GGUFType::STRING && elem != GGUFType::ARRAY) return pos + count * scalar_size(elem);
    for (uint64_t i = 0; i < count; ++i) pos = skip_value(base, elem, pos);
    return pos;
}

[[noreturn]] void wrong_type(const GGUFFile& f, const GGUFValue& v, const char* want) {
    throw GGUFError(f.path() + ": value at offset " + std::to_string(v.offset) + " is " +
                    gguf_type_name(v.type) + ", expected " + want);
}

}  // namespace

int64_t GGUFFile::as_int(const GGUFValue& v) const {
    const uint8_t* p = sources_[0]->data() + v.offset;
    switch (v.type) {
        case GGUFType::U8: return load<uint8_t>(p);
        case GGUFType::I8: return load<int8_t>(p);
        case GGUFType::U16: return load<uint16_t>(p);
        case GGUFType::I16: return load<int16_t>(p);
        case GGUFType::U32: return load<uint32_t>(p);
        case GGUFType::I32: return load<int32_t>(p);
        case GGUFType::I64: return load<int64_t>(p);
        case GGUFType::U64: {
            const uint64_t u = load<uint64_t>(p);
            if (u > static_cast<uint64_t>(INT64_MAX))
                throw GGUFError(path() + ": value at offset " + std::to_string(v.offset) +
                                ": " + std::to_string(u) + " does not fit in an int64");
            return static_cast<int64_t>(u);
        }
        default: wrong_type(*this, v, "an integer");
    }
}

double GGUFFile::as_float(const GGUFValue& v) const {
    const uint8_t* p = sources_[0]->data() + v.offset;
    if (v.type == GGUFType::F32) return load<float>(p);
    if (v.type == GGUFType::F64) return load<double>(p);
    wrong_type(*this, v, "a float");
}

bool GGUFFile::as_bool(const GGUFValue& v) const {
    if (v.type != GGUFType::BOOL) wrong_type(*this, v, "a bool");
    return sources_[0]->data()[v.offset] != 0;
}

std::string_view GGUFFile::as_string(const GGUFValue& v) const {
    if (v.type != GGUFType::STRING) wrong_type(*this, v, "a string");
    const uint8_t* p = sources_[0]->data() + v.offset;
    return {reinterpret_cast<const char*>(p + kStringPrefixBytes), load<uint64_t>(p)};
}

const uint8_t* GGUFFile::array_data(const GGUFValue& v) const {
    if (v.type != GGUFType::ARRAY) wrong_type(*this, v, "an array");
    return sources_[0]->data() + v.offset;
}

std::vector<GGUFValue> GGUFFile::array_items(const GGUFValue& v) const {
    if (v.type != GGUFType::ARRAY) wrong_type(*this, v, "an array");
    // The array was validated when the file was opened; walking it again cannot fail.
    const uint8_t* base = sources_[0]->data();
    std::vector<GGUFValue> items;
    items.reserve(v.count);
    uint64_t pos = v.offset;
    for (uint64_t i = 0; i < v.count; ++i) {
        GGUFValue item{v.elem_type, GGUFType::U8, 0, pos, 0};
        if (v.elem_type == GGUFType::ARRAY) {
            item.elem_type = static_cast<GGUFType>(load<uint32_t>(base + pos));
            item.count = load<uint64_t>(base + pos + 4);
            item.offset = pos + kMinArrayBytes;
        }
        pos = skip_value(base, v.elem_type, pos);
        item.end = pos;
        items.push_back(item);
    }
    return items;
}

std::vector<std::string_view> GGUFFile::array_strings(const GGUFValue& v) const {
    if (v.type != GGUFType::ARRAY || v.elem_type != GGUFType::STRING)
        wrong_type(*this, v, "an array of strings");
    std::vector<std::string_view> out;
    out.reserve(v.count);
    for (const GGUFValue& item : array_items(v)) out.push_back(as_string(item));
    return out;
}

}  // namespace dasllama
