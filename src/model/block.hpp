// One decoder block (Llama / Mistral / Qwen2 / Qwen3), pre-norm:
//   h   = x + o_proj(attention(rope(qk_norm(q_proj(n1))), rope(qk_norm(k_proj(n1))), v_proj(n1)))
//   out = h + down_proj(silu(gate_proj(n2)) ∘ up_proj(n2))
// with n1 = rmsnorm(x)·input_layernorm, n2 = rmsnorm(h)·post_attention_layernorm.
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

struct LayerWeights {
    std::vector<float> input_norm;      // hidden
    std::vector<float> post_attn_norm;  // hidden
    std::vector<float> q_norm, k_norm;  // head_dim (qwen3), else empty
    Linear q, k, v, o, gate, up, down;
};

// The linear-layer inputs a calibration pass sees. `input` names the first
// projection that reads it: "self_attn.q_proj" (shared by q/k/v),
// "self_attn.o_proj", "mlp.gate_proj" (shared by gate/up), "mlp.down_proj".
// x is rows × cols, row-major, valid only during the call.
using LinearInputHook = std::function<void(int64_t layer, std::string_view input, const float* x,
                                           int64_t rows, int64_t cols)>;

// T rows each (one per token of the batch).
struct BlockActivations {
    MatF x;             // block input (residual stream)
    MatF attn_in;       // n1: input of q/k/v_proj
    MatF q_lin, k_lin;  // q_proj, k_proj outputs (+bias), before qk-norm and RoPE
    MatF q, k, v;       // what attention reads: q, k after qk-norm and RoPE; v_proj output
    MatF attn;          // attention output, input of o_proj (T × heads·head_dim)
    MatF attn_out;      // o_proj output
    MatF h;             // x + attn_out
    MatF mlp_in;        // n2: input of gate/up_proj
    MatF gate, up;      // projections
    MatF act;           // silu(gate) ∘ up: input of down_proj
    MatF mlp_out;       // down_proj output
    MatF out;           // h + mlp_out: block output
};

// Keys and values (after RoPE) of every layer for positions [0, length).
struct KvCache {
    int64_t capacity = 0;
    int64_t length = 0;
    std::vector<MatF> k, v;  // per layer: capacity × kv_heads·head_dim

    KvCache() = default;
    KvCache(const io::ModelConfig& c, int64_t capacity);
    void clear() { length = 0; }
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

}  // namespace cortiq::model
