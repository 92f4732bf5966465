#include "tune/block.hpp"

#include <algorithm>
#include <cmath>

#include "core/error.hpp"

namespace cortiq::tune {

namespace {

template <class T>
void lin_forward(const LinearT<T>& l, const T* x, int64_t rows, std::vector<T>& y,
                 BlrCacheT<T>& cache) {
    y.resize(static_cast<size_t>(rows * l.m));
    if (l.blr) {
        blr_forward(*l.blr, x, rows, y.data(), cache);
        if (!l.bias.empty())
            for (int64_t i = 0; i < rows; ++i)
                for (int64_t j = 0; j < l.m; ++j) y[i * l.m + j] += l.bias[j];
    } else {
        linear_forward(x, rows, l.n, l.w.data(), l.m, l.bias.empty() ? nullptr : l.bias.data(),
                       y.data());
    }
}

// dx (rows × n) = ∂/∂x of the layer given dy, added into dx_acc when `add`;
// the BLR gradients into g.
template <class T>
void lin_backward(const LinearT<T>& l, const T* x, int64_t rows, const BlrCacheT<T>& cache,
                  const T* dy, std::vector<T>& dx, bool add, std::optional<BlrGradT<T>>& g,
                  std::vector<T>& scratch) {
    T* out = dx.data();
    if (add) {
        scratch.resize(static_cast<size_t>(rows * l.n));
        out = scratch.data();
    }
    if (l.blr)
        blr_backward(*l.blr, x, rows, cache, dy, out, *g);
    else
        linear_backward(dy, x, rows, l.n, l.w.data(), l.m, out, static_cast<T*>(nullptr),
                        static_cast<T*>(nullptr));
    if (add)
        for (size_t i = 0; i < scratch.size(); ++i) dx[i] += scratch[i];
}

template <class T>
T* opt_data(std::vector<T>& v) {
    return v.empty() ? nullptr : v.data();
}

}  // namespace

template <class T>
BlockGradsT<T> zero_grads(const BlockParamsT<T>& p) {
    BlockGradsT<T> g;
    for (const auto* l : p.linears())
        g.blr.push_back(l->blr ? std::optional<BlrGradT<T>>(blr_zero_grad(*l->blr)) : std::nullopt);
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
    const int64_t N = windows * L, H = d.hidden, hd = d.head_dim;
    const int64_t qw = d.heads * hd, kw = d.kv_heads * hd;
    const T eps = static_cast<T>(d.eps);
    CORTIQ_ASSERT(rope.period == L, "RoPE table for {} positions, windows of {}", rope.period, L);
    a.windows = windows;
    a.L = L;
    a.cache.resize(7);
    a.x.assign(x, x + N * H);
    a.n1.resize(N * H);
    a.rstd1.resize(N);
    rmsnorm_forward(x, N, H, p.in_norm.data(), eps, a.n1.data(), a.rstd1.data());
    lin_forward(p.q, a.n1.data(), N, a.q_lin, a.cache[0]);
    lin_forward(p.k, a.n1.data(), N, a.k_lin, a.cache[1]);
    lin_forward(p.v, a.n1.data(), N, a.v, a.cache[2]);
    a.q = a.q_lin;
    a.k = a.k_lin;
    if (d.qk_norm) {
        a.rstd_q.resize(N * d.heads);
        a.rstd_k.resize(N * d.kv_heads);
        rmsnorm_forward(a.q_lin.data(), N * d.heads, hd, p.q_norm.data(), eps, a.q.data(),
                        a.rstd_q.data());
        rmsnorm_forward(a.k_lin.data(), N * d.kv_heads, hd, p.k_norm.data(), eps, a.k.data(),
                        a.rstd_k.data());
    }
    rope_forward(a.q.data(), N, qw, d.heads, hd, L, rope.cos.data(), rope.sin.data());
    rope_forward(a.k.data(), N, kw, d.kv_heads, hd, L, rope.cos.data(), rope.sin.data());
    a.attn.resize(N * qw);
    a.probs.resize(windows * d.heads * L * L);
    for (int64_t w = 0; w < windows; ++w)
        attention_forward(a.q.data() + w * L * qw, a.k.data() + w * L * kw, a.v.data() + w * L * kw,
                          L, d.heads, d.kv_heads, hd, a.attn.data() + w * L * qw,
                          a.probs.data() + w * d.heads * L * L);
    lin_forward(p.o, a.attn.data(), N, a.h, a.cache[3]);
    for (int64_t i = 0; i < N * H; ++i) a.h[i] += x[i];
    a.n2.resize(N * H);
    a.rstd2.resize(N);
    rmsnorm_forward(a.h.data(), N, H, p.post_norm.data(), eps, a.n2.data(), a.rstd2.data());
    lin_forward(p.gate, a.n2.data(), N, a.gate, a.cache[4]);
    lin_forward(p.up, a.n2.data(), N, a.up, a.cache[5]);
    a.act.resize(N * d.ffn);
    swiglu_forward(a.gate.data(), a.up.data(), N * d.ffn, a.act.data());
    lin_forward(p.down, a.act.data(), N, a.out, a.cache[6]);
    for (int64_t i = 0; i < N * H; ++i) a.out[i] += a.h[i];
}

template <class T>
void block_backward(const BlockParamsT<T>& p, const BlockDims& d, const RopeT<T>& rope,
                    BlockActsT<T>& a, const T* dout, T* dx, BlockGradsT<T>& g) {
    const int64_t L = a.L, windows = a.windows, N = windows * L, H = d.hidden, hd = d.head_dim;
    const int64_t qw = d.heads * hd, kw = d.kv_heads * hd;
    std::vector<T> scratch, dact(N * d.ffn), dgate(N * d.ffn), dup(N * d.ffn), dn2(N * H);
    std::vector<T> dh(dout, dout + N * H);
    // MLP: out = h + down(act)
    lin_backward(p.down, a.act.data(), N, a.cache[6], dout, dact, false, g.blr[6], scratch);
    swiglu_backward(dact.data(), a.gate.data(), a.up.data(), N * d.ffn, dgate.data(), dup.data());
    lin_backward(p.gate, a.n2.data(), N, a.cache[4], dgate.data(), dn2, false, g.blr[4], scratch);
    lin_backward(p.up, a.n2.data(), N, a.cache[5], dup.data(), dn2, true, g.blr[5], scratch);
    std::vector<T> tmp(N * H);
    rmsnorm_backward(dn2.data(), a.h.data(), p.post_norm.data(), a.rstd2.data(), N, H, tmp.data(),
                     opt_data(g.post_norm));
    for (int64_t i = 0; i < N * H; ++i) dh[i] += tmp[i];
    // attention: h = x + o(attn)
    std::vector<T> dattn(N * qw), dq(N * qw), dk(N * kw), dv(N * kw);
    lin_backward(p.o, a.attn.data(), N, a.cache[3], dh.data(), dattn, false, g.blr[3], scratch);
    for (int64_t w = 0; w < windows; ++w)
        attention_backward(dattn.data() + w * L * qw, a.q.data() + w * L * qw,
                           a.k.data() + w * L * kw, a.v.data() + w * L * kw,
                           a.probs.data() + w * d.heads * L * L, L, d.heads, d.kv_heads, hd,
                           dq.data() + w * L * qw, dk.data() + w * L * kw, dv.data() + w * L * kw);
    rope_backward(dq.data(), N, qw, d.heads, hd, L, rope.cos.data(), rope.sin.data());
    rope_backward(dk.data(), N, kw, d.kv_heads, hd, L, rope.cos.data(), rope.sin.data());
    if (d.qk_norm) {
        std::vector<T> dql(N * qw), dkl(N * kw);
        rmsnorm_backward(dq.data(), a.q_lin.data(), p.q_norm.data(), a.rstd_q.data(), N * d.heads,
                         hd, dql.data(), opt_data(g.q_norm));
        rmsnorm_backward(dk.data(), a.k_lin.data(), p.k_norm.data(), a.rstd_k.data(),
                         N * d.kv_heads, hd, dkl.data(), opt_data(g.k_norm));
        dq.swap(dql);
        dk.swap(dkl);
    }
    std::vector<T> dn1(N * H);
    lin_backward(p.q, a.n1.data(), N, a.cache[0], dq.data(), dn1, false, g.blr[0], scratch);
    lin_backward(p.k, a.n1.data(), N, a.cache[1], dk.data(), dn1, true, g.blr[1], scratch);
    lin_backward(p.v, a.n1.data(), N, a.cache[2], dv.data(), dn1, true, g.blr[2], scratch);
    rmsnorm_backward(dn1.data(), a.x.data(), p.in_norm.data(), a.rstd1.data(), N, H, tmp.data(),
                     opt_data(g.in_norm));
    if (dx)
        for (int64_t i = 0; i < N * H; ++i) dx[i] = dh[i] + tmp[i];
}

#define CORTIQ_TUNE_BLOCK(T)                                                                   \
    template BlockGradsT<T> zero_grads<T>(const BlockParamsT<T>&);                             \
    template RopeT<T> rope_for<T>(const std::vector<float>&, int64_t);                         \
    template void block_forward<T>(const BlockParamsT<T>&, const BlockDims&, const RopeT<T>&,  \
                                   const T*, int64_t, int64_t, BlockActsT<T>&);                \
    template void block_backward<T>(const BlockParamsT<T>&, const BlockDims&, const RopeT<T>&, \
                                    BlockActsT<T>&, const T*, T*, BlockGradsT<T>&);

CORTIQ_TUNE_BLOCK(float)
CORTIQ_TUNE_BLOCK(double)

}  // namespace cortiq::tune
