// The packed BLR layer on CUDA against cuBLAS in fp16, side by side in one run
// (prints tables; not a timed unit test):
//   bench_blr_gpu [--shapes 4096x4096,4096x11008,11008x4096] [--bpw 0.55,1.0,2.0]
//                 [--tokens 512] [--layers 32] [--reps 200] [--tiles 1024,64,16]
//                 [--paths 1,2] [--ctx 256] [--rows 1,4,16]
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
// time), against the same layers in fp16; and a whole decode step of that
// model with every op between the linear layers (norms, RoPE, attention over
// --ctx cached positions, SwiGLU, the fp16 head; --ctx 0: not run). Times are
// medians of CUDA events. --rows: only the decode of that many rows at 1.0
// bpw, fp16 cuBLAS against the binary and the fp16 tensor-core decodes.
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
#include "model/cuda/blr_batch.hpp"
#include "model/cuda/blr_linear.hpp"
#include "model/cuda/kernels.hpp"

using namespace cortiq;
using bench::graph_ms;
using bench::time_ms;
namespace ec = cortiq::cuda;
namespace mc = cortiq::model::cuda;

namespace {

constexpr double kPeakBytesPerS = 4.8e12;  // H200 HBM3e

// y (rows × m, of type y_type) = beta·y + x (rows × n, fp16) · Wᵀ with W (m ×
// n, fp16) through cuBLAS, fp32 accumulation.
void fp16_gemm(cublasHandle_t blas, const __half* w, const __half* x, void* y,
               cudaDataType_t y_type, int64_t m, int64_t n, int64_t rows, float beta) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(m),
                              static_cast<int>(rows), static_cast<int>(n), &one, w, CUDA_R_16F,
                              static_cast<int>(n), x, CUDA_R_16F, static_cast<int>(n), &beta, y,
                              y_type, static_cast<int>(m), CUBLAS_COMPUTE_32F,
                              CUBLAS_GEMM_DEFAULT));
}

