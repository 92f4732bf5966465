// libFuzzer target: the resume journal. A scratch output has a journal whose
// settings match; the first input byte picks what the rest replaces: 0 the
// entry of layer 0 (a safetensors file with payloads and reports), 1 the
// journal's settings.json. The journal is then reopened with --resume and the
// entry loaded as `cortiq quantize` does.
#include <cstdint>
#include <fstream>
#include <iterator>

#include "fuzz_common.hpp"
#include "quantize/journal.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const nlohmann::json& settings() {
    static const nlohmann::json s = {{"format_version", 1}, {"method", "nvg"}};
    return s;
}

std::string out_path() {
    return (fuzz::scratch_dir() / "out.safetensors").string();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    quant::Journal(out_path(), settings(), false, true);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    if (size == 0) return 0;
    const std::string out = out_path();
    const fs::path dir = out + ".journal";
    static const std::string good_settings = [&] {
        std::ifstream f(dir / "settings.json");
        return std::string(std::istreambuf_iterator<char>(f), {});
    }();
    const std::span<const uint8_t> rest(data + 1, size - 1);
    if (data[0] == 1) {
        fuzz::write_file(dir / "settings.json", rest);
        fs::remove(dir / "layer_0.safetensors");
    } else {
        fuzz::write_file(dir / "settings.json", good_settings);
        fuzz::write_file(dir / "layer_0.safetensors", rest);
    }
    fuzz::expect_clean([&] {
        const quant::Journal j(out, settings(), true, false);
        // what the seeds' entry of layer 0 holds
        const std::vector<quant::JournalTensor> expected = {
            {"model.layers.0.self_attn.q_proj.weight", 4, 8},
            {"model.layers.0.mlp.down_proj.weight", 4, 8}};
        if (auto rec = j.load(0, expected)) {
            if (rec->payloads.size() != expected.size() || rec->reports.size() != expected.size())
                std::abort();
        }
        (void)j.load(1, expected);
    });
    return 0;
}
