// The Gated DeltaNet mixer's forward and backward on the device, stage by
// stage the twin of tune/delta_block.cpp.
#include "core/error.hpp"
#include "tune/cuda/block_detail.hpp"
#include "tune/cuda/parts.hpp"

namespace cortiq::tune::cuda {

void delta_mixer_forward(const Gpu& g, const DBlockParams& p, const BlockDims& d, DBlockActs& a) {
    const DeltaDims& dd = d.delta;
    const int64_t N = a.windows * a.L, C = dd.conv_dim(), H = dd.v_heads, V = dd.value_dim();
    const cudaStream_t st = g.stream();
    CORTIQ_ASSERT(p.conv.size() == C * dd.conv_kernel && p.a_log.size() == H &&
                      p.dt_bias.size() == H && p.gnorm.size() == dd.dv,
                  "Gated DeltaNet block weights do not match its shapes");
    lin_forward(g, p.qkv, a.n1.get(), N, a.qkv_lin, a.cache[kQkv], a.blr);
    lin_forward(g, p.z, a.n1.get(), N, a.z, a.cache[kZ], a.blr);
    lin_forward(g, p.b, a.n1.get(), N, a.b_lin, a.cache[kB], a.blr);
    lin_forward(g, p.a, a.n1.get(), N, a.a_lin, a.cache[kA], a.blr);
    ensure(a.conv_pre, N * C, st);
    ensure(a.qkv, N * C, st);
    {
        const PartTimer part(g, "part/delta_conv_forward");
        conv_silu_forward(g, a.qkv_lin.get(), a.windows, a.L, C, p.conv.get(), dd.conv_kernel,
                          a.conv_pre.get(), a.qkv.get());
    }
    // v passes; q and k (side by side) normalised per head
    ensure(a.qkv_n, N * C, st);
    CUDA_CHECK(cudaMemcpyAsync(a.qkv_n.get(), a.qkv.get(), sizeof(float) * N * C,
                               cudaMemcpyDeviceToDevice, st));
    ensure(a.inv_qk, N * 2 * dd.k_heads, st);
    l2norm_forward(g, a.qkv.get(), N, C, 2 * dd.k_heads, dd.dk, static_cast<float>(kDeltaL2Eps),
                   a.qkv_n.get(), a.inv_qk.get());
    ensure(a.g, N * H, st);
    ensure(a.beta, N * H, st);
    delta_gates_forward(g, a.a_lin.get(), a.b_lin.get(), N, H, p.a_log.get(), p.dt_bias.get(),
                        a.g.get(), a.beta.get());
    ensure(a.delta, N * V, st);
    {
        const PartTimer part(g, "part/delta_rule_forward");
        delta_rule_forward(
            g, delta_rule_of(d.delta, a.windows, a.L, a.qkv_n.get(), a.g.get(), a.beta.get()),
            kTuneDeltaChunk, a.delta.get(), V, a.states);
    }
    ensure(a.attn, N * V, st);
    ensure(a.rstd_g, N * H, st);
    rmsnorm_gated_forward(g, a.delta.get(), a.z.get(), N * H, dd.dv, p.gnorm.get(),
                          static_cast<float>(d.eps), a.attn.get(), a.rstd_g.get());
    lin_forward(g, p.out, a.attn.get(), N, a.h, a.cache[kOut], a.blr);
}

void delta_mixer_backward(const Gpu& g, const DBlockParams& p, const BlockDims& d, DBlockActs& a,
                          DBlockGrads& gr) {
    const DeltaDims& dd = d.delta;
    const int64_t N = a.windows * a.L, C = dd.conv_dim(), H = dd.v_heads, V = dd.value_dim();
    const cudaStream_t st = g.stream();
    lin_backward(g, p.out, a.attn.get(), N, a.cache[kOut], a.dh.get(), a.dattn, false, gr.blr[kOut],
                 a.blr);
    ensure(a.ddelta, N * V, st);
    ensure(a.dz, N * V, st);
    rmsnorm_gated_backward(g, a.dattn.get(), a.delta.get(), a.z.get(), p.gnorm.get(),
                           a.rstd_g.get(), N * H, dd.dv, a.ddelta.get(), a.dz.get(), nullptr);
    // the rule's dq, dk, dv land in in_proj_qkv's column layout
    ensure(a.dqkv, N * C, st);
    ensure(a.dg, N * H, st);
    ensure(a.dbeta, N * H, st);
    {
        const PartTimer part(g, "part/delta_rule_backward");
        delta_rule_backward(
            g, delta_rule_of(d.delta, a.windows, a.L, a.qkv_n.get(), a.g.get(), a.beta.get()),
            kTuneDeltaChunk, a.states, a.ddelta.get(), V, a.dqkv.get(), a.dqkv.get() + dd.key_dim(),
            a.dqkv.get() + 2 * dd.key_dim(), a.dg.get(), a.dbeta.get(), a.rule);
    }
    ensure(a.da, N * H, st);
    ensure(a.db, N * H, st);
    delta_gates_backward(g, a.dg.get(), a.dbeta.get(), a.a_lin.get(), a.beta.get(), N, H,
                         p.a_log.get(), p.dt_bias.get(), a.da.get(), a.db.get());
    l2norm_backward(g, a.dqkv.get(), a.qkv_n.get(), a.inv_qk.get(), N, C, 2 * dd.k_heads, dd.dk,
                    a.dqkv.get());
    ensure(a.dqkv_lin, N * C, st);
    {
        const PartTimer part(g, "part/delta_conv_backward");
        conv_silu_backward(g, a.dqkv.get(), a.qkv_lin.get(), a.conv_pre.get(), a.windows, a.L, C,
                           p.conv.get(), dd.conv_kernel, a.dqkv_lin.get(), nullptr);
    }
    lin_backward(g, p.qkv, a.n1.get(), N, a.cache[kQkv], a.dqkv_lin.get(), a.dn1, false,
                 gr.blr[kQkv], a.blr);
    lin_backward(g, p.z, a.n1.get(), N, a.cache[kZ], a.dz.get(), a.dn1, true, gr.blr[kZ], a.blr);
    lin_backward(g, p.b, a.n1.get(), N, a.cache[kB], a.db.get(), a.dn1, true, gr.blr[kB], a.blr);
    lin_backward(g, p.a, a.n1.get(), N, a.cache[kA], a.da.get(), a.dn1, true, gr.blr[kA], a.blr);
}

}  // namespace cortiq::tune::cuda
