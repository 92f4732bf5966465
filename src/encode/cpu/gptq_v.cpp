// Stage 7, input side (SPEC §3.7): the columns of S_V,p in act order, as in
// GPTQ. Column j of path p is g_j M s_j (M = left_p, s_j the j-th row of S_V,p);
// against its target t_j the best g_j for given signs is sᵀb / sᵀKs (b = Mᵀt_j,
// K = MᵀM), leaving the error ‖t_j‖² − (sᵀb)² / sᵀKs, which a greedy flip
// search from the current signs minimises. The column's error e_j reaches the
// later columns k through the upper Cholesky factor of H⁻¹:
//   t_k ← t_k − e_j Uc[j,k] / Uc[j,j],
// carried in the latent space: Mᵀe_j = b_j − g_j K s_j, so only r-vectors are
// touched in the sequential part; blocks of columns, the trailing update a GEMM.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "encode/cpu/stages.hpp"
#include "linalg/blas.hpp"

namespace cortiq::encode::cpu {

namespace {

// One column's search state: s, K s, α = sᵀb and β = sᵀKs, whose objective
// (sᵀb)² / (sᵀKs) both searches maximise.
struct Column {
    double* s;
    const double* b;
    const MatD& k;
    double* ks;
    double alpha = 0, beta = 0;

