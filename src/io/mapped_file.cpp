#include "io/mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.hpp"

namespace cortiq::io {

namespace {

// Closes a file descriptor at scope exit (the mapping outlives it).
struct FdGuard {
    int fd;
    ~FdGuard() {
        if (fd >= 0) ::close(fd);
    }
};

}  // namespace

MappedFile::MappedFile(const std::string& path) : path_(path) {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    CORTIQ_CHECK(fd >= 0, "{}: cannot open: {}", path, std::strerror(errno));
    FdGuard guard{fd};
    struct stat st {};
    CORTIQ_CHECK(::fstat(fd, &st) == 0, "{}: cannot stat: {}", path, std::strerror(errno));
    CORTIQ_CHECK(S_ISREG(st.st_mode), "{}: not a regular file", path);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ == 0) return;
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    CORTIQ_CHECK(p != MAP_FAILED, "{}: cannot map {} bytes: {}", path, size_, std::strerror(errno));
    data_ = static_cast<const uint8_t*>(p);
}

void MappedFile::drop_pages(std::span<const uint8_t> range) const noexcept {
    if (range.empty() || !data_) return;
    const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
    const auto begin = reinterpret_cast<uintptr_t>(range.data());
    const uintptr_t end = begin + range.size();
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (first < last)  // a failure only leaves the pages where they are
        (void)::madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED);
}

MappedFile::~MappedFile() {
    release();
}

MappedFile::MappedFile(MappedFile&& o) noexcept
    : path_(std::move(o.path_)),
      data_(std::exchange(o.data_, nullptr)),
      size_(std::exchange(o.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& o) noexcept {
    if (this != &o) {
        release();
        path_ = std::move(o.path_);
        data_ = std::exchange(o.data_, nullptr);
        size_ = std::exchange(o.size_, 0);
    }
    return *this;
}

void MappedFile::release() noexcept {
    if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
    data_ = nullptr;
    size_ = 0;
}

}  // namespace cortiq::io
