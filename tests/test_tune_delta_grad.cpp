// The Gated DeltaNet mixer's backward passes (tune/delta_grad_ops) against
// central finite differences in float64, one operation at a time and the
// whole chain conv → l2norm → gates → delta rule → gated RMSNorm; the delta
// rule's chunked recomputation against chunk sizes; and the float forwards
// against the runtime's float32 operations (model/delta_ops, model/ops).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <random>
#include <string>

#include "model/delta_ops.hpp"
#include "model/ops.hpp"
#include "tune/delta_grad_ops.hpp"
#include "tune_fixtures.hpp"

namespace cortiq::tune {
namespace {

using fixtures::randn;
using fixtures::Vec;

// The shapes of the gradient checks: 2 windows of 11 tokens, delta-rule
// chunks of 4 (11 is not a multiple), 2 key heads shared by 4 value heads.
constexpr int64_t kWindows = 2, kL = 11, kRows = kWindows * kL, kChunk = 4;
constexpr int64_t kKeyHeads = 2, kValueHeads = 4, kDv = 5, kConvK = 4;
constexpr double kL2Eps = 1e-6, kNormEps = 1e-6;

// |analytic − numeric| ≤ 1e-6 · max(1, |numeric|) for every entry of v
// (central differences, h = 1e-6, as test_tune_grad); `name(i)` labels entry i.
// Returns the largest relative error seen.
double check(Vec& v, const Vec& analytic, const std::function<double()>& loss,
             const std::function<std::string(size_t)>& name) {
    EXPECT_EQ(v.size(), analytic.size());
    const double h = 1e-6;
    double worst = 0;
    for (size_t i = 0; i < v.size(); ++i) {
        const double keep = v[i];
        v[i] = keep + h;
        const double up = loss();
        v[i] = keep - h;
        const double down = loss();
        v[i] = keep;
        const double num = (up - down) / (2 * h), scale = std::max(1.0, std::abs(num));
        worst = std::max(worst, std::abs(analytic[i] - num) / scale);
        EXPECT_NEAR(analytic[i], num, 1e-6 * scale) << name(i) << " entry " << i;
    }
    return worst;
}

double check(Vec& v, const Vec& analytic, const std::function<double()>& loss,
             const std::string& what) {
    return check(v, analytic, loss, [&](size_t) { return what; });
}

// The largest errors are kept as test properties (--gtest_output=xml).
std::string sci(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3g", v);
    return buf;
}

double dot(const Vec& a, const Vec& b) {
    double s = 0;
    for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
    return s;
}

Vec sigmoid_of(Vec v) {
    for (auto& x : v) x = 1.0 / (1.0 + std::exp(-x));
    return v;
}

TEST(TuneDeltaGrad, ConvSiluMatchesFiniteDifferences) {
    std::mt19937_64 rng(1);
    const int64_t C = 6;
    Vec x = randn(rng, kRows * C), w = randn(rng, C * kConvK, 0.5), c = randn(rng, kRows * C);
    Vec pre(x.size()), y(x.size());
    auto loss = [&] {
        conv_silu_forward(x.data(), kWindows, kL, C, w.data(), kConvK, pre.data(), y.data());
        return dot(c, y);
    };
    loss();
    Vec dx(x.size()), dw(w.size(), 0.0);
    conv_silu_backward(c.data(), x.data(), pre.data(), kWindows, kL, C, w.data(), kConvK, dx.data(),
                       dw.data());
    const double e = std::max(check(x, dx, loss, "dx"), check(w, dw, loss, "dw"));
    RecordProperty("max_rel_error", sci(e));
    // dw is added to: a second backward (on the unperturbed forward) doubles it
    loss();
    Vec dw2 = dw;
    conv_silu_backward(c.data(), x.data(), pre.data(), kWindows, kL, C, w.data(), kConvK, dx.data(),
                       dw2.data());
    for (size_t i = 0; i < dw.size(); ++i) EXPECT_NEAR(dw2[i], 2 * dw[i], 1e-12);
}

TEST(TuneDeltaGrad, L2NormMatchesFiniteDifferencesAndMayRunInPlace) {
    std::mt19937_64 rng(2);
    const int64_t heads = 3, d = 4, ld = heads * d + 2;  // two columns outside the groups
    Vec x = randn(rng, kRows * ld), c = randn(rng, kRows * ld);
    for (int64_t i = 0; i < kRows; ++i) c[i * ld + ld - 1] = c[i * ld + ld - 2] = 0;
    Vec y(x.size(), 0.0), inv(kRows * heads);
    auto loss = [&] {
        l2norm_forward(x.data(), kRows, ld, heads, d, kL2Eps, y.data(), inv.data());
        return dot(c, y);
    };
    loss();
    Vec dx(x.size(), 0.0);
    l2norm_backward(c.data(), y.data(), inv.data(), kRows, ld, heads, d, dx.data());
    RecordProperty("max_rel_error", sci(check(x, dx, loss, "dx")));
    // dx may be dy, and the columns outside the groups are left alone
    Vec inplace = c;
    for (int64_t i = 0; i < kRows; ++i) inplace[i * ld + ld - 1] = 7.0;
    l2norm_backward(inplace.data(), y.data(), inv.data(), kRows, ld, heads, d, inplace.data());
    for (int64_t i = 0; i < kRows; ++i)
        for (int64_t j = 0; j < heads * d; ++j) EXPECT_EQ(inplace[i * ld + j], dx[i * ld + j]);
    for (int64_t i = 0; i < kRows; ++i) EXPECT_EQ(inplace[i * ld + ld - 1], 7.0);
}

TEST(TuneDeltaGrad, GatesMatchFiniteDifferencesOnBothSidesOfTheSoftplusThreshold) {
    std::mt19937_64 rng(3);
    const int64_t H = kValueHeads, n = kRows * H;
    Vec a = randn(rng, n), b = randn(rng, n), a_log = randn(rng, H, 0.5), dt_bias = randn(rng, H);
    // the last head's softplus argument above 20 (torch keeps it as it is),
    // clear of the threshold by more than the difference step
    dt_bias[H - 1] = 20.0;
    for (int64_t t = 0; t < kRows; ++t) a[t * H + H - 1] = 0.5 + std::abs(a[t * H + H - 1]);
    Vec cg = randn(rng, n), cb = randn(rng, n), g(n), beta(n);
    auto loss = [&] {
        delta_gates_forward(a.data(), b.data(), kRows, H, a_log.data(), dt_bias.data(), g.data(),
                            beta.data());
        return dot(cg, g) + dot(cb, beta);
    };
    loss();
    Vec da(n), db(n);
    delta_gates_backward(cg.data(), cb.data(), a.data(), beta.data(), kRows, H, a_log.data(),
                         dt_bias.data(), da.data(), db.data());
    const double e = std::max(check(a, da, loss, "da"), check(b, db, loss, "db"));
    RecordProperty("max_rel_error", sci(e));
}

// The delta rule's inputs in one buffer with in_proj_qkv's layout (q, k, v
// side by side) plus one column of no head, so the backward is seen to write
// only its own columns; q and k L2-normalised, g ≤ 0, β in (0, 1).
struct DeltaInputs {
    int64_t dk, ld;
    Vec qkv, g, beta;

