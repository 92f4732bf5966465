// Lanczos on MᵀM for the scale and the smallest σ of ITQ's polar factors
// (linalg/polar_scaling.hpp; the float64 twin is la::lanczos_extremes). Each
// step is two gemvs and one single-block kernel that orthogonalises, takes α
// and β and normalises on the device, so the step count costs no readback:
// the coefficients are read once at the end (with two candidate streams
// sharing the GPU, each readback waits behind the other stream's kernels).
#include <cmath>

#include "encode/cuda/ops.hpp"
#include "encode/cuda/stages.hpp"
#include "linalg/polar_scaling.hpp"

namespace cortiq::encode::cuda {

namespace {

constexpr int kLanczosThreads = 1024;

__device__ double block_sum_1024(double v, double* red) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // red is reused
    if (lane == 0) red[warp] = v;
    __syncthreads();
    double s = 0;
    if (threadIdx.x == 0) {
        for (int w = 0; w < kLanczosThreads / 32; ++w) s += red[w];  // fixed order
        red[32] = s;
    }
    __syncthreads();
    return red[32];
}

// One step j after w = MᵀM v: w −= β_j v_prev; α_j = w·v; w −= α_j v;
// β_{j+1} = ‖w‖; v_prev = v; v = w / β_{j+1}. coef[2j] = α_j, coef[2j+1] =
// β_{j+1}; a zero β (an invariant subspace) leaves v zero, which ends the
// useful steps (the host cuts the tridiagonal there).
__global__ void k_lanczos_step(int64_t r, int j, float* w, float* v, float* v_prev, double* coef) {
    __shared__ double red[33];
    const double beta = j > 0 ? coef[2 * j - 1] : 0.0;
    double s = 0;
    for (int64_t i = threadIdx.x; i < r; i += kLanczosThreads) {
        const float wi = w[i] - static_cast<float>(beta) * v_prev[i];
        w[i] = wi;
        s += static_cast<double>(wi) * v[i];
    }
    const double alpha = block_sum_1024(s, red);
    s = 0;
    for (int64_t i = threadIdx.x; i < r; i += kLanczosThreads) {
        const float wi = w[i] - static_cast<float>(alpha) * v[i];
        w[i] = wi;
        s += static_cast<double>(wi) * wi;
    }
    const double nb = sqrt(block_sum_1024(s, red));
    const float inv = nb > 0 ? static_cast<float>(1.0 / nb) : 0.0f;
    for (int64_t i = threadIdx.x; i < r; i += kLanczosThreads) {
        v_prev[i] = v[i];
        v[i] = w[i] * inv;
    }
    if (threadIdx.x == 0) {
        coef[2 * j] = alpha;
        coef[2 * j + 1] = nb;
    }
}

}  // namespace

std::pair<double, double> lanczos_extremes(const Gpu& g, const DMat& m, int steps, int64_t active) {
    const cudaStream_t st = g.stream();
    const int64_t r = m.rows;
    if (active < 0) active = r;
    CORTIQ_ASSERT(active <= r, "Lanczos on {} of {} rows", active, r);
    steps = static_cast<int>(std::min<int64_t>(steps, active));
    if (steps <= 0) return {0.0, 0.0};
    std::vector<float> v0(r);
    double n0 = 0;
    for (int64_t i = 0; i < active; ++i) {  // zero beyond `active`: a padded M's
        v0[i] = 1.0f + 0.5f * std::sin(0.7f * static_cast<float>(i));  // zero block
        n0 += static_cast<double>(v0[i]) * v0[i];  // never enters the Krylov space
    }
    for (auto& x : v0) x = static_cast<float>(x / std::sqrt(n0));
    DVec v = upload_f(v0, st), v_prev(r, st), u(r, st), w(r, st);
    // v_prev enters step 0 as 0 · v_prev: a NaN left in fresh pool memory
    // would make α_0 NaN and the whole estimate void (it did, for about a
    // third of ITQ's polar factors on the H200, which then took plain steps)
    CUDA_CHECK(cudaMemsetAsync(v_prev.get(), 0, r * sizeof(float), st));
    DeviceBuffer<double> coef(2 * static_cast<int64_t>(steps), st);
    for (int j = 0; j < steps; ++j) {
        gemv(g, false, r, r, m.data(), v.get(), u.get());  // M v
        gemv(g, true, r, r, m.data(), u.get(), w.get());   // Mᵀ M v
        k_lanczos_step<<<1, kLanczosThreads, 0, st>>>(r, j, w.get(), v.get(), v_prev.get(),
                                                      coef.get());
        CUDA_LAUNCH_CHECK();
    }
    std::vector<double> c(2 * static_cast<size_t>(steps));
    CUDA_CHECK(cudaMemcpyAsync(c.data(), coef.get(), c.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, st));
    g.sync();
    std::vector<double> diag, off;
    for (int j = 0; j < steps; ++j) {
        if (!std::isfinite(c[2 * j])) break;
        diag.push_back(c[2 * j]);
        // float32: a β this small relative to the first α is an invariant subspace
        if (j + 1 == steps || !(c[2 * j + 1] > 1e-6 * std::abs(diag.front()))) break;
        off.push_back(c[2 * j + 1]);
    }
    if (diag.empty()) return {0.0, 0.0};
    off.resize(diag.size() - 1);
    return la::tridiag_extremes(diag, off);
}

}  // namespace cortiq::encode::cuda
