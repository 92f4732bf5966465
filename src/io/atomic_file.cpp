#include "io/atomic_file.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"

namespace cortiq::io {

namespace fs = std::filesystem;

TempFile::TempFile(std::string target)
    : path_(fmt::format("{}.tmp.{}", target, ::getpid())), target_(std::move(target)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    CORTIQ_CHECK(fd_ >= 0, "{}: cannot create temporary file {}: {}", target_, path_,
                 std::strerror(errno));
}

TempFile::~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
}

void TempFile::write(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
        const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
        if (w < 0 && errno == EINTR) continue;
        CORTIQ_CHECK(w > 0, "{}: write failed: {}", target_,
                     w < 0 ? std::strerror(errno) : "no progress");
        p += w;
        n -= static_cast<size_t>(w);
    }
}

void TempFile::commit() {
    CORTIQ_CHECK(::fsync(fd_) == 0, "{}: fsync failed: {}", target_, std::strerror(errno));
    const int fd = fd_;
    fd_ = -1;
    CORTIQ_CHECK(::close(fd) == 0, "{}: close failed: {}", target_, std::strerror(errno));
    CORTIQ_CHECK(::rename(path_.c_str(), target_.c_str()) == 0, "{}: rename from {} failed: {}",
                 target_, path_, std::strerror(errno));
    committed_ = true;
    // Make the rename itself durable (best effort: some filesystems refuse).
    auto dir = fs::path(target_).parent_path();
    if (dir.empty()) dir = ".";
    const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        ::fsync(dfd);
        ::close(dfd);
    }
}

void write_file_atomic(const std::string& target, std::string_view bytes) {
    TempFile tmp(target);
    tmp.write(bytes.data(), bytes.size());
    tmp.commit();
}

int remove_stale_temp_files(const std::string& folder, std::string_view target_name, bool folders) {
    int removed = 0;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(folder.empty() ? "." : folder, ec)) {
        const std::string name = e.path().filename().string();
        const size_t at = name.rfind(".tmp.");
        if (at == std::string::npos || at + 5 == name.size()) continue;
        if (!target_name.empty() && std::string_view(name).substr(0, at) != target_name) continue;
        const std::string digits = name.substr(at + 5);
        if (digits.size() > 9 || !std::all_of(digits.begin(), digits.end(), ::isdigit)) continue;
        const pid_t pid = static_cast<pid_t>(std::stol(digits));
        if (pid == ::getpid() || pid <= 0) continue;
        if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // its writer may still run
        std::error_code rec;
        if (e.is_regular_file(rec) && fs::remove(e.path(), rec))
            ++removed;
        else if (folders && e.is_directory(rec) && fs::remove_all(e.path(), rec) > 0)
            ++removed;
    }
    return removed;
}

}  // namespace cortiq::io
