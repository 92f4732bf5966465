// Shared by the libFuzzer targets: the exception policy and scratch files.
//
// Policy: bad input must end in cortiq::Error (a message for the user). Any
// other exception (an InvariantError, a nlohmann::json exception, bad_alloc,
// std::out_of_range, ...) escapes the target and aborts, so libFuzzer reports
// it as a crash, as it does sanitizer reports and timeouts.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <string_view>

#include "core/error.hpp"

namespace cortiq::fuzz {

// One thread: the targets read small inputs, and OpenMP's pool would only add
// noise (and leak reports) to each execution.
inline void init_env() {
    ::setenv("OMP_NUM_THREADS", "1", 1);
    ::setenv("OPENBLAS_NUM_THREADS", "1", 1);
}

// Runs f(); returns normally on cortiq::Error, lets anything else escape.
template <class F>
void expect_clean(F&& f) {
    try {
        f();
    } catch (const cortiq::Error&) {
    }
}

// A per-process scratch folder in memory (/dev/shm when present), removed at exit.
inline const std::filesystem::path& scratch_dir() {
    static const std::filesystem::path dir = [] {
        namespace fs = std::filesystem;
        const fs::path base =
            fs::is_directory("/dev/shm") ? fs::path("/dev/shm") : fs::temp_directory_path();
        fs::path d = base / ("cortiq-fuzz-" + std::to_string(::getpid()));
        fs::remove_all(d);
        fs::create_directories(d);
        std::atexit([] {
            std::error_code ec;
            std::filesystem::remove_all(scratch_dir(), ec);
        });
        return d;
    }();
    return dir;
}

// Writes `bytes` to `path` (truncating), aborting on I/O errors (the harness's
// own, not the input's).
inline void write_file(const std::filesystem::path& path, std::span<const uint8_t> bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    if (!f) std::abort();
    if (!bytes.empty() && std::fwrite(bytes.data(), 1, bytes.size(), f) != bytes.size())
        std::abort();
    if (std::fclose(f) != 0) std::abort();
}

inline void write_file(const std::filesystem::path& path, std::string_view text) {
    write_file(
        path, std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
}

// The input as a file without touching a disk: a memfd, named by /proc/self/fd.
class MemFile {
  public:
    MemFile(const uint8_t* data, size_t size) {
        fd_ = ::memfd_create("cortiq-fuzz", MFD_CLOEXEC);
        if (fd_ < 0) std::abort();
        size_t done = 0;
        while (done < size) {
            const ssize_t w = ::write(fd_, data + done, size - done);
            if (w <= 0) std::abort();
            done += static_cast<size_t>(w);
        }
        path_ = "/proc/self/fd/" + std::to_string(fd_);
    }
    ~MemFile() { ::close(fd_); }
    MemFile(const MemFile&) = delete;
    MemFile& operator=(const MemFile&) = delete;
    const std::string& path() const { return path_; }

  private:
    int fd_ = -1;
    std::string path_;
};

}  // namespace cortiq::fuzz
