// The float32 NVG encoder on the GPU (SPEC §3), stage for stage the float64
// reference of src/encode/cpu/stages.hpp: the same stage names, the same
// arguments where they make sense, float32 data on one device.
//
// Threads: an InputContext or TensorData is built on one Gpu and, once built,
// read by any Gpu (stream) of the same device; everything else (models,
// TensorContext) belongs to one host thread and its Gpu.
#pragma once

#include <chrono>
#include <climits>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "blr/model.hpp"
#include "core/cuda/device.hpp"
#include "core/matrix.hpp"
#include "core/profile.hpp"
#include "encode/cuda/ops.hpp"
#include "encode/options.hpp"

namespace cortiq::encode::cuda {

// The column-search kernel of gptq_v (both make the CPU scan's decisions).
// Measured side by side on the H200 (bench_encode_gpu --variants): 4096×11008
// in 31.3 s with lazy against 40.2 s with batched, 2048×8192 in 10.3 s against
// 13.2 s, the same held-out errors.
enum class GptqKernel {
    lazy,     // one deciding warp; owner warps keep ks up to date from a flip log
    batched,  // the whole block updates ks after every flip (two barriers per flip)
};

// Knobs of the device encoder that have no CPU counterpart.
struct Tuning {
    // ITQ's two products and the Newton–Schulz iterations in TF32 (the final
    // polish and U_p R, V_p R stay FP32) from this rank up; INT_MAX: never.
    int itq_tf32_min_rank = 512;
    // The last Newton–Schulz steps of ITQ's polar factors (after the TF32 ones)
    // in 3xTF32 on the tensor cores instead of FP32 on the CUDA cores.
    bool itq_finish_x3 = false;
    // The earlier hand-over from TF32 to the finishing steps (PolarOptions::
    // early_handover), to compare.
    bool itq_early_handover = false;
    // ITQ's polar factors by plain Newton–Schulz steps instead of Chen–Chow's
    // scaled ones (PolarOptions::scaled), to compare.
    bool itq_plain_ns = false;
    // ALS: g's later sweeps within one als() call by PCG with the factor of the
    // call's first g system as preconditioner (als.cu), instead of a Cholesky
    // factorisation each; keeps an n × n factor per path. Measured on the H200
    // at 4096×11008, G = 64: 6.76 s against 7.31 s, the same held-out error.
    bool als_g_pcg = true;
    // ITQ: every polar factor but the last stops after its TF32 steps
    // (‖XᵀX − I‖_F < 0.1 or TF32's floor); the last one is finished in FP32.
    bool itq_tf32_intermediate = false;
    // ITQ in TF32 (r ≥ itq_tf32_min_rank) on r padded to a multiple of 32
    // (itq.cu: cuBLAS's faster TF32 kernels; the same polar factors).
    bool itq_pad_rank = true;
    // ALS: g's n × n system S_V K S_Vᵀ as its solver triangle only (syrkx,
    // half the flops); false: the full gemm, to compare.
    bool als_g_syrk = true;
    // Stage 9 as before pack_signs.cu: the signs brought to the host as
    // matrices and packed there (to compare; the bytes are the same).
    bool host_pack = false;
    // latents: the top r eigenpairs only (cusolverDnDsyevdx) instead of all (syevd).
    bool eig_partial = false;
    // Products with an inner dimension from this size run as 3xTF32 (see
    // ops.hpp: FP32-like accuracy, 2.8e-7 vs 1.9e-7 relative on the H200);
    // smaller ones in plain FP32; INT64_MAX: all in FP32. Slower than FP32
    // while r = 2966 cost cuBLAS its fast kernels (8.47 against 8.10 s per
    // 4096×11008 tensor); since gemm pads the operands to multiples of 4, 4.90
    // against 5.85 s, the same held-out error (H200, docs/encoder_speed.md).
    int64_t x3_min_k = 1024;
    GptqKernel gptq_kernel = GptqKernel::lazy;  // batched above the lazy kernel's rank (3584)
    // gptq_v (batched): threads per block, 0: automatic (512 from r = 257). Fewer
    // threads make a barrier cheaper but give each thread more of r per flip.
    int gptq_threads = 0;
    // gptq_v (batched): candidates whose K rows one batch fetches, 0: as many as
    // 32 registers per thread hold (8 rows at r = 1475, mostly unused: a flip
    // changes α and β, and the next candidate is rarely the prefetched one).
    int gptq_prefetch = 0;
    // gptq_v (lazy): entries of the flip-log ring used, a power of two from 64
    // to 4096; 0: 4096. Only tests set it, to make the ring wrap at small
    // shapes: the result does not depend on it.
    int gptq_log_cap = 0;
    // The P = 2 and P = 1 candidates on two streams at once (two host threads).
    bool parallel_candidates = true;
    // encode_tensor checks its memory estimate against the free device memory
    // (encode_many budgets memory itself and turns this off).
    bool check_memory = true;
};

// float32 flips need a gain above float resolution (SPEC §3.7).
inline double flip_tol_f32(double tol) {
    return tol < 1e-7 ? 1e-7 : tol;
}

// ── stage 1: per-input context ───────────────────────────────────────────────
class InputContext {
  public:
    // Same checks and maths as cpu::InputContext, float32 on `gpu`'s device.
    InputContext(Gpu& gpu, const MatD& h_fit, const MatD& h_sel, double rho,
                 const std::string& what = "Gram");

