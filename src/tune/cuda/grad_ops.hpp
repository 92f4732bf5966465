// The CUDA twins of tune/grad_ops.hpp: float32 forward and backward passes of
// the operations of a decoder block, same names, same shapes, same
// conventions (row-major activations, one row per token; dx outputs
// overwritten unless `accumulate` says otherwise; parameter gradients added).
// Every launcher enqueues on the Gpu's stream; the large products are cuBLAS
// GEMMs on the TF32 tensor cores with float32 accuracy (3xTF32, or two passes
// where one operand is a ±1 sign matrix, core/cuda/gemm_tf32.hpp), so the
// parity test holds them to float32 rounding as it did the plain FP32 ones.
// tests/test_tune_grad_gpu.cpp checks each against the CPU float64 block.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "core/cuda/device.hpp"
#include "core/cuda/gemm_tf32.hpp"

namespace cortiq::tune::cuda {

using cortiq::cuda::DeviceBuffer;
using cortiq::cuda::DVec;
using cortiq::cuda::Gpu;

// ── cuBLAS behind row-major signatures (blas.cpp) ──────────────────────────────
// C (m × n, row stride ldc) = alpha · op(A) · op(B) + beta · C, as tune::gemm,
// in 3xTF32; `exact` (cortiq::cuda::kExactA / kExactB) marks a sign-matrix
// operand, which needs no split. With CORTIQ_TUNE_FP32=1 in the environment
// every product runs in plain FP32 instead (the reference for the speed-up;
// docs/encoder_speed.md, "Tuning in 3xTF32").
void gemm(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
          const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
          int64_t ldc, unsigned exact = cortiq::cuda::kNone);
// `count` such products in plain FP32, the i-th on a + i·sa, b + i·sb,
// c + i·sc (a stride may be 0: one operand shared by every product).
void gemm_batched(const Gpu& g, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                  const float* a, int64_t lda, int64_t sa, const float* b, int64_t ldb, int64_t sb,
                  float beta, float* c, int64_t ldc, int64_t sc, int64_t count);

// ── element-wise and reductions (grad_ops.cu) ──────────────────────────────────
// out[i, j] = a[i, j] · s[j] (rows × cols); out += … when accumulate. out may be a.
void scale_cols(const Gpu& g, const float* a, const float* s, int64_t rows, int64_t cols,
                float* out, bool accumulate);
// acc[j] += Σ_i a[i, j] · b[i, j] (summed in float64, as on the CPU).
void col_dots(const Gpu& g, const float* a, const float* b, int64_t rows, int64_t cols, float* acc);
// y += x over n values.
void add_into(const Gpu& g, float* y, const float* x, int64_t n);
// y[i, j] += b[j] (rows × m).
void add_bias(const Gpu& g, float* y, const float* b, int64_t rows, int64_t m);

// ── the operations of tune/grad_ops.hpp ────────────────────────────────────────
void rmsnorm_forward(const Gpu& g, const float* x, int64_t rows, int64_t n, const float* w,
                     float eps, float* y, float* rstd);
// dw may be null.
void rmsnorm_backward(const Gpu& g, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t rows, int64_t n, float* dx, float* dw);

// rot: the values of each head that turn (tune::rope_forward).
void rope_forward(const Gpu& g, float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d,
                  int64_t rot, int64_t period, const float* cos, const float* sin);
void rope_backward(const Gpu& g, float* dx, int64_t rows, int64_t ld, int64_t heads, int64_t d,
                   int64_t rot, int64_t period, const float* cos, const float* sin);

// Causal GQA over `windows` windows of L tokens at once (attention.cu):
// q, out: windows·L × heads·d; k, v: windows·L × kv_heads·d; probs:
// windows × heads × L × L (kept).
void attention_forward(const Gpu& g, const float* q, const float* k, const float* v,
                       int64_t windows, int64_t L, int64_t heads, int64_t kv_heads, int64_t d,
                       float* out, float* probs);
// dq, dk, dv overwritten; ds: scratch of windows × heads × L × L.
void attention_backward(const Gpu& g, const float* dout, const float* q, const float* k,
                        const float* v, const float* probs, int64_t windows, int64_t L,
                        int64_t heads, int64_t kv_heads, int64_t d, float* dq, float* dk, float* dv,
                        float* ds);

// Qwen3.5's attention gate (tune::split_query_gate … sigmoid_gate_backward).
void split_query_gate(const Gpu& g, const float* qg, int64_t rows, int64_t heads, int64_t d,
                      float* q, float* gate);
void merge_query_gate(const Gpu& g, const float* q, const float* gate, int64_t rows, int64_t heads,
                      int64_t d, float* qg);
void sigmoid_gate_forward(const Gpu& g, const float* x, const float* gate, int64_t n, float* y);
void sigmoid_gate_backward(const Gpu& g, const float* dy, const float* x, const float* gate,
                           int64_t n, float* dx, float* dgate);

void swiglu_forward(const Gpu& g, const float* gate, const float* up, int64_t n, float* y);
void swiglu_backward(const Gpu& g, const float* dy, const float* gate, const float* up, int64_t n,
                     float* dgate, float* dup);

// ── linear layers (linear.cpp) ─────────────────────────────────────────────────
// y = x Wᵀ (+ b); backward dx = dy W (added into dx when accumulate). w_tf32:
// W's values are exact in TF32 (cortiq::cuda::exact_in_tf32), so its products
// skip W's split (two passes, the same bits).
void linear_forward(const Gpu& g, const float* x, int64_t rows, int64_t n, const float* w,
                    int64_t m, const float* bias, float* y, bool w_tf32 = false);
void linear_backward_dx(const Gpu& g, const float* dy, int64_t rows, int64_t n, const float* w,
                        int64_t m, float* dx, bool accumulate, bool w_tf32 = false);

// The BLR layer on the device: ±1 signs held as float so the products are GEMMs.
// The rank is padded to rp, a multiple of 4 (cuBLAS's tensor-core kernels run
// 2–3× slower on other sizes, docs/encoder_speed.md): the padding columns of
// ℓ, S_U and S_V are zeros, so they add exact zeros to every product, their
// gradients are zeros, and Adam leaves them zero (a zero scale stays zero
// under a log-scale step, a zero sign latent under a latent step).
//
// Signs that tuning does not move (lr_signs = 0) may be held packed instead,
// one bit each (su_bits, sv_bits; su, sv then empty): distillation holds every
// layer of the model at once, and float signs with their gradients and Adam
// moments are 20 bytes a weight, 130 GB for a 7B model. Each product writes
// the signs, packed or not, into a float scratch first (stack_signs_paths),
// so the products and their bits are the same either way.
struct DBlrPath {
    DVec h, l, g;                             // m, rp, n scales
    DVec su, sv;                              // m × rp and n × rp, entries ±1 (0 in the padding)
    DeviceBuffer<uint32_t> su_bits, sv_bits;  // or packed: bit i·rp + j set where +1
    bool packed() const { return su.empty() && !su_bits.empty(); }
};
struct DBlr {
    int64_t m = 0, n = 0, r = 0;
    int64_t rp = 0;  // r padded to a multiple of 4
    std::vector<DBlrPath> paths;
};
using DBlrGrad = DBlr;
// The padded rank of a BLR layer of rank r.
inline int64_t padded_rank(int64_t r) {
    return (r + 3) / 4 * 4;
}
// The host values of a path's ℓ (cols = 1) or a sign matrix (rows × r) padded
// to rp columns with zeros, and back.
std::vector<float> pad_cols(const std::vector<float>& v, int64_t rows, int64_t r, int64_t rp);
std::vector<float> unpad_cols(const std::vector<float>& v, int64_t rows, int64_t r, int64_t rp);
// Per path p: t_p = (g_p ∘ x) S_V,p (rows × rp), u_p = (ℓ_p ∘ t_p) S_U,pᵀ (rows × m),
// the paths one after the other (t: paths × rows × rp, u: paths × rows × m).
struct DBlrCache {
    DVec t, u;
};
// Scratch the BLR forward and backward reuse between calls; it only grows.
// The layers of a model may share one (`shared`, owned by the caller: its
// buffers are then sized once, for the largest layer).
struct DBlrScratch {
    DVec a;               // the split activations of every path: paths × rows × 2k
    DVec signs;           // a sign matrix of every path, stacked twice
    DVec dtl, dxg;        // the backward's products, every path
    DVec du, tl, xg, dt;  // the signs' gradients (tuners that move the signs)
    DBlrScratch* shared = nullptr;
};

// ── BLR steps over the paths (blr_paths.cu) ────────────────────────────────────
// A BLR layer has at most kMaxBlrPaths paths; the per-path vectors of a step
// travel to its kernel by value.
constexpr int kMaxBlrPaths = 4;
struct PathVecs {
    const float* v[kMaxBlrPaths] = {};
};
struct PathOut {
    float* v[kMaxBlrPaths] = {};
};
// Each path's signs: floats (rows × rp) or, where f[p] is null, packed bits.
struct PathSigns {
    const float* f[kMaxBlrPaths] = {};
    const uint32_t* bits[kMaxBlrPaths] = {};
};
// out_p = [lo | hi] of in_p ∘ s_p (rows × 2·cols; in_p = in + p·in_stride,
// in_stride 0: one input for every path; out_p = out + p·rows·2·cols):
// the 3xTF32 split (hi = tf32_high, lo = v − hi) of the scaled values.
void split_scaled_paths(const Gpu& g, const float* in, int64_t in_stride, const PathVecs& s,
                        int paths, int64_t rows, int64_t cols, float* out);
// Each path's ±1 signs (0 in the padding columns) stacked twice into
// out + p·2·rows·rp: one above the other (2·rows × rp), or side by side
// (rows × 2·rp) when side_by_side.
void stack_signs_paths(const Gpu& g, const PathSigns& s, int paths, int64_t rows, int64_t r,
                       int64_t rp, bool side_by_side, float* out);
// acc_p[j] += Σ_i a_p[i, j] b_p[i, j] (a_p = a + p·sa, b_p = b + p·sb; a
// stride may be 0): col_dots' kernel over the paths (grad_ops.cu).
void col_dots_paths(const Gpu& g, const float* a, int64_t sa, const float* b, int64_t sb,
                    const PathOut& acc, int paths, int64_t rows, int64_t cols);
// out (+)= Σ_p in_p ∘ s_p (rows × cols; in_p = in + p·in_stride), summed in
// path order.
void sum_scaled_paths(const Gpu& g, const float* in, int64_t in_stride, const PathVecs& s,
                      int paths, int64_t rows, int64_t cols, float* out, bool accumulate);
// C_p = A_p B_p (B_p transposed when tb) for `count` products in TF32 on the
// tensor cores (plain FP32 under CORTIQ_TUNE_FP32=1): the products of
// split_scaled_paths' halves with the stacked signs.
void gemm_batched_tf32(const Gpu& g, bool tb, int64_t m, int64_t n, int64_t k, const float* a,
                       int64_t lda, int64_t sa, const float* b, int64_t ldb, int64_t sb, float* c,
                       int64_t ldc, int64_t sc, int64_t count);

// with_signs false: the gradients of the scales alone (su, sv empty); the
// backward then skips the two products of dS_U and dS_V.
DBlrGrad blr_zero_grad(const DBlr& w, cudaStream_t stream, bool with_signs = true);
// A path's float signs packed, one bit each (su, sv freed).
void pack_path_signs(const Gpu& g, const DBlr& w, DBlrPath& p);
// ±1 signs (0 in the padding columns j ≥ r) of `rows` × rp packed ones into out.
void expand_signs(const Gpu& g, const uint32_t* bits, int64_t rows, int64_t r, int64_t rp,
                  float* out);
// bits of `n` values (v > 0 → 1), n rounded up to whole words with zeros.
void pack_signs(const Gpu& g, const float* v, int64_t n, uint32_t* bits);
void blr_forward(const Gpu& g, const DBlr& w, const float* x, int64_t rows, float* y,
                 DBlrCache& cache, DBlrScratch& s);
// As tune::blr_backward; dx (may be null) overwritten, or added into when accumulate.
void blr_backward(const Gpu& g, const DBlr& w, const float* x, int64_t rows, const DBlrCache& cache,
                  const float* dy, float* dx, bool accumulate, DBlrGrad& grad, DBlrScratch& s);

// ── distillation (loss.cu) ─────────────────────────────────────────────────────
// out[i] = table[tokens[i]] (rows × dim); tokens on the device.
void embedding_forward(const Gpu& g, const float* table, int64_t dim, const int32_t* tokens,
                       int64_t rows, float* out);
// As tune::kl_forward_backward: *sum += Σ_rows KL(p_teacher ‖ softmax(logits))
// (float64 on the device), and dlogits = scale · (softmax(logits) − p_teacher)
// when dlogits is not null; teacher_logp holds the teacher's log-probabilities.
void kl_loss(const Gpu& g, const float* logits, const float* teacher_logp, int64_t rows,
             int64_t vocab, float scale, double* sum, float* dlogits);

// out = each row of logits (rows × vocab, on the device) as log-probabilities,
// its sum in float64 (tune::log_softmax_rows on the device); out may be logits.
void log_softmax_rows(const Gpu& g, const float* logits, int64_t rows, int64_t vocab, float* out);

// Makes b hold n values (reallocating only when the size differs).
void ensure(DVec& b, int64_t n, cudaStream_t stream);

}  // namespace cortiq::tune::cuda
