// The small kernels of the GPU forward pass (model/gpu_model.hpp), one per
// .cu file, each the device twin of a function in model/ops.hpp. Activations
// are row-major float32 on the device, one row per token; a batch holds
// `batch` sequences of T rows back to back. Every launcher enqueues on
// `stream` and checks the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cortiq::model::cuda {

// out[r,:] = table[tokens[r],:]   (rows × d; ids already checked on the host)
void embed(const int32_t* tokens, const float* table, int64_t rows, int64_t d, float* out,
           cudaStream_t stream);

// y[r,:] = w ∘ x[r,:] / sqrt(mean_j x[r,j]² + eps)   (rows × n; y may be x).
// Qwen3's q/k norm is the same call on rows of head_dim values.
void rmsnorm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
             cudaStream_t stream);

// In place, rotate_half convention (model::rope): row r is at position
// pos0 + r mod T; cos/sin hold rows of `half` values for positions 0.. .
void rope(float* x, int64_t rows, int64_t T, int64_t heads, int64_t head_dim, const float* cos,
          const float* sin, int64_t pos0, cudaStream_t stream);

// Causal grouped-query attention (model::attention). Sequence b's query row
// i (position pos0 + i) of head h attends key rows j ≤ pos0 + i (and
// j > pos0 + i − window if window > 0) of kv head h / (heads / kv_heads),
// key j at row b·kv_rows + j of k and v (kv_heads·head_dim wide).
// q, out: batch·T rows of heads·head_dim. head_dim ≤ 256.
void attention(const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t T,
               int64_t kv_rows, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t pos0,
               int64_t window, cudaStream_t stream);

// gate ← silu(gate) ∘ up over n values (in place).
void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream);

// y[r,c] += b[c]   (rows × m)
void add_bias(float* y, const float* b, int64_t rows, int64_t m, cudaStream_t stream);

// Per row r of logits (rows × vocab), T rows per sequence: nll[r] =
// logsumexp(logits[r]) − logits[r, tokens[r+1]] for r mod T < T − 1, else 0.
void next_token_nll(const float* logits, const int32_t* tokens, int64_t rows, int64_t T,
                    int64_t vocab, double* nll, cudaStream_t stream);

}  // namespace cortiq::model::cuda
