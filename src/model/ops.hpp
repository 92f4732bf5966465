// The float32 operations of a Llama/Qwen decoder, one per function, on
// row-major activations (one row per token). Each writes its output to a
// separate buffer (or states that it works in place) so that its inputs stay
// available to a backward pass.
//
// Threading: OpenMP over rows, heads or tiles, with BLAS called inside the
// regions; run them under SingleThreadedBlas (core/blas_threads.hpp), as
// Model does, so that OpenBLAS's own pool does not compete for the cores.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/matrix.hpp"
#include "io/config.hpp"

namespace cortiq::model {

// y[i,:] = w ∘ x[i,:] / sqrt(mean_j x[i,j]² + eps)      (rows × n, HF LlamaRMSNorm)
// x and y may be the same buffer.
void rmsnorm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y);

// y[i,:] = w ∘ x[i,:] / sqrt(mean_j x[i,j]² + eps) ∘ silu(z[i,:])   (rows × n)
// Qwen3.5's gated RMSNorm (Qwen3_5RMSNormGated: normalise, scale, then gate).
void rmsnorm_gated(const float* x, const float* z, int64_t rows, int64_t n, const float* w,
                   float eps, float* y);

// In place, each of `heads` groups of d values of each row (row stride ld):
// x ← x / sqrt(Σ x² + eps)   (transformers' / FLA's l2norm, eps 1e-6).
void l2norm_heads(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, float eps);

// Qwen3.5's q_proj output, per row and head h, is [query_h (d) | gate_h (d)]:
// q[i, h·d + j] = qg[i, 2hd + j], gate[i, h·d + j] = qg[i, 2hd + d + j].
void split_query_gate(const float* qg, int64_t rows, int64_t heads, int64_t d, float* q,
                      float* gate);

// y = x ∘ σ(gate), σ(z) = 1 / (1 + e^−z) (n values; the attention output gate).
void sigmoid_gate(const float* x, const float* gate, int64_t n, float* y);

// RoPE inverse frequencies θ^(-2i/d), i < d/2, d = c.rotary_dim() (the head
// dimension, or its first part with a partial rotary factor), with the
// config's scaling (linear: ÷ factor; llama3: the wavelength-dependent
// blend). Rounded to float32 as transformers does.
std::vector<float> rope_inv_freq(const io::ModelConfig& c);

// cos and sin of a = pos·inv_freq[j] (a in float32, as in HF) for the
// positions pos0 .. pos0 + rows − 1: rows × d/2 each.
struct RopeTable {
    int64_t pos0 = 0, rows = 0, half = 0;
    std::vector<float> cos, sin;
};
RopeTable rope_table(std::span<const float> inv_freq, int64_t pos0, int64_t rows);

// In place, HF rotate_half convention: for each row i (position
// table.pos0 + i) and head, with c, s the table's cos and sin, r = 2 ·
// table.half ≤ head_dim the rotary size, j < r/2:
//   x'[j]       = x[j]·c − x[j+r/2]·s
//   x'[j + r/2] = x[j+r/2]·c + x[j]·s
// and the head's dims from r on unchanged (partial rotary).
// x: rows × (heads·d), row stride ld.
void rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_dim,
          const RopeTable& table);

// In place: s ← exp(s − max s) / Σ exp(s − max s) over n values (float32,
// a polynomial exp with ~2e-7 relative error).
void softmax(float* s, int64_t n);

// Causal grouped-query attention. Query row i (absolute position pos0 + i)
// of head h attends to key rows j ≤ pos0 + i (and j > pos0 + i − window if
// window > 0) of kv head h / (heads / kv_heads):
//   out[i, h] = Σ_j softmax_j(q[i,h]·k[j,g] / sqrt(d)) v[j,g]
// q: T × (heads·d) (row stride ldq); k, v: S × (kv_heads·d) (row stride ldkv,
// S ≥ pos0 + T); out: T × (heads·d) (row stride ldo).
void attention(const float* q, int64_t T, int64_t ldq, const float* k, const float* v, int64_t ldkv,
               int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t pos0, int64_t window,
               float* out, int64_t ldo);

// y = silu(gate) ∘ up, silu(z) = z / (1 + e^−z) (polynomial exp, as softmax)
void swiglu(const float* gate, const float* up, int64_t n, float* y);

// y = a + b (elementwise, n values); y may alias a or b.
void add(const float* a, const float* b, int64_t n, float* y);

// y (rows × m) = x (rows × n) · Wᵀ, W m × n (float32 sgemm, tiled over the
// OpenMP threads: row panels for batches, column panels for a few rows).
void matmul_wt(const float* x, int64_t rows, int64_t n, const MatF& w, float* y);

// Per row of logits (rows × vocab): log Σ_j exp(l_j) (max-shifted, summed in
// double).
std::vector<double> logsumexp_rows(const MatF& logits);

// Σ over rows i < T−1 of −log softmax(logits[i])[tokens[i+1]] (double), T =
// tokens.size() = logits.rows(): the NLL of one window scored on its own.
double next_token_nll(const MatF& logits, std::span<const int32_t> tokens);

}  // namespace cortiq::model
