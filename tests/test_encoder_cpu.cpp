// The float64 NVG encoder, stage by stage: each test asserts a mathematical
// property (an exact minimiser, a monotone step, an independent recomputation).
#include <gtest/gtest.h>
#include <lapacke.h>

#include <cmath>

#include "core/error.hpp"
#include "core/rng.hpp"
#include "encode/cpu/stages.hpp"
#include "encode/encode_many.hpp"
#include "encode/synthetic.hpp"
#include "flip_gain.hpp"
#include "linalg/blas.hpp"
#include "linalg/polar_scaling.hpp"

using namespace cortiq;
using namespace cortiq::encode;
using namespace cortiq::encode::cpu;

namespace {

double rel_diff(const MatD& a, const MatD& b) {
    double num = 0, den = 0;
    for (int64_t k = 0; k < a.size(); ++k) {
        num += std::pow(a.data()[k] - b.data()[k], 2);
        den += std::pow(b.data()[k], 2);
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

struct Fixture {
    SyntheticLayer s;
    std::unique_ptr<InputContext> input_ctx;
    std::unique_ptr<TensorContext> tc;
    Fixture(int64_t m, int64_t n, uint64_t seed, double rho = 0.03) {
        s = synthetic_layer(m, n, seed);
        input_ctx = std::make_unique<InputContext>(s.h_fit, s.h_sel, rho);
        tc = std::make_unique<TensorContext>(s.w, *input_ctx);
    }
};

Options small_options() {
    Options o;
    o.itq_iters = 20;
    return o;
}

}  // namespace

TEST(Context, UcIsTheUpperCholeskyFactorOfPermutedInverse) {
    Fixture f(24, 64, 1);
    const auto& input_ctx = *f.input_ctx;
    const int64_t n = input_ctx.n;
    MatD hp(n, n);
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = 0; j < n; ++j)
            hp(i, j) = input_ctx.h(input_ctx.perm[i], input_ctx.perm[j]);
    for (int64_t i = 1; i < n; ++i)
        EXPECT_GE(input_ctx.h(input_ctx.perm[i - 1], input_ctx.perm[i - 1]),
                  input_ctx.h(input_ctx.perm[i], input_ctx.perm[i]));
    for (int64_t i = 0; i < n; ++i) {
        EXPECT_GT(input_ctx.uc(i, i), 0);
        for (int64_t j = 0; j < i; ++j) EXPECT_EQ(input_ctx.uc(i, j), 0.0);
    }
    // Hp · (Ucᵀ Uc) = I
    const MatD prod = la::gemm(hp, false, la::gemm(input_ctx.uc, true, input_ctx.uc, false), false);
    EXPECT_LT(rel_diff(prod, MatD::identity(n)), 1e-9);
    // L Lᵀ = H
    EXPECT_LT(rel_diff(la::gemm(input_ctx.l(), false, input_ctx.l(), true), input_ctx.h), 1e-12);
}

TEST(Context, RejectsBadGrams) {
    auto s = synthetic_layer(8, 16, 2);
    MatD asym = s.h_fit;
    asym(0, 1) += 1.0;
    EXPECT_THROW(InputContext(asym, s.h_sel, 0.01), Error);
    MatD nan = s.h_fit;
    nan(3, 3) = NAN;
    EXPECT_THROW(InputContext(nan, s.h_sel, 0.01), Error);
    MatD indefinite = s.h_fit;  // −H + small diagonal: negative eigenvalues
    for (auto& v : indefinite.vec()) v = -v;
    for (int64_t i = 0; i < 16; ++i) indefinite(i, i) = std::abs(indefinite(i, i)) * 0.01;
    EXPECT_THROW(InputContext(indefinite, s.h_sel, 0.0), Error);
    EXPECT_THROW(InputContext(s.h_fit, MatD(15, 15), 0.01), Error);
    InputContext ok(s.h_fit, s.h_sel, 0.01);
    MatD w = s.w;
    w(0, 0) = NAN;
    EXPECT_THROW(TensorContext(w, ok), Error);
    EXPECT_THROW(TensorContext(MatD(4, 15), ok), Error);
}

// The best rank-r approximation in the H metric by another route: the SVD of
// W·L (dgesvd), truncated, mapped back by L⁻¹.
TEST(Latents, EqualTruncatedSvdOfWhitenedWeight) {
    for (auto [m, n] : {std::pair{40, 96}, std::pair{96, 40}}) {
        Fixture f(m, n, 3);
        const int64_t r = 12;
        auto [up, vp] = latents(f.s.w, &f.tc->wh, *f.input_ctx, r);
        const MatD got = la::gemm(up, false, vp, true);
        MatD wl = la::gemm(f.s.w, false, f.input_ctx->l(), false);
        const int64_t k = std::min(m, n);
        MatD u(m, k), vt(k, n);
        VecD sv(k), superb(k);
        MatD a = wl;
        ASSERT_EQ(LAPACKE_dgesvd(LAPACK_ROW_MAJOR, 'S', 'S', m, n, a.data(), n, sv.data(), u.data(),
                                 k, vt.data(), n, superb.data()),
                  0);
        MatD xr(m, n);
        for (int64_t i = 0; i < m; ++i)
            for (int64_t j = 0; j < n; ++j) {
                double s = 0;
                for (int64_t q = 0; q < r; ++q) s += u(i, q) * sv[q] * vt(q, j);
                xr(i, j) = s;
            }
        MatD linv = f.input_ctx->l();
        la::tri_inv(linv, false);
        const MatD want = la::gemm(xr, false, linv, false);
        EXPECT_LT(rel_diff(got, want), 1e-8) << m << "x" << n;
        // balanced: ‖U_p[:,k]‖ = ‖L V_p[:,k]‖ (both √σ_k)
        const MatD lv = la::gemm(f.input_ctx->l(), true, vp, false);
        for (int64_t q = 0; q < r; ++q) {
            double nu = 0, nv = 0;
            for (int64_t i = 0; i < m; ++i) nu += up(i, q) * up(i, q);
            for (int64_t j = 0; j < n; ++j) nv += lv(j, q) * lv(j, q);
            EXPECT_NEAR(nu, nv, 1e-8 * nu);
        }
    }
}

TEST(Polar, NewtonSchulzMatchesEigenRoute) {
    Rng rng(4);
    MatD m(30, 30);
    for (auto& v : m.vec()) v = rng.normal();
    int it = 0;
    const MatD ns = la::polar_newton_schulz(m, 1e-10, 200, &it);
    const MatD ev = la::polar_eig(m);
    EXPECT_LT(rel_diff(ns, ev), 1e-8);
    EXPECT_LT(rel_diff(la::gemm(ev, true, ev, false), MatD::identity(30)), 1e-10);
}

// Sturm bisection against the closed form of the second-difference matrix:
// eigenvalues 2 − 2cos(jπ/(k+1)).
TEST(Polar, TridiagonalExtremesMatchTheClosedForm) {
    for (const int k : {1, 2, 7, 40}) {
        const std::vector<double> diag(k, 2.0), off(k - 1, -1.0);
        const auto [lo, hi] = la::tridiag_extremes(diag, off);
        const double pi = std::acos(-1.0);
        EXPECT_NEAR(lo, 2 - 2 * std::cos(pi / (k + 1)), 1e-12) << k;
        EXPECT_NEAR(hi, 2 - 2 * std::cos(k * pi / (k + 1)), 1e-12) << k;
    }
}

// The Ritz values lie inside the spectrum; the largest converges in a few
// steps; with as many steps as the size, both ends are exact.
TEST(Polar, LanczosExtremesLieInsideTheSpectrum) {
    const int64_t n = 500;
    VecD lam(n);
    for (int64_t i = 0; i < n; ++i) lam[i] = std::pow(1e-4, static_cast<double>(i) / (n - 1));
    const auto diag_op = [&](const VecD& v, VecD& out) {
        out.resize(v.size());
        for (size_t i = 0; i < v.size(); ++i) out[i] = lam[i] * v[i];
    };
    for (const int steps : {8, 24, 48}) {
        const auto [lo, hi] = la::lanczos_extremes(n, steps, diag_op);
        EXPECT_GE(lo, 1e-4 * (1 - 1e-9)) << steps;
        EXPECT_LE(lo, hi);
        EXPECT_LE(hi, 1.0 + 1e-9) << steps;
        EXPECT_GT(hi, steps >= 24 ? 0.999 : 0.95) << steps;  // the top of lam is dense too
    }
    const int64_t small = 10;
    const auto [lo, hi] = la::lanczos_extremes(small, 40, diag_op);  // the first 10 of lam
    EXPECT_NEAR(lo, lam[small - 1], 1e-10);
    EXPECT_NEAR(hi, 1.0, 1e-10);
}

// Chen–Chow's scaled step maps [l, 1] into [l', 1], with l' above the
// unscaled step's p(l), and both ends of the interval meet at l'.
TEST(Polar, ScaledStepMapsTheIntervalIntoItsBound) {
    const auto p = [](double s) { return 0.5 * s * (3 - s * s); };
    for (const double u : {1.0, la::kNsUpperMargin})
        for (const double l : {1e-4, 1e-2, 0.1, 0.5, 0.9, 1.0}) {
            const la::NsScaledStep st = la::ns_scaled_step(l, u);
            if (u == 1.0) EXPECT_GE(st.next_l, p(l) - 1e-15) << l;
            EXPECT_NEAR(p(st.alpha * l), st.next_l, 1e-12) << l;
            EXPECT_NEAR(p(st.alpha * u), st.next_l, 1e-12) << l;  // both ends meet
            for (int k = 0; k <= 100; ++k) {
                const double s = l + (u - l) * k / 100.0;
                EXPECT_GE(p(st.alpha * s), st.next_l - 1e-12) << l << " " << s;
                EXPECT_LE(p(st.alpha * s), 1 + 1e-12) << l << " " << s;
            }
        }
    EXPECT_GT(la::ns_scaled_step(0.01).next_l, 2.5 * 0.01);  // vs ×1.5 unscaled
    // with the margin, a σ rounded to 1.005 stays positive even from l = 1e-6
    const la::NsScaledStep tiny = la::ns_scaled_step(1e-6);
    EXPECT_GT(p(tiny.alpha * 1.005), 0.0);
}

// The scaled iteration gives the same polar factor as the eigenvalue route,
// in fewer steps than the unscaled one, on M = Q diag(σ) Pᵀ with σ from
// 0.01 to 1 (where the unscaled steps grow the small σ ×1.5 at a time).
TEST(Polar, ScaledNewtonSchulzMatchesEigenRouteInFewerSteps) {
    Rng rng(9);
    const int64_t r = 120;
    MatD q(r, r), pm(r, r);
    for (auto& v : q.vec()) v = rng.normal();
    for (auto& v : pm.vec()) v = rng.normal();
    q = la::polar_eig(q);
    pm = la::polar_eig(pm);
    MatD qs = q;
    for (int64_t i = 0; i < r; ++i)
        for (int64_t k = 0; k < r; ++k)
            qs(i, k) *= std::pow(0.01, static_cast<double>(k) / (r - 1));
    const MatD m = la::gemm(qs, false, pm, true);
    const MatD want = la::gemm(q, false, pm, true);
    int it_plain = 0, it_scaled = 0;
    const MatD plain = la::polar_newton_schulz(m, 1e-10, 200, &it_plain);
    const MatD scaled = la::polar_scaled_newton_schulz(m, 1e-10, 200, &it_scaled);
    EXPECT_LT(rel_diff(plain, want), 1e-8);
    EXPECT_LT(rel_diff(scaled, want), 1e-8);
    EXPECT_LT(rel_diff(la::polar_eig(m), want), 1e-8);
    EXPECT_LT(it_scaled, it_plain);
    EXPECT_LE(it_scaled, 12) << "unscaled: " << it_plain;
    // a well-conditioned matrix too, and the zero matrix
    MatD w(r, r);
    for (auto& v : w.vec()) v = rng.normal();
    for (int64_t i = 0; i < r; ++i) w(i, i) += 30;
    EXPECT_LT(rel_diff(la::polar_scaled_newton_schulz(w, 1e-10, 200), la::polar_eig(w)), 1e-8);
    EXPECT_LT(rel_diff(la::polar_scaled_newton_schulz(MatD(5, 5)), MatD::identity(5)), 1e-15);
    RecordProperty("steps", fmt::format("{} scaled, {} unscaled", it_scaled, it_plain));
}

// On ITQ's own matrices M = Xᵀ B (a synthetic layer's first ITQ iterations),
// whose σ span about two decades under one dominant σ, the scaled iteration
// reaches the same polar factor in fewer steps.
TEST(Polar, ScaledStepsOnItqMatrices) {
    const int64_t m = 256, n = 688, r = 187;
    Fixture f(m, n, 7);
    auto [up, vp] = latents(f.s.w, &f.tc->wh, *f.input_ctx, r);
    auto [wu, wv] = itq_weights(up, vp, *f.input_ctx);
    const int64_t nn = m + n;
    MatD x(nn, r);
    VecD w2(nn);
    for (int64_t i = 0; i < nn; ++i) {
        const double* src = i < m ? up.row(i) : vp.row(i - m);
        const double nr = std::sqrt(la::dot(src, src, r));
        for (int64_t k = 0; k < r; ++k) x(i, k) = src[k] / nr;
        const double w = i < m ? wu[i] : wv[i - m];
        w2[i] = w * w;
    }
    MatD rot = MatD::identity(r), xr(nn, r);
    int plain_all = 0, scaled_all = 0;
    for (int it = 0; it < 3; ++it) {
        la::gemm_into(1.0, x, false, rot, false, 0.0, xr);
        for (int64_t i = 0; i < nn; ++i)
            for (int64_t k = 0; k < r; ++k) xr(i, k) = xr(i, k) >= 0 ? w2[i] : -w2[i];
        const MatD mm = la::gemm(x, true, xr, false);
        int plain = 0, scaled = 0;
        rot = la::polar_newton_schulz(mm, 1e-4, 60, &plain);
        const MatD rs = la::polar_scaled_newton_schulz(mm, 1e-4, 60, &scaled);
        EXPECT_LT(rel_diff(rs, rot), 1e-4) << it;
        EXPECT_LT(scaled, plain) << it;
        plain_all += plain;
        scaled_all += scaled;
    }
    RecordProperty("steps", fmt::format("{} scaled, {} plain", scaled_all, plain_all));
}

TEST(Itq, NeverLowersItsObjective) {
    Fixture f(60, 90, 5);
    auto [up, vp] = latents(f.s.w, &f.tc->wh, *f.input_ctx, 16);
    auto [wu, wv] = itq_weights(up, vp, *f.input_ctx);
    const ItqResult res = itq(up, vp, wu, wv, 30, /*eig_polar=*/true);
    for (size_t i = 1; i < res.objective.size(); ++i)
        EXPECT_GE(res.objective[i], res.objective[i - 1] * (1 - 1e-12)) << "iteration " << i;
    EXPECT_GT(res.objective.back(), res.objective.front());
    // the rotation keeps U_p V_pᵀ
    EXPECT_LT(rel_diff(la::gemm(res.u, false, res.v, true), la::gemm(up, false, vp, true)), 1e-9);
}

TEST(Svid, RankOneFitOfPositiveMatrixIsExactWhenRankOne) {
    VecD a{1, 2, 3, 4}, b{0.5, 1.5, 2.5};
    MatD m(4, 3);
    for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 3; ++k) m(i, k) = a[i] * b[k];
    auto [l, r] = rank1_pos(m);
    for (int i = 0; i < 4; ++i)
        for (int k = 0; k < 3; ++k) EXPECT_NEAR(l[i] * r[k], m(i, k), 1e-12);
}

