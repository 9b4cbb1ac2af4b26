#include "core/byte_source.h"

#include <cerrno>
#include <cstddef>
#include <cstring>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/errors.h"

namespace dasllama {

namespace {

// A zero-byte file cannot be mapped; it is represented by an empty range instead.
const uint8_t kEmpty[1] = {0};

std::string os_error(const std::string& path, const char* what) {
    return path + ": cannot " + what + ": " + std::strerror(errno);
}

}  // namespace

std::shared_ptr<const ByteSource> ByteSource::map_file(const std::string& path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw GGUFError(os_error(path, "open"));
    struct stat st {};
    if (::fstat(fd, &st) != 0) {
        const std::string msg = os_error(path, "stat");
        ::close(fd);
        throw GGUFError(msg);
    }
    if (!S_ISREG(st.st_mode)) {
        ::close(fd);
        throw GGUFError(path + ": not a regular file");
    }
    std::shared_ptr<ByteSource> src(new ByteSource());
    src->name_ = path;
    src->size_ = static_cast<uint64_t>(st.st_size);
    if (src->size_ == 0) {
        src->data_ = kEmpty;
    } else {
        void* p = ::mmap(nullptr, src->size_, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            const std::string msg = os_error(path, "map");
            ::close(fd);
            throw GGUFError(msg);
        }
        src->data_ = static_cast<const uint8_t*>(p);
        src->mapped_ = true;
    }
    ::close(fd);  // the mapping stays valid without the descriptor
    return src;
}

std::shared_ptr<const ByteSource> ByteSource::wrap(const uint8_t* data, uint64_t size,
                                                   std::shared_ptr<const void> owner,
                                                   std::string name) {
    std::shared_ptr<ByteSource> src(new ByteSource());
    src->data_ = size ? data : kEmpty;
    src->size_ = size;
    src->owner_ = std::move(owner);
    src->name_ = std::move(name);
    return src;
}

void ByteSource::release(const uint8_t* p, uint64_t n) const {
    if (!mapped_ || p < data_ || n > size_ || p - data_ > static_cast<std::ptrdiff_t>(size_ - n))
        return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + page - 1) / page * page;
    const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + n) / page * page;
    // Private read-only file pages: dropping them loses nothing, a later read refaults them.
    if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

ByteSource::~ByteSource() {
    if (mapped_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace dasllama
