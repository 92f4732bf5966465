// Stage 2 on the device (SPEC §3.2): the top-r eigenpairs of the smaller Gram
// of the whitened target give U_r and σ; U_p = U_r √σ, V_p = Tᵀ U_r / √σ.
#include <algorithm>
#include <cmath>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"

namespace cortiq::encode::cuda {

namespace {

// σ (descending) and U_r (m × r) of T L. The Gram squares T L's condition
// number, so it is formed and decomposed in float64 (T, T·H and T·L stay
// float32): in float32 the r-th eigenvector lost ~1e-3 where the spectrum
// decays slowly.
std::pair<VecD, DMat> left_factors(const TensorContext& c, const DMat& t, const DMat* th, int64_t r,
                                   bool whiten) {
    const Gpu& g = c.gpu;
    const cudaStream_t st = c.stream();
    const int64_t m = t.rows, n = t.cols;
    VecD sig(r);
    if (m <= n) {
        // G = T H Tᵀ (m × m): its eigenvectors are the left singular vectors of T L.
        DMat t_h;
        if (whiten && !th) t_h = mm(g, t, false, c.input_ctx.h, false, c.big(n));
        const DMat& left = !whiten ? t : th ? *th : t_h;
        DeviceBuffer<double> gram(m * m, st);
        {
            DeviceBuffer<double> ld(m * n, st), td(m * n, st);
            to_f64(st, left.data(), ld.get(), m * n);
            to_f64(st, t.data(), td.get(), m * n);
            gemm_f64(g, false, true, m, m, n, ld.get(), n, td.get(), n, gram.get(), m);
        }
        auto [lam, vecs] = sym_eig_top_f64(g, gram, m, r, c.tuning.eig_partial);
        for (int64_t k = 0; k < r; ++k) sig[k] = std::sqrt(std::max(lam[k], 0.0));
        return {std::move(sig), std::move(vecs)};
    }
    // (T L)ᵀ (T L) (n × n): right singular vectors V_r; U_r = T L V_r / σ.
    DMat tl_own;
    if (whiten) tl_own = mm(g, t, false, c.input_ctx.l(c.gpu), false, c.big(n));
    const DMat& tl = whiten ? tl_own : t;
    DeviceBuffer<double> gram(n * n, st);
    {
        DeviceBuffer<double> tld(m * n, st);
        to_f64(st, tl.data(), tld.get(), m * n);
        gemm_f64(g, true, false, n, n, m, tld.get(), n, tld.get(), n, gram.get(), n);
    }
    auto [lam, vr] = sym_eig_top_f64(g, gram, n, r, c.tuning.eig_partial);
    gram.reset();
    for (int64_t k = 0; k < r; ++k) sig[k] = std::sqrt(std::max(lam[k], 0.0));
    DMat ur = mm(g, tl, false, vr, false, c.big(n));
    const double floor = std::max(sig[0], 1e-300) * 1e-15;
    VecD inv(r);
    for (int64_t k = 0; k < r; ++k) inv[k] = 1.0 / std::max(sig[k], floor);
    const DVec inv_d = upload(inv, st);
    scale_rc_inplace(st, ur.data(), nullptr, inv_d.get(), m, r);
    return {std::move(sig), std::move(ur)};
}

}  // namespace

EigCache latents_cache(const TensorContext& c, int64_t r_max) {
    EigCache e;
    e.r = r_max;
    std::tie(e.sig, e.ur) = left_factors(c, c.d.w, &c.d.wh, r_max, true);
    return e;
}

std::pair<DMat, DMat> latents(const TensorContext& c, const DMat& t, const DMat* th, int64_t r,
                              bool whiten, bool use_cache) {
    const cudaStream_t st = c.stream();
    const int64_t m = t.rows, n = t.cols;
    CORTIQ_ASSERT(r >= 1 && r <= std::min(m, n), "latents: rank {} for {}x{}", r, m, n);
    VecD sig;
    DMat ur;
    const EigCache* cache = use_cache && whiten && c.eig && c.eig->r >= r ? c.eig : nullptr;
    if (cache) {
        // The top-r eigenpairs are the leading columns of the top-r_max ones.
        ur = DMat(m, r, st);
        CUDA_CHECK(cudaMemcpy2DAsync(ur.data(), r * sizeof(float), cache->ur.data(),
                                     cache->r * sizeof(float), r * sizeof(float), m,
                                     cudaMemcpyDeviceToDevice, st));
        sig.assign(cache->sig.begin(), cache->sig.begin() + r);
    } else {
        std::tie(sig, ur) = left_factors(c, t, th, r, whiten);
    }
    const double floor = std::max(sig[0], 1e-300) * 1e-15;
    VecD sq(r), isq(r);
    for (int64_t k = 0; k < r; ++k) {
        sq[k] = std::sqrt(sig[k]);
        isq[k] = 1.0 / std::sqrt(std::max(sig[k], floor));
    }
    const DVec sq_d = upload(sq, st), isq_d = upload(isq, st);
    DMat up(m, r, st);
    scale_rc(st, up.data(), ur.data(), nullptr, sq_d.get(), m, r);
    DMat vp = mm(c.gpu, t, true, ur, false, c.big(m));
    scale_rc_inplace(st, vp.data(), nullptr, isq_d.get(), n, r);
    return {std::move(up), std::move(vp)};
}

std::pair<DMat, DMat> residual(const TensorContext& c, const DeviceFactors& f, bool with_h) {
    const cudaStream_t st = c.stream();
    const DMat left = f.left(st, 0);
    DMat res = c.d.w.clone(st), res_h;
    mm_into(c.gpu, -1.f, left, false, f.right(st, 0), true, 1.f, res, c.big(f.r));
    if (with_h) {
        res_h = c.d.wh.clone(st);
        mm_into(c.gpu, -1.f, left, false, f.h_right(c, 0), true, 1.f, res_h, c.big(f.r));
    }
    return {std::move(res), std::move(res_h)};
}

}  // namespace cortiq::encode::cuda