// err along a line through the current scales is quadratic; an exact block
// minimiser leaves no first-order term: the best step along any direction
// gains at most a rounding-level fraction of the error.
template <class Get>
void expect_block_minimum(const blr::Factors& md, const TensorContext& c, Get get, uint64_t seed) {
    Rng rng(seed);
    const double f0 = err(md, c, Metric::h);
    for (int trial = 0; trial < 3; ++trial) {
        blr::Factors a = md, b = md;
        VecD& va = get(a);
        VecD& vb = get(b);
        double scale = 0;
        for (double v : va) scale += v * v;
        const double t = 1e-3 * std::sqrt(scale / static_cast<double>(va.size()));
        for (size_t k = 0; k < va.size(); ++k) {
            const double d = rng.normal() * t;
            va[k] += d;
            vb[k] -= d;
        }
        const double fp = err(a, c, Metric::h), fm = err(b, c, Metric::h);
        const double lin = (fp - fm) / 2, quad = (fp + fm) / 2 - f0;
        ASSERT_GT(quad, 0);
        EXPECT_LE(lin * lin / (4 * quad), 1e-9 * f0) << "first-order term " << lin << " f0 " << f0;
        EXPECT_GE(std::min(fp, fm), f0 * (1 - 1e-9));
    }
}

TEST(Als, EachBlockIsTheExactMinimiserAndNeverRaisesTheError) {
    for (int paths : {1, 2}) {
        Fixture f(48, 80, 7 + paths);
        Options o = small_options();
        o.als_init_sweeps = 0;
        o.als_joint_sweeps = 0;
        blr::Factors md = build_init(*f.tc, 10, paths, o);
        double e = err(md, *f.tc, Metric::h);
        for (int sweep = 0; sweep < 2; ++sweep) {
            als_l(md, *f.tc);
            const double el = err(md, *f.tc, Metric::h);
            EXPECT_LE(el, e * (1 + 1e-10));
            for (int p = 0; p < paths; ++p)
                expect_block_minimum(
                    md, *f.tc, [p](blr::Factors& x) -> VecD& { return x.paths[p].l; }, 11);
            als_h(md, *f.tc);
            const double eh = err(md, *f.tc, Metric::h);
            EXPECT_LE(eh, el * (1 + 1e-10));
            for (int p = 0; p < paths; ++p)
                expect_block_minimum(
                    md, *f.tc, [p](blr::Factors& x) -> VecD& { return x.paths[p].h; }, 12);
            double eg = eh;
            for (int p = 0; p < paths; ++p) {
                als_g(md, *f.tc, p);
                const double e2 = err(md, *f.tc, Metric::h);
                EXPECT_LE(e2, eg * (1 + 1e-10));
                eg = e2;
                expect_block_minimum(
                    md, *f.tc, [p](blr::Factors& x) -> VecD& { return x.paths[p].g; }, 13);
            }
            e = eg;
        }
    }
}

