#include <algorithm>
#include <tuple>

#include "calib/cuda/gram.hpp"
#include "core/error.hpp"

namespace cortiq::calib::cuda {

namespace {

constexpr int64_t kChunkRows = 2048;  // rows widened to double per DSYRK

__global__ void widen_kernel(const float* x, double* y, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = static_cast<double>(x[i]);
}

// The mean of a lower-triangle sum (column-major lower = row-major upper):
// out[i·n + j] = out[j·n + i] = sum[i·n + j] · inv for j ≥ i. The host then
// takes the matrix as it is (a loop there over an 11008² matrix, writing by
// columns, took seconds).
__global__ void symmetric_mean_kernel(const double* sum, int64_t n, double inv, double* out) {
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n * n;
         idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = idx / n, j = idx - i * n;
        out[idx] = (j >= i ? sum[i * n + j] : sum[j * n + i]) * inv;
    }
}

unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::min<int64_t>((n + 255) / 256, 65536));
}

}  // namespace

DeviceGram::DeviceGram(int64_t n, cudaStream_t stream)
    : n_(n), stream_(stream), sum_(n * n, stream), scratch_(kChunkRows * n, stream) {
    CORTIQ_CHECK(n > 0, "Gram of width {}", n);
    CUDA_CHECK(cudaMemsetAsync(sum_.get(), 0, static_cast<size_t>(n * n) * sizeof(double), stream));
}

void DeviceGram::add(cublasHandle_t blas, const float* x, int64_t rows) {
    const double one = 1.0;
    for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
        const int64_t k = std::min(kChunkRows, rows - r0), count = k * n_;
        widen_kernel<<<blocks_for(count), 256, 0, stream_>>>(x + r0 * n_, scratch_.get(), count);
        CUDA_LAUNCH_CHECK();
        // Column-major, the row-major k × n block is A = n × k: A Aᵀ = Σ x xᵀ.
        CUBLAS_CHECK(cublasDsyrk(blas, CUBLAS_FILL_MODE_LOWER, CUBLAS_OP_N, static_cast<int>(n_),
                                 static_cast<int>(k), &one, scratch_.get(), static_cast<int>(n_),
                                 &one, sum_.get(), static_cast<int>(n_)));
    }
    tokens_ += rows;
}

MatD DeviceGram::mean() const {
    MatD h(n_, n_);
    const double inv = tokens_ ? 1.0 / static_cast<double>(tokens_) : 0.0;
    cortiq::cuda::DeviceBuffer<double> full(n_ * n_, stream_);
    symmetric_mean_kernel<<<blocks_for(n_ * n_), 256, 0, stream_>>>(sum_.get(), n_, inv,
                                                                    full.get());
    CUDA_LAUNCH_CHECK();
    CUDA_CHECK(cudaMemcpyAsync(h.data(), full.get(), static_cast<size_t>(n_ * n_) * sizeof(double),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    return h;
}

DeviceCrossGram::DeviceCrossGram(int64_t na, int64_t nb, cudaStream_t stream)
    : na_(na),
      nb_(nb),
      stream_(stream),
      sum_(na * nb, stream),
      scratch_a_(kChunkRows * na, stream),
      scratch_b_(kChunkRows * nb, stream) {
    CORTIQ_CHECK(na > 0 && nb > 0, "cross Gram of widths {} and {}", na, nb);
    CUDA_CHECK(
        cudaMemsetAsync(sum_.get(), 0, static_cast<size_t>(na * nb) * sizeof(double), stream));
}

void DeviceCrossGram::add(cublasHandle_t blas, const float* a, const float* b, int64_t rows) {
    const double one = 1.0;
    for (int64_t r0 = 0; r0 < rows; r0 += kChunkRows) {
        const int64_t k = std::min(kChunkRows, rows - r0);
        for (auto [src, dst, w] : {std::tuple{a + r0 * na_, scratch_a_.get(), na_},
                                   std::tuple{b + r0 * nb_, scratch_b_.get(), nb_}}) {
            const int64_t count = k * w;
            widen_kernel<<<blocks_for(count), 256, 0, stream_>>>(src, dst, count);
            CUDA_LAUNCH_CHECK();
        }
        // Column-major the blocks are A (na × k) and B (nb × k); B Aᵀ (nb × na,
        // column-major) is Σ a bᵀ row-major.
        CUBLAS_CHECK(cublasDgemm(blas, CUBLAS_OP_N, CUBLAS_OP_T, static_cast<int>(nb_),
                                 static_cast<int>(na_), static_cast<int>(k), &one, scratch_b_.get(),
                                 static_cast<int>(nb_), scratch_a_.get(), static_cast<int>(na_),
                                 &one, sum_.get(), static_cast<int>(nb_)));
    }
    tokens_ += rows;
}

MatD DeviceCrossGram::mean() const {
    MatD c(na_, nb_);
    CUDA_CHECK(cudaMemcpyAsync(c.data(), sum_.get(),
                               static_cast<size_t>(na_ * nb_) * sizeof(double),
                               cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    const double inv = tokens_ ? 1.0 / static_cast<double>(tokens_) : 0.0;
    for (int64_t i = 0; i < na_ * nb_; ++i) c.data()[i] *= inv;
    return c;
}

}  // namespace cortiq::calib::cuda
