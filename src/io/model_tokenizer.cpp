#include "io/model_tokenizer.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/safetensors.hpp"

namespace cortiq::io {

namespace fs = std::filesystem;

namespace {

// A temporary folder removed at scope exit.
class TempFolder {
  public:
    TempFolder() {
        std::string tmpl = (fs::temp_directory_path() / "cortiq_tok_XXXXXX").string();
        CORTIQ_CHECK(::mkdtemp(tmpl.data()) != nullptr, "cannot create a temporary folder");
        path_ = tmpl;
    }
    ~TempFolder() {
        std::error_code ec;
        fs::remove_all(path_, ec);
    }
    TempFolder(const TempFolder&) = delete;
    TempFolder& operator=(const TempFolder&) = delete;
    const fs::path& path() const { return path_; }

  private:
    fs::path path_;
};

}  // namespace

Tokenizer load_model_tokenizer(const std::string& model, const std::string& dir) {
    if (!dir.empty()) return Tokenizer::load(dir);
    if (fs::is_directory(model)) return Tokenizer::load(model);
    const auto ckpt = Checkpoint::open(model);
    const auto& md = ckpt.metadata();
    if (auto it = md.find("tokenizer.json"); it != md.end()) {
        TempFolder tmp;
        std::ofstream(tmp.path() / "tokenizer.json", std::ios::binary) << it->second;
        if (auto c = md.find("tokenizer_config.json"); c != md.end())
            std::ofstream(tmp.path() / "tokenizer_config.json", std::ios::binary) << c->second;
        return Tokenizer::load(tmp.path().string());
    }
    const auto parent = fs::path(model).parent_path();
    return Tokenizer::load(parent.empty() ? std::string(".") : parent.string());
}

}  // namespace cortiq::io