TEST(ErrorExpansion, EqualsDenseTrace) {
    for (int paths : {1, 2}) {
        Fixture f(30, 50, 17);
        blr::Factors md = build_init(*f.tc, 8, paths, small_options());
        const MatD what = md.dense();
        const double a = err(md, *f.tc, Metric::h), b = err_dense(f.s.w, what, f.input_ctx->h);
        EXPECT_NEAR(a, b, 1e-9 * b);
        EXPECT_NEAR(err(md, *f.tc, Metric::fit), err_dense(f.s.w, what, f.input_ctx->h_fit),
                    1e-9 * b);
        const double s = err_dense(f.s.w, what, f.input_ctx->h_sel);
        EXPECT_NEAR(err(md, *f.tc, Metric::sel), s, 1e-9 * s);
    }
}

TEST(FlipU, NeverRaisesTheError) {
    for (int paths : {1, 2}) {
        Fixture f(64, 96, 19 + paths);
        blr::Factors md = build_init(*f.tc, 12, paths, small_options());
        for (int p = 0; p < paths; ++p) {
            const double before = err(md, *f.tc, Metric::h);
            const int64_t flips = flip_u(md, *f.tc, p, 1e-12, 16);
            const double after = err(md, *f.tc, Metric::h);
            EXPECT_LE(after, before * (1 + 1e-12));
            if (flips > 0) EXPECT_LT(after, before);
            for (double v : md.paths[p].su.vec()) EXPECT_TRUE(v == 1.0 || v == -1.0);
        }
    }
}

