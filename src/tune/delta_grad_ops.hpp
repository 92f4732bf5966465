// Forward and backward passes of the operations of Qwen3.5's Gated DeltaNet
// mixer (model/delta_block.cpp), one pair per operation as tune/grad_ops.hpp,
// templated on the scalar: double is the reference the tests hold against
// finite differences, float is what block tuning runs. Activations are
// row-major, one row per token, `windows` windows of L rows each; every
// window is a sequence of its own, starting from zero convolution and
// delta-rule states (as the calibration windows are scored).
//
// Conventions as tune/grad_ops.hpp: dx-like outputs are overwritten,
// parameter gradients (dw) are added and may be null.
#pragma once

#include <cstdint>
#include <vector>

namespace cortiq::tune {

// Depthwise causal convolution of width K with SiLU, per channel c and row t
// of each window (x: rows × C, row stride C):
//   pre[t, c] = Σ_{k<K} w[c·K + k] · x[t − K + 1 + k, c]   (rows before the window's first: 0)
//   y = silu(pre)
// pre (rows × C) is kept for the backward.
template <class T>
void conv_silu_forward(const T* x, int64_t windows, int64_t L, int64_t C, const T* w, int64_t K,
                       T* pre, T* y);
// dpre = dy ∘ silu'(pre); dx[t, c] = Σ_k w[c·K + k] · dpre[t + K − 1 − k, c] (within the
// window); dw[c·K + k] += Σ_t dpre[t, c] · x[t − K + 1 + k, c].
template <class T>
void conv_silu_backward(const T* dy, const T* x, const T* pre, int64_t windows, int64_t L,
                        int64_t C, const T* w, int64_t K, T* dx, T* dw);

// L2 normalisation of `heads` groups of d values of each row (row stride ld;
// the groups start at column 0): y = x · inv, inv = 1/√(Σ x² + eps) per group
// (rows × heads, kept). y may be x.
template <class T>
void l2norm_forward(const T* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, T eps, T* y,
                    T* inv);
// dx = inv · (dy − y (y · dy)) per group (same layout, the groups' columns
// overwritten; dx may be dy).
template <class T>
void l2norm_backward(const T* dy, const T* y, const T* inv, int64_t rows, int64_t ld, int64_t heads,
                     int64_t d, T* dx);

// The decay and write gates, per row and value head (rows × heads each):
//   beta = σ(b),  g = −e^{a_log[h]} · softplus(a + dt_bias[h])
// softplus as torch's (its argument above 20 kept as it is).
template <class T>
void delta_gates_forward(const T* a, const T* b, int64_t rows, int64_t heads, const T* a_log,
                         const T* dt_bias, T* g, T* beta);
// da = dg · (−e^{a_log}) · σ(a + dt_bias) (1 above the threshold), db = dbeta · β (1 − β);
// both overwritten (A_log and dt_bias are not tuned: no gradient for them).
template <class T>
void delta_gates_backward(const T* dg, const T* dbeta, const T* a, const T* beta, int64_t rows,
                          int64_t heads, const T* a_log, const T* dt_bias, T* da, T* db);

// The inputs of the gated delta rule for `windows` windows of L tokens. q, k:
// rows of k_heads · dk values (row stride ld_qk), L2-normalised per head; v:
// rows of v_heads · dv (row stride ld_v); g, beta: rows × v_heads. Value head
// h reads key head h / (v_heads / k_heads).
template <class T>
struct DeltaRuleT {
    const T *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    int64_t windows = 0, L = 0, ld_qk = 0, ld_v = 0;
    int64_t k_heads = 0, v_heads = 0, dk = 0, dv = 0;
};

// Per window and value head, from S = 0, for t = 0..L−1 (model/delta_ops.hpp):
//   P = e^{g_t} S;   δ_t = β_t (v_t − Pᵀ k_t);   S ← P + k_t δ_tᵀ;   o_t = Sᵀ q_t / √dk
// out: rows × v_heads · dv (row stride ld_o). `states` receives the state at
// the start of every chunk of `chunk` tokens (windows × ⌈L/chunk⌉ × v_heads ×
// dk × dv): the backward recomputes the states inside a chunk from them, so
// memory is O(chunk · heads · dk · dv) per window beyond these checkpoints.
template <class T>
void delta_rule_forward(const DeltaRuleT<T>& r, int64_t chunk, T* out, int64_t ld_o,
                        std::vector<T>& states);
// Given dout (row stride ld_o), backwards in t with dS from the later steps:
//   dS += q̂_t do_tᵀ, dq̂_t = S_t do_t   (q̂ = q / √dk)
//   dδ = dSᵀ k_t;  dk_t += dS δ_t;  dv_t = β_t dδ;  dβ_t = dδ · (v_t − Pᵀ k_t)
//   dP = dS − β_t k_t dδᵀ;  dk_t −= β_t P dδ;  dg_t = Σ dP ∘ P;  dS ← e^{g_t} dP
// dq, dk (stride ld_qk; summed over the value heads of a key head), dv (stride
// ld_v), dg, dbeta (rows × v_heads) overwritten. They may point into one
// buffer of the layout of q, k, v (in_proj_qkv's columns).
template <class T>
void delta_rule_backward(const DeltaRuleT<T>& r, int64_t chunk, const std::vector<T>& states,
                         const T* dout, int64_t ld_o, T* dq, T* dk, T* dv, T* dg, T* dbeta);

// The gated RMSNorm (Qwen3_5RMSNormGated), per row of n values (one value
// head): y = (x · rstd) ∘ w ∘ silu(z), rstd = 1/√(mean x² + eps) (kept).
template <class T>
void rmsnorm_gated_forward(const T* x, const T* z, int64_t rows, int64_t n, const T* w, T eps, T* y,
                           T* rstd);
// dx, dz overwritten; dw added (may be null).
template <class T>
void rmsnorm_gated_backward(const T* dy, const T* x, const T* z, const T* w, const T* rstd,
                            int64_t rows, int64_t n, T* dx, T* dz, T* dw);

}  // namespace cortiq::tune
