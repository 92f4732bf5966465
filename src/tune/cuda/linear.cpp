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

// A path's S_U (rows = m) or S_V (rows = n) as floats: the held ones, or the
// packed ones expanded into the scratch (valid until the next expansion).
const float* signs_of(const Gpu& g, const DBlr& w, const DVec& f,
                      const DeviceBuffer<uint32_t>& bits, int64_t rows, DBlrScratch& s) {
    if (!f.empty()) return f.get();
    CORTIQ_ASSERT(!bits.empty(), "a BLR path without signs");
    DVec& out = s.shared_signs ? *s.shared_signs : s.signs;
    if (out.size() < rows * w.rp) out = DVec(rows * w.rp, g.stream());  // grows, never shrinks
    expand_signs(g, bits.get(), rows, w.r, w.rp, out.get());
    return out.get();
}

}  // namespace

void blr_forward(const Gpu& g, const DBlr& w, const float* x, int64_t rows, float* y,
                 DBlrCache& cache, DBlrScratch& s) {
    const int64_t m = w.m, n = w.n, r = w.rp;
    const cudaStream_t st = g.stream();
    const size_t np = w.paths.size();
    CORTIQ_ASSERT(np > 0, "a BLR layer without paths");
    cache.t.resize(np);
    cache.u.resize(np);
    ensure(s.xg, rows * n, st);
    ensure(s.tl, rows * r, st);
    for (size_t p = 0; p < np; ++p) {
        const DBlrPath& q = w.paths[p];
        DVec& t = cache.t[p];
        DVec& u = cache.u[p];
        ensure(t, rows * r, st);
        ensure(u, rows * m, st);
        scale_cols(g, x, q.g.get(), rows, n, s.xg.get(), false);
        gemm(g, false, false, rows, r, n, 1.0f, s.xg.get(), n,
             signs_of(g, w, q.sv, q.sv_bits, n, s), r, 0.0f, t.get(), r, kExactB);
        scale_cols(g, t.get(), q.l.get(), rows, r, s.tl.get(), false);
        gemm(g, false, true, rows, m, r, 1.0f, s.tl.get(), r, signs_of(g, w, q.su, q.su_bits, m, s),
             r, 0.0f, u.get(), m, kExactB);
        scale_cols(g, u.get(), q.h.get(), rows, m, y, p > 0);
    }
}

void blr_backward(const Gpu& g, const DBlr& w, const float* x, int64_t rows, const DBlrCache& cache,
                  const float* dy, float* dx, bool accumulate, DBlrGrad& grad, DBlrScratch& s) {
    const int64_t m = w.m, n = w.n, r = w.rp;
    const cudaStream_t st = g.stream();
    ensure(s.du, rows * m, st);
    ensure(s.tl, rows * r, st);
    ensure(s.dtl, rows * r, st);
    ensure(s.xg, rows * n, st);
    ensure(s.dxg, rows * n, st);
    for (size_t p = 0; p < w.paths.size(); ++p) {
        const DBlrPath& q = w.paths[p];
        DBlrPath& gq = grad.paths[p];
        const float* t = cache.t[p].get();
        col_dots(g, dy, cache.u[p].get(), rows, m, gq.h.get());  // dh += Σ dy ∘ u
        // the signs' gradients only where the tuner keeps them (grad.su, sv
        // empty: signs fixed), two products of the layer's size
        const bool sign_grads = !gq.su.empty();
        scale_cols(g, dy, q.h.get(), rows, m, s.du.get(), false);  // du = dy ∘ h
        gemm(g, false, false, rows, r, m, 1.0f, s.du.get(), m,
             signs_of(g, w, q.su, q.su_bits, m, s), r, 0.0f, s.dtl.get(), r,
             kExactB);  // dtl = du S_U
        if (sign_grads) {
            scale_cols(g, t, q.l.get(), rows, r, s.tl.get(), false);  // ℓ ∘ t
            gemm(g, true, false, m, r, rows, 1.0f, s.du.get(), m, s.tl.get(), r, 1.0f, gq.su.get(),
                 r);  // dS_U += duᵀ (ℓ ∘ t)
        }
        col_dots(g, s.dtl.get(), t, rows, r, gq.l.get());                    // dℓ += Σ dtl ∘ t
        scale_cols(g, s.dtl.get(), q.l.get(), rows, r, s.dtl.get(), false);  // dt = dtl ∘ ℓ
        gemm(g, false, true, rows, n, r, 1.0f, s.dtl.get(), r,
             signs_of(g, w, q.sv, q.sv_bits, n, s), r, 0.0f, s.dxg.get(), n,
             kExactB);  // dxg = dt S_Vᵀ
        if (sign_grads) {
            scale_cols(g, x, q.g.get(), rows, n, s.xg.get(), false);  // g ∘ x
            gemm(g, true, false, n, r, rows, 1.0f, s.xg.get(), n, s.dtl.get(), r, 1.0f, gq.sv.get(),
                 r);  // dS_V += (g ∘ x)ᵀ dt
        }
        col_dots(g, s.dxg.get(), x, rows, n, gq.g.get());  // dg += Σ dxg ∘ x
        if (dx) scale_cols(g, s.dxg.get(), q.g.get(), rows, n, dx, accumulate || p > 0);
    }
}

}  // namespace cortiq::tune::cuda