// On a correlated Gram the feedback of each column's error to the later
// columns (GPTQ) must beat the same search without it.
TEST(GptqV, ErrorFeedbackBeatsTheSameSearchWithout) {
    int wins = 0;
    for (uint64_t seed : {23, 24, 25}) {
        Fixture f(64, 128, seed);
        blr::Factors md = build_init(*f.tc, 16, 1, small_options());
        blr::Factors with = md, without = md;
        gptq_v(with, *f.tc, 0, 1e-12, 16, 32, true);
        gptq_v(without, *f.tc, 0, 1e-12, 16, 32, false);
        const double ew = err(with, *f.tc, Metric::h), eo = err(without, *f.tc, Metric::h);
        if (ew < eo) ++wins;
        for (double v : with.paths[0].sv.vec()) EXPECT_TRUE(v == 1.0 || v == -1.0);
    }
    EXPECT_EQ(wins, 3);
}

TEST(GptqV, BlockSizeDoesNotChangeTheResult) {
    Fixture f(40, 100, 29);
    blr::Factors md = build_init(*f.tc, 10, 2, small_options());
    blr::Factors a = md, b = md;
    gptq_v(a, *f.tc, 1, 1e-12, 16, 7, true);
    gptq_v(b, *f.tc, 1, 1e-12, 16, 128, true);
    EXPECT_EQ(a.paths[1].sv.vec(), b.paths[1].sv.vec());
    for (int64_t j = 0; j < 100; ++j)
        EXPECT_NEAR(a.paths[1].g[j], b.paths[1].g[j], 1e-9 * std::abs(b.paths[1].g[j]) + 1e-15);
}