    DeltaInputs(std::mt19937_64& rng, int64_t dk_, int64_t windows, int64_t L)
        : dk(dk_), ld(2 * kKeyHeads * dk_ + kValueHeads * kDv + 1) {
        const int64_t rows = windows * L;
        qkv = randn(rng, rows * ld);
        Vec inv(rows * 2 * kKeyHeads);
        l2norm_forward(qkv.data(), rows, ld, 2 * kKeyHeads, dk, kL2Eps, qkv.data(), inv.data());
        g = randn(rng, rows * kValueHeads);
        for (auto& x : g) x = -0.6 * std::abs(x);
        beta = sigmoid_of(randn(rng, rows * kValueHeads));
    }
    DeltaRuleT<double> rule(int64_t windows, int64_t L) const {
        DeltaRuleT<double> r;
        r.q = qkv.data();
        r.k = qkv.data() + kKeyHeads * dk;
        r.v = qkv.data() + 2 * kKeyHeads * dk;
        r.g = g.data();
        r.beta = beta.data();
        r.windows = windows;
        r.L = L;
        r.ld_qk = r.ld_v = ld;
        r.k_heads = kKeyHeads;
        r.v_heads = kValueHeads;
        r.dk = dk;
        r.dv = kDv;
        return r;
    }
};

// The delta rule's gradients, dq, dk, dv into one buffer of qkv's layout.
struct DeltaGrads {
    Vec dqkv, dg, dbeta;
};

DeltaGrads delta_backward(const DeltaInputs& in, const DeltaRuleT<double>& r, int64_t chunk,
                          const std::vector<double>& states, const Vec& dout) {
    const int64_t rows = r.windows * r.L;
    DeltaGrads d{Vec(rows * in.ld, 7.0), Vec(rows * kValueHeads), Vec(rows * kValueHeads)};
    double* base = d.dqkv.data();
    delta_rule_backward(r, chunk, states, dout.data(), kValueHeads * kDv, base,
                        base + kKeyHeads * in.dk, base + 2 * kKeyHeads * in.dk, d.dg.data(),
                        d.dbeta.data());
    return d;
}

TEST(TuneDeltaGrad, DeltaRuleMatchesFiniteDifferences) {
    for (const int64_t dk : {3, 4}) {
        SCOPED_TRACE("dk " + std::to_string(dk));
        std::mt19937_64 rng(4 + static_cast<uint64_t>(dk));
        DeltaInputs in(rng, dk, kWindows, kL);
        const int64_t ld_o = kValueHeads * kDv;
        Vec c = randn(rng, kRows * ld_o), out(c.size());
        std::vector<double> states;
        auto loss = [&] {
            delta_rule_forward(in.rule(kWindows, kL), kChunk, out.data(), ld_o, states);
            return dot(c, out);
        };
        loss();
        const DeltaGrads d = delta_backward(in, in.rule(kWindows, kL), kChunk, states, c);
        // the column of no head keeps its value
        for (int64_t i = 0; i < kRows; ++i) EXPECT_EQ(d.dqkv[i * in.ld + in.ld - 1], 7.0);
        Vec analytic = d.dqkv;
        for (int64_t i = 0; i < kRows; ++i) analytic[i * in.ld + in.ld - 1] = 0;  // no gradient
        auto column = [&](size_t i) {
            const int64_t col = static_cast<int64_t>(i) % in.ld;
            return col < kKeyHeads * dk       ? std::string("dq")
                   : col < 2 * kKeyHeads * dk ? std::string("dk")
                                              : std::string("dv");
        };
        double e = check(in.qkv, analytic, loss, column);
        e = std::max(e, check(in.g, d.dg, loss, "dg"));
        e = std::max(e, check(in.beta, d.dbeta, loss, "dbeta"));
        RecordProperty("max_rel_error_dk" + std::to_string(dk), sci(e));
    }
}

TEST(TuneDeltaGrad, DeltaRuleGradientsDoNotDependOnTheChunk) {
    std::mt19937_64 rng(9);
    DeltaInputs in(rng, 4, kWindows, kL);
    const DeltaRuleT<double> r = in.rule(kWindows, kL);
    const int64_t ld_o = kValueHeads * kDv;
    const Vec dout = randn(rng, kRows * ld_o);
    Vec out_ref(dout.size()), out(dout.size());
    std::vector<double> states;
    delta_rule_forward(r, kL, out_ref.data(), ld_o, states);
    EXPECT_EQ(states.size(), static_cast<size_t>(kWindows * kValueHeads * 4 * kDv));
    const DeltaGrads ref = delta_backward(in, r, kL, states, dout);
    double worst = 0;
    auto near = [&](const Vec& a, const Vec& b, const char* what) {
        for (size_t i = 0; i < a.size(); ++i) {
            const double scale = std::max(1.0, std::abs(b[i]));
            worst = std::max(worst, std::abs(a[i] - b[i]) / scale);
            EXPECT_NEAR(a[i], b[i], 1e-12 * scale) << what << " " << i;
        }
    };
    for (const int64_t chunk : {int64_t{4}, int64_t{1}}) {
        SCOPED_TRACE("chunk " + std::to_string(chunk));
        delta_rule_forward(r, chunk, out.data(), ld_o, states);
        // one checkpoint per chunk: ⌈11 / chunk⌉ per window and value head
        EXPECT_EQ(states.size(), static_cast<size_t>(kWindows * ((kL + chunk - 1) / chunk) *
                                                     kValueHeads * 4 * kDv));
        near(out, out_ref, "out");
        const DeltaGrads d = delta_backward(in, r, chunk, states, dout);
        near(d.dqkv, ref.dqkv, "dqkv");
        near(d.dg, ref.dg, "dg");
        near(d.dbeta, ref.dbeta, "dbeta");
    }
    RecordProperty("max_rel_difference", sci(worst));
}

TEST(TuneDeltaGrad, GatedRmsNormMatchesFiniteDifferences) {
    std::mt19937_64 rng(5);
    const int64_t rows = kRows * kValueHeads, n = kDv;
    Vec x = randn(rng, rows * n), z = randn(rng, rows * n), w = randn(rng, n, 0.3),
        c = randn(rng, rows * n);
    for (auto& v : w) v += 1.0;
    Vec y(x.size()), rstd(rows);
    auto loss = [&] {
        rmsnorm_gated_forward(x.data(), z.data(), rows, n, w.data(), kNormEps, y.data(),
                              rstd.data());
        return dot(c, y);
    };
    loss();
    Vec dx(x.size()), dz(z.size()), dw(n, 0.0);
    rmsnorm_gated_backward(c.data(), x.data(), z.data(), w.data(), rstd.data(), rows, n, dx.data(),
                           dz.data(), dw.data());
    double e = check(x, dx, loss, "dx");
    e = std::max(e, check(z, dz, loss, "dz"));
    e = std::max(e, check(w, dw, loss, "dw"));
    RecordProperty("max_rel_error", sci(e));
}

// The whole mixer between the projections, as model/delta_block.cpp: the
// convolution of in_proj_qkv's output, q and k L2-normalised, the gates from
// in_proj_a and in_proj_b, the delta rule, and the gated RMSNorm with
// in_proj_z's output; loss Σ c ∘ out.
struct Mixer {
    static constexpr int64_t dk = 4, C = 2 * kKeyHeads * dk + kValueHeads * kDv;
    static constexpr int64_t H = kValueHeads, ld_o = kValueHeads * kDv;
    Vec x, conv_w, a, b, z, a_log, dt_bias, norm_w, c;
    // the forward's activations
    Vec pre, qkv, inv, g, beta, o, y, rstd;
    std::vector<double> states;

