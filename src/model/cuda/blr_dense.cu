// A BLR layer's dense weight formed on the device (weights.hpp,
// set_weight_blr): Ŵ = Σ_p diag(h_p) S_U,p diag(ℓ_p) S_V,pᵀ diag(g_p) in
// float64, rounded once to float32, as blr::dequant forms it on the host
// (Factors::dense: left = h ∘ S_U ∘ ℓ, right = g ∘ S_V, one float64 product
// per path). Every factor entry is a product of f16 values and a sign, exact
// in float64, so the two agree up to the order of the float64 sums.
// Calibration replaces each layer just compressed by this weight; on the
// host a 4096 × 11008 layer's float64 product took seconds.
#include <vector>

#include "blr/packed.hpp"
#include "core/error.hpp"
#include "model/cuda/blr_batch.hpp"  // blocks_for
#include "model/cuda/weights.hpp"

namespace cortiq::model::cuda {

namespace {

__device__ bool bit_at(const uint64_t* words, uint64_t first, uint64_t stride, int64_t k,
                       int64_t j) {
    const uint64_t b = first + static_cast<uint64_t>(k) * stride + static_cast<uint64_t>(j);
    return (words[b / 64] >> (b % 64)) & 1;
}

// out (rows × cols, row k of the sign rows: k < rows = r, j < cols) =
// (row_scale ? row_scale[j] : 1) · sign(k, j) · (col_scale ? col_scale[k] : 1),
// the row scale applied first as on the host. Row k of out is column k of
// left (h ∘ S_U ∘ ℓ) or right (g ∘ S_V).
__global__ void factor_kernel(const uint64_t* words, uint64_t first, uint64_t stride, int64_t rows,
                              int64_t cols, const float* per_col, const float* per_row,
                              double* out) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         idx < rows * cols; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t k = idx / cols, j = idx - k * cols;
        double v = static_cast<double>(per_col[j]) * (bit_at(words, first, stride, k, j) ? -1 : 1);
        if (per_row) v *= static_cast<double>(per_row[k]);
        out[idx] = v;
    }
}

__global__ void to_float_kernel(const double* x, int64_t n, float* y) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = static_cast<float>(x[i]);
}

}  // namespace

void set_weight_blr(DeviceLinear& d, const blr::PackedWeight& p, cublasHandle_t blas,
                    cudaStream_t stream) {
    // (buffers are freed in stream order; the host waits once, at the end)
    CORTIQ_CHECK(p.m == d.m && p.n == d.n && d.own.get() == d.w && !d.packed && !d.w16 && !p.sign,
                 "set_weight_blr: a {}x{} BLR weight for a {}x{} dense layer", p.m, p.n, d.m, d.n);
    const int64_t m = p.m, n = p.n, r = p.r;  // r ≥ 1: a BLR payload's rule
    using cortiq::cuda::DeviceBuffer;
    DeviceBuffer<uint64_t> words(static_cast<int64_t>(p.bits.size()), stream);
    CUDA_CHECK(cudaMemcpyAsync(words.get(), p.bits.data(), p.bits.size() * sizeof(uint64_t),
                               cudaMemcpyHostToDevice, stream));
    DeviceBuffer<double> left_t(r * m, stream), right_t(r * n, stream), w(m * n, stream);
    std::vector<float> hs, ls, gs;
    for (int path = 0; path < p.paths; ++path) {
        p.scales(path, hs, ls, gs);
        const DVec h = cortiq::cuda::upload_f(hs, stream), l = cortiq::cuda::upload_f(ls, stream),
                   g = cortiq::cuda::upload_f(gs, stream);
        const blr::SignRows su = p.sut(path), sv = p.svt(path);
        factor_kernel<<<blocks_for(r * m), 256, 0, stream>>>(words.get(), su.first, su.stride, r, m,
                                                             h.get(), l.get(), left_t.get());
        CUDA_LAUNCH_CHECK();
        factor_kernel<<<blocks_for(r * n), 256, 0, stream>>>(words.get(), sv.first, sv.stride, r, n,
                                                             g.get(), nullptr, right_t.get());
        CUDA_LAUNCH_CHECK();
        // row-major W (m × n) is the column-major n × m matrix Wᵀ = right · leftᵀ;
        // right_t (r × n row-major) is right column-major, left_t likewise
        const double one = 1.0, beta = path == 0 ? 0.0 : 1.0;
        CUBLAS_CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(n),
                                 static_cast<int>(m), static_cast<int>(r), &one, right_t.get(),
                                 static_cast<int>(n), left_t.get(), static_cast<int>(m), &beta,
                                 w.get(), static_cast<int>(n)));
    }
    to_float_kernel<<<blocks_for(m * n), 256, 0, stream>>>(w.get(), m * n, d.own.get());
    CUDA_LAUNCH_CHECK();
    mark_tf32(d, stream);  // waits for the stream
}

}  // namespace cortiq::model::cuda
