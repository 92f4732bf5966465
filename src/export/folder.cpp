// The output folder of an export. Nothing appears under its name until every
// file is written: the files go to a sibling OUT.tmp.<pid> that is renamed
// into place (a folder being replaced is moved aside first and removed
// after), and a failure removes the sibling.
#include <unistd.h>

#include <algorithm>
#include <system_error>

#include "core/error.hpp"
#include "export/steps.hpp"
#include "io/atomic_file.hpp"

namespace cortiq::hf {

namespace {

// OUT_DIR without a trailing separator ("out/" → "out").
fs::path clean(const std::string& s) {
    fs::path p = fs::path(s).lexically_normal();
    if (p.filename().empty()) p = p.parent_path();
    return p;
}

// Whether `file` lies inside `dir` (after resolving links).
bool inside(const fs::path& file, const fs::path& dir) {
    std::error_code ec;
    const fs::path f = fs::weakly_canonical(file, ec), d = fs::weakly_canonical(dir, ec);
    const auto [end, _] = std::mismatch(d.begin(), d.end(), f.begin(), f.end());
    return end == d.end();
}

}  // namespace

FolderWriter::FolderWriter(const std::string& out_dir, bool force, const std::string& in_path)
    : out_(clean(out_dir)) {
    const std::string leaf = out_.filename().string();
    CORTIQ_CHECK(!out_.empty() && leaf != "." && leaf != "..",
                 "export: '{}' cannot be the output folder (name a new or empty folder)", out_dir);
    tmp_ = out_.parent_path() / fmt::format("{}.tmp.{}", leaf, ::getpid());
    std::error_code ec;
    if (!fs::exists(out_, ec)) return;
    CORTIQ_CHECK(fs::is_directory(out_, ec), "export: {} exists and is not a folder",
                 out_.string());
    CORTIQ_CHECK(fs::is_empty(out_, ec) || force,
                 "export: {} is not empty (pass --force to replace it)", out_.string());
    CORTIQ_CHECK(!inside(in_path, out_), "export: {} holds the input {}; choose another folder",
                 out_.string(), in_path);
}

FolderWriter::~FolderWriter() {
    if (started_ && !committed_) {
        std::error_code ec;
        fs::remove_all(tmp_, ec);
    }
}

void FolderWriter::begin() {
    const fs::path parent = out_.parent_path().empty() ? fs::path(".") : out_.parent_path();
    std::error_code ec;
    fs::create_directories(parent, ec);
    CORTIQ_CHECK(!ec, "export: cannot create {}: {}", parent.string(), ec.message());
    io::remove_stale_temp_files(parent.string(), out_.filename().string(), /*folders=*/true);
    fs::remove_all(tmp_, ec);
    fs::create_directory(tmp_, ec);
    CORTIQ_CHECK(!ec, "export: cannot create {}: {}", tmp_.string(), ec.message());
    started_ = true;
}

void FolderWriter::commit() {
    CORTIQ_CHECK(started_ && !committed_, "export: commit without a started folder");
    std::error_code ec;
    fs::path old;
    if (fs::exists(out_, ec)) {
        old = out_.parent_path() / fmt::format("{}.old.{}", out_.filename().string(), ::getpid());
        fs::rename(out_, old, ec);
        CORTIQ_CHECK(!ec, "export: cannot move {} aside: {}", out_.string(), ec.message());
    }
    fs::rename(tmp_, out_, ec);
    if (ec) {
        const std::string why = ec.message();
        if (!old.empty()) fs::rename(old, out_, ec);  // put the old folder back
        CORTIQ_FAIL("export: cannot rename {} to {}: {}", tmp_.string(), out_.string(), why);
    }
    committed_ = true;
    if (!old.empty()) fs::remove_all(old, ec);
}

}  // namespace cortiq::hf
