// Crash-safe file writes: a temporary file beside the target
// (`target`.tmp.<pid>), fsync, rename over the target, fsync of the folder;
// and the clean-up of temporaries that a killed writer left behind.
#pragma once

#include <string>
#include <string_view>

namespace cortiq::io {

// Owns the temporary file of `target` until commit(): closes the descriptor
// and removes the file on any early exit. Errors throw cortiq::Error naming
// the target (and the system's reason: "No space left on device", ...).
class TempFile {
  public:
    explicit TempFile(std::string target);
    ~TempFile();
    TempFile(const TempFile&) = delete;
    TempFile& operator=(const TempFile&) = delete;

    void write(const void* data, size_t n);
    // fsync, close, rename over the target, fsync the folder.
    void commit();
    const std::string& path() const { return path_; }

  private:
    std::string path_, target_;
    int fd_ = -1;
    bool committed_ = false;
};

// TempFile + commit in one call.
void write_file_atomic(const std::string& target, std::string_view bytes);

// Removes the temporaries `NAME.tmp.<pid>` in `folder` whose writer (pid) no
// longer runs: what a killed run leaves. With `target_name`, only those of
// that file name; with `folders`, temporary folders of that pattern too (what
// a killed export leaves). Returns how many were removed; never throws.
int remove_stale_temp_files(const std::string& folder, std::string_view target_name = {},
                            bool folders = false);

}  // namespace cortiq::io
