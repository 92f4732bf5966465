// The Gated DeltaNet mixer of a Qwen3.5 block with its backward pass, the
// stages of model/delta_block.cpp on windows that start from zero states:
//   qkv = silu(conv1d(in_proj_qkv(n1)));  q, k L2-normalised per key head
//   g = −e^{A_log} softplus(in_proj_a(n1) + dt_bias),  β = σ(in_proj_b(n1))
//   o = gated delta rule (q, k, v, g, β)
//   mix = out_proj(rmsnorm(o)·norm ∘ silu(in_proj_z(n1)))   (per value head)
// Each stage's backward is in tune/delta_grad_ops.hpp; the chain rule runs
// them in reverse order, the four input projections' dx summed into dn1.
#include "core/error.hpp"
#include "tune/block_detail.hpp"
#include "tune/delta_grad_ops.hpp"

namespace cortiq::tune::detail {

template <class T>
void delta_mixer_forward(const BlockParamsT<T>& p, const BlockDims& d, BlockActsT<T>& a,
                         std::vector<T>& mix) {
    const DeltaDims& dd = d.delta;
    const int64_t N = a.windows * a.L, C = dd.conv_dim(), H = dd.v_heads;
    CORTIQ_ASSERT(static_cast<int64_t>(p.conv.size()) == C * dd.conv_kernel &&
                      static_cast<int64_t>(p.a_log.size()) == H &&
                      static_cast<int64_t>(p.dt_bias.size()) == H &&
                      static_cast<int64_t>(p.gnorm.size()) == dd.dv,
                  "Gated DeltaNet block weights do not match its shapes");
    lin_forward(p.qkv, a.n1.data(), N, a.qkv_lin, a.cache[kQkv]);
    lin_forward(p.z, a.n1.data(), N, a.z, a.cache[kZ]);
    lin_forward(p.b, a.n1.data(), N, a.b_lin, a.cache[kB]);
    lin_forward(p.a, a.n1.data(), N, a.a_lin, a.cache[kA]);
    a.conv_pre.resize(N * C);
    a.qkv.resize(N * C);
    conv_silu_forward(a.qkv_lin.data(), a.windows, a.L, C, p.conv.data(), dd.conv_kernel,
                      a.conv_pre.data(), a.qkv.data());
    a.qkv_n = a.qkv;  // v passes; q and k (side by side) normalised per head
    a.inv_qk.resize(N * 2 * dd.k_heads);
    l2norm_forward(a.qkv.data(), N, C, 2 * dd.k_heads, dd.dk, static_cast<T>(kDeltaL2Eps),
                   a.qkv_n.data(), a.inv_qk.data());
    a.g.resize(N * H);
    a.beta.resize(N * H);
    delta_gates_forward(a.a_lin.data(), a.b_lin.data(), N, H, p.a_log.data(), p.dt_bias.data(),
                        a.g.data(), a.beta.data());
    a.delta.resize(N * dd.value_dim());
    delta_rule_forward(
        delta_rule_of(d.delta, a.windows, a.L, a.qkv_n.data(), a.g.data(), a.beta.data()),
        kTuneDeltaChunk, a.delta.data(), dd.value_dim(), a.states);
    a.attn.resize(N * dd.value_dim());
    a.rstd_g.resize(N * H);
    rmsnorm_gated_forward(a.delta.data(), a.z.data(), N * H, dd.dv, p.gnorm.data(),
                          static_cast<T>(d.eps), a.attn.data(), a.rstd_g.data());
    lin_forward(p.out, a.attn.data(), N, mix, a.cache[kOut]);
}

template <class T>
void delta_mixer_backward(const BlockParamsT<T>& p, const BlockDims& d, BlockActsT<T>& a,
                          const T* dmix, std::vector<T>& dn1, BlockGradsT<T>& g) {
    const DeltaDims& dd = d.delta;
    const int64_t N = a.windows * a.L, C = dd.conv_dim(), H = dd.v_heads, V = dd.value_dim();
    std::vector<T> scratch, dattn(N * V), ddelta(N * V), dz(N * V);
    lin_backward(p.out, a.attn.data(), N, a.cache[kOut], dmix, dattn, false, g.blr[kOut], scratch);
    rmsnorm_gated_backward(dattn.data(), a.delta.data(), a.z.data(), p.gnorm.data(),
                           a.rstd_g.data(), N * H, dd.dv, ddelta.data(), dz.data(),
                           static_cast<T*>(nullptr));
    // the rule's dq, dk, dv land in in_proj_qkv's column layout
    std::vector<T> dqkv(N * C), dg(N * H), dbeta(N * H);
    delta_rule_backward(
        delta_rule_of(d.delta, a.windows, a.L, a.qkv_n.data(), a.g.data(), a.beta.data()),
        kTuneDeltaChunk, a.states, ddelta.data(), V, dqkv.data(), dqkv.data() + dd.key_dim(),
        dqkv.data() + 2 * dd.key_dim(), dg.data(), dbeta.data());
    std::vector<T> da(N * H), db(N * H);
    delta_gates_backward(dg.data(), dbeta.data(), a.a_lin.data(), a.beta.data(), N, H,
                         p.a_log.data(), p.dt_bias.data(), da.data(), db.data());
    l2norm_backward(dqkv.data(), a.qkv_n.data(), a.inv_qk.data(), N, C, 2 * dd.k_heads, dd.dk,
                    dqkv.data());
    std::vector<T> dqkv_lin(N * C);
    conv_silu_backward(dqkv.data(), a.qkv_lin.data(), a.conv_pre.data(), a.windows, a.L, C,
                       p.conv.data(), dd.conv_kernel, dqkv_lin.data(), static_cast<T*>(nullptr));
    lin_backward(p.qkv, a.n1.data(), N, a.cache[kQkv], dqkv_lin.data(), dn1, false, g.blr[kQkv],
                 scratch);
    lin_backward(p.z, a.n1.data(), N, a.cache[kZ], dz.data(), dn1, true, g.blr[kZ], scratch);
    lin_backward(p.b, a.n1.data(), N, a.cache[kB], db.data(), dn1, true, g.blr[kB], scratch);
    lin_backward(p.a, a.n1.data(), N, a.cache[kA], da.data(), dn1, true, g.blr[kA], scratch);
}

#define CORTIQ_TUNE_DELTA_BLOCK(T)                                                                 \
    template void delta_mixer_forward<T>(const BlockParamsT<T>&, const BlockDims&, BlockActsT<T>&, \
                                         std::vector<T>&);                                         \
    template void delta_mixer_backward<T>(const BlockParamsT<T>&, const BlockDims&,                \
                                          BlockActsT<T>&, const T*, std::vector<T>&,               \
                                          BlockGradsT<T>&);

CORTIQ_TUNE_DELTA_BLOCK(float)
CORTIQ_TUNE_DELTA_BLOCK(double)

}  // namespace cortiq::tune::detail
