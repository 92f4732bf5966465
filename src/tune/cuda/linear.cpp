// Dense and BLR linear layers on the device, the twins of tune::linear_* and
// tune::blr_* (tune/grad_ops.cpp, where the equations are written): GEMMs with
// the ±1 sign matrices held as float (exact in TF32, so their products take
// two tensor-core passes), column dots for dh, dℓ, dg. The rank is padded
// (grad_ops.hpp): every r below is the padded rp.
#include <algorithm>

#include "core/error.hpp"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

using cortiq::cuda::kExactB;

std::vector<float> pad_cols(const std::vector<float>& v, int64_t rows, int64_t r, int64_t rp) {
    CORTIQ_ASSERT(static_cast<int64_t>(v.size()) == rows * r, "{} values for {} × {}", v.size(),
                  rows, r);
    std::vector<float> out(static_cast<size_t>(rows * rp), 0.0f);
    for (int64_t i = 0; i < rows; ++i)
        std::copy(v.begin() + i * r, v.begin() + (i + 1) * r, out.begin() + i * rp);
    return out;
}

std::vector<float> unpad_cols(const std::vector<float>& v, int64_t rows, int64_t r, int64_t rp) {
    CORTIQ_ASSERT(static_cast<int64_t>(v.size()) == rows * rp, "{} values for {} × {}", v.size(),
                  rows, rp);
    std::vector<float> out(static_cast<size_t>(rows * r));
    for (int64_t i = 0; i < rows; ++i)
        std::copy(v.begin() + i * rp, v.begin() + i * rp + r, out.begin() + i * r);
    return out;
}

void linear_forward(const Gpu& g, const float* x, int64_t rows, int64_t n, const float* w,
                    int64_t m, const float* bias, float* y, bool w_tf32) {
    gemm(g, false, true, rows, m, n, 1.0f, x, n, w, n, 0.0f, y, m,
         w_tf32 ? kExactB : cortiq::cuda::kNone);
    if (bias) add_bias(g, y, bias, rows, m);
}

void linear_backward_dx(const Gpu& g, const float* dy, int64_t rows, int64_t n, const float* w,
                        int64_t m, float* dx, bool accumulate, bool w_tf32) {
    gemm(g, false, false, rows, n, m, 1.0f, dy, m, w, n, accumulate ? 1.0f : 0.0f, dx, n,
         w_tf32 ? kExactB : cortiq::cuda::kNone);
}

DBlrGrad blr_zero_grad(const DBlr& w, cudaStream_t stream, bool with_signs) {
    DBlrGrad gr{w.m, w.n, w.r, w.rp, {}};
    auto zeros = [&](int64_t n) {
        DVec v(n, stream);
        if (n > 0) CUDA_CHECK(cudaMemsetAsync(v.get(), 0, sizeof(float) * n, stream));
        return v;
    };
    for (size_t p = 0; p < w.paths.size(); ++p)
        gr.paths.push_back({zeros(w.m),
                            zeros(w.rp),
                            zeros(w.n),
                            zeros(with_signs ? w.m * w.rp : 0),
                            zeros(with_signs ? w.n * w.rp : 0),
                            {},
                            {}});
    return gr;
}

namespace {

// Makes b hold at least n values (a scratch that only grows).
void grow(DVec& b, int64_t n, cudaStream_t stream) {
    if (b.size() < n) b = DVec(n, stream);
}

PathVecs vecs(const DBlr& w, DVec DBlrPath::*v) {
    PathVecs out;
    for (size_t p = 0; p < w.paths.size(); ++p) out.v[p] = (w.paths[p].*v).get();
    return out;
}

PathOut outs(DBlrGrad& gr, DVec DBlrPath::*v) {
    PathOut out;
    for (size_t p = 0; p < gr.paths.size(); ++p) out.v[p] = (gr.paths[p].*v).get();
    return out;
}

// Every path's S_U (u true) or S_V: floats where held, else packed.
PathSigns signs(const DBlr& w, bool u) {
    PathSigns s;
    for (size_t p = 0; p < w.paths.size(); ++p) {
        const DBlrPath& q = w.paths[p];
        const DVec& f = u ? q.su : q.sv;
        const DeviceBuffer<uint32_t>& bits = u ? q.su_bits : q.sv_bits;
        CORTIQ_ASSERT(!f.empty() || !bits.empty(), "a BLR path without signs");
        s.f[p] = f.empty() ? nullptr : f.get();
        s.bits[p] = bits.empty() ? nullptr : bits.get();
    }
    return s;
}

int paths_of(const DBlr& w) {
    CORTIQ_ASSERT(!w.paths.empty() && w.paths.size() <= kMaxBlrPaths,
                  "a BLR layer of {} paths (1 to {})", w.paths.size(), kMaxBlrPaths);
    return static_cast<int>(w.paths.size());
}

// The signs' gradients of every path (tuners that move the signs), two
// products of the layer's size each: dS_U += duᵀ (ℓ ∘ t), du = dy ∘ h, and
// dS_V += (g ∘ x)ᵀ dt, dt = dtl ∘ ℓ.
void sign_gradients(const Gpu& g, const DBlr& w, const float* x, int64_t rows,
                    const DBlrCache& cache, const float* dy, DBlrGrad& grad, DBlrScratch& s) {
    const int64_t m = w.m, n = w.n, r = w.rp;
    const cudaStream_t st = g.stream();
    grow(s.du, rows * m, st);
    grow(s.tl, rows * r, st);
    grow(s.xg, rows * n, st);
    grow(s.dt, rows * r, st);
    for (size_t p = 0; p < w.paths.size(); ++p) {
        const DBlrPath& q = w.paths[p];
        DBlrPath& gq = grad.paths[p];
        scale_cols(g, dy, q.h.get(), rows, m, s.du.get(), false);
        scale_cols(g, cache.t.get() + p * rows * r, q.l.get(), rows, r, s.tl.get(), false);
        gemm(g, true, false, m, r, rows, 1.0f, s.du.get(), m, s.tl.get(), r, 1.0f, gq.su.get(), r);
        scale_cols(g, s.dtl.get() + p * rows * r, q.l.get(), rows, r, s.dt.get(), false);
        scale_cols(g, x, q.g.get(), rows, n, s.xg.get(), false);
        gemm(g, true, false, n, r, rows, 1.0f, s.xg.get(), n, s.dt.get(), r, 1.0f, gq.sv.get(), r);
    }
}

}  // namespace

