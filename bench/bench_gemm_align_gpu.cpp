// Figures for docs/encoder_speed.md (prints a table; not a timed unit test): do the GPU
// encoder's float32 products lose cuBLAS's fast kernels when the rank r makes
// rows start off a 16-byte boundary (r = 2966: 2966 × 4 bytes)?
//   bench_gemm_align_gpu [--ranks 2966,1475] [--rows 15104] [--reps 20]
//                        [--solver 11008]
// For each r, side by side in one run: the two products of a Newton–Schulz
// step (XᵀX and X A, r×r×r) and ITQ's two products (X R and Xᵀ B, rows×r),
// in TF32 and FP32, at r itself, at r with the leading dimension padded to a
// multiple of 32, and at r rounded up to a multiple of 32. Milliseconds per
// product (median of the repetitions, CUDA events) and TFLOP/s. --solver N:
// the parts of ALS's g solve on an N × N SPD system (build by syrkx or gemm
// at each rank, Cholesky, the preconditioner's triangular solves, symv, gemv,
// and a dot read back to the host), in milliseconds.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#ifdef CORTIQ_HAVE_CUDA
#include "core/gpu.hpp"
#include "encode/cuda/ops.hpp"

using namespace cortiq;
using cortiq::cuda::DeviceBuffer;
using cortiq::cuda::Gpu;
namespace cu = cortiq::encode::cuda;

namespace {

std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> out;
    std::stringstream ss(s);
    for (std::string tok; std::getline(ss, tok, ',');) out.push_back(std::stoll(tok));
    return out;
}

int64_t round_up(int64_t v, int64_t q) {
    return (v + q - 1) / q * q;
}

// Median milliseconds of `reps` calls of f on g's stream.
template <class F>
double time_ms(const Gpu& g, int reps, F&& f) {
    f();  // warm-up (cuBLAS picks its kernel)
    g.sync();
    std::vector<float> ms;
    cudaEvent_t a, b;
    CUDA_CHECK(cudaEventCreate(&a));
    CUDA_CHECK(cudaEventCreate(&b));
    for (int i = 0; i < reps; ++i) {
        CUDA_CHECK(cudaEventRecord(a, g.stream()));
        f();
        CUDA_CHECK(cudaEventRecord(b, g.stream()));
        CUDA_CHECK(cudaEventSynchronize(b));
        float t = 0;
        CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
    }
    CUDA_CHECK(cudaEventDestroy(a));
    CUDA_CHECK(cudaEventDestroy(b));
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

struct Case {
    const char* what;
    bool ta;
    int64_t m, n, k;  // C(m×n) = op(A) op(B), inner k
};

void solver_parts(const Gpu& g, int64_t n, const std::vector<int64_t>& ranks, int reps) {
    const cudaStream_t st = g.stream();
    fmt::print("| g solve part (n = {}) | ms |\n|---|---|\n", n);
    DeviceBuffer<float> sys(n * n, st), work(n * n, st), x(n, st), y(n, st);
    for (const int64_t r : ranks) {
        DeviceBuffer<float> a(n * r, st), b(n * r, st);
        cu::fill_normal(st, a.get(), n * r, 3, 0, 1.f);
        cu::fill_normal(st, b.get(), n * r, 4, 0, 1.f);
        fmt::print("| syrkx, k = {} | {:.3f} |\n", r, time_ms(g, reps, [&] {
                       cu::syrkx_solver(g, n, r, a.get(), b.get(), sys.get());
                   }));
        fmt::print("| gemm FP32, k = {} | {:.3f} |\n", r, time_ms(g, reps, [&] {
                       cu::gemm(g, false, true, n, n, r, 1.f, a.get(), r, b.get(), r, 0.f,
                                sys.get(), n, cu::Prec::fp32);
                   }));
        fmt::print("| gemm 3xTF32 (B exact), k = {} | {:.3f} |\n", r, time_ms(g, reps, [&] {
                       cu::gemm(g, false, true, n, n, r, 1.f, a.get(), r, b.get(), r, 0.f,
                                sys.get(), n, cu::Prec::tf32x3, cu::kExactB);
                   }));
    }
    // an SPD system: A Aᵀ + n I from a random n × n A
    cu::fill_normal(st, work.get(), n * n, 5, 0, 1.f);
    cu::gemm(g, false, true, n, n, n, 1.f, work.get(), n, work.get(), n, 0.f, sys.get(), n,
             cu::Prec::fp32);
    cu::add_diag(st, sys.get(), n, static_cast<float>(n));
    cu::fill_normal(st, x.get(), n, 6, 0, 1.f);
    bool ok = true;
    fmt::print("| Cholesky (potrf) | {:.3f} |\n", time_ms(g, std::min(reps, 5), [&] {
                   CUDA_CHECK(cudaMemcpyAsync(work.get(), sys.get(), n * n * sizeof(float),
                                              cudaMemcpyDeviceToDevice, st));
                   ok = ok && cu::potrf_solver(g, work.get(), n);
               }));
    fmt::print("| (copy of the system inside the line above) | {:.3f} |\n", time_ms(g, reps, [&] {
                   CUDA_CHECK(cudaMemcpyAsync(y.get(), x.get(), n * sizeof(float),
                                              cudaMemcpyDeviceToDevice, st));
                   CUDA_CHECK(cudaMemcpyAsync(work.get() + n, sys.get(),
                                              n * n * sizeof(float) - n * sizeof(float),
                                              cudaMemcpyDeviceToDevice, st));
               }));
    CUDA_CHECK(cudaMemcpyAsync(work.get(), sys.get(), n * n * sizeof(float),
                               cudaMemcpyDeviceToDevice, st));
    ok = ok && cu::potrf_solver(g, work.get(), n);
    fmt::print("| potrs, one right-hand side (two triangular solves) | {:.3f} |\n",
               time_ms(g, reps, [&] { cu::potrs_solver(g, work.get(), n, y.get()); }));
    fmt::print("| symv (the solver's triangle) | {:.3f} |\n",
               time_ms(g, reps, [&] { cu::symv_solver(g, sys.get(), n, x.get(), y.get()); }));
    fmt::print("| gemv (the whole matrix) | {:.3f} |\n",
               time_ms(g, reps, [&] { cu::gemv(g, false, n, n, sys.get(), x.get(), y.get()); }));
    fmt::print("| dot read back to the host | {:.3f} |\n",
               time_ms(g, reps, [&] { (void)cu::dot(st, x.get(), y.get(), n); }));
    fmt::print("| inverse of the factor (trsm) | {:.3f} |\n", time_ms(g, std::min(reps, 3), [&] {
                   cu::tri_inv_lower(g, work.get(), sys.get(), n);
               }));
    fmt::print("(Cholesky succeeded: {})\n\n", ok);
}

}  // namespace

