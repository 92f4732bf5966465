// The forward pass's CUDA kernels against their CPU twins (model/ops.hpp) on
// shapes the model tests do not reach: decoding attention (a few query rows
// against a long key cache, with grouped heads, a sliding window, head sizes
// that are not multiples of 32, several sequences), RMSNorm on a few wide
// rows (the block-per-row kernel) and on many, and RoPE on q and k in one
// launch; the 3xTF32 product with an operand exact in TF32 (a BF16 weight),
// which skips that operand's split. Every test skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <tuple>
#include <vector>

#include "core/rng.hpp"
#include "gpu_skip.hpp"
#include "model/ops.hpp"

#ifdef CORTIQ_HAVE_CUDA
#include "core/cuda/device.hpp"
#include "core/cuda/gemm_tf32.hpp"
#include "model/cuda/kernels.hpp"
#endif

using namespace cortiq;

namespace {

// Kernels against the CPU in float32: rounding only (other summation orders,
// expf against the CPU's polynomial exp, ~2e-7). A wrong mask, head or
// window moves outputs by whole units of their scale.
constexpr double kKernelTol = 1e-5;

[[maybe_unused]] std::vector<float> randn(int64_t n, double scale, Rng& rng) {
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = static_cast<float>(scale * rng.normal());
    return v;
}

// max |a − b| / max |b|
[[maybe_unused]] double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
    double worst = 0, scale = 0;
    for (size_t i = 0; i < b.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
        scale = std::max(scale, std::abs(static_cast<double>(b[i])));
    }
    return scale > 0 ? worst / scale : worst;
}

// x rounded to BF16 (to nearest even), held as float: exact in TF32
[[maybe_unused]] float round_bf16(float x) {
    uint32_t u = 0;
    std::memcpy(&u, &x, sizeof u);
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    std::memcpy(&x, &u, sizeof u);
    return x;
}

struct AttentionCase {
    int64_t batch, T, pos0, heads, kv_heads, hd, window;
};

}  // namespace

#ifdef CORTIQ_HAVE_CUDA
namespace cu = cortiq::cuda;
#endif

TEST(KernelsGpu, DecodingAttentionMatchesTheCpu) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    // T ≤ 4 takes the decoding kernel (a cluster of one block per 128
    // visible keys, up to 8: 1, 2, 3 and 8 blocks below); T = 9 the
    // many-rows kernel, as a check that both agree with the CPU.
    const AttentionCase cases[] = {
        {1, 1, 0, 4, 4, 64, 0},       // the first token: one key
        {1, 1, 200, 4, 4, 64, 0},     // two blocks of a cluster
        {1, 1, 999, 8, 2, 128, 0},    // a long cache, grouped heads
        {1, 2, 700, 6, 3, 80, 0},     // head size not a multiple of 32
        {2, 3, 257, 4, 1, 256, 0},    // two sequences, the widest heads
        {1, 1, 1500, 4, 4, 64, 100},  // a sliding window
        {1, 4, 63, 2, 2, 96, 17},     // window and rows together
        {1, 9, 300, 4, 2, 128, 0},    // many rows: the other kernel
    };
    cu::Gpu gpu;
    const cudaStream_t s = gpu.stream();
    Rng rng(7);
    for (const auto& c : cases) {
        const int64_t kv_rows = c.pos0 + c.T + 3;  // rows past the last visible one
        const int64_t q_dim = c.heads * c.hd, kv_dim = c.kv_heads * c.hd;
        const auto q = randn(c.batch * c.T * q_dim, 1.0, rng);
        const auto k = randn(c.batch * kv_rows * kv_dim, 1.0, rng);
        const auto v = randn(c.batch * kv_rows * kv_dim, 1.0, rng);
        std::vector<float> want(q.size());
        for (int64_t b = 0; b < c.batch; ++b)
            model::attention(q.data() + b * c.T * q_dim, c.T, q_dim,
                             k.data() + b * kv_rows * kv_dim, v.data() + b * kv_rows * kv_dim,
                             kv_dim, c.heads, c.kv_heads, c.hd, c.pos0, c.window,
                             want.data() + b * c.T * q_dim, q_dim);
        const cu::DVec dq = cu::upload_f(q, s), dk = cu::upload_f(k, s), dv = cu::upload_f(v, s);
        cu::DVec dout(static_cast<int64_t>(q.size()), s);
        model::cuda::attention(dq.get(), dk.get(), dv.get(), dout.get(), c.batch, c.T, kv_rows,
                               c.heads, c.kv_heads, c.hd, c.pos0, c.window, s);
        const auto got = cu::download_f(dout.get(), static_cast<int64_t>(q.size()), s);
        EXPECT_LT(rel_err(got, want), kKernelTol)
            << "batch " << c.batch << " T " << c.T << " pos0 " << c.pos0 << " heads " << c.heads
            << "/" << c.kv_heads << " hd " << c.hd << " window " << c.window;
    }
