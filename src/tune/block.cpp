#include "tune/block.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "tune/block_detail.hpp"

namespace cortiq::tune {

using detail::lin_backward;
using detail::lin_forward;

namespace {

template <class T>
T* opt_data(std::vector<T>& v) {
    return v.empty() ? nullptr : v.data();
}

// The attention mixer: a.n1 → mix (o_proj's output), as model/block.cpp.
template <class T>
void attention_mixer_forward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope,
                             BlockActsT<T>& a, std::vector<T>& mix) {
    const int64_t L = a.L, windows = a.windows, N = windows * L, hd = d.head_dim;
    const int64_t qw = d.heads * hd, kw = d.kv_heads * hd;
    const T eps = static_cast<T>(d.eps);
    lin_forward(p.q, a.n1.data(), N, a.q_lin, a.cache[kQ]);
    lin_forward(p.k, a.n1.data(), N, a.k_lin, a.cache[kK]);
    lin_forward(p.v, a.n1.data(), N, a.v, a.cache[kV]);
    if (d.attn_gate) {  // q_proj: [query | gate] per head
        a.q_in.resize(N * qw);
        a.gate_lin.resize(N * qw);
        split_query_gate(a.q_lin.data(), N, d.heads, hd, a.q_in.data(), a.gate_lin.data());
    } else {
        a.q_in = a.q_lin;
    }
    a.q = a.q_in;
    a.k = a.k_lin;
    if (d.qk_norm) {
        a.rstd_q.resize(N * d.heads);
        a.rstd_k.resize(N * d.kv_heads);
        rmsnorm_forward(a.q_in.data(), N * d.heads, hd, p.q_norm.data(), eps, a.q.data(),
                        a.rstd_q.data());
        rmsnorm_forward(a.k_lin.data(), N * d.kv_heads, hd, p.k_norm.data(), eps, a.k.data(),
                        a.rstd_k.data());
    }
    rope_forward(a.q.data(), N, qw, d.heads, hd, d.rot(), L, rope.cos.data(), rope.sin.data());
    rope_forward(a.k.data(), N, kw, d.kv_heads, hd, d.rot(), L, rope.cos.data(), rope.sin.data());
    a.core.resize(N * qw);
    a.probs.resize(windows * d.heads * L * L);
    for (int64_t w = 0; w < windows; ++w)
        attention_forward(a.q.data() + w * L * qw, a.k.data() + w * L * kw, a.v.data() + w * L * kw,
                          L, d.heads, d.kv_heads, hd, a.core.data() + w * L * qw,
                          a.probs.data() + w * d.heads * L * L);
    if (d.attn_gate) {
        a.attn.resize(N * qw);
        sigmoid_gate_forward(a.core.data(), a.gate_lin.data(), N * qw, a.attn.data());
    } else {
        a.attn = a.core;
    }
    lin_forward(p.o, a.attn.data(), N, mix, a.cache[kO]);
}

// Given dmix (N × hidden): dn1 overwritten, gradients into g.
template <class T>
void attention_mixer_backward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope,
                              BlockActsT<T>& a, const T* dmix, std::vector<T>& dn1,
                              BlockGradsT<T>& g) {
    const int64_t L = a.L, windows = a.windows, N = windows * L, hd = d.head_dim;
    const int64_t qw = d.heads * hd, kw = d.kv_heads * hd;
    std::vector<T> scratch, dattn(N * qw), dcore(N * qw), dgate, dq(N * qw), dk(N * kw), dv(N * kw);
    lin_backward(p.o, a.attn.data(), N, a.cache[kO], dmix, dattn, false, g.blr[kO], scratch);
    if (d.attn_gate) {
        dgate.resize(N * qw);
        sigmoid_gate_backward(dattn.data(), a.core.data(), a.gate_lin.data(), N * qw, dcore.data(),
                              dgate.data());
    } else {
        dcore.swap(dattn);
    }
    for (int64_t w = 0; w < windows; ++w)
        attention_backward(dcore.data() + w * L * qw, a.q.data() + w * L * qw,
                           a.k.data() + w * L * kw, a.v.data() + w * L * kw,
                           a.probs.data() + w * d.heads * L * L, L, d.heads, d.kv_heads, hd,
                           dq.data() + w * L * qw, dk.data() + w * L * kw, dv.data() + w * L * kw);
    rope_backward(dq.data(), N, qw, d.heads, hd, d.rot(), L, rope.cos.data(), rope.sin.data());
    rope_backward(dk.data(), N, kw, d.kv_heads, hd, d.rot(), L, rope.cos.data(), rope.sin.data());
    if (d.qk_norm) {
        std::vector<T> dql(N * qw), dkl(N * kw);
        rmsnorm_backward(dq.data(), a.q_in.data(), p.q_norm.data(), a.rstd_q.data(), N * d.heads,
                         hd, dql.data(), opt_data(g.q_norm));
        rmsnorm_backward(dk.data(), a.k_lin.data(), p.k_norm.data(), a.rstd_k.data(),
                         N * d.kv_heads, hd, dkl.data(), opt_data(g.k_norm));
        dq.swap(dql);
        dk.swap(dkl);
    }
    if (d.attn_gate) {  // back to q_proj's [query | gate] layout
        std::vector<T> dqg(N * 2 * qw);
        merge_query_gate(dq.data(), dgate.data(), N, d.heads, hd, dqg.data());
        dq.swap(dqg);
    }
    lin_backward(p.q, a.n1.data(), N, a.cache[kQ], dq.data(), dn1, false, g.blr[kQ], scratch);
    lin_backward(p.k, a.n1.data(), N, a.cache[kK], dk.data(), dn1, true, g.blr[kK], scratch);
    lin_backward(p.v, a.n1.data(), N, a.cache[kV], dv.data(), dn1, true, g.blr[kV], scratch);
}

}  // namespace