    int64_t n = 0;
    int device = 0;
    double c_fit = 0;
    DMat h;                     // H = H_fit + c I
    DMat h_sel;                 // H_sel
    VecD sqd;                   // sqrt(diag H) (host, float64)
    std::vector<int64_t> perm;  // act order
    DeviceBuffer<int> perm_d;   // the same on the device
    DMat uc;                    // upper Cholesky factor of (P H Pᵀ)⁻¹
    double uc_ridge = 0;        // ridge the equilibrated float32 factorisation needed
    // Lower Cholesky factor of H, built on first use with the caller's Gpu.
    const DMat& l(Gpu& gpu) const;
    // Device bytes this context holds (L included once built).
    size_t bytes() const;

  private:
    mutable std::mutex l_mu_;
    mutable std::unique_ptr<DMat> l_;
};

// Per-tensor device data, shared read-only by the candidates' streams.
struct TensorData {
    TensorData(Gpu& gpu, const MatD& w, const InputContext& input_ctx, const Tuning& tuning = {});
    int64_t m = 0, n = 0;
    DMat w, wh, wh_sel;                            // W, W·H, W·H_sel
    double a_h = 0, a_fit = 0, a_sel = 0, w2 = 0;  // tr(W X Wᵀ), ‖W‖²_F
};

// The r_max leading left singular vectors of W·L and their σ, shared by the
// candidates (the top-r of a smaller rank are their leading columns).
struct EigCache {
    int64_t r = 0;
    DMat ur;  // m × r
    VecD sig;
};

// One thread's view of a tensor: data, input, its Gpu and profile.
struct TensorContext {
    TensorContext(const TensorData& d, const InputContext& input_ctx, Gpu& gpu,
                  Profile* prof = nullptr, Tuning tuning = {});
    const TensorData& d;
    const InputContext& input_ctx;
    Gpu& gpu;
    Profile* prof = nullptr;
    Tuning tuning;
    const EigCache* eig = nullptr;  // latents of W (optional)
    cudaStream_t stream() const { return gpu.stream(); }
    // The precision of a large product with inner dimension k (Tuning::x3_min_k).
    Prec big(int64_t k) const { return k >= tuning.x3_min_k ? Prec::tf32x3 : Prec::fp32; }
};

// core's stage timer (core/cuda/device.hpp), also made from a tensor's context.
class StageTimer : public cortiq::cuda::StageTimer {
  public:
    using cortiq::cuda::StageTimer::StageTimer;
    StageTimer(const TensorContext& c, const char* stage)
        : cortiq::cuda::StageTimer(c.gpu, c.prof, stage) {}
};

// ── the model on the device ──────────────────────────────────────────────────
struct Path {
    DVec h, l, g;  // m, r, n scales
    DMat su, sv;   // m × r, n × r, entries ±1
    // H·right and W H·right, valid while g and sv are unchanged (see invalidate).
    mutable std::optional<DMat> h_right, wh_right;
    void invalidate() {
        h_right.reset();
        wh_right.reset();
    }
};

struct DeviceFactors {
    int64_t m = 0, n = 0, r = 0;
    std::vector<Path> paths;

