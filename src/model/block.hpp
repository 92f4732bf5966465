// One decoder block (Llama / Mistral / Qwen2 / Qwen3 / Qwen3.5), pre-norm:
//   h   = x + o_proj(attention(rope(qk_norm(q_proj(n1))), rope(qk_norm(k_proj(n1))), v_proj(n1)))
//   out = h + down_proj(silu(gate_proj(n2)) ∘ up_proj(n2))
// with n1 = rmsnorm(x)·input_layernorm, n2 = rmsnorm(h)·post_attention_layernorm.
// Qwen3.5's attention layers gate the attention output by σ(gate), the gate
// made by q_proj beside the query, and turn only part of each head with RoPE;
// its Gated DeltaNet layers replace the attention by the linear-attention
// mixer (model/delta_block.cpp):
//   qkv = silu(conv1d(in_proj_qkv(n1))); q, k L2-normalised per head;
//   g = −e^{A_log} softplus(in_proj_a(n1) + dt_bias), β = σ(in_proj_b(n1));
//   o = gated delta rule (model/delta_ops.hpp);
//   h = x + out_proj(rmsnorm(o)·norm ∘ silu(in_proj_z(n1)))   (per value head)
// Qwen3.5's RMSNorms scale by 1 + w: the loader stores 1 + w, so the block
// multiplies by the stored weight as for the other models.
// Every intermediate is kept in BlockActivations for calibration and a later
// backward pass.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/matrix.hpp"
#include "io/config.hpp"
#include "model/linear.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

// The Gated DeltaNet mixer's weights (HF names under linear_attn.).
struct DeltaNetWeights {
    Linear qkv, z, b, a, out;           // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj
    MatF conv;                          // conv1d.weight: conv_dim × kernel
    std::vector<float> a_log, dt_bias;  // v_heads
    std::vector<float> norm;            // v_dim: the gated RMSNorm's w
};

struct LayerWeights {
    io::Mixer mixer = io::Mixer::attention;
    std::vector<float> input_norm;      // hidden
    std::vector<float> post_attn_norm;  // hidden
    std::vector<float> q_norm, k_norm;  // head_dim (qwen3, qwen3.5), else empty
    Linear q, k, v, o, gate, up, down;  // q..o: attention layers only
    DeltaNetWeights delta;              // Gated DeltaNet layers only

    // The layer's linear layers (those it has), for counting.
    std::vector<const Linear*> linears() const;
};

// The linear-layer inputs a calibration pass sees. `input` names the first
// projection that reads it: "self_attn.q_proj" (shared by q/k/v),
// "self_attn.o_proj", "mlp.gate_proj" (shared by gate/up), "mlp.down_proj";
// in a Gated DeltaNet layer "linear_attn.in_proj_qkv" (shared by in_proj_qkv,
// in_proj_z, in_proj_b, in_proj_a) and "linear_attn.out_proj".
// x is rows × cols, row-major, valid only during the call.
using LinearInputHook = std::function<void(int64_t layer, std::string_view input, const float* x,
                                           int64_t rows, int64_t cols)>;

// T rows each (one per token of the batch).
struct BlockActivations {
    MatF x;             // block input (residual stream)
    MatF attn_in;       // n1: input of q/k/v_proj
    MatF q_lin, k_lin;  // q_proj, k_proj outputs (+bias), before qk-norm and RoPE
    MatF q, k, v;       // what attention reads: q, k after qk-norm and RoPE; v_proj output
    MatF gate_lin;      // attn_gate: the gate half of q_proj's output (T × heads·head_dim)
    MatF attn_core;     // attn_gate: the attention output before its gate
    MatF attn;          // input of o_proj (T × heads·head_dim) or of out_proj (DeltaNet)
    MatF attn_out;      // o_proj / out_proj output
    // Gated DeltaNet layers:
    MatF qkv_lin;          // in_proj_qkv output (T × conv_dim)
    MatF qkv;              // after conv1d and SiLU, its q and k parts L2-normalised per head
    MatF z, b_lin, a_lin;  // in_proj_z (T × value_dim), in_proj_b, in_proj_a (T × v_heads)
    MatF g, beta;          // log decay and write strength (T × v_heads)
    MatF delta;            // the delta rule's output (T × value_dim), before the gated norm
    MatF h;                // x + attn_out
    MatF mlp_in;           // n2: input of gate/up_proj
    MatF gate, up;         // projections
    MatF act;              // silu(gate) ∘ up: input of down_proj
    MatF mlp_out;          // down_proj output
    MatF out;              // h + mlp_out: block output
};

// Keys and values (after RoPE) of every attention layer for positions
// [0, length); for every Gated DeltaNet layer its state after those positions:
// the convolution's last kernel − 1 inputs and the delta rule's S.
struct KvCache {
    int64_t capacity = 0;
    int64_t length = 0;
    std::vector<MatF> k, v;  // per layer: capacity × kv_heads·head_dim (empty: DeltaNet)
    std::vector<MatF> conv;  // per layer: (kernel − 1) × conv_dim (empty: attention)
    std::vector<std::vector<float>> state;  // per layer: v_heads × dk × dv (empty: attention)

    KvCache() = default;
    KvCache(const io::ModelConfig& c, int64_t capacity);
    void clear();  // length 0, DeltaNet states zero
};

struct BlockContext {
    const io::ModelConfig* cfg = nullptr;
    const RopeTable* rope = nullptr;  // cos/sin for positions pos0 .. pos0 + T − 1
    int64_t layer = 0;
    int64_t pos0 = 0;          // position of the first row
    KvCache* cache = nullptr;  // rows go to [pos0, pos0 + T) of the layer's cache
    const LinearInputHook* hook = nullptr;
    // If set to one of the hook's input names: return right after that input
    // (calibration needs nothing past the input whose Gram it collects; the
    // fields of BlockActivations after it are then stale).
    std::string_view stop_after;
};

// Runs the block on a.x (T × hidden, the input), filling every other field
// of `a` (a.out: the output). Reuses a's buffers when their sizes match, so
// repeated calls of one size allocate nothing.
void block_forward(const LayerWeights& w, const BlockContext& ctx, BlockActivations& a);

// The Gated DeltaNet mixer of a block (model/delta_block.cpp): from a.attn_in
// (n1) to a.attn_out (out_proj's output), calling the hook at its two inputs.
// Returns false when ctx.stop_after stopped it.
bool delta_mixer_forward(const DeltaNetWeights& w, const BlockContext& ctx, BlockActivations& a);

// Delta rule chunk size for prefill and scoring (transformers uses 64).
inline constexpr int64_t kDeltaChunk = 64;

}  // namespace cortiq::model
