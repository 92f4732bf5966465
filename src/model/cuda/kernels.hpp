// The small kernels of the GPU forward pass (model/gpu_model.hpp), one per
// .cu file, each the device twin of a function in model/ops.hpp. Activations
// are row-major float32 on the device, one row per token; a batch holds
// `batch` sequences of T rows back to back. Every launcher enqueues on
// `stream` and checks the launch. The kernels of the decode chain (RMSNorm,
// RoPE, attention, SwiGLU) are launched with programmatic dependent launch
// (pdl.cuh).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace cortiq::model::cuda {

// out[r,:] = table[tokens[r],:]   (rows × d; ids already checked on the host)
void embed(const int32_t* tokens, const float* table, int64_t rows, int64_t d, float* out,
           cudaStream_t stream);
// The same from an fp16 table (the dense fp16 runtime).
void embed(const int32_t* tokens, const __half* table, int64_t rows, int64_t d, float* out,
           cudaStream_t stream);

// y[i] = fp16(x[i]) over n values (round to nearest; the dense fp16 runtime's
// GEMM inputs).
void to_f16(const float* x, int64_t n, __half* y, cudaStream_t stream);

// y[r,:] = w ∘ x[r,:] / sqrt(mean_j x[r,j]² + eps)   (rows × n; y may be x).
// Qwen3's q/k norm is the same call on rows of head_dim values.
void rmsnorm(const float* x, int64_t rows, int64_t n, const float* w, float eps, float* y,
             cudaStream_t stream);

// In place, rotate_half convention (model::rope), on q (rows of q_heads
// heads) and k (rows of k_heads heads) in one launch: row r is at position
// p0 + r mod T, p0 = pos[r / T] when pos (device memory, one per sequence)
// is given, else pos0; cos/sin hold rows of `half` values for positions
// 0.. ; 2·half ≤ head_dim dims of each head turn (partial rotary: the rest
// stay).
void rope_qk(float* q, int64_t q_heads, float* k, int64_t k_heads, int64_t rows, int64_t T,
             int64_t head_dim, int64_t half, const float* cos, const float* sin, int64_t pos0,
             const int32_t* pos, cudaStream_t stream);

// The keys and values of `batch` sequences of T rows (k, v: batch·T rows of
// kv_dim) into a KV cache of `capacity` rows per sequence: row i of
// sequence b goes to cache row b·capacity + p0 + i, p0 = pos[b] (device
// memory) when pos is given, else pos0. The cache is float32 (k_f32,
// v_f32) or fp16 (k_f16, v_f16, rounded to nearest); the other pair null.
struct KvCacheView {
    float *k_f32 = nullptr, *v_f32 = nullptr;
    __half *k_f16 = nullptr, *v_f16 = nullptr;
    int64_t capacity = 0;
};
void kv_store(const float* k, const float* v, int64_t batch, int64_t T, int64_t kv_dim,
              const KvCacheView& cache, int64_t pos0, const int32_t* pos, cudaStream_t stream);

// Causal grouped-query attention (model::attention). Sequence b's query row
// i (position pos0 + i) of head h attends key rows j ≤ pos0 + i (and
// j > pos0 + i − window if window > 0) of kv head h / (heads / kv_heads),
// key j at row b·kv_rows + j of k and v (kv_heads·head_dim wide).
// q, out: batch·T rows of heads·head_dim. head_dim ≤ 256.
void attention(const float* q, const float* k, const float* v, float* out, int64_t batch, int64_t T,
               int64_t kv_rows, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t pos0,
               int64_t window, cudaStream_t stream);
// The same on a float32 (k, v) or fp16 (k_f16, v_f16) cache, the positions
// either pos0 for every sequence or pos[b] (device memory; sequence b's first
// query row) — then max_keys bounds the keys any query row sees and sizes the
// decode grid, so that one captured launch serves every position below it.
struct AttentionArgs {
    const float* q = nullptr;
    const float *k = nullptr, *v = nullptr;
    const __half *k_f16 = nullptr, *v_f16 = nullptr;
    float* out = nullptr;
    int64_t batch = 1, T = 0, kv_rows = 0, heads = 0, kv_heads = 0, head_dim = 0;
    int64_t pos0 = 0;
    const int32_t* pos = nullptr;
    int64_t max_keys = 0;  // with pos: at least every row's position + 1
    int64_t window = 0;
};
void attention(const AttentionArgs& a, cudaStream_t stream);
// The blocks (a cluster) attention gives each decoded query row and head
// when any row sees at most `keys` keys (min(keys, window) with a window >
// 0) and there are `pairs` (row, head) pairs: one per 32 keys, at most 16
// and at most 256 / pairs (CORTIQ_ATTN_KEYS, CORTIQ_ATTN_SPLITS,
// CORTIQ_ATTN_BLOCKS). The size class of a captured decode step.
int attention_decode_splits(int64_t keys, int64_t window, int64_t pairs);