    DeviceFactors clone(cudaStream_t st) const;
    void rebind(cudaStream_t st);  // future frees on `st` (after a hand-over)
    // Ŵ_p = left(p) right(p)ᵀ
    DMat left(cudaStream_t st, size_t p) const;                    // diag(h) S_U diag(ℓ)
    DMat left_h(cudaStream_t st, size_t p) const;                  // diag(h) S_U
    DMat left_l(cudaStream_t st, size_t p) const;                  // S_U diag(ℓ)
    DMat right(cudaStream_t st, size_t p) const;                   // diag(g) S_V
    const DMat& h_right(const TensorContext& c, size_t p) const;   // H·right (cached)
    const DMat& wh_right(const TensorContext& c, size_t p) const;  // W H·right (cached)
};

// Hooks for tests and the pack step: the same signs and scales on either side.
DeviceFactors to_device(const blr::Factors& factors, cudaStream_t st);
blr::Factors to_host(const DeviceFactors& factors, cudaStream_t st);
// blr::pack of the factors with the signs packed on the device (pack_signs.cu):
// the same bytes, and only the scales and the payload cross to the host.
std::vector<uint8_t> pack_payload(const DeviceFactors& factors, cudaStream_t st,
                                  blr::Factors* stored = nullptr);
MatD download(const DMat& a, cudaStream_t st);
DMat upload(const MatD& a, cudaStream_t st);

enum class Metric { h, fit, sel };

// err_X = tr(E X Eᵀ) by the factor-sized expansion (SPEC §2).
double err(const DeviceFactors& factors, const TensorContext& c, Metric x);
double rel_err(const DeviceFactors& factors, const TensorContext& c, Metric x);

// ── stage 2: whitened latents ────────────────────────────────────────────────
// t: the target (m × n); th = t·H (used when m ≤ n; null: computed).
// cache (optional): when t is W, the eigenpairs of W's Gram from c.eig.
std::pair<DMat, DMat> latents(const TensorContext& c, const DMat& t, const DMat* th, int64_t r,
                              bool whiten = true, bool use_cache = false);
// Fills an EigCache with W's top-r_max eigenpairs (for both candidates).
EigCache latents_cache(const TensorContext& c, int64_t r_max);

// Stage 6's target: the residual W − Ŵ_1 of path 1 and, with `with_h`, its
// product with H (empty otherwise).
std::pair<DMat, DMat> residual(const TensorContext& c, const DeviceFactors& f, bool with_h);

// ── stage 3: ITQ gauge ───────────────────────────────────────────────────────
struct ItqResult {
    DMat u, v, rot;
    std::vector<double> objective;  // per iteration, when asked for
};
ItqResult itq(const TensorContext& c, const DMat& up, const DMat& vp, const VecD& wu,
              const VecD& wv, int iters, bool record_objective = false);
std::pair<VecD, VecD> itq_weights(const TensorContext& c, const DMat& up, const DMat& vp);
// Orthogonal polar factor by Newton–Schulz from M/(1.1 ‖M‖₂), ‖M‖₂ by Lanczos.
struct PolarOptions {
    bool tf32 = false;            // the early steps in TF32, until ‖XᵀX − I‖_F < 0.1
    Prec finish = Prec::fp32;     // the last steps (fp32, or tf32x3: FP32-like on tensor cores)
    bool early_handover = false;  // the earlier TF32 → finish rule (itq.cu), to compare
    bool scaled = true;      // Chen–Chow scaled steps (linalg/polar_scaling.hpp); false: plain
    bool tf32_only = false;  // stop at the hand-over: no finishing steps (with tf32)
    double tol = 1e-4;       // on ‖XᵀX − I‖_F
    int max_iter = 60;
    bool timed = false;  // wall seconds of the two phases into PolarStats (syncs)
    // M padded with zero rows and columns beyond its leading `active` ones
    // (−1: none): the zero block stays zero in every step, and the deviation
    // from the identity counts only the leading block.
    int64_t active = -1;
};
struct PolarStats {
    int steps = 0, fast_steps = 0;  // Newton–Schulz steps, of them in TF32
    int restarts = 0;  // from M/‖M‖_F after a divergence (a low estimate of ‖M‖₂)
    // the last call's Lanczos extremes of MᵀM, its scale and starting l (traces)
    double theta_min = 0, theta_max = 0, scale = 0, l0 = 0;
    double fast_s = 0, finish_s = 0;  // wall seconds of the two phases (timed)
};
DMat polar(const Gpu& g, const DMat& m, const PolarOptions& po = {}, PolarStats* stats = nullptr);
// The extreme eigenvalues of MᵀM from `steps` Lanczos steps (lanczos.cu; the
// same start as la::lanczos_extremes); {0, 0} when M v vanishes. active: the
// leading rows and columns that hold M when it is zero-padded (−1: all).
std::pair<double, double> lanczos_extremes(const Gpu& g, const DMat& m, int steps,
                                           int64_t active = -1);

// ── stage 4: SVID ────────────────────────────────────────────────────────────
std::pair<VecD, VecD> rank1_pos(const Gpu& g, const DMat& mabs);
Path svid(const Gpu& g, const DMat& u, const DMat& v);

// ── stage 5: exact block least squares in the H metric ───────────────────────
void als_l(DeviceFactors& factors, const TensorContext& c);
void als_h(DeviceFactors& factors, const TensorContext& c);
// The Cholesky factor of g's last factored n × n system within one als() call
// (Tuning::als_g_pcg), and the relative ridge it was factored with.
struct GCache {
    DeviceBuffer<float> factor;
    double ridge = 0;
};
void als_g(DeviceFactors& factors, const TensorContext& c, size_t p, GCache* cache = nullptr);
void als(DeviceFactors& factors, const TensorContext& c, int sweeps);

// ── stage 7: discrete knots ──────────────────────────────────────────────────
int64_t flip_u(DeviceFactors& factors, const TensorContext& c, size_t p, double tol, int passes);
// multi: Options::gptq_multi (0: the exact scan; Q: rounds of up to Q flips,
// at most kMaxGptqMulti).
constexpr int kMaxGptqMulti = 32;
// group: Options::gptq_group (> 1: a launch of `group` blocks, one column each).
int64_t gptq_v(DeviceFactors& factors, const TensorContext& c, size_t p, double tol, int passes,
               int block, bool feedback = true, int multi = 0, int group = 1);
// The largest rank the device column search supports.
int64_t gptq_v_max_rank();

// ── stage 9: pack ───────────────────────────────────────────────────────────
// The payload of f (packed on the host), its size, and the fit and held-out
// errors with the stored scales, into `out`.
void pack(const TensorContext& c, const DeviceFactors& f, Encoded& out);

// ── the driver over these stages (encode/driver.hpp; encode.cu) ──────────────
// stages 2–6: initial factors; 7: refinement
DeviceFactors build_init(const TensorContext& c, int64_t r, int paths, const Options& o);
DeviceFactors refine(DeviceFactors factors, const TensorContext& c, const Options& o);

// ── stages 8–9: whole tensor ─────────────────────────────────────────────────
// `helper` (optional): a second Gpu of the same device for the P = 1 candidate
// (one is made when tuning.parallel_candidates and none is given).
Encoded encode_tensor(const MatD& w, const InputContext& input_ctx, const Options& o, Profile* prof,
                      Gpu& gpu, const Tuning& tuning = {}, Gpu* helper = nullptr);

// rtn-sign baseline on the device.
Encoded encode_rtn_sign(const MatD& w, const InputContext& input_ctx, const Options& o,
                        Profile* prof, Gpu& gpu);

// ── device memory ────────────────────────────────────────────────────────────
// Peak device bytes to encode an m × n tensor (context: also its input context).
size_t estimate_bytes(int64_t m, int64_t n, const Options& o, bool with_context,
                      const Tuning& tuning = {});
size_t context_bytes(int64_t m, int64_t n);
// Throws cortiq::Error naming sizes when the estimate exceeds the free memory.
void ensure_fits(int64_t m, int64_t n, const Options& o, bool with_context,
                 const Tuning& tuning = {});

}  // namespace cortiq::encode::cuda
