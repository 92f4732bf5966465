// The packed BLR layer on the CPU against float32 OpenBLAS, side by side in
// one run (prints a table; not a timed unit test):
//   bench_blr_cpu [--shapes 4096x4096,4096x11008,11008x4096] [--bpw 0.55,1.0,2.0]
//                 [--tokens 512] [--threads 0] [--reps 20]
// Decode: one token, y = W x. sgemv reads 4·m·n bytes; the packed layer reads
// its bits (r·(m+n)/8 bytes) and f16 scales. Prefill: `--tokens` rows at once,
// sgemm against the packed layer's tiles + sgemm. Also each SIMD variant of
// the one-vector kernels and a lookup-table variant of the S_Vᵀ product (16
// signed sums of every 4 inputs, as T-MAC and bitnet.cpp do), to choose.
#include <cblas.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_common.hpp"
#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign_kernels.hpp"
#include "core/error.hpp"
#include "core/half.hpp"
#include "core/parallel.hpp"
#include "core/rng.hpp"
#include "model/blr_linear.hpp"

using namespace cortiq;

namespace {

using Clock = std::chrono::steady_clock;

// Median seconds of `reps` calls after one warm-up.
template <class F>
double time_median(int reps, F&& f) {
    f();
    std::vector<double> t;
    for (int i = 0; i < reps; ++i) {
        const auto t0 = Clock::now();
        f();
        t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
    }
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

// t[k] = Σ_j s(k,j) x[j] through a table of the 16 signed sums of each group
// of 4 inputs: one lookup and one add per 4 weights.
void lut_dot(const blr::SignRows& s, const float* x, float* out, std::vector<float>& table) {
    const int64_t groups = (s.cols + 3) / 4;
    table.assign(static_cast<size_t>(16 * groups), 0.0f);
    for (int64_t q = 0; q < groups; ++q)
        for (int v = 0; v < 16; ++v) {
            float acc = 0;
            for (int b = 0; b < 4 && 4 * q + b < s.cols; ++b)
                acc += (v >> b) & 1 ? -x[4 * q + b] : x[4 * q + b];
            table[static_cast<size_t>(16 * q + v)] = acc;
        }
    parallel_for(
        0, s.rows,
        [&](int64_t k) {
            const uint64_t base = s.first + static_cast<uint64_t>(k) * s.stride;
            float acc[4] = {};
            for (int64_t q = 0; q < groups; ++q) {
                const uint64_t b = base + 4 * static_cast<uint64_t>(q);
                const uint64_t w = s.words[b / 64] >> (b % 64);  // rows here are 4-bit aligned
                acc[q & 3] += table[static_cast<size_t>(16 * q + (w & 15))];
            }
            out[k] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
        },
        64);
}

std::vector<double> parse_list(const std::string& s) {
    std::vector<double> out;
    std::stringstream ss(s);
    for (std::string tok; std::getline(ss, tok, ',');) out.push_back(std::stod(tok));
    return out;
}

}  // namespace

int main(int argc, char** argv) try {
    std::string shapes = "4096x4096,4096x11008,11008x4096", bpws = "0.55,1.0,2.0";
    int64_t tokens = 512;
    int threads = 0, reps = 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--shapes")
            shapes = v;
        else if (k == "--bpw")
            bpws = v;
        else if (k == "--tokens")
            tokens = std::stoll(v);
        else if (k == "--threads")
            threads = std::stoi(v);
        else if (k == "--reps")
            reps = std::stoi(v);
        else
            CORTIQ_FAIL("unknown flag {}", k);
    }
    set_num_threads(threads);
    fmt::print("bench_blr_cpu: {} threads, one-vector kernels: {} (best of this CPU)\n\n",
               num_threads(), blr::isa_name(blr::best_sign_isa()));
    fmt::print(
        "| m×n | bpw | rank | sgemv ms | packed ms | speed-up | sgemv GB/s | packed GB/s "
        "| portable ms | avx2 ms | lut ms (S_Vᵀ only) | masked ms (S_Vᵀ only) | "
        "sgemm {} ms | packed {} ms | ratio |\n",
        tokens, tokens);
    fmt::print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    Rng rng(1);
    for (auto [m, n] : bench::parse_shapes(shapes)) {
        MatF w(m, n);
        for (auto& v : w.vec()) v = static_cast<float>(rng.normal());
        std::vector<float> x(static_cast<size_t>(n)), y(static_cast<size_t>(m));
        for (auto& v : x) v = static_cast<float>(rng.normal());
        const double t_gemv = time_median(reps, [&] {
            cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(m), static_cast<int>(n), 1.0f,
                        w.data(), static_cast<int>(n), x.data(), 1, 0.0f, y.data(), 1);
        });
        MatF xb(tokens, n), yb(tokens, m);
        for (auto& v : xb.vec()) v = static_cast<float>(rng.normal());
        const double t_gemm = time_median(std::max(3, reps / 5), [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(tokens),
                        static_cast<int>(m), static_cast<int>(n), 1.0f, xb.data(),
                        static_cast<int>(n), w.data(), static_cast<int>(n), 0.0f, yb.data(),
                        static_cast<int>(m));
        });
        for (double bpw : parse_list(bpws)) {
            const model::BlrLinear lin(bench::random_packed(m, n, bpw, 7));
            const auto& pw = lin.packed();
            const double t_packed = time_median(reps, [&] { lin.apply(x.data(), 1, y.data()); });
            const double t_batch = time_median(std::max(3, reps / 5),
                                               [&] { lin.apply(xb.data(), tokens, yb.data()); });
            auto with_isa = [&](blr::SignIsa isa) {
                if (static_cast<int>(isa) > static_cast<int>(blr::best_sign_isa())) return -1.0;
                const auto keep = blr::set_sign_isa(isa);
                const double t = time_median(reps, [&] { lin.apply(x.data(), 1, y.data()); });
                blr::set_sign_isa(keep);
                return t;
            };
            const double t_portable = with_isa(blr::SignIsa::portable);
            const double t_avx2 = with_isa(blr::SignIsa::avx2);
            std::vector<float> t(static_cast<size_t>(pw.r)), table;
            const double t_lut =
                time_median(reps, [&] { lut_dot(pw.svt(0), x.data(), t.data(), table); });
            const double t_masked =
                time_median(reps, [&] { blr::sign_dot(pw.svt(0), x.data(), t.data()); });
            const double gemv_bytes = 4.0 * m * n,
                         packed_bytes = static_cast<double>(pw.resident_bytes());
            fmt::print(
                "| {}×{} | {:.2f} | {} | {:.3f} | {:.3f} | {:.2f}× | {:.1f} | {:.1f} | {:.3f} | "
                "{} | {:.3f} | {:.3f} | {:.1f} | {:.1f} | {:.2f}× |\n",
                m, n, bpw, pw.r, 1e3 * t_gemv, 1e3 * t_packed, t_gemv / t_packed,
                gemv_bytes / t_gemv / 1e9, packed_bytes / t_packed / 1e9, 1e3 * t_portable,
                t_avx2 < 0 ? std::string("-") : fmt::format("{:.3f}", 1e3 * t_avx2), 1e3 * t_lut,
                1e3 * t_masked, 1e3 * t_gemm, 1e3 * t_batch, t_gemm / t_batch);
            std::fflush(stdout);
        }
    }
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_blr_cpu: {}\n", e.what());
    return 1;
}
