// The batch path's last stage (model/cuda/blr_linear.cu): one path's product
// u into y, with the output scale h, the activations' row scale undone, β on
// the first path and the bias on the last.
#include "core/cuda/device.hpp"
#include "model/cuda/blr_batch.hpp"

namespace cortiq::model::cuda {

namespace {

__global__ void blr_epilogue_kernel(EpilogueArgs a) {
    const int64_t n = a.rows * a.m, ld_u = a.ld_u > 0 ? a.ld_u : a.m;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t row = i / a.m, j = i - row * a.m;
        float v = a.first ? (a.beta == 0.0f ? 0.0f : a.beta * a.y[i]) : a.y[i];
        const float ui = a.u[row * ld_u + j];
        const float u = a.row_scale ? ui * a.row_scale[row] : ui;
        v += __half2float(a.h[j]) * u;
        if (a.last && a.bias) v += a.bias[j];
        a.y[i] = v;
    }
}

}  // namespace

void blr_epilogue(const EpilogueArgs& a, cudaStream_t stream) {
    if (a.rows * a.m == 0) return;
    blr_epilogue_kernel<<<blocks_for(a.rows * a.m), 256, 0, stream>>>(a);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
