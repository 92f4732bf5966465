// Float64 host linear algebra over OpenBLAS + LAPACKE (row-major throughout).
#pragma once

#include <utility>

#include "core/matrix.hpp"

namespace cortiq::la {

// C = op(A) op(B)
MatD gemm(const MatD& a, bool ta, const MatD& b, bool tb);
// C = alpha op(A) op(B) + beta C
void gemm_into(double alpha, const MatD& a, bool ta, const MatD& b, bool tb, double beta, MatD& c);
// C = A Aᵀ (ta = false) or Aᵀ A (ta = true), full symmetric result.
MatD syrk(const MatD& a, bool ta);
// y = op(A) x
VecD gemv(const MatD& a, bool ta, const VecD& x);

double dot(const double* a, const double* b, int64_t n);
double frob2(const MatD& a);                    // ‖A‖²_F
double frob_dot(const MatD& a, const MatD& b);  // ⟨A, B⟩_F
double trace(const MatD& a);

// In-place Cholesky of an SPD matrix: lower (A = L Lᵀ) or upper (A = Uᵀ U);
// the other triangle is zeroed. Returns false if A is not positive definite.
bool cholesky(MatD& a, bool upper);
// Cholesky with a growing diagonal ridge (relative to mean diag) on failure;
// returns the ridge that was needed (0 if none). Throws if even 1e-1 fails.
double cholesky_ridge(MatD& a, bool upper, const char* what);
// In-place inverse of a triangular matrix.
void tri_inv(MatD& a, bool upper);

// The r largest eigenpairs of a symmetric matrix: values descending,
// vectors as columns of an n × r matrix.
std::pair<VecD, MatD> sym_eig_top(const MatD& a, int64_t r);
// All eigenpairs, values descending.
std::pair<VecD, MatD> sym_eig(const MatD& a);

// Solve A x = b for SPD A with a relative ridge (ridge · mean diag added to
// the diagonal), growing it if the factorisation fails.
VecD solve_spd(const MatD& a, const VecD& b, double ridge_rel = 1e-10);
// The same for the columns of B (A X = B, X the size of B).
MatD solve_spd(const MatD& a, const MatD& b, double ridge_rel = 1e-10);
// The lower Cholesky factor of A + ridge · mean|diag| I, the ridge growing
// tenfold from ridge_rel until the factorisation succeeds (the solves above).
MatD spd_factor(const MatD& a, double ridge_rel = 1e-10);

// ‖A − I‖_F of a square matrix (the Newton–Schulz stopping measure on XᵀX).
double identity_deviation(const MatD& a);
// Orthogonal polar factor Q of a square M (M = Q P): Newton–Schulz
// X ← X(3I − XᵀX)/2 from M/‖M‖_F until ‖XᵀX − I‖_F ≤ tol (≤ max_iter).
MatD polar_newton_schulz(const MatD& m, double tol = 1e-4, int max_iter = 60, int* iters = nullptr);
// The same factor through the eigendecomposition of MᵀM: Q = M (MᵀM)^{-1/2}.
MatD polar_eig(const MatD& m);

}  // namespace cortiq::la
