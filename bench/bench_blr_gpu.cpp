// The packed BLR layer on CUDA against cuBLAS in fp16, side by side in one run
// (prints tables; not a timed unit test):
//   bench_blr_gpu [--shapes 4096x4096,4096x11008,11008x4096] [--bpw 0.55,1.0,2.0]
//                 [--tokens 512] [--layers 32] [--reps 200] [--tiles 1024,64,16]
//                 [--paths 1,2]
// Decode: one token, y = W x; cuBLAS reads 2·m·n bytes of fp16 weights, the
// packed layer its bits and f16 scales. Prefill: --tokens rows, cuBLAS fp16
// tensor-core GEMM against the packed layer's batch path, side by side: the
// earlier TF32 tiles (BatchMath::tf32), the fp16 tiles at the default tile
// budget (with its scratch bytes), and the fp16 tiles at other budgets
// (--tiles, MiB: all of S at once, or L2-sized chunks); decode times are
// per call of a batch captured in a CUDA graph, each call on its own copy of
// the weights (≥ 256 MB in all, past the L2), prefill times per call. Whole model: the
// 224 linear layers of a 32-layer 4096/11008 Llama at 1.0 bpw, one token
// through all of them, captured in a CUDA graph (kernel time, not launch
// time), against the same layers in fp16. Times are medians of CUDA events.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"

#ifdef CORTIQ_HAVE_CUDA
#include <cuda_fp16.h>

#include "bench_common.hpp"
#include "bench_gpu_timing.hpp"
#include "core/cuda/device.hpp"
#include "model/cuda/blr_linear.hpp"

using namespace cortiq;
using bench::graph_ms;
using bench::time_ms;
namespace ec = cortiq::cuda;
namespace mc = cortiq::model::cuda;

