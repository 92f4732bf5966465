// libFuzzer target: model.safetensors.index.json of a sharded checkpoint.
// Two fixed, valid shards lie in a scratch folder; the input is the index,
// which may name shards, tensors and files that are not there.
#include <cstdint>

#include "fuzz_common.hpp"
#include "io/safetensors.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

const fs::path& model_dir() {
    static const fs::path dir = [] {
        const fs::path d = fuzz::scratch_dir() / "sharded";
        fs::create_directories(d);
        const std::vector<float> v = {1, 2, 3, 4, 5, 6};
        io::SafetensorsWriter a, b;
        a.add_f32("model.embed_tokens.weight", {2, 3}, v);
        a.add_f32("model.norm.weight", {3}, std::span<const float>(v).first(3));
        b.add_f32("lm_head.weight", {3, 2}, v);
        b.add_f32("model.norm.weight", {3}, std::span<const float>(v).last(3));
        a.write((d / "model-00001-of-00002.safetensors").string());
        b.write((d / "model-00002-of-00002.safetensors").string());
        return d;
    }();
    return dir;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    fuzz::init_env();
    (void)model_dir();
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    fuzz::write_file(model_dir() / "model.safetensors.index.json",
                     std::span<const uint8_t>(data, size));
    fuzz::expect_clean([&] {
        const auto c = io::Checkpoint::open(model_dir().string());
        for (const auto& n : c.names()) {
            (void)c.file_of(n).path();
            (void)c.load_floats(n);
        }
        (void)c.metadata();
    });
    return 0;
}