// Every path at once (blr_paths.cu): a = [lo | hi] of x ∘ g_p, t_p = a_p [S_V; S_V],
// a = [lo | hi] of t_p ∘ ℓ_p, u_p = a_p [S_U | S_U]ᵀ, y = Σ_p u_p ∘ h_p.
void blr_forward(const Gpu& g, const DBlr& w, const float* x, int64_t rows, float* y,
                 DBlrCache& cache, DBlrScratch& own) {
    DBlrScratch& s = own.shared ? *own.shared : own;
    const int64_t m = w.m, n = w.n, r = w.rp;
    const int np = paths_of(w);
    const cudaStream_t st = g.stream();
    ensure(cache.t, np * rows * r, st);
    ensure(cache.u, np * rows * m, st);
    grow(s.a, np * rows * 2 * std::max(n, r), st);
    grow(s.signs, np * 2 * std::max(m, n) * r, st);
    split_scaled_paths(g, x, 0, vecs(w, &DBlrPath::g), np, rows, n, s.a.get());
    stack_signs_paths(g, signs(w, false), np, n, w.r, r, false, s.signs.get());
    gemm_batched_tf32(g, false, rows, r, 2 * n, s.a.get(), 2 * n, rows * 2 * n, s.signs.get(), r,
                      2 * n * r, cache.t.get(), r, rows * r, np);
    split_scaled_paths(g, cache.t.get(), rows * r, vecs(w, &DBlrPath::l), np, rows, r, s.a.get());
    stack_signs_paths(g, signs(w, true), np, m, w.r, r, true, s.signs.get());
    gemm_batched_tf32(g, true, rows, m, 2 * r, s.a.get(), 2 * r, rows * 2 * r, s.signs.get(), 2 * r,
                      m * 2 * r, cache.u.get(), m, rows * m, np);
    sum_scaled_paths(g, cache.u.get(), rows * m, vecs(w, &DBlrPath::h), np, rows, m, y, false);
}

// dh_p += Σ dy ∘ u_p; dtl_p = [lo | hi] of dy ∘ h_p times [S_U; S_U];
// dℓ_p += Σ dtl_p ∘ t_p; dxg_p = [lo | hi] of dtl_p ∘ ℓ_p times [S_V | S_V]ᵀ;
// dg_p += Σ dxg_p ∘ x; dx (+)= Σ_p dxg_p ∘ g_p.
void blr_backward(const Gpu& g, const DBlr& w, const float* x, int64_t rows, const DBlrCache& cache,
                  const float* dy, float* dx, bool accumulate, DBlrGrad& grad, DBlrScratch& own) {
    DBlrScratch& s = own.shared ? *own.shared : own;
    const int64_t m = w.m, n = w.n, r = w.rp;
    const int np = paths_of(w);
    const cudaStream_t st = g.stream();
    CORTIQ_ASSERT(cache.t.size() == np * rows * r && cache.u.size() == np * rows * m,
                  "BLR backward: a cache of {} and {} values for {} rows", cache.t.size(),
                  cache.u.size(), rows);
    grow(s.a, np * rows * 2 * std::max(m, r), st);
    grow(s.signs, np * 2 * std::max(m, n) * r, st);
    grow(s.dtl, np * rows * r, st);
    grow(s.dxg, np * rows * n, st);
    col_dots_paths(g, dy, 0, cache.u.get(), rows * m, outs(grad, &DBlrPath::h), np, rows, m);
    split_scaled_paths(g, dy, 0, vecs(w, &DBlrPath::h), np, rows, m, s.a.get());
    stack_signs_paths(g, signs(w, true), np, m, w.r, r, false, s.signs.get());
    gemm_batched_tf32(g, false, rows, r, 2 * m, s.a.get(), 2 * m, rows * 2 * m, s.signs.get(), r,
                      2 * m * r, s.dtl.get(), r, rows * r, np);
    col_dots_paths(g, s.dtl.get(), rows * r, cache.t.get(), rows * r, outs(grad, &DBlrPath::l), np,
                   rows, r);
    split_scaled_paths(g, s.dtl.get(), rows * r, vecs(w, &DBlrPath::l), np, rows, r, s.a.get());
    stack_signs_paths(g, signs(w, false), np, n, w.r, r, true, s.signs.get());
    gemm_batched_tf32(g, true, rows, n, 2 * r, s.a.get(), 2 * r, rows * 2 * r, s.signs.get(), 2 * r,
                      n * 2 * r, s.dxg.get(), n, rows * n, np);
    col_dots_paths(g, s.dxg.get(), rows * n, x, 0, outs(grad, &DBlrPath::g), np, rows, n);
    if (dx)
        sum_scaled_paths(g, s.dxg.get(), rows * n, vecs(w, &DBlrPath::g), np, rows, n, dx,
                         accumulate);
    if (!grad.paths[0].su.empty()) sign_gradients(g, w, x, rows, cache, dy, grad, s);
}

}  // namespace cortiq::tune::cuda