// Options::gptq_group decides only which feedback each column sees: group 1 is
// the reference search byte for byte; without feedback any group gives the
// same result; and one group spanning the whole (single) block leaves no
// feedback to see, so it is the search without feedback, while smaller groups
// still feed the later groups.
TEST(GptqV, ColumnGroupsDecideOnlyWhichFeedbackAColumnSees) {
    Fixture f(40, 100, 29);
    const blr::Factors md = build_init(*f.tc, 10, 2, small_options());
    auto run = [&](int block, bool feedback, int group) {
        blr::Factors g = md;
        gptq_v(g, *f.tc, 1, 1e-12, 16, block, feedback, 0, group);
        return g.paths[1];
    };
    blr::Factors ref = md;
    gptq_v(ref, *f.tc, 1, 1e-12, 16, 32, true);
    const blr::Path one = run(32, true, 1);
    EXPECT_EQ(one.sv.vec(), ref.paths[1].sv.vec());
    EXPECT_EQ(one.g, ref.paths[1].g);
    const blr::Path none = run(32, false, 1);
    for (int group : {3, 8, 100}) {
        const blr::Path nf = run(32, false, group);
        EXPECT_EQ(nf.sv.vec(), none.sv.vec()) << group;
        EXPECT_EQ(nf.g, none.g) << group;
    }
    const blr::Path whole = run(100, true, 100);
    EXPECT_EQ(whole.sv.vec(), none.sv.vec());
    EXPECT_EQ(whole.g, none.g);
    const blr::Path some = run(100, true, 8);
    EXPECT_NE(some.sv.vec(), none.sv.vec());  // the groups after the first see feedback
    EXPECT_NE(some.sv.vec(), one.sv.vec());   // ... but not their own group's
}

