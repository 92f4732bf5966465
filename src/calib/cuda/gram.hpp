// The Gram of a linear layer's input on the device, for calibration with the
// GPU forward pass (quantize --device gpu; calib/gpu_states.hpp): Σ x xᵀ over the rows x of every
// added block, in float64 (the rows are widened to double and multiplied by
// cuBLAS DSYRK), as calib::GramAccumulator does on the host.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/device.hpp"
#include "core/matrix.hpp"

namespace cortiq::calib::cuda {

class DeviceGram {
  public:
    DeviceGram(int64_t n, cudaStream_t stream);
    // x: rows × n row-major float32 on the device (enqueued on the stream).
    void add(cublasHandle_t blas, const float* x, int64_t rows);
    int64_t tokens() const { return tokens_; }
    int64_t dim() const { return n_; }
    // (1/T) Σ x xᵀ on the host (synchronises the stream).
    MatD mean() const;

  private:
    int64_t n_ = 0, tokens_ = 0;
    cudaStream_t stream_ = nullptr;
    cortiq::cuda::DeviceBuffer<double> sum_;      // n × n, the lower triangle (column-major)
    cortiq::cuda::DeviceBuffer<double> scratch_;  // a chunk of rows widened to double
};

// Σ a bᵀ over paired rows a (width na) and b (width nb), in float64 (DGEMM
// on rows widened to double), as calib::CrossGramAccumulator does on the host.
class DeviceCrossGram {
  public:
    DeviceCrossGram(int64_t na, int64_t nb, cudaStream_t stream);
    // a: rows × na, b: rows × nb, row-major float32 on the device.
    void add(cublasHandle_t blas, const float* a, const float* b, int64_t rows);
    // (1/T) Σ a bᵀ (na × nb) on the host (synchronises the stream).
    MatD mean() const;

  private:
    int64_t na_ = 0, nb_ = 0, tokens_ = 0;
    cudaStream_t stream_ = nullptr;
    cortiq::cuda::DeviceBuffer<double> sum_;  // nb × na column-major = na × nb row-major
    cortiq::cuda::DeviceBuffer<double> scratch_a_, scratch_b_;
};

}  // namespace cortiq::calib::cuda
