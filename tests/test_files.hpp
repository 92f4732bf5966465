// Files for the tests: a fresh scratch folder per test and process, and a
// file's bytes.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace cortiq::test {

// temp/<prefix><tag>_<pid>, emptied.
inline std::filesystem::path scratch_dir(const std::string& prefix, const char* tag) {
    namespace fs = std::filesystem;
    fs::path d = fs::temp_directory_path() / (prefix + tag + "_" + std::to_string(getpid()));
    fs::remove_all(d);
    fs::create_directories(d);
    return d;
}

inline std::string slurp(const std::filesystem::path& p) {
    std::ifstream f(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(f), {});
}

}  // namespace cortiq::test