// --gptq-group auto: the largest power of two up to r/16, between 1 and 64;
// an explicit group passes through; and the whole encoder with auto equals the
// encoder with that group spelled out, byte for byte.
TEST(GptqV, AutoGroupFollowsTheRank) {
    const std::pair<int64_t, int> want[] = {{1, 1},     {31, 1},    {32, 2},      {63, 2},
                                            {64, 4},    {97, 4},    {128, 8},     {1006, 32},
                                            {1024, 64}, {1475, 64}, {1 << 20, 64}};
    for (const auto& [r, g] : want) EXPECT_EQ(gptq_group_for(0, r), g) << r;
    EXPECT_EQ(gptq_group_for(1, 4096), 1);
    EXPECT_EQ(gptq_group_for(16, 100), 16);
    Fixture f(48, 256, 41);
    Options auto_o = small_options();
    auto_o.gptq_group = 0;
    auto_o.paths = PathsChoice::one;
    auto_o.bpw = 2.0;
    const Encoded a = encode_tensor(f.s.w, *f.input_ctx, auto_o);
    ASSERT_GE(a.rank, 32) << a.line;  // so that auto's group is at least 2
    Options spelled = auto_o;
    spelled.gptq_group = gptq_group_for(0, a.rank);
    EXPECT_EQ(a.payload, encode_tensor(f.s.w, *f.input_ctx, spelled).payload);
}

