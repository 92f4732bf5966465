// calib/gpu_drift.hpp on the device: cuBLAS and cuSOLVER in float64. A
// row-major m × n matrix is read as its column-major transpose (n × m, leading
// dimension n), so every product below is the transpose of drift.cpp's:
//   (W E)ᵀ = Eᵀ Wᵀ, Dᵀ = A⁻¹ (W E)ᵀ (E = C − H), (W Δ)ᵀ = Δᵀ Wᵀ, (D H)ᵀ = H Dᵀ,
// where the column-major view of a row-major E is Eᵀ, and of a symmetric
// A or H the matrix itself. Frobenius products do not care about the layout.
#include <algorithm>
#include <cmath>

#include "calib/gpu_drift.hpp"
#include "core/cuda/device.hpp"
#include "core/error.hpp"

namespace cortiq::calib {

namespace {

using DBuf = cortiq::cuda::DeviceBuffer<double>;

__global__ void add_diag_kernel(double* a, int64_t n, double v) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) a[i * n + i] += v;
}

void add_diag(DBuf& a, int64_t n, double v, cudaStream_t st) {
    add_diag_kernel<<<static_cast<unsigned>((n + 255) / 256), 256, 0, st>>>(a.get(), n, v);
    CUDA_LAUNCH_CHECK();
}

DBuf upload_mat(const MatD& m, cudaStream_t st) {
    DBuf b(m.size(), st);
    CUDA_CHECK(cudaMemcpyAsync(b.get(), m.data(), static_cast<size_t>(m.size()) * sizeof(double),
                               cudaMemcpyHostToDevice, st));
    return b;
}

double dot(cublasHandle_t blas, const DBuf& a, const DBuf& b, int64_t count) {
    double r = 0;  // host pointer mode: the call waits for the result
    CUBLAS_CHECK(cublasDdot(blas, static_cast<int>(count), a.get(), 1, b.get(), 1, &r));
    return r;
}

// A = H_fit + cI + ridge·mean|diag(H_fit + cI)|·I, Cholesky-factored (lower),
// with linalg's escalation (spd_factor): ridge 1e-10, ×10 per failure. hf:
// H_fit on the device (copied for each attempt).
DBuf factor_fit(const cortiq::cuda::Gpu& g, const MatD& h_fit, const DBuf& hf, double damping) {
    const int64_t n = h_fit.rows();
    const cudaStream_t st = g.stream();
    double mean_diag = 0;
    for (int64_t i = 0; i < n; ++i) mean_diag += std::abs(h_fit(i, i) + damping);
    mean_diag = n ? mean_diag / static_cast<double>(n) : 0.0;
    if (!(mean_diag > 0)) mean_diag = 1.0;
    cortiq::cuda::DeviceBuffer<int> info(1, st);
    double ridge = 1e-10;
    for (int attempt = 0; attempt < 12; ++attempt) {
        DBuf a(n * n, st);
        CUDA_CHECK(cudaMemcpyAsync(a.get(), hf.get(), static_cast<size_t>(n * n) * sizeof(double),
                                   cudaMemcpyDeviceToDevice, st));
        add_diag(a, n, damping + ridge * mean_diag, st);
        int lwork = 0;
        CUSOLVER_CHECK(cusolverDnDpotrf_bufferSize(g.solver(), CUBLAS_FILL_MODE_LOWER,
                                                   static_cast<int>(n), a.get(),
                                                   static_cast<int>(n), &lwork));
        DBuf work(std::max(lwork, 1), st);
        CUSOLVER_CHECK(cusolverDnDpotrf(g.solver(), CUBLAS_FILL_MODE_LOWER, static_cast<int>(n),
                                        a.get(), static_cast<int>(n), work.get(), lwork,
                                        info.get()));
        int h_info = 0;
        CUDA_CHECK(cudaMemcpyAsync(&h_info, info.get(), sizeof(int), cudaMemcpyDeviceToHost, st));
        g.sync();
        if (h_info == 0) return a;
        ridge = std::max(ridge * 10, 1e-12);
    }
    CORTIQ_FAIL("SPD solve failed: {}x{} system is not positive definite", n, n);
}

}  // namespace

