// SHA-256 of files (OpenSSL EVP), hex-encoded.
#pragma once

#include <string>
#include <vector>

namespace cortiq::io {

std::string sha256_file(const std::string& path);
// Hash of several files in order (the hash of their hashes and names).
std::string sha256_files(const std::vector<std::string>& paths);
std::string sha256_text(const std::string& text);

}  // namespace cortiq::io