// The rounds of simultaneous flips (Options::gptq_multi) stop where the exact
// scan stops: at signs no single flip improves (beyond the tolerance), with
// g_j the best scale for them, and the signs stay ±1.
TEST(GptqV, MultiFlipRoundsEndWhereNoSingleFlipHelps) {
    Fixture f(48, 80, 37);
    const blr::Factors md = build_init(*f.tc, 12, 1, small_options());
    for (int multi : {0, 1, 8, 64}) {
        blr::Factors g = md;
        const int64_t flips = gptq_v(g, *f.tc, 0, 1e-12, 64, 32, false, multi);
        EXPECT_GT(flips, 0) << multi;
        for (double v : g.paths[0].sv.vec()) ASSERT_TRUE(v == 1.0 || v == -1.0);
        for (int64_t j = 0; j < 80; ++j)
            EXPECT_LE(best_single_flip_gain(g, *f.tc, j), 1e-9)
                << "multi " << multi << " col " << j;
    }
}

// Options::gptq_passes bounds every column search of the encoder's gptq_v calls
// (one pass: exactly one per column).
TEST(GptqV, PassLimitOfTheEncoderBoundsEveryColumnSearch) {
    Fixture f(48, 64, 33);
    long long calls[2] = {}, passes[2] = {};
    for (int run = 0; run < 2; ++run) {
        Options o = small_options();
        if (run == 1) o.gptq_passes = 1;
        Profile prof;
        encode_tensor(f.s.w, *f.input_ctx, o, &prof);
        for (const auto& e : prof.entries()) {
            if (e.stage == "gptq_v") calls[run] = e.calls;
            if (e.stage == "gptq_v.passes") passes[run] = e.count;
        }
        ASSERT_GT(calls[run], 0);
    }
    EXPECT_GT(passes[0], calls[0] * 64);  // some column needed a second pass
    EXPECT_EQ(passes[1], calls[1] * 64);
}

TEST(Refine, NeverRaisesTheErrorAndKnotsHelp) {
    Fixture f(64, 128, 31);
    Options o = small_options();
    blr::Factors md = build_init(*f.tc, 14, 2, o);
    const double before = err(md, *f.tc, Metric::h);
    const blr::Factors out = refine(md, *f.tc, o);
    EXPECT_LT(err(out, *f.tc, Metric::h), before);
}

TEST(Encode, SelectionPicksTheLowerHeldOutError) {
    Fixture f(48, 96, 37);
    Options o = small_options();
    o.bpw = 1.5;
    const Encoded e = encode_tensor(f.s.w, *f.input_ctx, o);
    ASSERT_GT(e.err_p1_sel, 0);
    ASSERT_GT(e.err_p2_sel, 0);
    EXPECT_EQ(e.paths, e.err_p1_sel <= e.err_p2_sel ? 1 : 2);
    EXPECT_NO_THROW(blr::validate(e.payload, "t", 48, 96));
    EXPECT_LE(e.bpw, 1.5);
    EXPECT_EQ(e.rank, blr::rank_for(48, 96, 1.5, e.paths));
    // the stored errors are those of the payload's dense matrix
    const MatD dq = blr::dequant(e.payload).cast<double>();
    const double sel = std::sqrt(err_dense(f.s.w, dq, f.input_ctx->h_sel) / f.tc->a_sel);
    EXPECT_NEAR(e.err_sel, sel, 1e-5 * sel);
    for (auto [choice, p] : {std::pair{PathsChoice::one, 1}, std::pair{PathsChoice::two, 2}}) {
        o.paths = choice;
        EXPECT_EQ(encode_tensor(f.s.w, *f.input_ctx, o).paths, p);
    }
}

TEST(Encode, NvgBeatsTheBaselinesAtEqualBits) {
    Fixture f(96, 256, 41);
    Options o = small_options();
    o.bpw = 1.0;
    auto run = [&](Method m) {
        o.method = m;
        return encode_tensor(f.s.w, *f.input_ctx, o);
    };
    const Encoded nvg = run(Method::nvg), nok = run(Method::nvg_noknots), sv = run(Method::svid),
                  rs = run(Method::rtn_sign);
    EXPECT_LT(nvg.err_sel, nok.err_sel);
    EXPECT_LT(nvg.err_sel, sv.err_sel);
    EXPECT_LT(nvg.err_sel, rs.err_sel);
    EXPECT_LE(nvg.bpw, sv.bpw + 1e-12);
    EXPECT_LE(nvg.bpw, rs.bpw);
}