namespace {

constexpr double kPeakBytesPerS = 4.8e12;  // H200 HBM3e

// y (rows × m, fp16) = x (rows × n, fp16) · Wᵀ with W (m × n, fp16) through cuBLAS.
void fp16_linear(cublasHandle_t blas, const __half* w, const __half* x, __half* y, int64_t m,
                 int64_t n, int64_t rows) {
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                              static_cast<int>(rows), static_cast<int>(n), &one, w, CUDA_R_16F,
                              static_cast<int>(n), x, CUDA_R_16F, static_cast<int>(n), &zero, y,
                              CUDA_R_16F, static_cast<int>(m), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

ec::DeviceBuffer<__half> fill_half(int64_t n, cudaStream_t st) {
    ec::DeviceBuffer<__half> b(n, st);
    CUDA_CHECK(cudaMemsetAsync(b.get(), 0x2c, sizeof(__half) * static_cast<size_t>(n), st));
    return b;
}
ec::DVec fill_float(int64_t n, cudaStream_t st) {
    ec::DVec b(n, st);
    CUDA_CHECK(cudaMemsetAsync(b.get(), 0x3c, sizeof(float) * static_cast<size_t>(n), st));
    return b;
}

// Copies of a weight of `bytes` that a decode cycles through so that the
// batch reads at least 256 MB, 5× the H200's 50 MB L2: each call reads its
// weights from HBM, as in a model, not from the cache the last call filled.
int copies_for(double bytes) {
    return static_cast<int>(std::clamp(std::ceil(256e6 / bytes), 1.0, 64.0));
}

// Median µs of one prefill of `tokens` rows through the packed layer with options o.
double prefill_us(ec::Gpu& gpu, const mc::DevicePacked& dev, const mc::BatchOptions& o,
                  const float* x, float* y, int64_t tokens, int reps, int64_t* scratch_bytes) {
    mc::PackedScratch ws;
    ws.batch = o;
    const cudaStream_t st = gpu.stream();
    const double ms = time_ms(st, std::max(5, reps / 10), [&] {
        mc::packed_linear(gpu.blas(), st, dev, ws, x, tokens, y, 0.0f, nullptr);
    });
    if (scratch_bytes) *scratch_bytes = ws.bytes();
    return 1e3 * ms;
}

// The prefill row of one shape and budget: fp16 cuBLAS, TF32 tiles, fp16
// tiles at the default and at each of `tiles` MiB.
std::string prefill_row(ec::Gpu& gpu, const mc::DevicePacked& dev, double bpw, double t16_us,
                        const std::vector<int64_t>& tiles, const float* x, float* y, int64_t tokens,
                        int reps) {
    mc::BatchOptions old_o, new_o;
    old_o.math = mc::BatchMath::tf32;
    int64_t scratch = 0;
    const double t_old = prefill_us(gpu, dev, old_o, x, y, tokens, reps, nullptr);
    const double t_new = prefill_us(gpu, dev, new_o, x, y, tokens, reps, &scratch);
    std::string row = fmt::format(
        "| {}×{} | {:.2f} | {} | {:.0f} | {:.0f} | {:.0f} | {:.2f}× | {:.2f}× | {:.2f}× | {:.1f} |",
        dev.m, dev.n, bpw, dev.r, t16_us, t_old, t_new, t_old / t_new, t_old / t16_us,
        t_new / t16_us, scratch / 1048576.0);
    for (int64_t mb : tiles) {
        mc::BatchOptions o;
        o.tile_bytes = mb << 20;
        row += fmt::format(" {:.0f} |", prefill_us(gpu, dev, o, x, y, tokens, reps, nullptr));
    }
    return row + "\n";
}

void layer_table(ec::Gpu& gpu, const std::string& shapes, const std::vector<double>& bpws,
                 const std::vector<int>& path_counts, int64_t tokens, int reps,
                 const std::vector<int64_t>& tiles) {
    const cudaStream_t st = gpu.stream();
    fmt::print(
        "| m×n | bpw | P | rank | true bpw | fp16 decode µs | packed decode µs (planes, default) | "
        "speed-up | rows µs | spans µs | planes vs rows | fp16 GB/s (% peak) | packed GB/s (% "
        "peak) | "
        "fp16 {} tok µs | packed {} tok µs | ratio |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        tokens, tokens);
    mc::PackedScratch ws, ws_rows, ws_spans;
    ws.decode = mc::Decode::planes;
    ws_rows.decode = mc::Decode::rows;
    ws_spans.decode = mc::Decode::spans;
    std::string prefill;
    for (auto [m, n] : bench::parse_shapes(shapes)) {
        std::vector<ec::DeviceBuffer<__half>> w16s;
        for (int c = copies_for(2.0 * m * n); c > 0; --c) w16s.push_back(fill_half(m * n, st));
        const auto& w16 = w16s[0];
        const auto x16 = fill_half(tokens * n, st);
        auto y16 = fill_half(tokens * m, st);
        const int batch16 = std::max<int>(20, static_cast<int>(w16s.size()));
        const double t16 = graph_ms(st, reps, batch16, [&](int i) {
            fp16_linear(gpu.blas(), w16s[i % w16s.size()].get(), x16.get(), y16.get(), m, n, 1);
        });
        const double t16b = time_ms(st, std::max(5, reps / 10), [&] {
            fp16_linear(gpu.blas(), w16.get(), x16.get(), y16.get(), m, n, tokens);
        });
        const auto x = fill_float(tokens * n, st);
        auto y = fill_float(tokens * m, st);
        for (double bpw : bpws)
            for (int paths : path_counts) {
                const auto pw = bench::random_packed(m, n, bpw, 3, paths);
                std::vector<mc::DevicePacked> devs;
                devs.push_back(mc::upload_packed(pw, st));
                for (int c = copies_for(devs[0].bytes()); c > 1; --c)
                    devs.push_back(mc::upload_packed(pw, st));
                const auto& dev = devs[0];
                const int batch = std::max<int>(20, static_cast<int>(devs.size()));
                auto decode_ms = [&](mc::PackedScratch& w) {
                    return graph_ms(st, reps, batch, [&](int i) {
                        mc::packed_linear(gpu.blas(), st, devs[i % devs.size()], w, x.get(), 1,
                                          y.get(), 0.0f, nullptr);
                    });
                };
                const double tp = decode_ms(ws), tr = decode_ms(ws_rows), ts = decode_ms(ws_spans);
                const double tpb = time_ms(st, std::max(5, reps / 10), [&] {
                    mc::packed_linear(gpu.blas(), st, dev, ws, x.get(), tokens, y.get(), 0.0f,
                                      nullptr);
                });
                if (paths == 1)
                    prefill += prefill_row(gpu, dev, bpw, 1e3 * t16b, tiles, x.get(), y.get(),
                                           tokens, reps);
                const double payload = static_cast<double>(blr::payload_bytes(m, n, pw.r, paths));
                const double b16 = 2.0 * m * n / (t16 * 1e-3), bp = dev.bytes() / (tp * 1e-3);
                fmt::print(
                    "| {}×{} | {:.2f} | {} | {} | {:.3f} | {:.1f} | {:.1f} | {:.2f}× | {:.1f} | "
                    "{:.1f} | {:.2f}× | {:.0f} ({:.0f} %) | {:.0f} ({:.0f} %) | {:.0f} | {:.0f} | "
                    "{:.2f}× |\n",
                    m, n, bpw, paths, pw.r, 8 * payload / (m * n), 1e3 * t16, 1e3 * tp, t16 / tp,
                    1e3 * tr, 1e3 * ts, tr / tp, b16 / 1e9, 100 * b16 / kPeakBytesPerS, bp / 1e9,
                    100 * bp / kPeakBytesPerS, 1e3 * t16b, 1e3 * tpb, t16b / tpb);
                std::fflush(stdout);
            }
    }
    fmt::print(
        "\nPrefill, {} tokens, µs (medians): fp16 cuBLAS against the packed layer's TF32 tiles "
        "(old) and fp16 tiles (new, default tile budget {} MiB; scratch: its batch buffers)\n",
        tokens, mc::BatchOptions{}.tile_bytes >> 20);
    fmt::print(
        "| m×n | bpw | rank | fp16 | old TF32 | new fp16 | new vs old | old / fp16 | "
        "new / fp16 | scratch MiB |");
    for (int64_t mb : tiles) fmt::print(" new, tile {} MiB |", mb);
    fmt::print("\n|---|---|---|---|---|---|---|---|---|---|");
    for (size_t i = 0; i < tiles.size(); ++i) fmt::print("---|");
    fmt::print("\n{}", prefill);
}

// One token through every linear layer of a Llama-shaped model, as a CUDA
// graph: fp16 cuBLAS; the packed layers one by one with the span kernels
// (Decode::spans) and with the row kernels (Decode::rows); and with the row
// kernels, the layers that read the same input (q, k, v; gate, up) grouped
// into one pair of launches, as the runtime runs them.
void whole_model(ec::Gpu& gpu, int64_t layers, int reps, int paths) {
    const cudaStream_t st = gpu.stream();
    const int64_t H = 4096, F = 11008;
    const std::vector<std::pair<int64_t, int64_t>> shapes = {{H, H}, {H, H}, {H, H}, {H, H},
                                                             {F, H}, {F, H}, {H, F}};
    std::vector<mc::DevicePacked> packed;
    std::vector<ec::DeviceBuffer<__half>> dense;
    int64_t packed_bytes = 0, dense_bytes = 0;
    for (int64_t l = 0; l < layers; ++l)
        for (auto [m, n] : shapes) {
            packed.push_back(mc::upload_packed(bench::random_packed(m, n, 1.0, 11 + l, paths), st));
            packed_bytes += packed.back().bytes();
            dense.push_back(fill_half(m * n, st));
            dense_bytes += 2 * m * n;
        }
    // q, k, v and gate, up write separate outputs (as in a model); o and down one.
    auto x = fill_float(F, st);
    std::vector<ec::DVec> ys;
    for (int i = 0; i < 5; ++i) ys.push_back(fill_float(F, st));
    const auto x16 = fill_half(F, st);
    auto y16 = fill_half(F, st);
    mc::PackedScratch ws, ws_rows, ws_spans;
    ws.decode = mc::Decode::planes;
    ws_rows.decode = mc::Decode::rows;
    ws_spans.decode = mc::Decode::spans;
    constexpr int kOut[7] = {0, 1, 2, 3, 3, 4, 3};  // q k v o gate up down
    auto one_by_one = [&](mc::PackedScratch& w) {
        for (size_t i = 0; i < packed.size(); ++i)
            mc::packed_linear(gpu.blas(), st, packed[i], w, x.get(), 1, ys[kOut[i % 7]].get(), 0.0f,
                              nullptr);
    };
    auto grouped = [&](mc::PackedScratch& ws) {
        for (size_t l = 0; l < packed.size(); l += 7) {
            const mc::PackedOut qkv[3] = {{&packed[l], ys[0].get()},
                                          {&packed[l + 1], ys[1].get()},
                                          {&packed[l + 2], ys[2].get()}};
            mc::packed_linear_group(gpu.blas(), st, qkv, 3, ws, x.get(), 1);
            mc::packed_linear(gpu.blas(), st, packed[l + 3], ws, x.get(), 1, ys[3].get(), 0.0f,
                              nullptr);
            const mc::PackedOut gate_up[2] = {{&packed[l + 4], ys[3].get()},
                                              {&packed[l + 5], ys[4].get()}};
            mc::packed_linear_group(gpu.blas(), st, gate_up, 2, ws, x.get(), 1);
            mc::packed_linear(gpu.blas(), st, packed[l + 6], ws, x.get(), 1, ys[3].get(), 0.0f,
                              nullptr);
        }
    };
    auto run_dense = [&] {
        for (size_t i = 0; i < dense.size(); ++i) {
            const auto [m, n] = shapes[i % shapes.size()];
            fp16_linear(gpu.blas(), dense[i].get(), x16.get(), y16.get(), m, n, 1);
        }
    };
    const double td = graph_ms(st, reps, 1, [&](int) { run_dense(); });
    const double ts = graph_ms(st, reps, 1, [&](int) { one_by_one(ws_spans); });
    const double tr = graph_ms(st, reps, 1, [&](int) { one_by_one(ws_rows); });
    const double tg = graph_ms(st, reps, 1, [&](int) { grouped(ws_rows); });
    const double tp = graph_ms(st, reps, 1, [&](int) { one_by_one(ws); });
    const double tpg = graph_ms(st, reps, 1, [&](int) { grouped(ws); });
    const double tde = time_ms(st, std::max(3, reps / 10), run_dense);
    const double tge = time_ms(st, std::max(3, reps / 10), [&] { grouped(ws); });
    fmt::print(
        "\nWhole-model decode, linear layers only ({} layers × 7, 4096/11008, 1.0 bpw, P = {}):\n",
        layers, paths);
    fmt::print("| weights | bytes | ms/token (graph) | tokens/s (graph) | speed-up |\n");
    fmt::print("|---|---|---|---|---|\n");
    fmt::print("| fp16 cuBLAS | {:.2f} GB | {:.3f} | {:.0f} | 1.00× |\n", dense_bytes / 1e9, td,
               1e3 / td);
    auto row = [&](const char* name, double t) {
        fmt::print("| {} | {:.2f} GB | {:.3f} | {:.0f} | {:.2f}× |\n", name, packed_bytes / 1e9, t,
                   1e3 / t, td / t);
    };
    row("packed, span kernels, layer by layer", ts);
    row("packed, row kernels, layer by layer", tr);
    row("packed, row kernels, q/k/v and gate/up grouped", tg);
    row("packed, planes (binary tensor cores), layer by layer", tp);
    row("packed, planes, q/k/v and gate/up grouped (the runtime)", tpg);
    fmt::print(
        "launched one by one (no graph): fp16 {:.3f} ms, packed grouped {:.3f} ms ({:.2f}×)\n", tde,
        tge, tde / tge);
}

}  // namespace

int main(int argc, char** argv) try {
    std::string shapes = "4096x4096,4096x11008,11008x4096", bpw = "0.55,1.0,2.0";
    std::string tile_list = "1024,64,16", path_list = "1,2";
    int64_t tokens = 512, layers = 32;
    int reps = 200;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--shapes")
            shapes = v;
        else if (k == "--bpw")
            bpw = v;
        else if (k == "--tokens")
            tokens = std::stoll(v);
        else if (k == "--layers")
            layers = std::stoll(v);
        else if (k == "--tiles")
            tile_list = v;
        else if (k == "--paths")
            path_list = v;
        else if (k == "--reps")
            reps = std::stoi(v);
        else
            CORTIQ_FAIL("unknown flag {}", k);
    }
    std::vector<double> bpws;
    std::stringstream ss(bpw);
    for (std::string t; std::getline(ss, t, ',');) bpws.push_back(std::stod(t));
    std::vector<int64_t> tiles;
    std::stringstream ts(tile_list);
    for (std::string t; std::getline(ts, t, ',');) tiles.push_back(std::stoll(t));
    std::vector<int> path_counts;
    std::stringstream ps(path_list);
    for (std::string t; std::getline(ps, t, ',');) path_counts.push_back(std::stoi(t));
    ec::Gpu gpu;
    layer_table(gpu, shapes, bpws, path_counts, tokens, reps, tiles);
    if (layers > 0)
        for (int paths : path_counts) whole_model(gpu, layers, reps / 4, paths);
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_blr_gpu: {}\n", e.what());
    return 1;
}
#else
int main() {
    fmt::print("bench_blr_gpu: this build has no CUDA\n");
    return 0;
}
#endif
