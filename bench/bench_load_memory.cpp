// Host memory of a model loaded for quantize --device gpu, whose layers only
// go elsewhere (to the GPU, to the encoder): an eager load (every layer read
// into float32) against the layers left in the mapped checkpoint
// (LoadOptions::map_linears), each mode in a process of its own, measured as
// that process's peak resident set after loading and then reading every
// linear weight once, one at a time, as the GPU upload and the encoder do.
//   bench_load_memory MODEL            both modes, side by side, and the ratio
//   bench_load_memory MODEL eager|mapped
// For a model of the 7B shape without downloading one:
// scripts/bench/make_llama_7b_shape.py writes a random one (numpy only).
#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "core/error.hpp"
#include "core/memory_usage.hpp"
#include "model/llama.hpp"

using namespace cortiq;

namespace {

// Loads the model in `mode`, reads every linear weight once; prints the
// peak resident bytes and the float32 bytes of the layers' weights.
int one_mode(const std::string& dir, const std::string& mode) {
    model::LoadOptions lo;
    lo.map_linears = mode == "mapped";
    const model::Model m = model::Model::load(dir, lo);
    const int64_t after_load = peak_rss_bytes();
    double checksum = 0;
    int64_t layer_bytes = 0;
    static const char* const names[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                        "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                        "mlp.down_proj"};
    for (int64_t l = 0; l < m.num_layers(); ++l)
        for (const char* n : names) {
            const MatF w = m.linear(l, n).w->dense();
            checksum += w.data()[w.size() / 2];
            layer_bytes += 4 * w.size();
        }
    std::printf("%s %lld %lld %lld %.6g\n", mode.c_str(), static_cast<long long>(after_load),
                static_cast<long long>(peak_rss_bytes()), static_cast<long long>(layer_bytes),
                checksum);
    return 0;
}

}  // namespace

int main(int argc, char** argv) try {
    CORTIQ_CHECK(argc >= 2, "usage: bench_load_memory MODEL [eager|mapped]");
    const std::string dir = argv[1];
    if (argc >= 3) return one_mode(dir, argv[2]);
    // this program's own path (in the shell of popen, /proc/self/exe is the shell)
    const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
    double peak[2] = {0, 0}, loaded[2] = {0, 0}, layers = 0;
    for (int k = 0; k < 2; ++k) {
        const char* mode = k == 0 ? "eager" : "mapped";
        const std::string cmd = fmt::format("'{}' '{}' {}", self, dir, mode);
        FILE* p = ::popen(cmd.c_str(), "r");
        CORTIQ_CHECK(p, "cannot run {}", cmd);
        char name[16] = {};
        long long after_load = 0, top = 0, bytes = 0;
        double sum = 0;
        const int got =
            std::fscanf(p, "%15s %lld %lld %lld %lf", name, &after_load, &top, &bytes, &sum);
        CORTIQ_CHECK(::pclose(p) == 0 && got == 5, "{} failed", cmd);
        peak[k] = static_cast<double>(top);
        loaded[k] = static_cast<double>(after_load);
        layers = static_cast<double>(bytes);
    }
    fmt::print("{}: the layers' float32 weights {:.2f} GB\n", dir, layers / 1e9);
    fmt::print(
        "peak host memory  eager: {:.2f} GB after loading, {:.2f} GB after reading every "
        "layer\n",
        loaded[0] / 1e9, peak[0] / 1e9);
    fmt::print(
        "peak host memory mapped: {:.2f} GB after loading, {:.2f} GB after reading every "
        "layer\n",
        loaded[1] / 1e9, peak[1] / 1e9);
    fmt::print("mapped / eager: {:.3f}\n", peak[1] / peak[0]);
    return 0;
} catch (const std::exception& e) {
    std::fprintf(stderr, "bench_load_memory: %s\n", e.what());
    return 1;
}
