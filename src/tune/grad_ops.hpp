// Forward and backward passes of the operations of a decoder block, one pair
// per operation in the style of llm.c, templated on the scalar: double is the
// reference the tests check against finite differences, float is what block
// tuning runs. Row-major activations, one row per token; a forward keeps what
// its backward needs (rstd, probabilities, the BLR intermediates).
//
// Backward conventions: dx outputs are overwritten; parameter gradients
// (dw, dh, dl, dg, dsu, dsv, dbias) are accumulated, so several windows or
// batches can add into one gradient.
#pragma once

#include <cstdint>
#include <vector>

namespace cortiq::tune {

// C (m × n, row stride ldc) = alpha · op(A) · op(B) + beta · C, op(A) m × k
// (A stored k × m when ta), op(B) k × n (B stored n × k when tb); BLAS.
template <class T>
void gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda,
          const T* b, int64_t ldb, T beta, T* c, int64_t ldc);

// RMSNorm (HF LlamaRMSNorm): y = w ∘ x · rstd, rstd = 1/√(mean x² + eps),
// for each of `rows` rows of n values; rstd (rows values) is kept.
template <class T>
void rmsnorm_forward(const T* x, int64_t rows, int64_t n, const T* w, T eps, T* y, T* rstd);
// With x̂ = x · rstd: dx = rstd · (w ∘ dy − x̂ · mean(w ∘ dy ∘ x̂)); dw += Σ_rows dy ∘ x̂
// (dw may be null).
template <class T>
void rmsnorm_backward(const T* dy, const T* x, const T* w, const T* rstd, int64_t rows, int64_t n,
                      T* dx, T* dw);

// RoPE in place (HF rotate_half) on the first `rot` values of each head of d
// (rot = d but for Qwen3.5's partial rotary; the rest pass unchanged), row i
// at position i mod period; cos, sin: period × rot/2. x: rows × (heads · d),
// row stride ld.
template <class T>
void rope_forward(T* x, int64_t rows, int64_t ld, int64_t heads, int64_t d, int64_t rot,
                  int64_t period, const T* cos, const T* sin);
// The transpose of the rotation (rotation by −angle), in place on dx.
template <class T>
void rope_backward(T* dx, int64_t rows, int64_t ld, int64_t heads, int64_t d, int64_t rot,
                   int64_t period, const T* cos, const T* sin);

// Causal grouped-query attention over one window of L tokens (positions
// 0..L−1): for head h of kv group g = h / (heads / kv_heads),
//   P_h = softmax(q_h k_gᵀ / √d) (causal), out_h = P_h v_g.
// q, out: L × heads·d; k, v: L × kv_heads·d; probs: heads × L × L (kept).
template <class T>
void attention_forward(const T* q, const T* k, const T* v, int64_t L, int64_t heads,
                       int64_t kv_heads, int64_t d, T* out, T* probs);
// dS = P ∘ (dP − rowsum(dP ∘ P)) with dP = dout_h v_gᵀ; dq_h = dS k_g / √d,
// dk_g = Σ_h dSᵀ q_h / √d, dv_g = Σ_h P_hᵀ dout_h (dq, dk, dv overwritten).
template <class T>
void attention_backward(const T* dout, const T* q, const T* k, const T* v, const T* probs,
                        int64_t L, int64_t heads, int64_t kv_heads, int64_t d, T* dq, T* dk, T* dv);

// y = silu(gate) ∘ up over n values.
template <class T>
void swiglu_forward(const T* gate, const T* up, int64_t n, T* y);
// dgate = dy ∘ up ∘ σ(gate)(1 + gate(1 − σ(gate))), dup = dy ∘ silu(gate).
template <class T>
void swiglu_backward(const T* dy, const T* gate, const T* up, int64_t n, T* dgate, T* dup);

// Qwen3.5's q_proj output, per row and head h, is [query_h (d) | gate_h (d)]:
// split into q and gate (rows × heads·d each), and merge, its transpose
// (the split's backward).
template <class T>
void split_query_gate(const T* qg, int64_t rows, int64_t heads, int64_t d, T* q, T* gate);
template <class T>
void merge_query_gate(const T* q, const T* gate, int64_t rows, int64_t heads, int64_t d, T* qg);