// gate ← silu(gate) ∘ up over n values (in place).
void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream);

// y[r,c] += b[c]   (rows × m)
void add_bias(float* y, const float* b, int64_t rows, int64_t m, cudaStream_t stream);

// Per row r of logits (rows × vocab), T rows per sequence: nll[r] =
// logsumexp(logits[r]) − logits[r, tokens[r+1]] for r mod T < T − 1, else 0.
void next_token_nll(const float* logits, const int32_t* tokens, int64_t rows, int64_t T,
                    int64_t vocab, double* nll, cudaStream_t stream);

// ── Qwen3.5 (the twins of model/ops.hpp and model/delta_ops.hpp) ──────────

// q_proj's output per row and head h is [query_h (d) | gate_h (d)]:
// q[r, h·d + j] = qg[r, 2hd + j], gate[r, h·d + j] = qg[r, 2hd + d + j].
void split_query_gate(const float* qg, int64_t rows, int64_t heads, int64_t d, float* q,
                      float* gate, cudaStream_t stream);

// x ← x ∘ σ(gate) over n values (in place; the attention output gate).
void sigmoid_gate(float* x, const float* gate, int64_t n, cudaStream_t stream);

// y[r,:] = w ∘ x[r,:] / sqrt(mean_j x[r,j]² + eps) ∘ silu(z[r,:])   (rows × n;
// Qwen3.5's gated RMSNorm, model::rmsnorm_gated; y may be x).
void rmsnorm_gated(const float* x, const float* z, int64_t rows, int64_t n, const float* w,
                   float eps, float* y, cudaStream_t stream);

// In place, each of `heads` groups of d values of each row (row stride ld):
// x ← x / sqrt(Σ x² + eps)   (model::l2norm_heads).
void l2norm_heads(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, float eps,
                  cudaStream_t stream);

// Depthwise causal convolution of width K with SiLU (model::causal_conv1d_silu)
// on `batch` sequences of T rows of C channels: y[t, c] = silu(Σ_k w[c·K + k] ·
// x[t − K + 1 + k, c]). Rows before a sequence's first come from `state`
// ((K − 1) × C per sequence, oldest first, sequence b's at b·(K − 1)·C),
// which is then updated to the last K − 1 inputs; with state null they are
// zeros and nothing is kept. y ≠ x.
void causal_conv1d_silu(const float* x, int64_t batch, int64_t T, int64_t C, const float* w,
                        int64_t K, float* state, float* y, cudaStream_t stream);

// Per row r and value head h (rows × heads each; model::delta_gates):
//   beta = σ(b),  g = −exp(a_log[h]) · softplus(a + dt_bias[h])
void delta_gates(const float* a, const float* b, int64_t rows, int64_t heads, const float* a_log,
                 const float* dt_bias, float* g, float* beta, cudaStream_t stream);

// The gated delta rule (model::gated_delta_recurrent) on `batch` sequences of T
// rows, step by step over the tokens (decoding; delta_rule.cu). q, k: row stride ld_qk, k_heads·dk
// values; v: stride ld_v, v_heads·dv; g, beta: rows × v_heads; value head h
// reads key head h / (v_heads / k_heads). state: v_heads × dk × dv per
// sequence (sequence b's at b·v_heads·dk·dv), the start state, updated;
// null: every sequence starts from zero and the end
// state is dropped. out: rows × v_heads·dv (row stride ld_o). dk ≤ 128.
struct DeltaRuleArgs {
    const float *q = nullptr, *k = nullptr, *v = nullptr, *g = nullptr, *beta = nullptr;
    int64_t batch = 1, T = 0, ld_qk = 0, ld_v = 0;
    int64_t k_heads = 0, v_heads = 0, dk = 0, dv = 0;
};
void gated_delta_rule(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o,
                      cudaStream_t stream);

// The same outputs and end state chunkwise, 64 tokens at a time
// (model::gated_delta_chunked; delta_chunk.cu): for prefill and scoring.
void gated_delta_chunked(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o,
                         cudaStream_t stream);
// The chunk kernel's phases run on the host, thread by thread, on host
// pointers: its indexing checked where no GPU is (tests/test_qwen35_gpu.cpp).
void gated_delta_chunked_host(const DeltaRuleArgs& r, float* state, float* out, int64_t ld_o);

}  // namespace cortiq::model::cuda