// y (rows × m, fp16) = x (rows × n, fp16) · Wᵀ.
void fp16_linear(cublasHandle_t blas, const __half* w, const __half* x, __half* y, int64_t m,
                 int64_t n, int64_t rows) {
    fp16_gemm(blas, w, x, y, CUDA_R_16F, m, n, rows, 0.0f);
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

// The decode of several rows (sequences) per layer at 1.0 bpw, µs per call
// in a graph (each call on its own copy of the weights): fp16 cuBLAS, the
// binary tensor cores (Decode::planes, a row of blocks per pair of rows) and
// the fp16 ones (Decode::f16, every row in one pass over the signs).
void rows_table(ec::Gpu& gpu, const std::string& shapes, const std::vector<int64_t>& row_counts,
                int reps, int paths) {
    const cudaStream_t st = gpu.stream();
    fmt::print(
        "\nDecode of several rows, 1.0 bpw, P = {}, µs per call\n"
        "| m×n | rows | fp16 cuBLAS | planes | f16 | fp16 ÷ planes | fp16 ÷ f16 |\n"
        "|---|---|---|---|---|---|---|\n",
        paths);
    mc::PackedScratch planes, halves;
    planes.decode = mc::Decode::planes;
    planes.f16_from_rows = mc::kPlaneDecodeRows + 1;
    halves.decode = mc::Decode::f16;
    const int64_t most = mc::kPlaneDecodeRows;
    for (auto [m, n] : bench::parse_shapes(shapes)) {
        std::vector<ec::DeviceBuffer<__half>> w16s;
        for (int c = copies_for(2.0 * m * n); c > 0; --c) w16s.push_back(fill_half(m * n, st));
        const auto x16 = fill_half(most * n, st);
        auto y16 = fill_half(most * m, st);
        const auto x = fill_float(most * n, st);
        auto y = fill_float(most * m, st);
        const auto pw = bench::random_packed(m, n, 1.0, 3, paths);
        std::vector<mc::DevicePacked> devs;
        for (int c = copies_for(static_cast<double>(pw.m) * pw.n / 8); c > 0; --c)
            devs.push_back(mc::upload_packed(pw, st));
        const int batch = std::max<int>(20, static_cast<int>(std::max(devs.size(), w16s.size())));
        for (int64_t rows : row_counts) {
            const double t16 = graph_ms(st, reps, batch, [&](int i) {
                fp16_linear(gpu.blas(), w16s[i % w16s.size()].get(), x16.get(), y16.get(), m, n,
                            rows);
            });
            auto packed_ms = [&](mc::PackedScratch& w) {
                return graph_ms(st, reps, batch, [&](int i) {
                    mc::packed_linear(gpu.blas(), st, devs[i % devs.size()], w, x.get(), rows,
                                      y.get(), 0.0f, nullptr);
                });
            };
            const double tp = packed_ms(planes), th = packed_ms(halves);
            fmt::print("| {}×{} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f}× | {:.2f}× |\n", m, n,
                       rows, 1e3 * t16, 1e3 * tp, 1e3 * th, t16 / tp, t16 / th);
            std::fflush(stdout);
        }
    }
}

// The linear layers of a Llama-shaped model, packed at 1.0 bpw and in fp16.
struct LlamaWeights {
    static constexpr int64_t H = 4096, F = 11008;
    std::vector<std::pair<int64_t, int64_t>> shapes = {{H, H}, {H, H}, {H, H}, {H, H},
                                                       {F, H}, {F, H}, {H, F}};
    std::vector<mc::DevicePacked> packed;  // q k v o gate up down, layer by layer
    std::vector<ec::DeviceBuffer<__half>> dense;
    int64_t packed_bytes = 0, dense_bytes = 0;

    LlamaWeights(int64_t layers, int paths, cudaStream_t st) {
        for (int64_t l = 0; l < layers; ++l)
            for (auto [m, n] : shapes) {
                packed.push_back(
                    mc::upload_packed(bench::random_packed(m, n, 1.0, 11 + l, paths), st));
                packed_bytes += packed.back().bytes();
                dense.push_back(fill_half(m * n, st));
                dense_bytes += 2 * m * n;
            }
    }
};

// One token through every linear layer of a Llama-shaped model, as a CUDA
// graph: fp16 cuBLAS; the packed layers one by one with the span kernels
// (Decode::spans) and with the row kernels (Decode::rows); and with the row
// kernels, the layers that read the same input (q, k, v; gate, up) grouped
// into one pair of launches, as the runtime runs them.
void whole_model(ec::Gpu& gpu, const LlamaWeights& lw, int reps, int paths) {
    const cudaStream_t st = gpu.stream();
    const auto& packed = lw.packed;
    const auto& dense = lw.dense;
    const auto& shapes = lw.shapes;
    const int64_t layers = static_cast<int64_t>(packed.size() / 7);
    // q, k, v and gate, up write separate outputs (as in a model); o and down one.
    auto x = fill_float(LlamaWeights::F, st);
    std::vector<ec::DVec> ys;
    for (int i = 0; i < 5; ++i) ys.push_back(fill_float(LlamaWeights::F, st));
    const auto x16 = fill_half(LlamaWeights::F, st);
    auto y16 = fill_half(LlamaWeights::F, st);
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
    fmt::print("| fp16 cuBLAS | {:.2f} GB | {:.3f} | {:.0f} | 1.00× |\n", lw.dense_bytes / 1e9, td,
               1e3 / td);
    auto row = [&](const char* name, double t) {
        fmt::print("| {} | {:.2f} GB | {:.3f} | {:.0f} | {:.2f}× |\n", name, lw.packed_bytes / 1e9,
                   t, 1e3 / t, td / t);
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

// y (fp32, m values) = beta·y + W x with W (m × n) and x in fp16.
void fp16_linear_f32(cublasHandle_t blas, const __half* w, const __half* x, float* y, int64_t m,
                     int64_t n, float beta) {
    fp16_gemm(blas, w, x, y, CUDA_R_32F, m, n, 1, beta);
}

// The state of one decode step of the Llama-shaped model: the residual
// stream, the activations between the linear layers, a KV cache of ctx
// positions per layer (the new token's k and v written at the last one) and
// the rotary tables.
struct DecodeState {
    static constexpr int64_t kHeads = 32, kHeadDim = 128, kVocab = 32000;
    int64_t ctx;
    ec::DVec x, xn, q, att, gate, up, ones, cos, sin, logits;
    std::vector<ec::DVec> kc, vc;            // per layer: ctx × 4096
    ec::DeviceBuffer<__half> xh, head, vec;  // fp16 input of a linear layer; the head; g
    ec::DVec inv;                            // rows_to_f16's scale (unused: timing)
    DecodeState(int64_t layers, int64_t ctx_, cudaStream_t st)
        : ctx(ctx_),
          x(fill_float(LlamaWeights::H, st)),
          xn(fill_float(LlamaWeights::H, st)),
          q(fill_float(LlamaWeights::H, st)),
          att(fill_float(LlamaWeights::H, st)),
          gate(fill_float(LlamaWeights::F, st)),
          up(fill_float(LlamaWeights::F, st)),
          ones(fill_float(LlamaWeights::H, st)),
          cos(fill_float(ctx_ * kHeadDim / 2, st)),
          sin(fill_float(ctx_ * kHeadDim / 2, st)),
          logits(fill_float(kVocab, st)),
          xh(fill_half(LlamaWeights::F, st)),
          head(fill_half(kVocab * LlamaWeights::H, st)),
          vec(fill_half(LlamaWeights::F, st)),
          inv(fill_float(1, st)) {
        for (int64_t l = 0; l < layers; ++l) {
            kc.push_back(fill_float(ctx * LlamaWeights::H, st));
            vc.push_back(fill_float(ctx * LlamaWeights::H, st));
        }
    }
    float* k_row(int64_t l) {
        return kc[static_cast<size_t>(l)].get() + (ctx - 1) * LlamaWeights::H;
    }
    float* v_row(int64_t l) {
        return vc[static_cast<size_t>(l)].get() + (ctx - 1) * LlamaWeights::H;
    }
    // What the packed step leaves out in the breakdown rows (the results are
    // then wrong, the time of the rest is right): bits of kSkip*.
    int skip = 0;
    static constexpr int kSkipRope = 1, kSkipAttention = 2;
    // The ops between the linear layers, the same for both weights.
    void norm(const float* in, float* out, cudaStream_t st) {
        mc::rmsnorm(in, 1, LlamaWeights::H, ones.get(), 1e-5f, out, st);
    }
    void rope_attend(int64_t l, cudaStream_t st) {
        const int64_t half = kHeadDim / 2;
        if (!(skip & kSkipRope))
            mc::rope_qk(q.get(), kHeads, k_row(l), kHeads, 1, 1, kHeadDim, half, cos.get(),
                        sin.get(), ctx - 1, nullptr, st);
        if (!(skip & kSkipAttention))
            mc::attention(q.get(), kc[static_cast<size_t>(l)].get(),
                          vc[static_cast<size_t>(l)].get(), att.get(), 1, 1, ctx, kHeads, kHeads,
                          kHeadDim, ctx - 1, 0, st);
    }
    void to_half(const float* in, int64_t n, cudaStream_t st) {
        mc::rows_to_f16(in, n, vec.get(), nullptr, 1, n, xh.get(), n, inv.get(), st);
    }
    // The final norm and the fp16 head (the same in both models).
    void finish(cublasHandle_t blas, cudaStream_t st) {
        norm(x.get(), xn.get(), st);
        to_half(xn.get(), LlamaWeights::H, st);
        fp16_linear_f32(blas, head.get(), xh.get(), logits.get(), kVocab, LlamaWeights::H, 0.0f);
    }
};

// A whole decode step of the model, every op: per layer RMSNorm, q/k/v,
// RoPE, attention over ctx positions, o into the residual, RMSNorm,
// gate/up, SwiGLU, down into the residual; then the final norm and the
// vocabulary head (fp16 in both). The fp16 model turns each linear layer's
// input into fp16 (rows_to_f16, one launch per input) for cuBLAS; the packed
// model reads float inputs. Both share the runtime's kernels for the rest.
void decode_step(ec::Gpu& gpu, const LlamaWeights& lw, int64_t ctx, int reps) {
    const cudaStream_t st = gpu.stream();
    const auto& p = lw.packed;
    const auto& d = lw.dense;
    const int64_t layers = static_cast<int64_t>(p.size() / 7), H = LlamaWeights::H,
                  F = LlamaWeights::F;
    DecodeState s(layers, ctx, st);
    mc::PackedScratch ws;
    ws.decode = mc::Decode::planes;
    // convert = false leaves the fp16 conversions out (the linear layers then
    // read stale inputs): a floor for an fp16 runtime that fuses them away.
    bool convert = true;
    auto to_half = [&](const float* in, int64_t n) {
        if (convert) s.to_half(in, n, st);
    };
    auto run_dense = [&] {
        for (int64_t l = 0; l < layers; ++l) {
            const size_t b = static_cast<size_t>(7 * l);
            s.norm(s.x.get(), s.xn.get(), st);
            to_half(s.xn.get(), H);
            fp16_linear_f32(gpu.blas(), d[b].get(), s.xh.get(), s.q.get(), H, H, 0.0f);
            fp16_linear_f32(gpu.blas(), d[b + 1].get(), s.xh.get(), s.k_row(l), H, H, 0.0f);
            fp16_linear_f32(gpu.blas(), d[b + 2].get(), s.xh.get(), s.v_row(l), H, H, 0.0f);
            s.rope_attend(l, st);
            to_half(s.att.get(), H);
            fp16_linear_f32(gpu.blas(), d[b + 3].get(), s.xh.get(), s.x.get(), H, H, 1.0f);
            s.norm(s.x.get(), s.xn.get(), st);
            to_half(s.xn.get(), H);
            fp16_linear_f32(gpu.blas(), d[b + 4].get(), s.xh.get(), s.gate.get(), F, H, 0.0f);
            fp16_linear_f32(gpu.blas(), d[b + 5].get(), s.xh.get(), s.up.get(), F, H, 0.0f);
            mc::swiglu(s.gate.get(), s.up.get(), F, st);
            to_half(s.gate.get(), F);
            fp16_linear_f32(gpu.blas(), d[b + 6].get(), s.xh.get(), s.x.get(), H, F, 1.0f);
        }
        s.finish(gpu.blas(), st);
    };
    // As the runtime runs it: the norms inside the planes launches of q/k/v
    // and gate/up (packed_linear_group_normed), SwiGLU inside down_proj's
    // (packed_linear_swiglu); norm_launch: by launches of their own.
    bool norm_launch = false;
    auto normed_group = [&](const mc::PackedOut* outs, int count) {
        if (norm_launch) {
            s.norm(s.x.get(), s.xn.get(), st);
            mc::packed_linear_group(gpu.blas(), st, outs, count, ws, s.xn.get(), 1);
        } else {
            mc::packed_linear_group_normed(gpu.blas(), st, outs, count, ws, s.x.get(),
                                           {s.ones.get(), 1e-5f}, 1);
        }
    };
    auto run_packed = [&] {
        for (int64_t l = 0; l < layers; ++l) {
            const size_t b = static_cast<size_t>(7 * l);
            const mc::PackedOut qkv[3] = {
                {&p[b], s.q.get()}, {&p[b + 1], s.k_row(l)}, {&p[b + 2], s.v_row(l)}};
            normed_group(qkv, 3);
            s.rope_attend(l, st);
            mc::packed_linear(gpu.blas(), st, p[b + 3], ws, s.att.get(), 1, s.x.get(), 1.0f,
                              nullptr);
            const mc::PackedOut gate_up[2] = {{&p[b + 4], s.gate.get()}, {&p[b + 5], s.up.get()}};
            normed_group(gate_up, 2);
            if (norm_launch) {
                mc::swiglu(s.gate.get(), s.up.get(), F, st);
                mc::packed_linear(gpu.blas(), st, p[b + 6], ws, s.gate.get(), 1, s.x.get(), 1.0f,
                                  nullptr);
            } else {
                mc::packed_linear_swiglu(gpu.blas(), st, p[b + 6], ws, s.gate.get(), s.up.get(), 1,
                                         s.x.get(), 1.0f, nullptr);
            }
        }
        s.finish(gpu.blas(), st);
    };
    const double td = graph_ms(st, reps, 1, [&](int) { run_dense(); });
    convert = false;
    const double td_floor = graph_ms(st, reps, 1, [&](int) { run_dense(); });
    const double tp = graph_ms(st, reps, 1, [&](int) { run_packed(); });
    norm_launch = true;
    const double tp_norms = graph_ms(st, reps, 1, [&](int) { run_packed(); });
    norm_launch = false;
    // the packed step with one kind of op left out, for where its time goes
    std::vector<std::pair<const char*, double>> without;
    for (auto [name, bit] :
         {std::pair{"RoPE", DecodeState::kSkipRope}, {"attention", DecodeState::kSkipAttention}}) {
        s.skip = bit;
        without.emplace_back(name, graph_ms(st, reps, 1, [&](int) { run_packed(); }));
    }
    s.skip = 0;
    const int64_t head_bytes = 2 * DecodeState::kVocab * H;
    fmt::print(
        "\nWhole-model decode step, every op ({} layers, 4096/11008, 32 heads, context {}, "
        "fp16 head of 32,000 in both; CUDA graph):\n",
        layers, ctx);
    fmt::print(
        "| model | linear weights | ms/token | tokens/s | speed-up |\n|---|---|---|---|---|\n");
    fmt::print("| fp16 cuBLAS | {:.2f} GB | {:.3f} | {:.0f} | 1.00× |\n", lw.dense_bytes / 1e9, td,
               1e3 / td);
    fmt::print(
        "| fp16 cuBLAS, its inputs' conversions left out | {:.2f} GB | {:.3f} | {:.0f} | "
        "{:.2f}× |\n",
        lw.dense_bytes / 1e9, td_floor, 1e3 / td_floor, td / td_floor);
    fmt::print(
        "| packed 1.0 bpw, planes, grouped | {:.2f} GB | {:.3f} | {:.0f} | {:.2f}× "
        "({:.2f}× the floor) |\n",
        lw.packed_bytes / 1e9, tp, 1e3 / tp, td / tp, td_floor / tp);
    fmt::print("(in both: the fp16 head, {:.2f} GB; the float32 KV cache, {:.2f} GB)\n",
               head_bytes / 1e9, 2.0 * 4 * static_cast<double>(layers * ctx * H) / 1e9);
    fmt::print("packed step with the norms and SwiGLU by launches of their own: {:.3f} ms\n",
               tp_norms);
    fmt::print("packed step without each kind of op (ms, saving):");
    for (auto [name, t] : without) fmt::print(" {} {:.3f} ({:.3f})", name, t, tp - t);
    fmt::print("\n");
}

}  // namespace

int main(int argc, char** argv) try {
    std::string shapes = "4096x4096,4096x11008,11008x4096", bpw = "0.55,1.0,2.0";
    std::string tile_list = "1024,64,16", path_list = "1,2", rows_list;
    int64_t tokens = 512, layers = 32, ctx = 256;
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
        else if (k == "--ctx")
            ctx = std::stoll(v);
        else if (k == "--tiles")
            tile_list = v;
        else if (k == "--paths")
            path_list = v;
        else if (k == "--reps")
            reps = std::stoi(v);
        else if (k == "--rows")
            rows_list = v;
        else
            CORTIQ_FAIL("unknown flag {}", k);
    }
    const auto bpws = bench::parse_list<double>(bpw);
    const auto tiles = bench::parse_list<int64_t>(tile_list);
    const auto path_counts = bench::parse_list<int>(path_list);
    ec::Gpu gpu;
    if (!rows_list.empty()) {  // the several-row decode table alone
        for (int paths : path_counts)
            rows_table(gpu, shapes, bench::parse_list<int64_t>(rows_list), reps, paths);
        return 0;
    }
    layer_table(gpu, shapes, bpws, path_counts, tokens, reps, tiles);
    if (layers > 0)
        for (int paths : path_counts) {
            const LlamaWeights lw(layers, paths, gpu.stream());
            whole_model(gpu, lw, reps / 4, paths);
            if (ctx > 0) decode_step(gpu, lw, ctx, reps / 4);
        }
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