#endif
}

TEST(KernelsGpu, RmsNormMatchesTheCpuOnFewWideRowsAndOnMany) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    cu::Gpu gpu;
    const cudaStream_t s = gpu.stream();
    Rng rng(8);
    // (rows, n): one and a few wide rows (a block per row), many rows (a
    // warp per row), narrow rows (a warp per row even when few); in place too.
    const std::pair<int64_t, int64_t> shapes[] = {
        {1, 4096}, {3, 11008}, {64, 1027}, {65, 2048}, {2, 128}};
    for (auto [rows, n] : shapes) {
        const auto x = randn(rows * n, 3.0, rng), w = randn(n, 1.0, rng);
        std::vector<float> want(x.size());
        model::rmsnorm(x.data(), rows, n, w.data(), 1e-6f, want.data());
        cu::DVec dx = cu::upload_f(x, s);
        const cu::DVec dw = cu::upload_f(w, s);
        cu::DVec dy(rows * n, s);
        model::cuda::rmsnorm(dx.get(), rows, n, dw.get(), 1e-6f, dy.get(), s);
        EXPECT_LT(rel_err(cu::download_f(dy.get(), rows * n, s), want), kKernelTol)
            << rows << " × " << n;
        model::cuda::rmsnorm(dx.get(), rows, n, dw.get(), 1e-6f, dx.get(), s);
        EXPECT_LT(rel_err(cu::download_f(dx.get(), rows * n, s), want), kKernelTol)
            << rows << " × " << n << " in place";
    }
#endif
}

TEST(KernelsGpu, RopeOnQueriesAndKeysInOneLaunchMatchesTheCpu) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    cu::Gpu gpu;
    const cudaStream_t s = gpu.stream();
    Rng rng(9);
    std::vector<float> inv_freq(24);
    for (size_t j = 0; j < inv_freq.size(); ++j)
        inv_freq[j] = static_cast<float>(std::pow(10000.0, -2.0 * j / 64.0));
    // head_dim 64 with a rotary size of 48 (partial), 8 query and 2 key
    // heads; 2 sequences of T = 3 rows at positions 5..7; then one decoded row
    const int64_t hd = 64, qh = 8, kh = 2, half = 24, positions = 16;
    const model::RopeTable all = model::rope_table(inv_freq, 0, positions);
    const cu::DVec cos = cu::upload_f(all.cos, s), sin = cu::upload_f(all.sin, s);
    for (auto [rows, T, pos0] : {std::tuple<int64_t, int64_t, int64_t>{6, 3, 5}, {1, 1, 12}}) {
        const auto q = randn(rows * qh * hd, 1.0, rng), k = randn(rows * kh * hd, 1.0, rng);
        std::vector<float> want_q = q, want_k = k;
        for (int64_t b = 0; b < rows / T; ++b) {
            const model::RopeTable t = model::rope_table(inv_freq, pos0, T);
            model::rope(want_q.data() + b * T * qh * hd, T, qh * hd, qh, hd, t);
            model::rope(want_k.data() + b * T * kh * hd, T, kh * hd, kh, hd, t);
        }
        cu::DVec dq = cu::upload_f(q, s), dk = cu::upload_f(k, s);
        model::cuda::rope_qk(dq.get(), qh, dk.get(), kh, rows, T, hd, half, cos.get(), sin.get(),
                             pos0, nullptr, s);
        EXPECT_LT(rel_err(cu::download_f(dq.get(), rows * qh * hd, s), want_q), kKernelTol);
        EXPECT_LT(rel_err(cu::download_f(dk.get(), rows * kh * hd, s), want_k), kKernelTol);
    }