TEST(Encode, BudgetBelowOneRankOnePathGivesRankOneAndSaysSo) {
    // 16 x 32 at 0.3 bpw: 154 bits, below one rank-1 path (48 signs + 49 f16 scales)
    Fixture f(16, 32, 43);
    Options o = small_options();
    o.bpw = 0.3;
    ASSERT_LT(blr::rank_for(16, 32, o.bpw, 1), 1);
    for (Method m : {Method::nvg, Method::svid}) {
        o.method = m;
        const Encoded e = encode_tensor(f.s.w, *f.input_ctx, o);
        EXPECT_EQ(e.rank, 1);
        EXPECT_EQ(e.paths, 1);
        EXPECT_GT(e.bpw, o.bpw);
        EXPECT_EQ(e.bits, blr::bits(16, 32, 1, 1));
        EXPECT_NE(e.line.find("over budget"), std::string::npos) << e.line;
        EXPECT_NO_THROW(blr::validate(e.payload, "t", 16, 32));
        EXPECT_LT(e.err_sel, 1.0);
    }
}

// encode_many on the CPU with ManyOptions::profile: each result's enc.stages
// holds its encoder stages, the input context's stage goes with the first job
// of its input, and the payloads are those of a run without the profile.
// A "stage/part" entry times a part of its stage: the total and the shares
// count each second once, and merging keeps the parts apart.
TEST(Profile, PartsAreLeftOutOfTheTotalAndTheShares) {
    Profile p;
    p.add("itq", 3.0);
    p.add("itq/polar_tf32", 2.0, 12);
    p.add("als", 1.0);
    EXPECT_DOUBLE_EQ(p.total(), 4.0);
    const std::string line = p.line();
    EXPECT_NE(line.find("itq 3.000s (75%)"), std::string::npos) << line;
    EXPECT_NE(line.find("itq/polar_tf32 2.000s (50%) n=12"), std::string::npos) << line;
    EXPECT_NE(line.find("als 1.000s (25%)"), std::string::npos) << line;
    Profile q;
    q.add("itq/polar_tf32", 1.0, 3);
    q.merge(p);
    EXPECT_DOUBLE_EQ(q.total(), 4.0);
    for (const auto& e : q.entries())
        if (e.stage == "itq/polar_tf32") {
            EXPECT_DOUBLE_EQ(e.seconds, 3.0);
            EXPECT_EQ(e.count, 15);
        }
}

TEST(EncodeMany, ProfileGoesIntoEachResultsStagesOnTheCpu) {
    const auto s0 = synthetic_layer(32, 48, 81), s1 = synthetic_layer(40, 32, 82);
    const std::vector<ManyInput> inputs = {{&s0.h_fit, &s0.h_sel, "in0"},
                                           {&s1.h_fit, &s1.h_sel, "in1"}};
    const Options o = small_options();
    const MatD w2 = synthetic_layer(24, 48, 83).w;
    const std::vector<ManyJob> jobs = {{"a", &s0.w, 0, o}, {"b", &s1.w, 1, o}, {"c", &w2, 0, o}};
    ManyOptions mo;
    mo.device = Device::cpu;
    const auto plain = encode_many(inputs, jobs, mo);
    mo.profile = true;
    const auto profiled = encode_many(inputs, jobs, mo);
    auto has = [](const Profile& p, const std::string& stage) {
        for (const auto& e : p.entries())
            if (e.stage == stage) return true;
        return false;
    };
    for (size_t j = 0; j < jobs.size(); ++j) {
        EXPECT_EQ(profiled[j].enc.payload, plain[j].enc.payload) << jobs[j].name;
        EXPECT_TRUE(plain[j].enc.stages.entries().empty()) << jobs[j].name;
        EXPECT_TRUE(has(profiled[j].enc.stages, "als")) << jobs[j].name;
        EXPECT_TRUE(has(profiled[j].enc.stages, "gptq_v")) << jobs[j].name;
        // job c reuses input 0's context, built for job a
        EXPECT_EQ(has(profiled[j].enc.stages, "context"), j != 2) << jobs[j].name;
    }
}
