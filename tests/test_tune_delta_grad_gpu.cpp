// The CUDA twins of the Gated DeltaNet mixer's operations
// (tune/cuda/delta_grad_ops.hpp) against the CPU float64 reference
// (tune/delta_grad_ops.hpp, which test_tune_delta_grad holds against finite
// differences): every output and gradient, at test_tune_delta_grad's shapes
// and at larger ones (more than a 32-wide tile of channels or columns, more
// than one slab of rows, the 0.8B model's head dimension 128). The inputs are
// drawn in float64 and rounded to float32 first, so both sides compute on the
// same values and a difference is the device's float32 rounding alone.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "core/gpu.hpp"
#include "require.hpp"
#include "tune/delta_grad_ops.hpp"
#include "tune_fixtures.hpp"
#ifdef CORTIQ_HAVE_CUDA
#include "tune/cuda/delta_grad_ops.hpp"
#endif

namespace cortiq::tune {
namespace {

#define REQUIRE_GPU() REQUIRE_GPU_OF(::cortiq::gpu_available(), ::cortiq::gpu_unavailable_reason())

#ifdef CORTIQ_HAVE_CUDA

using fixtures::Vec;
using DVec = cortiq::cuda::DVec;

// Tolerances, as max|gpu − ref| ≤ tol · max|ref| over each output (float32's
// unit roundoff u = 6e-8):
// - the element-wise and per-row operations: each value is a handful of
//   float32 roundings (a K-tap or a d-term sum, expf/log1pf within 2 ulp) of
//   terms no larger than a few times the output's scale, ≲ 20 u ≈ 1e-6; the
//   weight gradients are sums over ≤ 600 rows taken in float64 of terms
//   rounded once or twice each, again ≲ 1e-6 relative to their largest.
//   1e-5 leaves room and still catches a wrong index or a missing term;
constexpr double kTolOps = 1e-5;
// - the delta rule: per step each value is a dk-term dot product (dk ≤ 128:
//   a random walk of ≈ √dk u ≈ 7e-7) fed into the next step, where it is
//   decayed by e^g ≤ 1 and by the delta rule's contraction (I − β k kᵀ,
//   |k| = 1); with g = −0.6 |N(0, 1)| a step's error is carried ≈ 1/(1 − e^ḡ)
//   ≈ 3 steps on average, a few tens where g is near 0, so the outputs and
//   gradients hold ≲ 10 such roundings ≈ 7e-6 of their scale; dg and dβ are
//   sums over dk · dv terms of that accuracy. 2e-5 of the largest value.
constexpr double kTolRule = 2e-5;

// v rounded to float32 (kept as float64 for the reference).
Vec to_float(Vec v) {
    for (auto& x : v) x = static_cast<double>(static_cast<float>(x));
    return v;
}

Vec randf(std::mt19937_64& rng, size_t n, double s = 1.0) {
    return to_float(fixtures::randn(rng, n, s));
}

DVec up(const Vec& v, cudaStream_t st) {
    return cortiq::cuda::upload(v, st);
}

Vec down(const DVec& v, cudaStream_t st) {
    return cortiq::cuda::download(v, st);
}

// Columns c0 .. c0 + n − 1 of a rows × ld matrix.
Vec cols(const Vec& m, int64_t rows, int64_t ld, int64_t c0, int64_t n) {
    Vec out(static_cast<size_t>(rows * n));
    for (int64_t i = 0; i < rows; ++i)
        for (int64_t j = 0; j < n; ++j) out[i * n + j] = m[i * ld + c0 + j];
    return out;
}

// max|gpu − ref| ≤ tol · max|ref|; prints the ratio.
void expect_close(const Vec& gpu, const Vec& ref, double tol, const std::string& what) {
    ASSERT_EQ(gpu.size(), ref.size()) << what;
    double mag = 0, diff = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
        mag = std::max(mag, std::abs(ref[i]));
        diff = std::max(diff, std::abs(gpu[i] - ref[i]));
    }
    ASSERT_GT(mag, 0) << what << ": an all-zero reference checks nothing";
    EXPECT_LE(diff, tol * mag) << what << ": max |gpu − ref| " << diff << ", max |ref| " << mag;
    std::printf("  %-28s max|gpu − ref| / max|ref| = %.2e\n", what.c_str(), diff / mag);
}

// ── convolution ──────────────────────────────────────────────────────────────
void check_conv(uint64_t seed, int64_t windows, int64_t L, int64_t C, int64_t K) {
    SCOPED_TRACE("conv: " + std::to_string(windows) + " × " + std::to_string(L) + ", C " +
                 std::to_string(C));
    std::mt19937_64 rng(seed);
    const int64_t n = windows * L * C;
    const Vec x = randf(rng, n), w = randf(rng, C * K, 0.5), dy = randf(rng, n),
              dw0 = randf(rng, C * K);
    Vec pre(n), y(n), dx(n), dw = dw0;  // dw is added into: starts non-zero on both sides
    conv_silu_forward(x.data(), windows, L, C, w.data(), K, pre.data(), y.data());
    conv_silu_backward(dy.data(), x.data(), pre.data(), windows, L, C, w.data(), K, dx.data(),
                       dw.data());

    const cuda::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    const DVec gx = up(x, st), gw = up(w, st), gdy = up(dy, st);
    DVec gpre(n, st), gy(n, st), gdx(n, st), gdw = up(dw0, st);
    cuda::conv_silu_forward(gpu, gx.get(), windows, L, C, gw.get(), K, gpre.get(), gy.get());
    cuda::conv_silu_backward(gpu, gdy.get(), gx.get(), gpre.get(), windows, L, C, gw.get(), K,
                             gdx.get(), gdw.get());
    expect_close(down(gpre, st), pre, kTolOps, "conv pre");
    expect_close(down(gy, st), y, kTolOps, "conv y");
    expect_close(down(gdx, st), dx, kTolOps, "conv dx");
    expect_close(down(gdw, st), dw, kTolOps, "conv dw (added)");
}

TEST(TuneDeltaGradGpu, ConvSiluMatchesTheCpu) {
    REQUIRE_GPU();
    check_conv(1, 2, 11, 6, 4);    // test_tune_delta_grad's shape
    check_conv(2, 3, 200, 70, 4);  // 3 tiles of channels, 3 slabs of rows crossing windows
}

// ── L2 normalisation ───────────────────────────────────────────────────────────
void check_l2norm(uint64_t seed, int64_t rows, int64_t heads, int64_t d) {
    SCOPED_TRACE("l2norm: d " + std::to_string(d));
    std::mt19937_64 rng(seed);
    const int64_t ld = heads * d + 3, n = rows * ld;  // 3 columns of no head
    const double eps = 1e-6;
    const Vec x = randf(rng, n), dy = randf(rng, n);
    Vec y(n, 0.0), inv(rows * heads), dx(n, 0.0);
    l2norm_forward(x.data(), rows, ld, heads, d, eps, y.data(), inv.data());
    l2norm_backward(dy.data(), y.data(), inv.data(), rows, ld, heads, d, dx.data());

    const cuda::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    const DVec gx = up(x, st), gdy = up(dy, st);
    DVec gy = up(Vec(n, 0.0), st), ginv(rows * heads, st), gdx = up(Vec(n, 0.0), st);
    cuda::l2norm_forward(gpu, gx.get(), rows, ld, heads, d, static_cast<float>(eps), gy.get(),
                         ginv.get());
    cuda::l2norm_backward(gpu, gdy.get(), gy.get(), ginv.get(), rows, ld, heads, d, gdx.get());
    expect_close(down(gy, st), y, kTolOps, "l2norm y");
    expect_close(down(ginv, st), inv, kTolOps, "l2norm inv");
    expect_close(down(gdx, st), dx, kTolOps, "l2norm dx");
    // in place: y = x, then dx = dy
    DVec inplace = up(x, st);
    cuda::l2norm_forward(gpu, inplace.get(), rows, ld, heads, d, static_cast<float>(eps),
                         inplace.get(), ginv.get());
    const Vec yi = down(inplace, st);
    expect_close(cols(yi, rows, ld, 0, heads * d), cols(y, rows, ld, 0, heads * d), kTolOps,
                 "l2norm y in place");
    DVec dinplace = up(dy, st);
    cuda::l2norm_backward(gpu, dinplace.get(), gy.get(), ginv.get(), rows, ld, heads, d,
                          dinplace.get());
    const Vec dxi = down(dinplace, st);
    expect_close(cols(dxi, rows, ld, 0, heads * d), cols(dx, rows, ld, 0, heads * d), kTolOps,
                 "l2norm dx in place");
}

TEST(TuneDeltaGradGpu, L2NormMatchesTheCpu) {
    REQUIRE_GPU();
    check_l2norm(3, 22, 4, 5);
    check_l2norm(4, 130, 4, 128);  // four values per lane
}

// ── gates ────────────────────────────────────────────────────────────────────
TEST(TuneDeltaGradGpu, GatesMatchTheCpu) {
    REQUIRE_GPU();
    std::mt19937_64 rng(5);
    const int64_t rows = 300, H = 4, n = rows * H;
    Vec a = randf(rng, n, 3.0), b = randf(rng, n, 3.0), a_log = randf(rng, H, 0.5),
        dt_bias = randf(rng, H), dg = randf(rng, n), dbeta = randf(rng, n);
    dt_bias[H - 1] = 20.0;  // one head about the softplus threshold, on both sides of it
    Vec g(n), beta(n), da(n), db(n);
    delta_gates_forward(a.data(), b.data(), rows, H, a_log.data(), dt_bias.data(), g.data(),
                        beta.data());
    delta_gates_backward(dg.data(), dbeta.data(), a.data(), beta.data(), rows, H, a_log.data(),
                         dt_bias.data(), da.data(), db.data());

    const cuda::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    const DVec ga = up(a, st), gb = up(b, st), galog = up(a_log, st), gbias = up(dt_bias, st),
               gdg = up(dg, st), gdbeta = up(dbeta, st);
    DVec gg(n, st), gbeta(n, st), gda(n, st), gdb(n, st);
    cuda::delta_gates_forward(gpu, ga.get(), gb.get(), rows, H, galog.get(), gbias.get(), gg.get(),
                              gbeta.get());
    cuda::delta_gates_backward(gpu, gdg.get(), gdbeta.get(), ga.get(), gbeta.get(), rows, H,
                               galog.get(), gbias.get(), gda.get(), gdb.get());
    expect_close(down(gg, st), g, kTolOps, "gates g");
    expect_close(down(gbeta, st), beta, kTolOps, "gates beta");
    expect_close(down(gda, st), da, kTolOps, "gates da");
    expect_close(down(gdb, st), db, kTolOps, "gates db");
}

// ── gated RMSNorm ──────────────────────────────────────────────────────────────
void check_rmsnorm_gated(uint64_t seed, int64_t rows, int64_t n) {
    SCOPED_TRACE("gated RMSNorm: " + std::to_string(rows) + " rows of " + std::to_string(n));
    std::mt19937_64 rng(seed);
    const int64_t m = rows * n;
    const double eps = 1e-6;
    const Vec x = randf(rng, m), z = randf(rng, m), w = randf(rng, n, 0.3), dy = randf(rng, m),
              dw0 = randf(rng, n);
    Vec y(m), rstd(rows), dx(m), dz(m), dw = dw0;
    rmsnorm_gated_forward(x.data(), z.data(), rows, n, w.data(), eps, y.data(), rstd.data());
    rmsnorm_gated_backward(dy.data(), x.data(), z.data(), w.data(), rstd.data(), rows, n, dx.data(),
                           dz.data(), dw.data());

    const cuda::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    const DVec gx = up(x, st), gz = up(z, st), gw = up(w, st), gdy = up(dy, st);
    DVec gy(m, st), grstd(rows, st), gdx(m, st), gdz(m, st), gdw = up(dw0, st);
    cuda::rmsnorm_gated_forward(gpu, gx.get(), gz.get(), rows, n, gw.get(), static_cast<float>(eps),
                                gy.get(), grstd.get());
    cuda::rmsnorm_gated_backward(gpu, gdy.get(), gx.get(), gz.get(), gw.get(), grstd.get(), rows, n,
                                 gdx.get(), gdz.get(), gdw.get());
    expect_close(down(gy, st), y, kTolOps, "gated norm y");
    expect_close(down(grstd, st), rstd, kTolOps, "gated norm rstd");
    expect_close(down(gdx, st), dx, kTolOps, "gated norm dx");
    expect_close(down(gdz, st), dz, kTolOps, "gated norm dz");
    expect_close(down(gdw, st), dw, kTolOps, "gated norm dw (added)");
}

TEST(TuneDeltaGradGpu, RmsNormGatedMatchesTheCpu) {
    REQUIRE_GPU();
    check_rmsnorm_gated(6, 22 * 4, 5);
    check_rmsnorm_gated(7, 600, 128);  // 4 column tiles, 3 slabs of rows
}

// ── the gated delta rule ─────────────────────────────────────────────────────
struct RuleShape {
    int64_t windows, L, chunk, k_heads, v_heads, dk, dv;
};

// q, k, v side by side in one buffer of in_proj_qkv's layout plus one column
// of no head (the backward must leave it alone); q and k L2-normalised per
// head, g ≤ 0, β in (0, 1); dout with a row stride past its values.
struct RuleCase {
    RuleShape s;
    int64_t rows, ld, ld_o;
    Vec qkv, g, beta, dout;

