#include "io/hash.hpp"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <fstream>
#include <memory>

#include "core/error.hpp"

namespace cortiq::io {

namespace {

struct MdCtxFree {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

class Sha256 {
  public:
    Sha256() : ctx_(EVP_MD_CTX_new()) {
        CORTIQ_CHECK(ctx_ && EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr) == 1,
                     "SHA-256 unavailable");
    }
    void update(const void* p, size_t n) { EVP_DigestUpdate(ctx_.get(), p, n); }
    std::string hex() {
        unsigned char md[EVP_MAX_MD_SIZE];
        unsigned int len = 0;
        EVP_DigestFinal_ex(ctx_.get(), md, &len);
        std::string s;
        for (unsigned int i = 0; i < len; ++i) s += fmt::format("{:02x}", md[i]);
        return s;
    }

  private:
    std::unique_ptr<EVP_MD_CTX, MdCtxFree> ctx_;
};

}  // namespace

std::string sha256_file(const std::string& path) {
    std::ifstream f(path, std::ios::binary);
    CORTIQ_CHECK(f, "cannot open {} to hash it", path);
    Sha256 h;
    std::vector<char> buf(1 << 20);
    while (f) {
        f.read(buf.data(), static_cast<std::streamsize>(buf.size()));
        h.update(buf.data(), static_cast<size_t>(f.gcount()));
    }
    CORTIQ_CHECK(f.eof(), "read error while hashing {}", path);
    return h.hex();
}

std::string sha256_files(const std::vector<std::string>& paths) {
    if (paths.size() == 1) return sha256_file(paths[0]);
    Sha256 h;
    for (const auto& p : paths) {
        const std::string line = sha256_file(p) + "  " + p.substr(p.find_last_of('/') + 1) + "\n";
        h.update(line.data(), line.size());
    }
    return h.hex();
}

std::string sha256_text(const std::string& text) {
    Sha256 h;
    h.update(text.data(), text.size());
    return h.hex();
}

}  // namespace cortiq::io