template <class T>
BlockGradsT<T> zero_grads(const BlockParamsT<T>& p, bool with_signs) {
    BlockGradsT<T> g;
    for (const auto* l : p.linears())
        g.blr.push_back(l->blr ? std::optional<BlrGradT<T>>(blr_zero_grad(*l->blr, with_signs))
                               : std::nullopt);
    g.in_norm.assign(p.in_norm.size(), T(0));
    g.post_norm.assign(p.post_norm.size(), T(0));
    g.q_norm.assign(p.q_norm.size(), T(0));
    g.k_norm.assign(p.k_norm.size(), T(0));
    return g;
}

template <class T>
RopeT<T> rope_for(const std::vector<float>& inv_freq, int64_t L) {
    const int64_t half = static_cast<int64_t>(inv_freq.size());
    RopeT<T> r{L, std::vector<T>(static_cast<size_t>(L * half)),
               std::vector<T>(static_cast<size_t>(L * half))};
    for (int64_t i = 0; i < L; ++i)
        for (int64_t j = 0; j < half; ++j) {
            // the angle in float32, as HF (and model::rope_table) compute it
            const float a = static_cast<float>(i) * inv_freq[j];
            r.cos[i * half + j] = static_cast<T>(std::cos(a));
            r.sin[i * half + j] = static_cast<T>(std::sin(a));
        }
    return r;
}

template <class T>
void block_forward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope, const T* x,
                   int64_t windows, int64_t L, BlockActsT<T>& a) {
    const int64_t N = windows * L, H = d.hidden;
    const T eps = static_cast<T>(d.eps);
    CORTIQ_ASSERT(p.delta || rope.period == L, "RoPE table for {} positions, windows of {}",
                  rope.period, L);
    a.windows = windows;
    a.L = L;
    a.cache.resize(kLinearSlots);
    a.x.assign(x, x + N * H);
    a.n1.resize(N * H);
    a.rstd1.resize(N);
    rmsnorm_forward(x, N, H, p.in_norm.data(), eps, a.n1.data(), a.rstd1.data());
    if (p.delta)
        detail::delta_mixer_forward(p, d, a, a.h);
    else
        attention_mixer_forward(p, d, rope, a, a.h);
    for (int64_t i = 0; i < N * H; ++i) a.h[i] += x[i];
    a.n2.resize(N * H);
    a.rstd2.resize(N);
    rmsnorm_forward(a.h.data(), N, H, p.post_norm.data(), eps, a.n2.data(), a.rstd2.data());
    lin_forward(p.gate, a.n2.data(), N, a.gate, a.cache[kGate]);
    lin_forward(p.up, a.n2.data(), N, a.up, a.cache[kUp]);
    a.act.resize(N * d.ffn);
    swiglu_forward(a.gate.data(), a.up.data(), N * d.ffn, a.act.data());
    lin_forward(p.down, a.act.data(), N, a.out, a.cache[kDown]);
    for (int64_t i = 0; i < N * H; ++i) a.out[i] += a.h[i];
}

template <class T>
void block_backward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope,
                    BlockActsT<T>& a, const T* dout, T* dx, BlockGradsT<T>& g) {
    const int64_t N = a.windows * a.L, H = d.hidden;
    std::vector<T> scratch, dact(N * d.ffn), dgate(N * d.ffn), dup(N * d.ffn), dn2(N * H);
    std::vector<T> dh(dout, dout + N * H);
    // MLP: out = h + down(act)
    lin_backward(p.down, a.act.data(), N, a.cache[kDown], dout, dact, false, g.blr[kDown], scratch);
    swiglu_backward(dact.data(), a.gate.data(), a.up.data(), N * d.ffn, dgate.data(), dup.data());
    lin_backward(p.gate, a.n2.data(), N, a.cache[kGate], dgate.data(), dn2, false, g.blr[kGate],
                 scratch);
    lin_backward(p.up, a.n2.data(), N, a.cache[kUp], dup.data(), dn2, true, g.blr[kUp], scratch);
    std::vector<T> tmp(N * H);
    rmsnorm_backward(dn2.data(), a.h.data(), p.post_norm.data(), a.rstd2.data(), N, H, tmp.data(),
                     opt_data(g.post_norm));
    for (int64_t i = 0; i < N * H; ++i) dh[i] += tmp[i];
    // the mixer: h = x + mix(n1)
    std::vector<T> dn1(N * H);
    if (p.delta)
        detail::delta_mixer_backward(p, d, a, dh.data(), dn1, g);
    else
        attention_mixer_backward(p, d, rope, a, dh.data(), dn1, g);
    rmsnorm_backward(dn1.data(), a.x.data(), p.in_norm.data(), a.rstd1.data(), N, H, tmp.data(),
                     opt_data(g.in_norm));
    if (dx)
        for (int64_t i = 0; i < N * H; ++i) dx[i] = dh[i] + tmp[i];
}

#define CORTIQ_TUNE_BLOCK(T)                                                                   \
    template BlockGradsT<T> zero_grads<T>(const BlockParamsT<T>&, bool);                       \
    template RopeT<T> rope_for<T>(const std::vector<float>&, int64_t);                         \
    template void block_forward<T>(const BlockParamsT<T>&, const BlockDims&, const RopeT<T>&,  \
                                   const T*, int64_t, int64_t, BlockActsT<T>&);                \
    template void block_backward<T>(const BlockParamsT<T>&, const BlockDims&, const RopeT<T>&, \
                                    BlockActsT<T>&, const T*, T*, BlockGradsT<T>&);

CORTIQ_TUNE_BLOCK(float)
CORTIQ_TUNE_BLOCK(double)

}  // namespace cortiq::tune
