// The decoder block's forward and backward on the device, stage by stage the
// twin of tune/block.cpp.
#include "tune/cuda/block.hpp"

#include "core/error.hpp"
#include "tune/cuda/block_detail.hpp"
#include "tune/cuda/parts.hpp"

namespace cortiq::tune::cuda {

namespace {

using cortiq::cuda::download_f;
using cortiq::cuda::upload_f;

void copy_d2d(float* dst, const float* src, int64_t n, cudaStream_t st) {
    if (n > 0)
        CUDA_CHECK(cudaMemcpyAsync(dst, src, sizeof(float) * n, cudaMemcpyDeviceToDevice, st));
}

void zero(DVec& v, cudaStream_t st) {
    if (!v.empty()) CUDA_CHECK(cudaMemsetAsync(v.get(), 0, sizeof(float) * v.size(), st));
}

DLinear upload_linear(const Gpu* packer, const LinearT<float>& l, cudaStream_t st) {
    DLinear d{l.m, l.n, std::nullopt, upload_f(l.w, st), upload_f(l.bias, st)};
    if (l.blr) {
        const int64_t m = l.blr->m, n = l.blr->n, r = l.blr->r, rp = padded_rank(r);
        DBlr b{m, n, r, rp, {}};
        for (const auto& q : l.blr->paths)
            b.paths.push_back({upload_f(q.h, st),
                               upload_f(pad_cols(q.l, 1, r, rp), st),
                               upload_f(q.g, st),
                               upload_f(pad_cols(q.su, m, r, rp), st),
                               upload_f(pad_cols(q.sv, n, r, rp), st),
                               {},
                               {}});
        if (packer)
            for (auto& q : b.paths) pack_path_signs(*packer, b, q);
        d.blr = std::move(b);
    }
    return d;
}

void into(const DVec& d, std::vector<float>& v, cudaStream_t st) {
    CORTIQ_ASSERT(d.size() == static_cast<int64_t>(v.size()), "device {} vs host {} values",
                  d.size(), v.size());
    v = download_f(d.get(), d.size(), st);
}

// A padded device matrix (rows × b.rp) as its host values (rows × b.r); none
// of none (a gradient of fixed signs).
std::vector<float> download_unpadded(const DVec& d, int64_t rows, const DBlr& b, cudaStream_t st) {
    if (d.empty()) return {};
    return unpad_cols(download_f(d.get(), d.size(), st), rows, b.r, b.rp);
}

// The same into v, whose size must already be rows × b.r.
void into_unpadded(const DVec& d, std::vector<float>& v, int64_t rows, const DBlr& b,
                   cudaStream_t st) {
    CORTIQ_ASSERT(static_cast<int64_t>(v.size()) == rows * b.r, "device {} vs host {} values",
                  d.size(), v.size());
    v = download_unpadded(d, rows, b, st);
}

float* opt(DVec& v) {
    return v.empty() ? nullptr : v.get();
}

}  // namespace

void lin_forward(const Gpu& g, const DLinear& l, const float* x, int64_t rows, DVec& y,
                 DBlrCache& cache, DBlrScratch& s) {
    const PartTimer part(g, l.blr ? "part/blr_forward" : "part/dense_forward");
    ensure(y, rows * l.m, g.stream());
    if (l.blr) {
        blr_forward(g, *l.blr, x, rows, y.get(), cache, s);
        if (!l.bias.empty()) add_bias(g, y.get(), l.bias.get(), rows, l.m);
    } else {
        linear_forward(g, x, rows, l.n, l.w.get(), l.m, l.bias.empty() ? nullptr : l.bias.get(),
                       y.get());
    }
}

// dx (rows × n) = ∂/∂x of the layer given dy, added into dx when `add`; the
// BLR gradients into gr.
void lin_backward(const Gpu& g, const DLinear& l, const float* x, int64_t rows,
                  const DBlrCache& cache, const float* dy, DVec& dx, bool add,
                  std::optional<DBlrGrad>& gr, DBlrScratch& s) {
    const PartTimer part(g, l.blr ? "part/blr_backward" : "part/dense_backward");
    ensure(dx, rows * l.n, g.stream());
    if (l.blr)
        blr_backward(g, *l.blr, x, rows, cache, dy, dx.get(), add, *gr, s);
    else
        linear_backward_dx(g, dy, rows, l.n, l.w.get(), l.m, dx.get(), add);
}

namespace {

DBlockParams upload_block(const Gpu* packer, const BlockParamsT<float>& p, cudaStream_t st) {
    DBlockParams d;
    d.in_norm = upload_f(p.in_norm, st);
    d.post_norm = upload_f(p.post_norm, st);
    d.q_norm = upload_f(p.q_norm, st);
    d.k_norm = upload_f(p.k_norm, st);
    d.delta = p.delta;
    d.conv = upload_f(p.conv, st);
    d.a_log = upload_f(p.a_log, st);
    d.dt_bias = upload_f(p.dt_bias, st);
    d.gnorm = upload_f(p.gnorm, st);
    const auto src = p.linears();
    const auto dst = d.linears();
    for (size_t i = 0; i < src.size(); ++i) *dst[i] = upload_linear(packer, *src[i], st);
    return d;
}

}  // namespace

DBlockParams upload(const BlockParamsT<float>& p, cudaStream_t st) {
    return upload_block(nullptr, p, st);
}

DBlockParams upload_packed(const Gpu& g, const BlockParamsT<float>& p) {
    return upload_block(&g, p, g.stream());
}

void upload_tuned(const BlockParamsT<float>& p, DBlockParams& d, cudaStream_t st) {
    const auto put = [&](const std::vector<float>& v, DVec& dv) {
        CORTIQ_ASSERT(static_cast<int64_t>(v.size()) == dv.size(), "host {} vs device {} values",
                      v.size(), dv.size());
        if (!v.empty())
            CUDA_CHECK(cudaMemcpyAsync(dv.get(), v.data(), sizeof(float) * v.size(),
                                       cudaMemcpyHostToDevice, st));
    };
    put(p.in_norm, d.in_norm);
    put(p.post_norm, d.post_norm);
    put(p.q_norm, d.q_norm);
    put(p.k_norm, d.k_norm);
    const auto src = p.linears();
    auto dst = d.linears();
    for (size_t i = 0; i < src.size(); ++i) {
        if (!dst[i]->blr) continue;
        DBlr& b = *dst[i]->blr;
        CORTIQ_ASSERT(src[i]->blr && src[i]->blr->paths.size() == b.paths.size(),
                      "device and host block differ in layer {}", i);
        for (size_t k = 0; k < b.paths.size(); ++k) {
            const auto& q = src[i]->blr->paths[k];
            DBlrPath& dq = b.paths[k];
            CORTIQ_ASSERT(dq.packed(), "upload_tuned: layer {} holds its signs as floats", i);
            put(q.h, dq.h);
            put(pad_cols(q.l, 1, b.r, b.rp), dq.l);
            put(q.g, dq.g);
        }
    }
    CUDA_CHECK(cudaStreamSynchronize(st));  // the host vectors may go
}

void download_into(const DBlockParams& d, BlockParamsT<float>& p, cudaStream_t st) {
    into(d.in_norm, p.in_norm, st);
    into(d.post_norm, p.post_norm, st);
    into(d.q_norm, p.q_norm, st);
    into(d.k_norm, p.k_norm, st);
    const auto src = d.linears();
    auto dst = p.linears();
    for (size_t i = 0; i < src.size(); ++i) {
        if (!src[i]->blr) continue;
        CORTIQ_ASSERT(dst[i]->blr && dst[i]->blr->paths.size() == src[i]->blr->paths.size(),
                      "device and host block differ in layer {}", i);
        for (size_t k = 0; k < src[i]->blr->paths.size(); ++k) {
            const DBlr& b = *src[i]->blr;
            const DBlrPath& s = b.paths[k];
            auto& q = dst[i]->blr->paths[k];
            into(s.h, q.h, st);
            into_unpadded(s.l, q.l, 1, b, st);
            into(s.g, q.g, st);
            if (s.packed()) continue;  // fixed: the host's stay as they are
            into_unpadded(s.su, q.su, b.m, b, st);
            into_unpadded(s.sv, q.sv, b.n, b, st);
        }
    }
}

DBlockGrads zero_grads(const DBlockParams& p, cudaStream_t st, bool with_signs) {
    DBlockGrads g;
    for (const auto* l : p.linears())
        g.blr.push_back(l->blr ? std::optional<DBlrGrad>(blr_zero_grad(*l->blr, st, with_signs))
                               : std::nullopt);
    g.in_norm = DVec(p.in_norm.size(), st);
    g.post_norm = DVec(p.post_norm.size(), st);
    g.q_norm = DVec(p.q_norm.size(), st);
    g.k_norm = DVec(p.k_norm.size(), st);
    clear(g, st);
    return g;
}

void clear(DBlockGrads& g, cudaStream_t st) {
    for (auto& b : g.blr)
        if (b)
            for (auto& q : b->paths) {
                zero(q.h, st);
                zero(q.l, st);
                zero(q.g, st);
                zero(q.su, st);
                zero(q.sv, st);
            }
    zero(g.in_norm, st);
    zero(g.post_norm, st);
    zero(g.q_norm, st);
    zero(g.k_norm, st);
}

BlockGradsT<float> download(const DBlockGrads& g, cudaStream_t st) {
    BlockGradsT<float> h;
    for (const auto& b : g.blr) {
        if (!b) {
            h.blr.emplace_back(std::nullopt);
            continue;
        }
        BlrGradT<float> o{b->m, b->n, b->r, {}};
        for (const auto& q : b->paths)
            o.paths.push_back(
                {download_f(q.h.get(), q.h.size(), st), download_unpadded(q.l, 1, *b, st),
                 download_f(q.g.get(), q.g.size(), st), download_unpadded(q.su, b->m, *b, st),
                 download_unpadded(q.sv, b->n, *b, st)});
        h.blr.emplace_back(std::move(o));
    }
    h.in_norm = download_f(g.in_norm.get(), g.in_norm.size(), st);
    h.post_norm = download_f(g.post_norm.get(), g.post_norm.size(), st);
    h.q_norm = download_f(g.q_norm.get(), g.q_norm.size(), st);
    h.k_norm = download_f(g.k_norm.get(), g.k_norm.size(), st);
    return h;
}

DRope upload(const RopeT<float>& r, cudaStream_t st) {
    return {r.period, upload_f(r.cos, st), upload_f(r.sin, st)};
}

namespace {

// The attention mixer: a.n1 → a.h (o_proj's output), as tune/block.cpp.
void attention_mixer_forward(const Gpu& g, const DBlockParams& p, const BlockDims& d,
                             const DRope& rope, DBlockActs& a) {
    const int64_t L = a.L, windows = a.windows, N = windows * L, hd = d.head_dim;
    const int64_t qw = d.heads * hd, kw = d.kv_heads * hd;
    const float eps = static_cast<float>(d.eps);
    const cudaStream_t st = g.stream();
    lin_forward(g, p.q, a.n1.get(), N, a.q_lin, a.cache[kQ], a.blr);
    lin_forward(g, p.k, a.n1.get(), N, a.k_lin, a.cache[kK], a.blr);
    lin_forward(g, p.v, a.n1.get(), N, a.v, a.cache[kV], a.blr);
    // q_in: the query (q_proj's output, or its query half with attn_gate)
    const float* q_in = a.q_lin.get();
    if (d.attn_gate) {
        ensure(a.q_in, N * qw, st);
        ensure(a.gate_lin, N * qw, st);
        split_query_gate(g, a.q_lin.get(), N, d.heads, hd, a.q_in.get(), a.gate_lin.get());
        q_in = a.q_in.get();
    }
    ensure(a.q, N * qw, st);
    ensure(a.k, N * kw, st);
    if (d.qk_norm) {
        ensure(a.rstd_q, N * d.heads, st);
        ensure(a.rstd_k, N * d.kv_heads, st);
        rmsnorm_forward(g, q_in, N * d.heads, hd, p.q_norm.get(), eps, a.q.get(), a.rstd_q.get());
        rmsnorm_forward(g, a.k_lin.get(), N * d.kv_heads, hd, p.k_norm.get(), eps, a.k.get(),
                        a.rstd_k.get());
    } else {
        copy_d2d(a.q.get(), q_in, N * qw, st);
        copy_d2d(a.k.get(), a.k_lin.get(), N * kw, st);
    }
    rope_forward(g, a.q.get(), N, qw, d.heads, hd, d.rot(), L, rope.cos.get(), rope.sin.get());
    rope_forward(g, a.k.get(), N, kw, d.kv_heads, hd, d.rot(), L, rope.cos.get(), rope.sin.get());
    ensure(a.attn, N * qw, st);
    ensure(a.probs, windows * d.heads * L * L, st);
    DVec& core = d.attn_gate ? a.core : a.attn;
    ensure(core, N * qw, st);
    {
        const PartTimer part(g, "part/attention_forward");
        attention_forward(g, a.q.get(), a.k.get(), a.v.get(), windows, L, d.heads, d.kv_heads, hd,
                          core.get(), a.probs.get());
    }
    if (d.attn_gate) sigmoid_gate_forward(g, a.core.get(), a.gate_lin.get(), N * qw, a.attn.get());
    lin_forward(g, p.o, a.attn.get(), N, a.h, a.cache[kO], a.blr);
}

// Given a.dh: a.dn1 overwritten, gradients into gr.
void attention_mixer_backward(const Gpu& g, const DBlockParams& p, const BlockDims& d,
                              const DRope& rope, DBlockActs& a, DBlockGrads& gr) {
    const int64_t L = a.L, windows = a.windows, N = windows * L, hd = d.head_dim;
    const int64_t qw = d.heads * hd, kw = d.kv_heads * hd;
    const cudaStream_t st = g.stream();
    // attention: h = x + o(attn)
    lin_backward(g, p.o, a.attn.get(), N, a.cache[kO], a.dh.get(), a.dattn, false, gr.blr[kO],
                 a.blr);
    const float* dcore = a.dattn.get();
    if (d.attn_gate) {
        ensure(a.dcore, N * qw, st);
        ensure(a.dqgate, N * qw, st);
        sigmoid_gate_backward(g, a.dattn.get(), a.core.get(), a.gate_lin.get(), N * qw,
                              a.dcore.get(), a.dqgate.get());
        dcore = a.dcore.get();
    }
    ensure(a.dq, N * qw, st);
    ensure(a.dk, N * kw, st);
    ensure(a.dv, N * kw, st);
    ensure(a.ds, windows * d.heads * L * L, st);
    {
        const PartTimer part(g, "part/attention_backward");
        attention_backward(g, dcore, a.q.get(), a.k.get(), a.v.get(), a.probs.get(), windows, L,
                           d.heads, d.kv_heads, hd, a.dq.get(), a.dk.get(), a.dv.get(), a.ds.get());
    }
    rope_backward(g, a.dq.get(), N, qw, d.heads, hd, d.rot(), L, rope.cos.get(), rope.sin.get());
    rope_backward(g, a.dk.get(), N, kw, d.kv_heads, hd, d.rot(), L, rope.cos.get(), rope.sin.get());
    if (d.qk_norm) {
        ensure(a.dql, N * qw, st);
        ensure(a.dkl, N * kw, st);
        rmsnorm_backward(g, a.dq.get(), d.attn_gate ? a.q_in.get() : a.q_lin.get(), p.q_norm.get(),
                         a.rstd_q.get(), N * d.heads, hd, a.dql.get(), opt(gr.q_norm));
        rmsnorm_backward(g, a.dk.get(), a.k_lin.get(), p.k_norm.get(), a.rstd_k.get(),
                         N * d.kv_heads, hd, a.dkl.get(), opt(gr.k_norm));
        std::swap(a.dq, a.dql);
        std::swap(a.dk, a.dkl);
    }
    const float* dq_lin = a.dq.get();
    if (d.attn_gate) {  // back to q_proj's [query | gate] layout
        ensure(a.dqg, N * 2 * qw, st);
        merge_query_gate(g, a.dq.get(), a.dqgate.get(), N, d.heads, hd, a.dqg.get());
        dq_lin = a.dqg.get();
    }
    lin_backward(g, p.q, a.n1.get(), N, a.cache[kQ], dq_lin, a.dn1, false, gr.blr[kQ], a.blr);
    lin_backward(g, p.k, a.n1.get(), N, a.cache[kK], a.dk.get(), a.dn1, true, gr.blr[kK], a.blr);
    lin_backward(g, p.v, a.n1.get(), N, a.cache[kV], a.dv.get(), a.dn1, true, gr.blr[kV], a.blr);
}

}  // namespace

void block_forward(const Gpu& g, const DBlockParams& p, const BlockDims& d, const DRope& rope,
                   const float* x, int64_t windows, int64_t L, DBlockActs& a) {
    const int64_t N = windows * L, H = d.hidden;
    const float eps = static_cast<float>(d.eps);
    const cudaStream_t st = g.stream();
    CORTIQ_ASSERT(p.delta || rope.period == L, "RoPE table for {} positions, windows of {}",
                  rope.period, L);
    a.windows = windows;
    a.L = L;
    a.cache.resize(kLinearSlots);
    ensure(a.x, N * H, st);
    copy_d2d(a.x.get(), x, N * H, st);
    ensure(a.n1, N * H, st);
    ensure(a.rstd1, N, st);
    rmsnorm_forward(g, x, N, H, p.in_norm.get(), eps, a.n1.get(), a.rstd1.get());
    if (p.delta)
        delta_mixer_forward(g, p, d, a);
    else
        attention_mixer_forward(g, p, d, rope, a);
    add_into(g, a.h.get(), x, N * H);
    ensure(a.n2, N * H, st);
    ensure(a.rstd2, N, st);
    rmsnorm_forward(g, a.h.get(), N, H, p.post_norm.get(), eps, a.n2.get(), a.rstd2.get());
    lin_forward(g, p.gate, a.n2.get(), N, a.gate, a.cache[kGate], a.blr);
    lin_forward(g, p.up, a.n2.get(), N, a.up, a.cache[kUp], a.blr);
    ensure(a.act, N * d.ffn, st);
    swiglu_forward(g, a.gate.get(), a.up.get(), N * d.ffn, a.act.get());
    lin_forward(g, p.down, a.act.get(), N, a.out, a.cache[kDown], a.blr);
    add_into(g, a.out.get(), a.h.get(), N * H);
}

void block_backward(const Gpu& g, const DBlockParams& p, const BlockDims& d, const DRope& rope,
                    DBlockActs& a, const float* dout, float* dx, DBlockGrads& gr) {
    const int64_t N = a.windows * a.L, H = d.hidden;
    const cudaStream_t st = g.stream();
    ensure(a.dh, N * H, st);
    copy_d2d(a.dh.get(), dout, N * H, st);
    // MLP: out = h + down(act)
    lin_backward(g, p.down, a.act.get(), N, a.cache[kDown], dout, a.dact, false, gr.blr[kDown],
                 a.blr);
    ensure(a.dgate, N * d.ffn, st);
    ensure(a.dup, N * d.ffn, st);
    swiglu_backward(g, a.dact.get(), a.gate.get(), a.up.get(), N * d.ffn, a.dgate.get(),
                    a.dup.get());
    lin_backward(g, p.gate, a.n2.get(), N, a.cache[kGate], a.dgate.get(), a.dn2, false,
                 gr.blr[kGate], a.blr);
    lin_backward(g, p.up, a.n2.get(), N, a.cache[kUp], a.dup.get(), a.dn2, true, gr.blr[kUp],
                 a.blr);
    ensure(a.tmp, N * H, st);
    rmsnorm_backward(g, a.dn2.get(), a.h.get(), p.post_norm.get(), a.rstd2.get(), N, H, a.tmp.get(),
                     opt(gr.post_norm));
    add_into(g, a.dh.get(), a.tmp.get(), N * H);
    // the mixer: h = x + mix(n1)
    if (p.delta)
        delta_mixer_backward(g, p, d, a, gr);
    else
        attention_mixer_backward(g, p, d, rope, a, gr);
    rmsnorm_backward(g, a.dn1.get(), a.x.get(), p.in_norm.get(), a.rstd1.get(), N, H, a.tmp.get(),
                     opt(gr.in_norm));
    if (dx) {
        copy_d2d(dx, a.dh.get(), N * H, st);
        add_into(g, dx, a.tmp.get(), N * H);
    }
}

}  // namespace cortiq::tune::cuda
