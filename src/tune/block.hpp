// A decoder block (Llama / Mistral / Qwen2 / Qwen3 / Qwen3.5, as
// model/block.hpp) with a backward pass, for tuning the BLR layers of a
// compressed block against the original model's block outputs
// (tune/block_tune.hpp). Windows of L tokens at positions 0..L−1, as the
// calibration windows are. Qwen3.5's attention blocks gate the attention
// output by σ(gate) (q_proj makes the gate beside the query) and turn part of
// each head with RoPE; its Gated DeltaNet blocks replace the attention by the
// mixer of tune/delta_block.cpp. Its RMSNorms scale by 1 + w: the loader
// stores 1 + w, so the block multiplies by the stored weight as for the other
// models (and norm tuning, off by default, would tune 1 + w).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "tune/delta_grad_ops.hpp"
#include "tune/grad_ops.hpp"

namespace cortiq::tune {

// The Gated DeltaNet mixer's shapes (io::DeltaNetConfig).
struct DeltaDims {
    int64_t k_heads = 0, v_heads = 0, dk = 0, dv = 0, conv_kernel = 0;
    int64_t key_dim() const { return k_heads * dk; }
    int64_t value_dim() const { return v_heads * dv; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v side by side
};

struct BlockDims {
    int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
    double eps = 1e-6;
    bool qk_norm = false;    // Qwen3, Qwen3.5
    bool attn_gate = false;  // Qwen3.5: q_proj gives [query | gate] per head
    int64_t rotary_dim = 0;  // values of each head RoPE turns; 0: head_dim
    DeltaDims delta;         // Qwen3.5's Gated DeltaNet blocks
    int64_t rot() const { return rotary_dim > 0 ? rotary_dim : head_dim; }
};

// The delta rule's chunk in tuning: the checkpoints the backward recomputes from.
inline constexpr int64_t kTuneDeltaChunk = 64;
// The L2 norm's eps of q and k in the delta rule (transformers' l2norm).
inline constexpr double kDeltaL2Eps = 1e-6;

// The delta rule's inputs for windows × L rows: q, k, v side by side in
// qkv_n (in_proj_qkv's columns after the convolution and the L2 norm), the
// gates g and beta (rows × v_heads). Shared by the CPU and CUDA mixers.
template <class T>
DeltaRuleT<T> delta_rule_of(const DeltaDims& dd, int64_t windows, int64_t L, const T* qkv_n,
                            const T* g, const T* beta) {
    DeltaRuleT<T> r;
    r.q = qkv_n;
    r.k = qkv_n + dd.key_dim();
    r.v = qkv_n + 2 * dd.key_dim();
    r.g = g;
    r.beta = beta;
    r.windows = windows;
    r.L = L;
    r.ld_qk = r.ld_v = dd.conv_dim();
    r.k_heads = dd.k_heads;
    r.v_heads = dd.v_heads;
    r.dk = dd.dk;
    r.dv = dd.dv;
    return r;
}

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
    bool delta = false;  // the Gated DeltaNet mixer (qkv … out) instead of attention (q … o)
    std::vector<T> in_norm, post_norm, q_norm, k_norm;
    LinearT<T> q, k, v, o, gate, up, down;
    // Gated DeltaNet: in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj,
    // conv1d (conv_dim × kernel), A_log and dt_bias (v_heads), the gated
    // norm's weight (dv). Kept as they are: only BLR layers are tuned.
    LinearT<T> qkv, z, b, a, out;
    std::vector<T> conv, a_log, dt_bias, gnorm;
    // The linears in a fixed order (q, k, v, o, gate, up, down, qkv, z, b, a,
    // out); those a block does not have are empty (m = 0).
    std::vector<LinearT<T>*> linears() {
        return {&q, &k, &v, &o, &gate, &up, &down, &qkv, &z, &b, &a, &out};
    }
    std::vector<const LinearT<T>*> linears() const {
        return {&q, &k, &v, &o, &gate, &up, &down, &qkv, &z, &b, &a, &out};
    }
};
// Where each linear sits in linears().
enum LinearSlot : size_t {
    kQ,
    kK,
    kV,
    kO,
    kGate,
    kUp,
    kDown,
    kQkv,
    kZ,
    kB,
    kA,
    kOut,
    kLinearSlots
};

// Gradients of what tuning changes: the BLR layers (same order as
// linears(); unset for dense ones) and the norm weights.
template <class T>
struct BlockGradsT {
    std::vector<std::optional<BlrGradT<T>>> blr;
    std::vector<T> in_norm, post_norm, q_norm, k_norm;
};
// with_signs false: no gradients of the signs (a tuner with lr_signs = 0).
template <class T>
BlockGradsT<T> zero_grads(const BlockParamsT<T>& p, bool with_signs = true);

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
    std::vector<T> x, n1, rstd1, h, n2, rstd2, gate, up, act, out;
    // attention: q_lin is q_proj's output ([query | gate] per head with
    // attn_gate), q_in its query part, core the attention's output, attn
    // o_proj's input (core ∘ σ(gate_lin) with attn_gate)
    std::vector<T> q_lin, q_in, gate_lin, k_lin, rstd_q, rstd_k, q, k, v, probs, core, attn;
    // Gated DeltaNet: in_proj_qkv's output, the convolution before and after
    // SiLU, q and k L2-normalised (qkv_n; inv_qk their 1/‖·‖), z, b, a, the
    // gates, the delta rule's chunk states and output, the gated norm's rstd
    // (its output is attn, out_proj's input)
    std::vector<T> qkv_lin, conv_pre, qkv, qkv_n, inv_qk, z, b_lin, a_lin, g, beta, states, delta,
        rstd_g;
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
