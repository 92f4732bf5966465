// Adam on the device, value for value the step of tune/block_tune.cpp's Adam.
#include <algorithm>
#include <cmath>

#include "tune/cuda/block_tune.hpp"

namespace cortiq::tune::cuda {

namespace {

__global__ void adam_kernel(AdamKind kind, float* p, const float* grad, float* m, float* v,
                            float* z, int64_t n, float step, float isc2, float b1, float b2) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        // the gradient in the parameter Adam moves: log|h| for a scale
        const float gi = kind == AdamKind::log_scale ? grad[i] * p[i] : grad[i];
        const float mi = b1 * m[i] + (1 - b1) * gi;
        const float vi = b2 * v[i] + (1 - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        const float u = step * mi / (sqrtf(vi * isc2) + 1e-12f);
        if (kind == AdamKind::log_scale) {
            p[i] *= expf(-u);
        } else if (kind == AdamKind::latent) {
            const float zi = z[i] - u;
            z[i] = zi;
            const float sg = zi < 0 ? -1.0f : 1.0f;
            if (zi != 0 && sg != p[i]) p[i] = sg;
        } else {
            p[i] -= u;
        }
    }
}

}  // namespace

void adam_step(const Gpu& g, AdamKind kind, float* p, const float* grad, float* m, float* v,
               float* z, int64_t n, float step, float isc2, float b1, float b2) {
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + 255) / 256, 4096);
    adam_kernel<<<static_cast<unsigned>(blocks), 256, 0, g.stream()>>>(kind, p, grad, m, v, z, n,
                                                                       step, isc2, b1, b2);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
