// A decoder block (Llama / Mistral / Qwen2 / Qwen3, as model/block.hpp) with
// a backward pass, for tuning the BLR layers of a compressed block against
// the original model's block outputs (tune/block_tune.hpp). Windows of L
// tokens at positions 0..L−1, as the calibration windows are.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tune/grad_ops.hpp"

namespace cortiq::tune {

struct BlockDims {
    int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
    double eps = 1e-6;
    bool qk_norm = false;  // Qwen3
};

// A linear layer of the block: BLR (tunable) or dense (kept as it is), with an
// optional bias.
template <class T>
struct LinearT {
    int64_t m = 0, n = 0;
    std::optional<BlrWeightsT<T>> blr;  // set: y = BLR(x); else y = x Wᵀ
    std::vector<T> w;                   // m × n when dense
    std::vector<T> bias;                // empty or m values
};

template <class T>
struct BlockParamsT {
    std::vector<T> in_norm, post_norm, q_norm, k_norm;
    LinearT<T> q, k, v, o, gate, up, down;
    // The linears in a fixed order (q, k, v, o, gate, up, down).
    std::vector<LinearT<T>*> linears() { return {&q, &k, &v, &o, &gate, &up, &down}; }
    std::vector<const LinearT<T>*> linears() const { return {&q, &k, &v, &o, &gate, &up, &down}; }
};

// Gradients of what tuning changes: the BLR layers (same order as
// linears(); unset for dense ones) and the norm weights.
template <class T>
struct BlockGradsT {
    std::vector<std::optional<BlrGradT<T>>> blr;
    std::vector<T> in_norm, post_norm, q_norm, k_norm;
};
template <class T>
BlockGradsT<T> zero_grads(const BlockParamsT<T>& p);

// cos and sin of RoPE for positions 0..L−1: L × head_dim/2 each.
template <class T>
struct RopeT {
    int64_t period = 0;
    std::vector<T> cos, sin;
};
// From the inverse frequencies (model::rope_inv_freq), as HF computes them.
template <class T>
RopeT<T> rope_for(const std::vector<float>& inv_freq, int64_t L);

// Everything the backward reads, for N = windows · L rows.
template <class T>
struct BlockActsT {
    int64_t windows = 0, L = 0;
    std::vector<T> x, n1, rstd1, q_lin, k_lin, rstd_q, rstd_k, q, k, v, probs, attn, h, n2, rstd2,
        gate, up, act, out;
    std::vector<BlrCacheT<T>> cache;  // per linear (order of linears())
};

// out = h + down(swiglu(gate(n2), up(n2))), h = x + o(attention(...)), as
// model/block.hpp; x: windows · L rows of `hidden`.
template <class T>
void block_forward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope, const T* x,
                   int64_t windows, int64_t L, BlockActsT<T>& a);
// Given dout (N × hidden): the gradients added into g (norms with
// tune_norms), dx (N × hidden, may be null) overwritten.
template <class T>
void block_backward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope,
                    BlockActsT<T>& a, const T* dout, T* dx, BlockGradsT<T>& g);

}  // namespace cortiq::tune
