// A read-only range of bytes that stays valid while anyone holds it: a memory-mapped file,
// or memory owned by someone else (a Python buffer) kept alive through `owner`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

namespace dasllama {

class ByteSource {
public:
    // Maps a whole file read-only. Throws GGUFError naming the path when it cannot.
    static std::shared_ptr<const ByteSource> map_file(const std::string& path);
    // Wraps memory that `owner` keeps alive; `name` stands in for a path in messages.
    static std::shared_ptr<const ByteSource> wrap(const uint8_t* data, uint64_t size,
                                                  std::shared_ptr<const void> owner,
                                                  std::string name);
    ~ByteSource();
    ByteSource(const ByteSource&) = delete;
    ByteSource& operator=(const ByteSource&) = delete;

    const uint8_t* data() const { return data_; }
    uint64_t size() const { return size_; }
    const std::string& name() const { return name_; }

    // Tells the OS that [p, p + n) will not be read again soon, so its pages can leave
    // resident memory (they are read back from the file if they are). Only a mapped file's
    // pages are released, and only whole pages inside the range; memory owned elsewhere is
    // left alone. Used after weights are repacked into a copy, so a model is not resident
    // twice.
    void release(const uint8_t* p, uint64_t n) const;

private:
    ByteSource() = default;
    const uint8_t* data_ = nullptr;
    uint64_t size_ = 0;
    std::string name_;
    bool mapped_ = false;
    std::shared_ptr<const void> owner_;
};

}  // namespace dasllama