int main(int argc, char** argv) {
    std::string ranks = "2966,1475,2028", rows_s = "15104";
    int reps = 20;
    int64_t solver = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!std::strcmp(argv[i], "--ranks"))
            ranks = argv[i + 1];
        else if (!std::strcmp(argv[i], "--rows"))
            rows_s = argv[i + 1];
        else if (!std::strcmp(argv[i], "--reps"))
            reps = std::atoi(argv[i + 1]);
        else if (!std::strcmp(argv[i], "--solver"))
            solver = std::atoll(argv[i + 1]);
    }
    if (!gpu_available()) {
        std::puts("no GPU: nothing to measure");
        return 0;
    }
    const int64_t rows = std::stoll(rows_s);
    Gpu g;
    if (solver > 0) solver_parts(g, solver, parse_list(ranks), reps);
    fmt::print("| product | r | layout | TF32 ms | TF32 TFLOP/s | FP32 ms | FP32 TFLOP/s |\n");
    fmt::print("|---|---|---|---|---|---|---|\n");
    for (const int64_t r0 : parse_list(ranks)) {
        const int64_t rp = round_up(r0, 32);
        const Case cases[] = {{"XᵀX (r×r×r)", true, r0, r0, r0},
                              {"X A (r×r×r)", false, r0, r0, r0},
                              {"X R (rows×r×r)", false, rows, r0, r0},
                              {"Xᵀ B (r×r×rows)", true, r0, r0, rows}};
        for (const Case& c : cases) {
            for (int layout = 0; layout < 3; ++layout) {
                // 0: r as it is; 1: r with padded leading dimensions; 2: r → rp
                const int64_t grow = layout == 2 ? rp - r0 : 0;
                const int64_t m = c.m == r0 ? c.m + grow : c.m;
                const int64_t n = c.n + grow, k = c.k == r0 ? c.k + grow : c.k;
                const int64_t ar = c.ta ? k : m, ac = c.ta ? m : k;
                const int64_t lda = layout == 1 ? round_up(ac, 32) : ac;
                const int64_t ldb = layout == 1 ? round_up(n, 32) : n;
                const int64_t ldc = ldb;
                DeviceBuffer<float> a(ar * lda, g.stream()), b(k * ldb, g.stream()),
                    cc(m * ldc, g.stream());
                cu::fill_normal(g.stream(), a.get(), ar * lda, 1, 0, 1.f);
                cu::fill_normal(g.stream(), b.get(), k * ldb, 2, 0, 1.f);
                double ms[2];
                for (int p = 0; p < 2; ++p) {
                    const cu::Prec prec = p == 0 ? cu::Prec::tf32 : cu::Prec::fp32;
                    ms[p] = time_ms(g, reps, [&] {
                        cu::gemm(g, c.ta, false, m, n, k, 1.f, a.get(), lda, b.get(), ldb, 0.f,
                                 cc.get(), ldc, prec);
                    });
                }
                const double flop =
                    2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
                static const char* names[] = {"as is", "ld padded to 32", "r rounded to 32"};
                fmt::print("| {} | {} | {} | {:.3f} | {:.0f} | {:.3f} | {:.0f} |\n", c.what,
                           layout == 2 ? rp : r0, names[layout], ms[0], flop / ms[0] / 1e9, ms[1],
                           flop / ms[1] / 1e9);
            }
        }
    }
    return 0;
}
#else
int main() {
    std::puts("built without CUDA: nothing to measure");
    return 0;
}
#endif
