// Stage 5: exact block least squares in the H metric (SPEC §3.5). Each block
// (ℓ of all paths jointly, h row by row, g of one path) is the exact minimiser
// of err_H with the others fixed, so no block raises err_H.
#include <cmath>

#include "core/parallel.hpp"
#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

namespace {

constexpr double kRidge = 1e-10;  // relative ridge of every SPD solve (SPEC §3.5)

MatD scaled_signs(const MatD& s, const VecD* rows, const VecD* cols) {
    MatD o = s;
    for (int64_t i = 0; i < o.rows(); ++i)
        for (int64_t k = 0; k < o.cols(); ++k)
            o(i, k) *= (rows ? (*rows)[i] : 1.0) * (cols ? (*cols)[k] : 1.0);
    return o;
}

}  // namespace

// ℓ: with A_p = diag(h_p) S_U,p and B_p = diag(g_p) S_V,p, err_H is quadratic in
// ℓ with the Pr × Pr matrix S[(p,k),(q,k')] = (A_pᵀA_q)_{kk'} (B_pᵀ H B_q)_{kk'}
// and right side b[(p,k)] = (A_pᵀ W H B_p)_{kk}.
void als_l(blr::Factors& factors, const TensorContext& c) {
    const size_t np = factors.paths.size();
    const int64_t r = factors.r, pr = static_cast<int64_t>(np) * r;
    std::vector<MatD> a(np), b(np), hb(np);
    for (size_t p = 0; p < np; ++p) {
        a[p] = scaled_signs(factors.paths[p].su, &factors.paths[p].h, nullptr);
        b[p] = factors.right(p);
        hb[p] = la::gemm(c.input_ctx.h, false, b[p], false);
    }
    MatD sys(pr, pr);
    VecD rhs(pr);
    for (size_t p = 0; p < np; ++p) {
        const MatD whb = la::gemm(c.wh, false, b[p], false);
        for (int64_t k = 0; k < r; ++k) {
            double s = 0;
            for (int64_t i = 0; i < factors.m; ++i) s += a[p](i, k) * whb(i, k);
            rhs[p * r + k] = s;
        }
        for (size_t q = 0; q < np; ++q) {
            const MatD aa = la::gemm(a[p], true, a[q], false);
            const MatD bb = la::gemm(b[p], true, hb[q], false);
            for (int64_t k = 0; k < r; ++k)
                for (int64_t k2 = 0; k2 < r; ++k2)
                    sys(p * r + k, q * r + k2) = aa(k, k2) * bb(k, k2);
        }
    }
    const VecD l = la::solve_spd(sys, rhs, kRidge);
    for (size_t p = 0; p < np; ++p)
        for (int64_t k = 0; k < r; ++k) factors.paths[p].l[k] = l[p * r + k];
}

// h: row i of Ŵ is Σ_p h_p,i z_p,iᵀ with z_p,i = B_p (s_p,i ∘ ℓ_p); the P × P
// normal equations per row: G[p,q] = (s∘ℓ)_pᵀ K_pq (s∘ℓ)_q, K_pq = B_pᵀ H B_q,
// rhs[p] = (s∘ℓ)_pᵀ B_pᵀ H w_i.
void als_h(blr::Factors& factors, const TensorContext& c) {
    const size_t np = factors.paths.size();
    const int64_t m = factors.m;
    std::vector<MatD> sl(np), whb(np), b(np), hb(np);
    for (size_t p = 0; p < np; ++p) {
        sl[p] = scaled_signs(factors.paths[p].su, nullptr, &factors.paths[p].l);
        b[p] = factors.right(p);
        hb[p] = la::gemm(c.input_ctx.h, false, b[p], false);
        whb[p] = la::gemm(c.wh, false, b[p], false);
    }
    // sl_p K_pq (m × r) for p ≤ q
    std::vector<std::vector<MatD>> slk(np, std::vector<MatD>(np));
    for (size_t p = 0; p < np; ++p)
        for (size_t q = p; q < np; ++q)
            slk[p][q] = la::gemm(sl[p], false, la::gemm(b[p], true, hb[q], false), false);
    parallel_for(
        0, m,
        [&](int64_t i) {
            double g[2][2] = {{0, 0}, {0, 0}}, rh[2] = {0, 0};
            for (size_t p = 0; p < np; ++p) {
                rh[p] = la::dot(whb[p].row(i), sl[p].row(i), factors.r);
                for (size_t q = p; q < np; ++q)
                    g[p][q] = g[q][p] = la::dot(slk[p][q].row(i), sl[q].row(i), factors.r);
            }
            if (np == 1) {
                const double d = g[0][0] * (1 + kRidge);
                if (d > 0) factors.paths[0].h[i] = rh[0] / d;
            } else {
                const double a = g[0][0] * (1 + kRidge), dd = g[1][1] * (1 + kRidge), bo = g[0][1];
                const double det = a * dd - bo * bo;
                if (det > 1e-14 * a * dd && a > 0 && dd > 0) {
                    factors.paths[0].h[i] = (dd * rh[0] - bo * rh[1]) / det;
                    factors.paths[1].h[i] = (a * rh[1] - bo * rh[0]) / det;
                } else if (a > 0) {  // the second direction is degenerate: fit the first alone
                    factors.paths[0].h[i] = (rh[0] - bo * factors.paths[1].h[i]) / a;
                }
            }
        },
        64);
}

// g of path p: Ŵ_p = M S_Vᵀ diag(g), M = left_p; err_H is quadratic in g with
// the n × n matrix (S_V K S_Vᵀ) ∘ H, K = MᵀM, and right side
// rhs_j = s_jᵀ [(W − Σ_{q≠p} Ŵ_q) H]ᵀ M.
void als_g(blr::Factors& factors, const TensorContext& c, size_t p) {
    const int64_t n = factors.n;
    const MatD mm = factors.left(p);
    MatD y = la::gemm(c.wh, true, mm, false);  // H Wᵀ M
    for (size_t q = 0; q < factors.paths.size(); ++q) {
        if (q == p) continue;
        const MatD hgq = la::gemm(c.input_ctx.h, false, factors.right(q), false);
        la::gemm_into(-1.0, hgq, false, la::gemm(factors.left(q), true, mm, false), false, 1.0, y);
    }
    const MatD& sv = factors.paths[p].sv;
    VecD rhs(n);
    for (int64_t j = 0; j < n; ++j) rhs[j] = la::dot(sv.row(j), y.row(j), factors.r);
    const MatD k = la::gemm(mm, true, mm, false);
    MatD sys = la::gemm(la::gemm(sv, false, k, false), false, sv, true);
    for (int64_t i = 0; i < sys.size(); ++i) sys.data()[i] *= c.input_ctx.h.data()[i];
    factors.paths[p].g = la::solve_spd(sys, rhs, kRidge);
}

void als(blr::Factors& factors, const TensorContext& c, int sweeps) {
    ScopedStage st(c.prof, "als");
    for (int s = 0; s < sweeps; ++s) {
        als_l(factors, c);
        als_h(factors, c);
        for (size_t p = 0; p < factors.paths.size(); ++p) als_g(factors, c, p);
    }
}

}  // namespace cortiq::encode::cpu
