// The float64 NVG encoder (SPEC §3), stage by stage: the reference every
// other backend is tested against. The CUDA encoder (src/encode/cuda/) has the
// same stage names.
#pragma once

#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "blr/model.hpp"
#include "core/matrix.hpp"
#include "core/profile.hpp"
#include "encode/options.hpp"

namespace cortiq::encode::cpu {

// ── stage 1: per-input context ───────────────────────────────────────────────
// Shared by every tensor that reads one input (q/k/v; gate/up).
class InputContext {
  public:
    // h_fit, h_sel: n × n Grams (symmetric PSD). Throws cortiq::Error naming
    // `what` for non-finite, asymmetric or non-SPD inputs.
    InputContext(const MatD& h_fit, const MatD& h_sel, double rho,
                 const std::string& what = "Gram");

    int64_t n = 0;
    double c_fit = 0;           // damping c = ρ · mean diag(H_fit)
    MatD h;                     // H = H_fit + c I
    MatD h_fit;                 // H_fit
    MatD h_sel;                 // H_sel
    VecD sqd;                   // sqrt(diag H)
    std::vector<int64_t> perm;  // act order: columns by descending diag(H)
    MatD uc;                    // upper Cholesky factor of (P H Pᵀ)⁻¹ (GPTQ)
    double uc_ridge = 0;        // ridge the equilibrated factorisation needed
    const MatD& l() const;      // lower Cholesky factor of H (built on first use)

  private:
    mutable std::once_flag l_once_;
    mutable MatD l_;
};

// Per-tensor products reused by every stage.
struct TensorContext {
    TensorContext(const MatD& w, const InputContext& input_ctx);
    const MatD& w;
    const InputContext& input_ctx;
    MatD wh, wh_fit, wh_sel;   // W·X for the three metrics
    double a_h, a_fit, a_sel;  // tr(W X Wᵀ)
    Profile* prof = nullptr;
};

enum class Metric { h, fit, sel };

// err_X = tr(E X Eᵀ) by the factor-sized expansion (SPEC §2).
double err(const blr::Factors& factors, const TensorContext& c, Metric x);
// sqrt(err_X / tr(W X Wᵀ))
double rel_err(const blr::Factors& factors, const TensorContext& c, Metric x);
// The same error computed densely from E = W − Ŵ (for tests and baselines).
double err_dense(const MatD& w, const MatD& w_hat, const MatD& x);

// ── stage 2: whitened latents ────────────────────────────────────────────────
// Rank-r factors minimising ‖(T − U_p V_pᵀ) L‖_F; th = T·H (needed when m ≤ n).
// whiten = false: the plain (unwhitened) SVD, H = I (the svid baseline).
std::pair<MatD, MatD> latents(const MatD& t, const MatD* th, const InputContext& input_ctx,
                              int64_t r, bool whiten = true);

// Stage 6's target: the residual W − Ŵ_1 of path 1 and, with `with_h`, its
// product with H (empty otherwise).
std::pair<MatD, MatD> residual(const TensorContext& c, const blr::Factors& f, bool with_h);

// ── stage 3: ITQ gauge ───────────────────────────────────────────────────────
// Weighted ITQ objective Σ_i w²_i ‖x̂_i R‖₁ over normalised rows x̂_i of [U_p; V_p].
struct ItqResult {
    MatD u, v;                      // U_p R, V_p R
    MatD rot;                       // R
    std::vector<double> objective;  // per iteration (for tests)
};
ItqResult itq(const MatD& up, const MatD& vp, const VecD& wu, const VecD& wv, int iters,
              bool eig_polar = false);
// Row weights of SPEC §3.3: ‖U_p row‖ and ‖V_p row‖·sqrt(H_jj).
std::pair<VecD, VecD> itq_weights(const MatD& up, const MatD& vp, const InputContext& input_ctx);

// ── stage 4: SVID ────────────────────────────────────────────────────────────
// Non-negative rank-1 fit of a non-negative matrix: M ≈ left rightᵀ.
std::pair<VecD, VecD> rank1_pos(const MatD& mabs);
blr::Path svid(const MatD& u, const MatD& v);

// ── stage 5: exact block least squares in the H metric ───────────────────────
void als_l(blr::Factors& factors, const TensorContext& c);
void als_h(blr::Factors& factors, const TensorContext& c);
void als_g(blr::Factors& factors, const TensorContext& c, size_t p);
void als(blr::Factors& factors, const TensorContext& c, int sweeps);

// ── stage 7: discrete knots ──────────────────────────────────────────────────
// Output side: exact single-bit flips of every row of S_U,p. Returns the flips.
int64_t flip_u(blr::Factors& factors, const TensorContext& c, size_t p, double tol, int passes);
// Input side: columns of S_V,p in act order with error feedback through Uc,
// carried in the latent space. feedback = false: the same search without it.
// multi > 0: each column by rounds of up to `multi` simultaneous flips
// (Options::gptq_multi) instead of the sequential scan. group > 1: columns in
// groups of `group` without feedback among them (Options::gptq_group).
int64_t gptq_v(blr::Factors& factors, const TensorContext& c, size_t p, double tol, int passes,
               int block, bool feedback = true, int multi = 0, int group = 1);

// ── stage 9: pack ───────────────────────────────────────────────────────────
// The payload of f (scales rebalanced, f16), its size, and the fit and
// held-out errors with the stored scales, into `out`.
void pack(const TensorContext& c, const blr::Factors& f, Encoded& out);

// ── the driver over these stages (encode/driver.hpp; encode.cpp) ─────────────
// stages 2–6: initial factors; 7: refinement
blr::Factors build_init(const TensorContext& c, int64_t r, int paths, const Options& o);
blr::Factors refine(blr::Factors factors, const TensorContext& c, const Options& o);

// ── stages 8–9: whole tensor ─────────────────────────────────────────────────
Encoded encode_tensor(const MatD& w, const InputContext& input_ctx, const Options& o,
                      Profile* prof = nullptr);

// ── baselines in the same code path ──────────────────────────────────────────
// rtn-sign: Ŵ = diag(h) sign(W) diag(g), h and g fitted in the H metric.
struct RtnSign {
    VecD h, g;
    MatD w_hat;
};
RtnSign rtn_sign(const MatD& w, const InputContext& input_ctx, int sweeps = 6);
Encoded encode_rtn_sign(const MatD& w, const InputContext& input_ctx, const Options& o,
                        Profile* prof = nullptr);

}  // namespace cortiq::encode::cpu
