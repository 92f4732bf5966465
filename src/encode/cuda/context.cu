// Stage 1 on the device (SPEC §3.1): damped H, act order, Uc from the
// equilibrated float32 Cholesky factor (growing ridge on failure), lazy L; and
// the per-tensor products W·H, W·H_sel with their traces.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"
#include "encode/gram_check.hpp"

namespace cortiq::encode::cuda {

namespace {

DeviceBuffer<int> upload_ints(const std::vector<int64_t>& v, cudaStream_t st) {
    std::vector<int> iv(v.begin(), v.end());
    DeviceBuffer<int> d(static_cast<int64_t>(iv.size()), st);
    if (!iv.empty()) {
        CUDA_CHECK(cudaMemcpyAsync(d.get(), iv.data(), iv.size() * sizeof(int),
                                   cudaMemcpyHostToDevice, st));
        CUDA_CHECK(cudaStreamSynchronize(st));
    }
    return d;
}

}  // namespace

InputContext::InputContext(Gpu& gpu, const MatD& hf, const MatD& hs, double rho,
                           const std::string& what) {
    check_gram(hf, what, "fit");
    check_gram(hs, what, "held-out");
    CORTIQ_CHECK(hf.rows() == hs.rows(), "{}: fit Gram is {}-wide, held-out Gram {}-wide", what,
                 hf.rows(), hs.rows());
    CORTIQ_CHECK(rho >= 0 && std::isfinite(rho), "{}: damping rho must be >= 0", what);
    n = hf.rows();
    device = gpu.device();
    double trace = 0;
    for (int64_t i = 0; i < n; ++i) trace += hf(i, i);
    const double mean_diag = trace / static_cast<double>(n);
    CORTIQ_CHECK(mean_diag > 0, "{}: fit Gram has a zero diagonal (no activations?)", what);
    c_fit = rho * mean_diag;
    const cudaStream_t st = gpu.stream();
    h = upload(hf, st);
    add_diag(st, h.data(), n, static_cast<float>(c_fit));
    h_sel = upload(hs, st);
    sqd.resize(n);
    for (int64_t i = 0; i < n; ++i) sqd[i] = std::sqrt(hf(i, i) + c_fit);
    perm.resize(n);
    std::iota(perm.begin(), perm.end(), 0);
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return hf(a, a) > hf(b, b); });
    perm_d = upload_ints(perm, st);

    // Uc as on the CPU: the lower factor L' of J A J (A = D⁻¹ P H Pᵀ D⁻¹, J the
    // reversal), inverted; uc(i,j) = L'⁻¹(n-1-i, n-1-j) / sqd[perm[j]].
    std::vector<int64_t> perm_rev(n);
    for (int64_t i = 0; i < n; ++i) perm_rev[i] = perm[n - 1 - i];
    const DeviceBuffer<int> perm_rev_d = upload_ints(perm_rev, st);
    const DVec sqd_d = upload(sqd, st);
    VecD sqd_perm(n);
    for (int64_t j = 0; j < n; ++j) sqd_perm[j] = sqd[perm[j]];
    const DVec sqd_perm_d = upload(sqd_perm, st);
    DMat a(n, n, st);
    double ridge = 0;
    while (true) {
        equilibrate(st, h.data(), sqd_d.get(), perm_rev_d.get(), a.data(), n,
                    static_cast<float>(ridge));
        if (cholesky_lower(gpu, a.data(), n)) break;
        // float32: start the ridge at float resolution (the CPU starts at 1e-10)
        ridge = ridge == 0 ? 1e-7 : ridge * 10;
        CORTIQ_CHECK(ridge < 1e-1,
                     "{}: damped fit Gram is not positive definite even with a {:g} ridge "
                     "(float32)",
                     what, ridge / 10);
    }
    uc_ridge = ridge;
    DMat linv(n, n, st);
    tri_inv_lower(gpu, a.data(), linv.data(), n);
    uc = DMat(n, n, st);
    make_uc(st, linv.data(), sqd_perm_d.get(), uc.data(), n);
    gpu.sync();
    // Shared by other streams from now on: frees go to the legacy stream.
    h.rebind(nullptr);
    h_sel.rebind(nullptr);
    uc.rebind(nullptr);
    perm_d.rebind(nullptr);
}

const DMat& InputContext::l(Gpu& gpu) const {
    std::lock_guard<std::mutex> lock(l_mu_);
    if (!l_) {
        const cudaStream_t st = gpu.stream();
        auto f = std::make_unique<DMat>(n, n, st);
        const DVec sqd_d = upload(sqd, st);
        double ridge = 0;
        while (true) {
            equilibrate(st, h.data(), sqd_d.get(), nullptr, f->data(), n,
                        static_cast<float>(ridge));
            if (cholesky_lower(gpu, f->data(), n)) break;
            ridge = ridge == 0 ? 1e-7 : ridge * 10;
            CORTIQ_CHECK(ridge < 1e-1, "damped fit Gram (L) is not positive definite (float32)");
        }
        make_l(st, f->data(), sqd_d.get(), n);  // L = D L̃
        gpu.sync();
        f->rebind(nullptr);
        l_ = std::move(f);
    }
    return *l_;
}

size_t InputContext::bytes() const {
    std::lock_guard<std::mutex> lock(l_mu_);
    const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n) * sizeof(float);
    return (l_ ? 4 : 3) * nn;
}

TensorData::TensorData(Gpu& gpu, const MatD& w_, const InputContext& input_ctx,
                       const Tuning& tuning) {
    CORTIQ_CHECK(w_.cols() == input_ctx.n, "weight is {}x{} but its input Gram is {}-wide",
                 w_.rows(), w_.cols(), input_ctx.n);
    for (double v : w_.vec()) CORTIQ_CHECK(std::isfinite(v), "weight has non-finite values");
    m = w_.rows();
    n = w_.cols();
    const cudaStream_t st = gpu.stream();
    w = upload(w_, st);
    const Prec p = n >= tuning.x3_min_k ? Prec::tf32x3 : Prec::fp32;
    wh = mm(gpu, w, false, input_ctx.h, false, p);
    wh_sel = mm(gpu, w, false, input_ctx.h_sel, false, p);
    SumBatch sb(st);
    sb.dot(w.data(), wh.data(), m * n);
    sb.dot(w.data(), wh_sel.data(), m * n);
    sb.dot(w.data(), w.data(), m * n);
    const auto v = sb.read();
    a_h = v[0];
    a_sel = v[1];
    w2 = v[2];
    a_fit = a_h - input_ctx.c_fit * w2;
}

}  // namespace cortiq::encode::cuda