std::vector<DriftStep> drift_steps_gpu(const std::vector<const MatD*>& weights,
                                       const MatD& cross_fit, const MatD& h_fit, double damping,
                                       const MatD& cross_sel, const MatD& h_sel) {
    const int64_t n = h_fit.rows();
    for (const MatD* m : {&cross_fit, &h_fit, &cross_sel, &h_sel})
        CORTIQ_CHECK(m->rows() == n && m->cols() == n,
                     "drift on the GPU: Grams of {} inputs, one is {}x{}", n, m->rows(), m->cols());
    for (const MatD* w : weights)
        CORTIQ_CHECK(w->cols() == n, "drift on the GPU: a weight of {} inputs, the Grams have {}",
                     w->cols(), n);
    cortiq::cuda::Gpu g;
    const cudaStream_t st = g.stream();
    const cublasHandle_t blas = g.blas();
    const int ni = static_cast<int>(n);
    const double one = 1, zero = 0, minus_one = -1;
    DBuf c = upload_mat(cross_fit, st);  // C_fit − H_fit (in place)
    DBuf a;
    {
        const DBuf hf = upload_mat(h_fit, st);  // once: the factor and C − H read it
        a = factor_fit(g, h_fit, hf, damping);
        CUBLAS_CHECK(cublasDgeam(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, &one, c.get(), ni,
                                 &minus_one, hf.get(), ni, c.get(), ni));
    }
    DBuf delta = upload_mat(cross_sel, st);  // Δ = C_sel − H_sel (in place)
    const DBuf hs = upload_mat(h_sel, st);
    CUBLAS_CHECK(cublasDgeam(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, ni, &one, delta.get(), ni,
                             &minus_one, hs.get(), ni, delta.get(), ni));
    cortiq::cuda::DeviceBuffer<int> info(1, st);
    std::vector<DriftStep> out;
    for (const MatD* w : weights) {
        const int64_t m = w->rows();
        const int mi = static_cast<int>(m);
        const DBuf wt = upload_mat(*w, st);  // Wᵀ, n × m
        DBuf dt(n * m, st), p(n * m, st);
        // (W (C − H))ᵀ, then Dᵀ = A⁻¹ (W (C − H))ᵀ (drift_step)
        CUBLAS_CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ni, &one, c.get(), ni,
                                 wt.get(), ni, &zero, dt.get(), ni));
        CUSOLVER_CHECK(cusolverDnDpotrs(g.solver(), CUBLAS_FILL_MODE_LOWER, ni, mi, a.get(), ni,
                                        dt.get(), ni, info.get()));
        // drift_shrinkage: ⟨W Δ, D⟩ = ⟨Δᵀ Wᵀ, Dᵀ⟩ and ⟨D H, D⟩ = ⟨H Dᵀ, Dᵀ⟩
        CUBLAS_CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ni, &one, delta.get(), ni,
                                 wt.get(), ni, &zero, p.get(), ni));
        const double num = dot(blas, p, dt, n * m);
        CUBLAS_CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, ni, mi, ni, &one, hs.get(), ni,
                                 dt.get(), ni, &zero, p.get(), ni));
        const double den = dot(blas, p, dt, n * m);
        DriftStep s;
        s.alpha = den > 0 ? std::clamp(num / den, 0.0, 1.0) : 0.0;
        s.d = MatD(m, n);  // row-major D = column-major Dᵀ
        CUDA_CHECK(cudaMemcpyAsync(s.d.data(), dt.get(),
                                   static_cast<size_t>(n * m) * sizeof(double),
                                   cudaMemcpyDeviceToHost, st));
        g.sync();
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace cortiq::calib
