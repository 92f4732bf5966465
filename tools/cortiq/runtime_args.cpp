#include "runtime_args.hpp"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/safetensors.hpp"

namespace cortiq::cli {

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

io::Tokenizer load_tokenizer(const std::string& model, const std::string& flag) {
    if (!flag.empty()) return io::Tokenizer::load(flag);
    if (fs::is_directory(model)) return io::Tokenizer::load(model);
    const auto ckpt = io::Checkpoint::open(model);
    const auto& md = ckpt.metadata();
    if (auto it = md.find("tokenizer.json"); it != md.end()) {
        TempFolder dir;
        std::ofstream(dir.path() / "tokenizer.json", std::ios::binary) << it->second;
        if (auto c = md.find("tokenizer_config.json"); c != md.end())
            std::ofstream(dir.path() / "tokenizer_config.json", std::ios::binary) << c->second;
        return io::Tokenizer::load(dir.path().string());
    }
    const auto parent = fs::path(model).parent_path();
    return io::Tokenizer::load(parent.empty() ? std::string(".") : parent.string());
}

model::Device runtime_device(const std::string& device) {
    const model::Device d = model::parse_device(device);
    CORTIQ_CHECK(d == model::Device::cpu || model::gpu_available(), "--device gpu: {}",
                 model::gpu_unavailable_reason());
    return d;
}

void add_no_verify(CLI::App* cmd, bool& no_verify) {
    cmd->add_flag("--no-verify", no_verify,
                  "load the file without checking its checksums (a damaged file then runs)");
}

}  // namespace cortiq::cli
