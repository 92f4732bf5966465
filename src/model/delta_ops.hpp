// The float32 operations of Qwen3.5's Gated DeltaNet (transformers'
// Qwen3_5GatedDeltaNet: a short causal convolution, decay and write gates,
// and the gated delta rule), one per function, on row-major activations (one
// row per token). The delta rule has two forms with one result: step by step
// (decoding, one token per call) and chunkwise (prefill and scoring).
#pragma once

#include <cstdint>

namespace cortiq::model {

// Depthwise causal convolution of width K over time with SiLU; per channel c
// and row t of x (T × C, row-major):
//   y[t, c] = silu(Σ_{k<K} w[c·K + k] · x[t − K + 1 + k, c])
// where the rows before the first come from `state` ((K − 1) × C: the inputs
// of the K − 1 previous positions, oldest first; zeros at the start of a
// sequence). `state` is updated to the last K − 1 inputs seen. y may not
// alias x.
void causal_conv1d_silu(const float* x, int64_t T, int64_t C, const float* w, int64_t K,
                        float* state, float* y);

// Per row t and value head h (T × heads each):
//   beta[t,h] = σ(b[t,h]),
//   g[t,h]    = −exp(a_log[h]) · softplus(a[t,h] + dt_bias[h])
// g is the log of the state's decay at t (≤ 0); softplus as torch's (x above
// 20 is kept as it is).
void delta_gates(const float* a, const float* b, int64_t T, int64_t heads, const float* a_log,
                 const float* dt_bias, float* g, float* beta);

// The inputs of the gated delta rule for T tokens. q, k: rows of k_heads ·
// dk values (row stride ld_qk), L2-normalised per head; v: rows of v_heads ·
// dv (stride ld_v); g, beta: T × v_heads. Value head h reads key head
// h / (v_heads / k_heads).
struct DeltaRule {
    const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    int64_t T = 0, ld_qk = 0, ld_v = 0;
    int64_t k_heads = 0, v_heads = 0, dk = 0, dv = 0;
};

// Step by step. state: v_heads × dk × dv (S per value head, row-major),
// updated; for each t and value head:
//   S ← e^{g_t} S;   S ← S + k_t (β_t (v_t − Sᵀ k_t))ᵀ;   o_t = Sᵀ q_t / sqrt(dk)
// out: T × v_heads · dv (row stride ld_o).
void gated_delta_recurrent(const DeltaRule& r, float* state, int64_t ld_o, float* out);

// The same outputs and final state, `chunk` tokens at a time (the WY form of
// transformers' torch_chunk_gated_delta_rule; chunk 64 there). Per chunk of n
// tokens with γ_i = Σ_{j≤i} g_j (within the chunk), kb_i = β_i k_i:
//   (I + L) U = [β_i v_i],  (I + L) W = [e^{γ_i} kb_i],
//       L_ij = (kb_i · k_j) e^{γ_i − γ_j} for j < i (forward substitution);
//   V' = U − W S;
//   o_i = e^{γ_i} Sᵀ q̂_i + Σ_{j≤i} (q̂_i · k_j) e^{γ_i − γ_j} V'_j,  q̂ = q / sqrt(dk);
//   S ← e^{γ_{n−1}} S + Σ_j e^{γ_{n−1} − γ_j} k_j V'_jᵀ.
void gated_delta_chunked(const DeltaRule& r, int64_t chunk, float* state, int64_t ld_o, float* out);

}  // namespace cortiq::model
