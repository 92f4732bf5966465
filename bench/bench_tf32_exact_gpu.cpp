// Figures for docs/encoder_speed.md (prints a table; not a timed unit test):
// what a weight exact in TF32 (a BF16 or FP16 checkpoint's) saves in a
// 3xTF32 product when it is marked exact and its split is skipped.
//   bench_tf32_exact_gpu [--reps 10]
// Side by side in one run, for the products of the distillation's head
// (forward x Wᵀ and backward dy W at the 0.8B Qwen3.5's and the 8B
// Llama-3's vocabularies, 512 rows) and of a 7B layer in calibration (4096
// rows): milliseconds per product with the weight split (three passes) and
// marked exact (two), their ratio, and whether the two gave the same bits.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#ifdef CORTIQ_HAVE_CUDA
#include "bench_gpu_timing.hpp"
#include "core/cuda/gemm_tf32.hpp"
#include "core/error.hpp"
#include "core/gpu.hpp"
#include "encode/cuda/ops.hpp"

using namespace cortiq;
using bench::time_ms;
using cortiq::cuda::DeviceBuffer;
using cortiq::cuda::Gpu;

namespace {

struct Case {
    const char* what;
    bool backward;       // dy (rows × m) W (m × n), else x (rows × n) Wᵀ
    int64_t rows, m, n;  // W is m × n
};

}  // namespace

int main(int argc, char** argv) {
    int reps = 10;
    for (int i = 1; i + 1 < argc; i += 2)
        if (std::string(argv[i]) == "--reps") reps = std::stoi(argv[i + 1]);
    if (!gpu_available()) {
        std::puts("no GPU: nothing to measure");
        return 0;
    }
    const Gpu g;
    const cudaStream_t st = g.stream();
    const Case cases[] = {
        {"head forward, vocab 248,320 (Qwen3.5)", false, 512, 248320, 1024},
        {"head backward, vocab 248,320 (Qwen3.5)", true, 512, 248320, 1024},
        {"head forward, vocab 128,256 (Llama-3 8B)", false, 512, 128256, 4096},
        {"head backward, vocab 128,256 (Llama-3 8B)", true, 512, 128256, 4096},
        {"7B up_proj, calibration batch", false, 4096, 11008, 4096},
        {"7B down_proj, calibration batch", false, 4096, 4096, 11008},
    };
    fmt::print(
        "| product | rows × m × n | split (ms) | exact (ms) | split / exact | same bits |\n");
    fmt::print("|---|---|---|---|---|---|\n");
    for (const Case& c : cases) {
        const int64_t in_w = c.backward ? c.m : c.n, out_w = c.backward ? c.n : c.m;
        DeviceBuffer<float> w(c.m * c.n, st), lo(c.m * c.n, st), x(c.rows * in_w, st),
            y(c.rows * out_w, st), y2(c.rows * out_w, st);
        encode::cuda::fill_normal(st, lo.get(), c.m * c.n, 11, 0, 0.02f);
        cortiq::cuda::split_tf32(st, lo.get(), c.m, c.n, c.n, w.get(), lo.get());  // w: TF32 values
        encode::cuda::fill_normal(st, x.get(), c.rows * in_w, 12, 0, 1.f);
        CORTIQ_CHECK(cortiq::cuda::exact_in_tf32(st, w.get(), c.m * c.n), "w is not TF32-exact");
        const auto run = [&](unsigned exact, float* out) {
            if (c.backward)
                cortiq::cuda::gemm_tf32x3(g, false, false, c.rows, c.n, c.m, 1.f, x.get(), c.m,
                                          w.get(), c.n, 0.f, out, c.n, exact);
            else
                cortiq::cuda::gemm_tf32x3(g, false, true, c.rows, c.m, c.n, 1.f, x.get(), c.n,
                                          w.get(), c.n, 0.f, out, c.m, exact);
        };
        const double split = time_ms(st, reps, [&] { run(cortiq::cuda::kNone, y.get()); });
        const double exact = time_ms(st, reps, [&] { run(cortiq::cuda::kExactB, y2.get()); });
        const auto a = cortiq::cuda::download_f(y.get(), c.rows * out_w, st),
                   b = cortiq::cuda::download_f(y2.get(), c.rows * out_w, st);
        const bool same = std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
        fmt::print("| {} | {} × {} × {} | {:.2f} | {:.2f} | {:.2f} | {} |\n", c.what, c.rows, c.m,
                   c.n, split, exact, split / exact, same ? "yes" : "NO");
    }
    return 0;
}
#else
int main() {
    std::puts("built without CUDA: nothing to measure");
    return 0;
}
#endif