    explicit Mixer(std::mt19937_64& rng)
        : x(randn(rng, kRows * C)),
          conv_w(randn(rng, C * kConvK, 0.5)),
          a(randn(rng, kRows * H)),
          b(randn(rng, kRows * H)),
          z(randn(rng, kRows * ld_o)),
          a_log(randn(rng, H, 0.5)),
          dt_bias(randn(rng, H, 0.5)),
          norm_w(randn(rng, kDv, 0.2)),
          c(randn(rng, kRows * ld_o)) {
        for (auto& v : norm_w) v += 1.0;
    }

    DeltaRuleT<double> rule() const {
        DeltaRuleT<double> r;
        r.q = qkv.data();
        r.k = qkv.data() + kKeyHeads * dk;
        r.v = qkv.data() + 2 * kKeyHeads * dk;
        r.g = g.data();
        r.beta = beta.data();
        r.windows = kWindows;
        r.L = kL;
        r.ld_qk = r.ld_v = C;
        r.k_heads = kKeyHeads;
        r.v_heads = H;
        r.dk = dk;
        r.dv = kDv;
        return r;
    }

    double loss() {
        pre.resize(x.size());
        qkv.resize(x.size());
        inv.resize(kRows * 2 * kKeyHeads);
        g.resize(kRows * H);
        beta.resize(kRows * H);
        o.resize(kRows * ld_o);
        y.resize(o.size());
        rstd.resize(kRows * H);
        conv_silu_forward(x.data(), kWindows, kL, C, conv_w.data(), kConvK, pre.data(), qkv.data());
        l2norm_forward(qkv.data(), kRows, C, 2 * kKeyHeads, dk, kL2Eps, qkv.data(), inv.data());
        delta_gates_forward(a.data(), b.data(), kRows, H, a_log.data(), dt_bias.data(), g.data(),
                            beta.data());
        delta_rule_forward(rule(), kChunk, o.data(), ld_o, states);
        rmsnorm_gated_forward(o.data(), z.data(), kRows * H, kDv, norm_w.data(), kNormEps, y.data(),
                              rstd.data());
        return dot(c, y);
    }
};

TEST(TuneDeltaGrad, WholeMixerMatchesFiniteDifferences) {
    std::mt19937_64 rng(6);
    Mixer m(rng);
    m.loss();
    const int64_t H = Mixer::H, C = Mixer::C, dk = Mixer::dk;
    Vec d_o(m.o.size()), dz(m.z.size()), dnorm(kDv, 0.0);
    rmsnorm_gated_backward(m.c.data(), m.o.data(), m.z.data(), m.norm_w.data(), m.rstd.data(),
                           kRows * H, kDv, d_o.data(), dz.data(), dnorm.data());
    Vec dqkv(m.qkv.size()), dg(m.g.size()), dbeta(m.beta.size());
    delta_rule_backward(m.rule(), kChunk, m.states, d_o.data(), Mixer::ld_o, dqkv.data(),
                        dqkv.data() + kKeyHeads * dk, dqkv.data() + 2 * kKeyHeads * dk, dg.data(),
                        dbeta.data());
    Vec da(m.a.size()), db(m.b.size());
    delta_gates_backward(dg.data(), dbeta.data(), m.a.data(), m.beta.data(), kRows, H,
                         m.a_log.data(), m.dt_bias.data(), da.data(), db.data());
    l2norm_backward(dqkv.data(), m.qkv.data(), m.inv.data(), kRows, C, 2 * kKeyHeads, dk,
                    dqkv.data());
    Vec dx(m.x.size()), dconv(m.conv_w.size(), 0.0);
    conv_silu_backward(dqkv.data(), m.x.data(), m.pre.data(), kWindows, kL, C, m.conv_w.data(),
                       kConvK, dx.data(), dconv.data());
    auto loss = [&] { return m.loss(); };
    double e = check(m.x, dx, loss, "dx");
    e = std::max(e, check(m.a, da, loss, "da"));
    e = std::max(e, check(m.b, db, loss, "db"));
    e = std::max(e, check(m.z, dz, loss, "dz"));
    e = std::max(e, check(m.conv_w, dconv, loss, "conv dw"));
    e = std::max(e, check(m.norm_w, dnorm, loss, "norm dw"));
    RecordProperty("max_rel_error", sci(e));
}

// ── the float forwards against the runtime's ────────────────────────────────────

using Fvec = std::vector<float>;

Fvec randn_f(std::mt19937_64& rng, size_t n, double s = 1.0) {
    const Vec v = randn(rng, n, s);
    return Fvec(v.begin(), v.end());
}

// max_i |a_i − b_i| / max(floor, max_i |b_i|)
double rel_diff(const Fvec& a, const Fvec& b, double floor = 0) {
    double d = 0, m = floor;
    for (size_t i = 0; i < a.size(); ++i) {
        d = std::max(d, std::abs(static_cast<double>(a[i]) - b[i]));
        m = std::max(m, std::abs(static_cast<double>(b[i])));
    }
    return d / m;
}

// One window of 70 tokens (more than one chunk of 64 for the runtime's
// chunked form). Each operation runs on the same inputs both ways.
// Tolerances: the conv, l2norm, gates, gated RMSNorm and the delta rule's
// step form are written with the runtime's operations in the runtime's
// order, so they agree to a few float32 roundings (u = 6e-8) of their
// largest value; 1e-6 leaves room for a compiler contracting differently. The
// chunked form (WY, a triangular solve and GEMMs) sums in another order: each
// output is a sum of ≲ 64 · dk products of unit-sized terms (|k| = |q| = 1,
// decays ≤ 1, β < 1), so its rounding is a few hundred u ≈ 1e-5 at worst,
// about √(64 · dk) u ≈ 2e-6 in practice; 2e-5 of the largest output.
TEST(TuneDeltaGrad, FloatForwardsMatchTheRuntime) {
    std::mt19937_64 rng(8);
    const int64_t L = 70, hk = 2, H = 4, dk = 16, dv = 8, K = 4;
    const int64_t C = 2 * hk * dk + H * dv, ld_o = H * dv;
    const float eps = 1e-6f;
    // the convolution from zero history
    const Fvec x = randn_f(rng, L * C), w = randn_f(rng, C * K, 0.5);
    Fvec pre(x.size()), y(x.size()), y_rt(x.size()), conv_state((K - 1) * C, 0.0f);
    conv_silu_forward(x.data(), 1, L, C, w.data(), K, pre.data(), y.data());
    model::causal_conv1d_silu(x.data(), L, C, w.data(), K, conv_state.data(), y_rt.data());
    const double e_conv = rel_diff(y, y_rt);
    EXPECT_LE(e_conv, 1e-6);
    RecordProperty("conv_vs_runtime", sci(e_conv));
    // q, k normalised per key head, in place as in the runtime
    Fvec qkv = y_rt, inv(L * 2 * hk);
    l2norm_forward(y_rt.data(), L, C, 2 * hk, dk, eps, qkv.data(), inv.data());
    model::l2norm_heads(y_rt.data(), L, C, 2 * hk, dk, eps);
    const double e_l2norm = rel_diff(qkv, y_rt);
    EXPECT_LE(e_l2norm, 1e-6);
    RecordProperty("l2norm_vs_runtime", sci(e_l2norm));
    // the gates, one head past the softplus threshold
    Fvec a = randn_f(rng, L * H), b = randn_f(rng, L * H), a_log = randn_f(rng, H, 0.5),
         dt_bias = randn_f(rng, H);
    dt_bias[H - 1] = 20.0f;
    Fvec g(L * H), beta(L * H), g_rt(L * H), beta_rt(L * H);
    delta_gates_forward(a.data(), b.data(), L, H, a_log.data(), dt_bias.data(), g.data(),
                        beta.data());
    model::delta_gates(a.data(), b.data(), L, H, a_log.data(), dt_bias.data(), g_rt.data(),
                       beta_rt.data());
    const double e_g = rel_diff(g, g_rt);
    EXPECT_LE(e_g, 1e-6);
    RecordProperty("g_vs_runtime", sci(e_g));
    const double e_beta = rel_diff(beta, beta_rt);
    EXPECT_LE(e_beta, 1e-6);
    RecordProperty("beta_vs_runtime", sci(e_beta));
    // the delta rule on the runtime's inputs, the gentler decays of a model
    for (auto& v : g_rt) v = std::max(v, -3.0f);
    DeltaRuleT<float> r;
    model::DeltaRule rr;
    r.q = rr.q = y_rt.data();
    r.k = rr.k = y_rt.data() + hk * dk;
    r.v = rr.v = y_rt.data() + 2 * hk * dk;
    r.g = rr.g = g_rt.data();
    r.beta = rr.beta = beta_rt.data();
    r.windows = 1;
    r.L = rr.T = L;
    r.ld_qk = r.ld_v = rr.ld_qk = rr.ld_v = C;
    r.k_heads = rr.k_heads = hk;
    r.v_heads = rr.v_heads = H;
    r.dk = rr.dk = dk;
    r.dv = rr.dv = dv;
    Fvec o(L * ld_o), o_step(o.size()), o_chunk(o.size());
    std::vector<float> states;
    delta_rule_forward(r, 16, o.data(), ld_o, states);
    Fvec s_step(H * dk * dv, 0.0f), s_chunk(H * dk * dv, 0.0f);
    model::gated_delta_recurrent(rr, s_step.data(), ld_o, o_step.data());
    model::gated_delta_chunked(rr, 64, s_chunk.data(), ld_o, o_chunk.data());
    const double e_step = rel_diff(o, o_step), e_chunk = rel_diff(o, o_chunk);
    EXPECT_LE(e_step, 1e-6);
    EXPECT_LE(e_chunk, 2e-5);
    // the gated RMSNorm per value head
    const Fvec z = randn_f(rng, L * ld_o), nw = randn_f(rng, dv, 0.2);
    Fvec out(o.size()), out_rt(o.size()), rstd(L * H);
    rmsnorm_gated_forward(o_step.data(), z.data(), L * H, dv, nw.data(), eps, out.data(),
                          rstd.data());
    model::rmsnorm_gated(o_step.data(), z.data(), L * H, dv, nw.data(), eps, out_rt.data());
    const double e_rmsnorm_gated = rel_diff(out, out_rt);
    EXPECT_LE(e_rmsnorm_gated, 1e-6);
    RecordProperty("rmsnorm_gated_vs_runtime", sci(e_rmsnorm_gated));
    RecordProperty("delta_rule_vs_step", sci(e_step));
    RecordProperty("delta_rule_vs_chunked", sci(e_chunk));
}

}  // namespace
}  // namespace cortiq::tune