#endif
}

// A BF16 weight is exact in TF32, so the 3xTF32 product that marks it exact
// (two passes) gives the bits of the one that splits it (three passes, the
// third adding lo = 0); both within float32 accuracy of the float64 product.
TEST(KernelsGpu, ProductsWithAWeightExactInTf32SkipItsSplitWithTheSameBits) {
    REQUIRE_GPU();
#ifdef CORTIQ_HAVE_CUDA
    cu::Gpu gpu;
    const cudaStream_t s = gpu.stream();
    Rng rng(10);
    const int64_t rows = 300, m = 517, n = 260;  // y (rows × m) = x (rows × n) · Wᵀ
    const auto x = randn(rows * n, 1.0, rng);
    auto w = randn(m * n, 0.05, rng);
    for (auto& v : w) v = round_bf16(v);
    const cu::DVec dx = cu::upload_f(x, s), dw = cu::upload_f(w, s);
    EXPECT_TRUE(cu::exact_in_tf32(s, dw.get(), m * n));
    EXPECT_FALSE(cu::exact_in_tf32(s, dx.get(), rows * n));
    EXPECT_TRUE(cu::exact_in_tf32(s, dx.get(), 0));
    for (const float bad : {std::nextafter(w[77], 1.0f), std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN()}) {
        auto w_bad = w;
        w_bad[m * n - 1] = bad;  // the last value: the grid-stride loop's tail
        EXPECT_FALSE(cu::exact_in_tf32(s, cu::upload_f(w_bad, s).get(), m * n)) << bad;
    }
    // forward (x Wᵀ) and backward (dy W) with W marked exact and not
    cu::DVec y3(rows * m, s), y2(rows * m, s), d3(rows * n, s), d2(rows * n, s);
    cu::gemm_tf32x3(gpu, false, true, rows, m, n, 1.0f, dx.get(), n, dw.get(), n, 0.0f, y3.get(), m,
                    cu::kNone);
    cu::gemm_tf32x3(gpu, false, true, rows, m, n, 1.0f, dx.get(), n, dw.get(), n, 0.0f, y2.get(), m,
                    cu::kExactB);
    cu::gemm_tf32x3(gpu, false, false, rows, n, m, 1.0f, y3.get(), m, dw.get(), n, 0.0f, d3.get(),
                    n, cu::kNone);
    cu::gemm_tf32x3(gpu, false, false, rows, n, m, 1.0f, y3.get(), m, dw.get(), n, 0.0f, d2.get(),
                    n, cu::kExactB);
    const auto h3 = cu::download_f(y3.get(), rows * m, s),
               h2 = cu::download_f(y2.get(), rows * m, s);
    const auto e3 = cu::download_f(d3.get(), rows * n, s),
               e2 = cu::download_f(d2.get(), rows * n, s);
    EXPECT_EQ(0, std::memcmp(h3.data(), h2.data(), h3.size() * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(e3.data(), e2.data(), e3.size() * sizeof(float)));
    std::vector<float> want(static_cast<size_t>(rows * m));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < m; ++j) {
            double acc = 0;
            for (int64_t k = 0; k < n; ++k) acc += static_cast<double>(x[i * n + k]) * w[j * n + k];
            want[i * m + j] = static_cast<float>(acc);
        }
    EXPECT_LT(rel_err(h2, want), kKernelTol);
#endif
}
