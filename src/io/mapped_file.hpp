// A read-only memory mapping of a whole file, unmapped when the object dies.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace cortiq::io {

class MappedFile {
  public:
    MappedFile() = default;
    // Maps `path` read-only; throws cortiq::Error naming the file on failure.
    // An empty file gives an empty span.
    explicit MappedFile(const std::string& path);
    ~MappedFile();
    MappedFile(MappedFile&& o) noexcept;
    MappedFile& operator=(MappedFile&& o) noexcept;
    MappedFile(const MappedFile&) = delete;
    MappedFile& operator=(const MappedFile&) = delete;

    std::span<const uint8_t> bytes() const { return {data_, size_}; }
    size_t size() const { return size_; }
    const std::string& path() const { return path_; }
    // Gives back the whole pages of `range` (a part of bytes()) that this
    // process holds in memory; a later read maps them from the file again.
    // Memory use only: the bytes read stay the same.
    void drop_pages(std::span<const uint8_t> range) const noexcept;

  private:
    void release() noexcept;

    std::string path_;
    const uint8_t* data_ = nullptr;  // owned by the mapping, released by munmap
    size_t size_ = 0;
};

}  // namespace cortiq::io