// The attention's output gate: y = x ∘ σ(gate) over n values.
template <class T>
void sigmoid_gate_forward(const T* x, const T* gate, int64_t n, T* y);
// dx = dy ∘ σ(gate), dgate = dy ∘ x ∘ σ(gate)(1 − σ(gate)) (overwritten).
template <class T>
void sigmoid_gate_backward(const T* dy, const T* x, const T* gate, int64_t n, T* dx, T* dgate);

// Embedding lookup out[i] = table[tokens[i]] and its backward, the rows of
// dout added into dtable[tokens[i]].
template <class T>
void embedding_forward(const T* table, int64_t dim, const int32_t* tokens, int64_t rows, T* out);
template <class T>
void embedding_backward(const T* dout, int64_t dim, const int32_t* tokens, int64_t rows, T* dtable);

// Dense linear y = x Wᵀ (+ b): x rows × n, W m × n. Backward: dx = dy W
// (overwritten; may be null), dw += dyᵀ x (may be null), db += Σ_rows dy.
template <class T>
void linear_forward(const T* x, int64_t rows, int64_t n, const T* w, int64_t m, const T* bias,
                    T* y);
template <class T>
void linear_backward(const T* dy, const T* x, int64_t rows, int64_t n, const T* w, int64_t m, T* dx,
                     T* dw, T* db);

// The BLR linear layer (SPEC §1): y = Σ_p h_p ∘ S_U,p (ℓ_p ∘ S_V,pᵀ (g_p ∘ x))
// per row x. Signs are held as ±1 values so the products are GEMMs; during
// tuning they are sign(latent) (tune/blr_param.hpp).
template <class T>
struct BlrPathT {
    std::vector<T> h, l, g;  // m, r, n scales
    std::vector<T> su, sv;   // m × r and n × r, entries ±1
};
template <class T>
struct BlrWeightsT {
    int64_t m = 0, n = 0, r = 0;
    std::vector<BlrPathT<T>> paths;
};
// What the backward needs per path: t = (g ∘ x) S_V (rows × r), u = (ℓ ∘ t) S_Uᵀ
// (rows × m).
template <class T>
struct BlrCacheT {
    std::vector<std::vector<T>> t, u;
};
// The gradients of one layer, same shapes as its weights.
template <class T>
using BlrGradT = BlrWeightsT<T>;

template <class T>
void blr_forward(const BlrWeightsT<T>& w, const T* x, int64_t rows, T* y, BlrCacheT<T>& cache);
// dh += Σ dy ∘ u; du = dy ∘ h; dtl = du S_U; dS_U += duᵀ (ℓ ∘ t); dℓ += Σ dtl ∘ t;
// dt = dtl ∘ ℓ; dxg = dt S_Vᵀ; dS_V += (g ∘ x)ᵀ dt; dg += Σ dxg ∘ x; dx = Σ_p dxg ∘ g.
// dS_U, dS_V are the gradients of the signs as real numbers: the
// straight-through estimator passes them to the latents. dx may be null.
template <class T>
void blr_backward(const BlrWeightsT<T>& w, const T* x, int64_t rows, const BlrCacheT<T>& cache,
                  const T* dy, T* dx, BlrGradT<T>& grad);
// A zeroed gradient shaped like w; with_signs false: of the scales alone (su,
// sv empty), and blr_backward then skips the two products of dS_U and dS_V.
template <class T>
BlrGradT<T> blr_zero_grad(const BlrWeightsT<T>& w, bool with_signs = true);

// Distillation loss of one row set: Σ_rows KL(p_teacher ‖ softmax(logits)),
// teacher given as log-probabilities; dlogits = softmax(logits) − p_teacher
// (times `scale`, also applied to the returned loss).
template <class T>
double kl_forward_backward(const T* logits, const T* teacher_logp, int64_t rows, int64_t vocab,
                           T scale, T* dlogits);

}  // namespace cortiq::tune