    Column(double* s_, const double* b_, const MatD& k_, double* ks_)
        : s(s_), b(b_), k(k_), ks(ks_) {
        const int64_t r = k.rows();
        for (int64_t a = 0; a < r; ++a) ks[a] = la::dot(k.row(a), s, r);
        alpha = la::dot(s, b, r);
        beta = la::dot(s, ks, r);
    }
    double phi() const { return beta > 0 ? alpha * alpha / beta : 0.0; }
    // α and β after flipping bit a alone; false when that β is not positive.
    bool flipped(int64_t a, double* alpha2, double* beta2) const {
        *alpha2 = alpha - 2 * s[a] * b[a];
        *beta2 = beta - 4 * s[a] * ks[a] + 4 * k(a, a);
        return *beta2 > 0;
    }
    static bool improves(double phi2, double phi, double tol) {
        return phi2 > phi * (1 + tol) + 1e-300;
    }
    // Flips bit a and keeps K s up to date (α and β are the caller's).
    void flip(int64_t a) {
        const double old = s[a];
        s[a] = -old;
        for (int64_t a2 = 0; a2 < k.rows(); ++a2) ks[a2] -= 2 * old * k(a2, a);
    }
    double scale() const { return beta > 0 ? alpha / beta : 0.0; }
};

// Greedy single-flip search maximising (sᵀb)² / (sᵀKs) from the current s.
// Adds the passes it ran to *passes_run.
int64_t column_search(double* s, const double* b, const MatD& k, double tol, int passes, double* ks,
                      double* g_out, int64_t* passes_run) {
    Column c(s, b, k, ks);
    int64_t flips = 0;
    for (int pass = 0; pass < passes; ++pass) {
        ++*passes_run;
        int64_t nflip = 0;
        for (int64_t a = 0; a < k.rows(); ++a) {
            double alpha2, beta2;
            if (!c.flipped(a, &alpha2, &beta2)) continue;
            if (Column::improves(alpha2 * alpha2 / beta2, c.phi(), tol)) {
                c.flip(a);
                c.alpha = alpha2;
                c.beta = beta2;
                ++nflip;
            }
        }
        flips += nflip;
        if (nflip == 0) break;
    }
    *g_out = c.scale();
    return flips;
}

// The same objective by rounds of simultaneous flips (Options::gptq_multi):
// each round scores every single flip against the current s (as in
// column_search, all from the same α, β and K s), takes the `multi` best that
// improve by more than tol, and keeps them when the objective of all of them
// together, with β exact (β_F = β − 4 Σ_F s_a (Ks)_a + 4 Σ_{a,a'∈F} s_a s_a'
// K_aa'), still improves; else it halves the set, down to the best flip
// alone, which always improves. A round's scores are independent, so a
// parallel device spends a round where the scan spends r sequential steps.
// `passes` caps the rounds at passes · r / multi (the scan's flips bound).
int64_t column_search_multi(double* s, const double* b, const MatD& k, double tol, int passes,
                            int multi, double* ks, double* g_out, int64_t* passes_run) {
    const int64_t r = k.rows();
    Column c(s, b, k, ks);
    std::vector<std::pair<double, int64_t>> cand;
    int64_t flips = 0;
    const int64_t max_rounds = std::max<int64_t>(1, passes * r / multi);
    for (int64_t round = 0; round < max_rounds; ++round) {
        ++*passes_run;
        const double phi = c.phi();
        cand.clear();
        for (int64_t a = 0; a < r; ++a) {
            double alpha2, beta2;
            if (!c.flipped(a, &alpha2, &beta2)) continue;
            const double phi2 = alpha2 * alpha2 / beta2;
            if (Column::improves(phi2, phi, tol)) cand.emplace_back(-phi2, a);
        }
        if (cand.empty()) break;
        int64_t q = std::min<int64_t>(multi, static_cast<int64_t>(cand.size()));
        std::partial_sort(cand.begin(), cand.begin() + q, cand.end());
        double alpha_f = 0, beta_f = 0;
        for (; q >= 1; q /= 2) {  // the largest prefix of the best flips that improves
            alpha_f = c.alpha;
            beta_f = c.beta;
            for (int64_t i = 0; i < q; ++i) {
                const int64_t a = cand[static_cast<size_t>(i)].second;
                alpha_f -= 2 * s[a] * b[a];
                beta_f -= 4 * s[a] * ks[a];
                for (int64_t i2 = 0; i2 < q; ++i2) {
                    const int64_t a2 = cand[static_cast<size_t>(i2)].second;
                    beta_f += 4 * s[a] * s[a2] * k(a, a2);
                }
            }
            if (beta_f > 0 && Column::improves(alpha_f * alpha_f / beta_f, phi, tol)) break;
        }
        // the best flip alone is scored as in the round, so it always improves
        CORTIQ_ASSERT(q >= 1, "gptq_v: no improving flip among the candidates");
        for (int64_t i = 0; i < q; ++i) c.flip(cand[static_cast<size_t>(i)].second);
        c.alpha = alpha_f;
        c.beta = beta_f;
        flips += q;
    }
    *g_out = c.scale();
    return flips;
}

}  // namespace

int64_t gptq_v(blr::Factors& factors, const TensorContext& c, size_t p, double tol, int passes,
               int block, bool feedback, int multi, int group) {
    CORTIQ_CHECK(multi >= 0, "gptq_v: multi {} < 0", multi);
    CORTIQ_CHECK(group >= 1, "gptq_v: group {} < 1", group);
    ScopedStage st(c.prof, "gptq_v");
    const int64_t n = factors.n, r = factors.r;
    const auto& perm = c.input_ctx.perm;
    const MatD& uc = c.input_ctx.uc;
    blr::Path& path = factors.paths[p];
    const MatD mm = factors.left(p);
    const MatD k = la::gemm(mm, true, mm, false);
    // Mᵀ t_j for every column, up front: (W − Σ_{q≠p} Ŵ_q)ᵀ M.
    MatD bn = la::gemm(c.w, true, mm, false);
    for (size_t q = 0; q < factors.paths.size(); ++q) {
        if (q == p) continue;
        la::gemm_into(-1.0, factors.right(q), false, la::gemm(factors.left(q), true, mm, false),
                      false, 1.0, bn);
    }
    MatD b(n, r), s(n, r), e(n, r);
    VecD g(n);
    for (int64_t j = 0; j < n; ++j) {
        std::copy(bn.row(perm[j]), bn.row(perm[j]) + r, b.row(j));
        std::copy(path.sv.row(perm[j]), path.sv.row(perm[j]) + r, s.row(j));
    }
    VecD ks(r);
    int64_t flips = 0, passes_run = 0;
    for (int64_t j0 = 0; j0 < n; j0 += block) {
        const int64_t j1 = std::min(n, j0 + block);
        for (int64_t g0 = j0; g0 < j1; g0 += group) {
            // a group's columns start from the same targets; their errors
            // reach the columns after the group (group = 1: every later one)
            const int64_t g1 = std::min(j1, g0 + group);
            for (int64_t j = g0; j < g1; ++j) {
                flips += multi > 0 ? column_search_multi(s.row(j), b.row(j), k, tol, passes, multi,
                                                         ks.data(), &g[j], &passes_run)
                                   : column_search(s.row(j), b.row(j), k, tol, passes, ks.data(),
                                                   &g[j], &passes_run);
                // scaled latent error (Mᵀ e_j) / Uc[j,j]; ks holds K s_j
                const double inv = 1.0 / uc(j, j);
                for (int64_t a = 0; a < r; ++a) e(j, a) = (b(j, a) - g[j] * ks[a]) * inv;
            }
            if (!feedback) continue;
            for (int64_t j = g0; j < g1; ++j)
                for (int64_t jj = g1; jj < j1; ++jj) {
                    const double f = uc(j, jj);
                    if (f == 0) continue;
                    for (int64_t a = 0; a < r; ++a) b(jj, a) -= f * e(j, a);
                }
        }
        if (!feedback || j1 >= n) continue;
        // trailing update: B[j1:] −= Uc[j0:j1, j1:]ᵀ E[j0:j1]
        MatD ucb(j1 - j0, n - j1), eb(j1 - j0, r);
        for (int64_t j = j0; j < j1; ++j) {
            std::copy(uc.row(j) + j1, uc.row(j) + n, ucb.row(j - j0));
            std::copy(e.row(j), e.row(j) + r, eb.row(j - j0));
        }
        MatD upd = la::gemm(ucb, true, eb, false);
        for (int64_t jj = j1; jj < n; ++jj)
            for (int64_t a = 0; a < r; ++a) b(jj, a) -= upd(jj - j1, a);
    }
    for (int64_t j = 0; j < n; ++j) {
        std::copy(s.row(j), s.row(j) + r, path.sv.row(perm[j]));
        path.g[perm[j]] = g[j];
    }
    if (c.prof) {
        c.prof->add("gptq_v.flips", 0, flips);
        c.prof->add("gptq_v.passes", 0, passes_run);
    }
    return flips;
}

}  // namespace cortiq::encode::cpu
