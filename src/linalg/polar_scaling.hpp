// Scaled Newton–Schulz for the orthogonal polar factor, shared by the float64
// host code and the CUDA ITQ (encode/cuda/itq.cu).
//
// The cubic step X ← X(3I − XᵀX)/2 maps each singular value σ ≤ 1 to
// p(σ) = (3σ − σ³)/2: a small σ grows only ×1.5 a step, so a matrix whose σ
// span [0.01, 1] needs about 15 steps. Chen & Chow (2014) scale each step:
// with every σ of X in [l, 1], the step on αX, α = √(3 / (1 + l + l²)), maps
// [l, 1] into [l', 1] with l' = p(αl), the largest lower bound any scaled
// cubic step reaches (p(αl) = p(α): the interval's two ends meet), a small σ
// growing up to ×2.6. l comes from a few Lanczos steps on MᵀM, which also
// give the scale ‖M‖₂ (SPEC §3.3's iteration starts from M/‖M‖_F instead).
#pragma once

#include <functional>
#include <utility>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::la {

// The smallest and largest eigenvalue of the symmetric tridiagonal matrix
// with diagonal `diag` and sub-diagonal `off` (off[i] couples i and i + 1;
// off.size() + 1 == diag.size()), by Sturm-sequence bisection.
std::pair<double, double> tridiag_extremes(const std::vector<double>& diag,
                                           const std::vector<double>& off);

// Lanczos on a symmetric operator of size n (apply(v, out): out = A v) for
// up to `steps` steps from the fixed start v_i = 1 + sin(0.7 i)/2 (the CUDA
// twin starts there too): the extreme Ritz values, which lie inside
// [λ_min, λ_max]; the largest converges in a few steps, the smallest from
// above and slowly where the low end of the spectrum is dense. Stops early on
// an invariant subspace.
std::pair<double, double> lanczos_extremes(int64_t n, int steps,
                                           const std::function<void(const VecD&, VecD&)>& apply);

// One scaled step for σ ∈ [l, u]: the factor α and the new lower bound l'
// (σ lands in [l', 1]). u is a little above 1 because a rounded step may
// leave a σ just above 1: with α near √3, a σ past √3/α would map below 0
// and converge to −1, a polar factor with that direction flipped (seen on
// the H200 with TF32 steps before the margin: more steps, not fewer).
struct NsScaledStep {
    double alpha = 1, next_l = 0;
};
constexpr double kNsUpperMargin = 1.01;
// u = 0: kNsUpperMargin while l < 0.5, then 1 (so that the steps converge to 1).
NsScaledStep ns_scaled_step(double l, double u = 0);

// Step `it` of the iteration from the running lower bound l: the first step
// unscaled (α = 1, l' = p(l)), then ns_scaled_step(l); l = 0 (no estimate, or
// plain steps asked for) gives plain steps throughout.
NsScaledStep ns_step(int it, double l);

// Where the scaled iteration starts from the Lanczos extremes of MᵀM
// (θ_min ≤ θ_max, 0 when unknown) and ‖M‖_F: X₀ = M / scale with
// scale = min(‖M‖_F, 1.1 √θ_max), and l = √θ_min / (2 scale), halved
// because Lanczos' smallest Ritz value overestimates λ_min (an l too low
// costs a step or two, one too high leaves the smallest σ behind, never
// worse than the unscaled iteration).
struct NsStart {
    double scale = 1, l = 0;
};
NsStart ns_start(double frob, double theta_min, double theta_max);

// The polar factor by the scaled iteration in float64: the first step
// unscaled (so that a σ up to √3 × the estimate still maps into (0, 1]), then
// scaled steps, until ‖XᵀX − I‖_F ≤ tol (≤ max_iter steps).
MatD polar_scaled_newton_schulz(const MatD& m, double tol = 1e-4, int max_iter = 60,
                                int* iters = nullptr, int lanczos_steps = 24);

}  // namespace cortiq::la
