// The Gated DeltaNet mixer of a Qwen3.5 block (transformers'
// Qwen3_5GatedDeltaNet.forward), from n1 to out_proj's output:
//   qkv = silu(conv1d(in_proj_qkv(n1)))      (causal, per channel, with the cache's past)
//   q, k, v = split(qkv); q, k L2-normalised per key head
//   g = −e^{A_log} softplus(in_proj_a(n1) + dt_bias),  β = σ(in_proj_b(n1))
//   o = gated delta rule (q, k, v, g, β)      (step form for one cached token, else chunks)
//   out = out_proj(rmsnorm(o)·norm ∘ silu(in_proj_z(n1)))   (per value head)
// Without a cache the convolution and the rule start from zero states; with
// one they continue from the cache's and leave theirs there.
#include <vector>

#include "model/block_detail.hpp"
#include "model/delta_ops.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

using detail::call_hook;
using detail::ensure;

bool delta_mixer_forward(const DeltaNetWeights& w, const BlockContext& ctx, BlockActivations& a) {
    const io::ModelConfig& c = *ctx.cfg;
    const io::DeltaNetConfig& d = c.delta;
    const int64_t T = a.attn_in.rows(), C = d.conv_dim(), H = d.v_heads;
    call_hook(ctx, "linear_attn.in_proj_qkv", a.attn_in);
    if (ctx.stop_after == "linear_attn.in_proj_qkv") return false;
    w.qkv.forward(a.attn_in, a.qkv_lin);
    w.z.forward(a.attn_in, a.z);
    w.b.forward(a.attn_in, a.b_lin);
    w.a.forward(a.attn_in, a.a_lin);

    // the states: the cache's, or fresh zeros for a sequence scored on its own
    std::vector<float> conv0, state0;
    float *conv_state = nullptr, *state = nullptr;
    if (ctx.cache) {
        const size_t l = static_cast<size_t>(ctx.layer);
        conv_state = ctx.cache->conv[l].data();
        state = ctx.cache->state[l].data();
    } else {
        conv0.assign(static_cast<size_t>((d.conv_kernel - 1) * C), 0.0f);
        state0.assign(static_cast<size_t>(H * d.k_dim * d.v_dim), 0.0f);
        conv_state = conv0.data();
        state = state0.data();
    }
    ensure(a.qkv, T, C);
    causal_conv1d_silu(a.qkv_lin.data(), T, C, w.conv.data(), d.conv_kernel, conv_state,
                       a.qkv.data());
    constexpr float kL2Eps = 1e-6f;  // transformers' l2norm in the delta rule
    l2norm_heads(a.qkv.data(), T, C, 2 * d.k_heads, d.k_dim, kL2Eps);  // q and k side by side
    ensure(a.g, T, H);
    ensure(a.beta, T, H);
    delta_gates(a.a_lin.data(), a.b_lin.data(), T, H, w.a_log.data(), w.dt_bias.data(), a.g.data(),
                a.beta.data());

    DeltaRule r;
    r.q = a.qkv.data();
    r.k = a.qkv.data() + d.key_dim();
    r.v = a.qkv.data() + 2 * d.key_dim();
    r.g = a.g.data();
    r.beta = a.beta.data();
    r.T = T;
    r.ld_qk = r.ld_v = C;
    r.k_heads = d.k_heads;
    r.v_heads = H;
    r.dk = d.k_dim;
    r.dv = d.v_dim;
    ensure(a.delta, T, d.value_dim());
    if (ctx.cache && T == 1)
        gated_delta_recurrent(r, state, d.value_dim(), a.delta.data());
    else
        gated_delta_chunked(r, kDeltaChunk, state, d.value_dim(), a.delta.data());

    ensure(a.attn, T, d.value_dim());
    rmsnorm_gated(a.delta.data(), a.z.data(), T * H, d.v_dim, w.norm.data(),
                  static_cast<float>(c.rms_norm_eps), a.attn.data());
    call_hook(ctx, "linear_attn.out_proj", a.attn);
    if (ctx.stop_after == "linear_attn.out_proj") return false;
    w.out.forward(a.attn, a.attn_out);
    return true;
}

}  // namespace cortiq::model