    RuleCase(uint64_t seed, const RuleShape& shape)
        : s(shape),
          rows(shape.windows * shape.L),
          ld(2 * shape.k_heads * shape.dk + shape.v_heads * shape.dv + 1),
          ld_o(shape.v_heads * shape.dv + 2) {
        std::mt19937_64 rng(seed);
        qkv = fixtures::randn(rng, rows * ld);
        Vec inv(rows * 2 * s.k_heads);
        l2norm_forward(qkv.data(), rows, ld, 2 * s.k_heads, s.dk, 1e-6, qkv.data(), inv.data());
        qkv = to_float(qkv);
        g = fixtures::randn(rng, rows * s.v_heads);
        for (auto& x : g) x = -0.6 * std::abs(x);
        g = to_float(g);
        beta = fixtures::randn(rng, rows * s.v_heads);
        for (auto& x : beta) x = 1.0 / (1.0 + std::exp(-x));
        beta = to_float(beta);
        dout = randf(rng, rows * ld_o);
    }
    template <class T>
    DeltaRuleT<T> rule(const T* qkv_p, const T* g_p, const T* beta_p) const {
        DeltaRuleT<T> r;
        r.q = qkv_p;
        r.k = qkv_p + s.k_heads * s.dk;
        r.v = qkv_p + 2 * s.k_heads * s.dk;
        r.g = g_p;
        r.beta = beta_p;
        r.windows = s.windows;
        r.L = s.L;
        r.ld_qk = r.ld_v = ld;
        r.k_heads = s.k_heads;
        r.v_heads = s.v_heads;
        r.dk = s.dk;
        r.dv = s.dv;
        return r;
    }
};

constexpr double kUnwritten = 7.0;  // what the gradient buffers start from

// Outputs and gradients of one side.
struct RuleResult {
    Vec out, states, dqkv, dg, dbeta;
};

RuleResult cpu_rule(const RuleCase& c) {
    const DeltaRuleT<double> r = c.rule(c.qkv.data(), c.g.data(), c.beta.data());
    const int64_t H = c.s.v_heads, kq = c.s.k_heads * c.s.dk;
    RuleResult o{Vec(c.rows * c.ld_o, 0.0),
                 {},
                 Vec(c.rows * c.ld, kUnwritten),
                 Vec(c.rows * H),
                 Vec(c.rows * H)};
    delta_rule_forward(r, c.s.chunk, o.out.data(), c.ld_o, o.states);
    double* d = o.dqkv.data();
    delta_rule_backward(r, c.s.chunk, o.states, c.dout.data(), c.ld_o, d, d + kq, d + 2 * kq,
                        o.dg.data(), o.dbeta.data());
    return o;
}

// The backward twice on the same scratch; the second's gradients in `again`.
RuleResult gpu_rule(const cuda::Gpu& gpu, const RuleCase& c, cuda::DeltaRuleScratch& scratch,
                    Vec& again) {
    const cudaStream_t st = gpu.stream();
    const int64_t H = c.s.v_heads, kq = c.s.k_heads * c.s.dk;
    const DVec qkv = up(c.qkv, st), g = up(c.g, st), beta = up(c.beta, st), dout = up(c.dout, st);
    const cuda::DeltaRule r = c.rule(qkv.get(), g.get(), beta.get());
    DVec out = up(Vec(c.rows * c.ld_o, 0.0), st), states;
    cuda::delta_rule_forward(gpu, r, c.s.chunk, out.get(), c.ld_o, states);
    DVec dg(c.rows * H, st), dbeta(c.rows * H, st);
    RuleResult o;
    for (int pass = 0; pass < 2; ++pass) {
        DVec dqkv = up(Vec(c.rows * c.ld, kUnwritten), st);
        float* d = dqkv.get();
        cuda::delta_rule_backward(gpu, r, c.s.chunk, states, dout.get(), c.ld_o, d, d + kq,
                                  d + 2 * kq, dg.get(), dbeta.get(), scratch);
        (pass == 0 ? o.dqkv : again) = down(dqkv, st);
    }
    o.out = down(out, st);
    o.states = down(states, st);
    o.dg = down(dg, st);
    o.dbeta = down(dbeta, st);
    return o;
}

void check_rule(const cuda::Gpu& gpu, uint64_t seed, const RuleShape& s,
                cuda::DeltaRuleScratch& scratch, const char* label) {
    SCOPED_TRACE(label);
    std::printf("[%s]\n", label);
    const RuleCase c(seed, s);
    const RuleResult ref = cpu_rule(c);
    Vec again;
    const RuleResult dev = gpu_rule(gpu, c, scratch, again);
    const int64_t kq = s.k_heads * s.dk, vw = s.v_heads * s.dv, rows = c.rows;
    expect_close(cols(dev.out, rows, c.ld_o, 0, vw), cols(ref.out, rows, c.ld_o, 0, vw), kTolRule,
                 "out");
    expect_close(dev.states, ref.states, kTolRule, "chunk checkpoints");
    expect_close(cols(dev.dqkv, rows, c.ld, 0, kq), cols(ref.dqkv, rows, c.ld, 0, kq), kTolRule,
                 "dq");
    expect_close(cols(dev.dqkv, rows, c.ld, kq, kq), cols(ref.dqkv, rows, c.ld, kq, kq), kTolRule,
                 "dk");
    expect_close(cols(dev.dqkv, rows, c.ld, 2 * kq, vw), cols(ref.dqkv, rows, c.ld, 2 * kq, vw),
                 kTolRule, "dv");
    expect_close(dev.dg, ref.dg, kTolRule, "dg");
    expect_close(dev.dbeta, ref.dbeta, kTolRule, "dbeta");
    // the column of no head untouched, the padding of out too
    for (int64_t i = 0; i < rows; ++i) {
        ASSERT_EQ(dev.dqkv[i * c.ld + c.ld - 1], kUnwritten) << "row " << i;
        ASSERT_EQ(dev.out[i * c.ld_o + vw], 0.0) << "row " << i;
    }
    // sums in a fixed order: a second backward repeats the first bit for bit
    EXPECT_TRUE(dev.dqkv == again) << "the backward is not deterministic";
}

TEST(TuneDeltaGradGpu, DeltaRuleMatchesTheCpu) {
    REQUIRE_GPU();
    // One stream for all shapes: the scratch is freed and reallocated in order on it
    // (a scratch outliving its stream cannot be freed).
    const cuda::Gpu gpu;
    cuda::DeltaRuleScratch scratch;  // reused across the shapes, resized by each
    check_rule(gpu, 11, {2, 11, 4, 2, 4, 4, 5}, scratch, "test_tune_delta_grad's shape, chunk 4");
    check_rule(gpu, 12, {1, 200, 64, 2, 4, 32, 32}, scratch, "dk = dv = 32, L 200, chunk 64");
    check_rule(gpu, 13, {1, 130, 64, 2, 4, 128, 128}, scratch, "dk = dv = 128, L 130, chunk 64");
    check_rule(gpu, 14, {2, 37, 16, 1, 2, 48, 40}, scratch,
               "dk 48, dv 40 (two tiles, one partial)");
}

// Milliseconds per forward and backward of the delta rule at the 0.8B
// model's shape (16 key and value heads, dk = dv = 128) on one window of
// 2048 tokens, chunk 64; checks only that the backward repeats itself.
TEST(TuneDeltaGradGpu, DeltaRuleTimingAtTheQwen35SmallShape) {
    REQUIRE_GPU();
    const RuleShape s{1, 2048, 64, 16, 16, 128, 128};
    const RuleCase c(21, s);
    const cuda::Gpu gpu;
    const cudaStream_t st = gpu.stream();
    const int64_t H = s.v_heads, kq = s.k_heads * s.dk;
    const DVec qkv = up(c.qkv, st), g = up(c.g, st), beta = up(c.beta, st), dout = up(c.dout, st);
    const cuda::DeltaRule r = c.rule(qkv.get(), g.get(), beta.get());
    DVec out(c.rows * c.ld_o, st), states, dqkv(c.rows * c.ld, st), dg(c.rows * H, st),
        dbeta(c.rows * H, st);
    cuda::DeltaRuleScratch scratch;
    float* d = dqkv.get();
    auto forward = [&] { cuda::delta_rule_forward(gpu, r, s.chunk, out.get(), c.ld_o, states); };
    auto backward = [&] {
        cuda::delta_rule_backward(gpu, r, s.chunk, states, dout.get(), c.ld_o, d, d + kq,
                                  d + 2 * kq, dg.get(), dbeta.get(), scratch);
    };
    auto ms_per = [&](const auto& f, int reps) {
        f();  // warm-up (and the scratch's allocation)
        gpu.sync();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < reps; ++i) f();
        gpu.sync();
        const std::chrono::duration<double, std::milli> dt = std::chrono::steady_clock::now() - t0;
        return dt.count() / reps;
    };
    const double fwd = ms_per(forward, 5), bwd = ms_per(backward, 5);
    const Vec first = down(dqkv, st);
    backward();
    EXPECT_TRUE(down(dqkv, st) == first) << "the backward is not deterministic";
    std::printf(
        "[delta rule, 1 window of %lld tokens, %lld heads, dk = dv = %lld, chunk %lld] forward "
        "%.3f ms, backward %.3f ms; scratch %.0f MB, checkpoints %.0f MB\n",
        static_cast<long long>(s.L), static_cast<long long>(H), static_cast<long long>(s.dk),
        static_cast<long long>(s.chunk), fwd, bwd,
        4e-6 * static_cast<double>(scratch.steps.size() + scratch.partials.size()),
        4e-6 * static_cast<double>(states.size()));
}

#else

TEST(TuneDeltaGradGpu, NeedsCuda) {
    REQUIRE_GPU_OF(false, ::cortiq::gpu_unavailable_reason());
}

#endif

}  // namespace
}  // namespace cortiq::tune
