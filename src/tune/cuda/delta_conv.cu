// The element-wise and per-row operations of tune/cuda/delta_grad_ops.hpp
// (everything but the delta rule), each the device twin of the function of
// the same name in tune/delta_grad_ops.cpp, where the equations are written.
// Row sums are taken in float64 as there. The parameter gradients (the
// convolution's and the gated norm's weights) are sums over every row: each
// block of a first kernel sums a slab of kSlabRows rows into a float64
// partial, a second adds the slabs in order into dw, so the result does not
// depend on scheduling.
#include <algorithm>
#include <cmath>

#include "core/error.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/reduce.cuh"
#include "tune/cuda/delta_grad_ops.hpp"

namespace cortiq::tune::cuda {

using model::cuda::warp_sum;

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 4;  // warps per block for the per-row kernels
constexpr int kMaxKernel = 8;     // convolution width at most
constexpr int kSlabRows = 256;    // rows per partial of a parameter gradient
constexpr int kPhases = 8;        // row phases per column in the gradient kernels

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(std::min<int64_t>(b, 65535 * 16));
}

unsigned row_blocks(int64_t rows) {
    return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

__device__ __forceinline__ float sigmoidf(float x) {
    return 1.0f / (1.0f + expf(-x));
}
// silu as the runtime's (model/cuda/delta_conv.cu)
__device__ __forceinline__ float siluf(float x) {
    return x / (1.0f + expf(-x));
}
// silu'(x) = σ(x) (1 + x (1 − σ(x)))
__device__ __forceinline__ float silu_gradf(float x) {
    const float s = sigmoidf(x);
    return s * (1.0f + x * (1.0f - s));
}

// ── convolution ──────────────────────────────────────────────────────────────
// pre[t, c] = Σ_k w[c·K + k] x[t − K + 1 + k, c], y = silu(pre); one thread
// per (row, channel), consecutive threads on consecutive channels (coalesced).
__global__ void conv_forward_kernel(const float* x, int64_t rows, int64_t L, int64_t C,
                                    const float* w, int K, float* pre, float* y) {
    const int64_t total = rows * C;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / C, c = i % C, t = r % L;
        float acc = 0;  // the taps in the CPU's order; rows before the window's first skipped
        for (int64_t k = t < K - 1 ? K - 1 - t : 0; k < K; ++k)
            acc += w[c * K + k] * x[(r - K + 1 + k) * C + c];
        pre[i] = acc;
        y[i] = siluf(acc);
    }
}

// dx[t, c] = Σ_k w[c·K + k] dpre[t + K − 1 − k, c], dpre = dy ∘ silu'(pre)
// recomputed per tap (rows past the window's end absent).
__global__ void conv_dx_kernel(const float* dy, const float* pre, int64_t rows, int64_t L,
                               int64_t C, const float* w, int K, float* dx) {
    const int64_t total = rows * C;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / C, c = i % C, t = r % L;
        float acc = 0;
        for (int64_t k = t + K > L ? t + K - L : 0; k < K; ++k) {
            const int64_t src = (r + K - 1 - k) * C + c;
            acc += w[c * K + k] * (dy[src] * silu_gradf(pre[src]));
        }
        dx[i] = acc;
    }
}

// The slab blockIdx.y of rows of dw[c·K + k] = Σ_t dpre[t, c] x[t − K + 1 + k, c]:
// threadIdx.x a channel, threadIdx.y a row phase; part: slabs × C × K.
__global__ void conv_dw_kernel(const float* dy, const float* x, const float* pre, int64_t rows,
                               int64_t L, int64_t C, int K, double* part) {
    __shared__ double sum[kPhases][kMaxKernel][32];
    const int64_t c = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kSlabRows;
    const int64_t r1 = rows < r0 + kSlabRows ? rows : r0 + kSlabRows;
    double acc[kMaxKernel] = {};
    if (c < C)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += kPhases) {
            const int64_t t = r % L;
            const double dp = dy[r * C + c] * silu_gradf(pre[r * C + c]);
#pragma unroll
            for (int k = 0; k < kMaxKernel; ++k)
                if (k < K && t - K + 1 + k >= 0) acc[k] += dp * x[(r - K + 1 + k) * C + c];
        }
#pragma unroll
    for (int k = 0; k < kMaxKernel; ++k) sum[threadIdx.y][k][threadIdx.x] = acc[k];
    __syncthreads();
    if (threadIdx.y != 0 || c >= C) return;
    for (int k = 0; k < K; ++k) {
        double s = 0;
        for (int p = 0; p < kPhases; ++p) s += sum[p][k][threadIdx.x];
        part[(blockIdx.y * C + c) * K + k] = s;
    }
}

// dw[j] += Σ_s part[s · n + j], the slabs in order.
__global__ void add_slabs_kernel(const double* part, int64_t slabs, int64_t n, float* dw) {
    for (int64_t j = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; j < n;
         j += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        double s = 0;
        for (int64_t p = 0; p < slabs; ++p) s += part[p * n + j];
        dw[j] += static_cast<float>(s);
    }
}

// ── L2 normalisation, one warp per (row, head) ─────────────────────────────────
__global__ void l2norm_forward_kernel(const float* x, int64_t pairs, int64_t ld, int64_t heads,
                                      int64_t d, float eps, float* y, float* inv) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (i >= pairs) return;  // whole warps leave
    const int64_t off = (i / heads) * ld + (i % heads) * d;
    double ss = 0;
    for (int64_t j = lane; j < d; j += 32) ss += static_cast<double>(x[off + j]) * x[off + j];
    ss = warp_sum(ss);
    const float r = static_cast<float>(1.0 / sqrt(ss + eps));
    if (lane == 0) inv[i] = r;
    for (int64_t j = lane; j < d; j += 32) y[off + j] = x[off + j] * r;  // y may be x
}

// dx = inv (dy − y (y · dy)); the dot first, each lane rewriting what it read, so dx may be dy.
__global__ void l2norm_backward_kernel(const float* dy, const float* y, const float* inv,
                                       int64_t pairs, int64_t ld, int64_t heads, int64_t d,
                                       float* dx) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (i >= pairs) return;
    const int64_t off = (i / heads) * ld + (i % heads) * d;
    double dot = 0;
    for (int64_t j = lane; j < d; j += 32) dot += static_cast<double>(y[off + j]) * dy[off + j];
    const float s = static_cast<float>(warp_sum(dot)), r = inv[i];
    for (int64_t j = lane; j < d; j += 32) dx[off + j] = r * (dy[off + j] - y[off + j] * s);
}

// ── gates, one thread per (row, value head) ───────────────────────────────────
// torch's softplus: the identity above it (as the runtime's forward)
constexpr float kSoftplusThreshold = 20.0f;

// da = dg · (−e^{a_log}) · σ(z) (1 above the threshold), db = dβ · β (1 − β).
__global__ void gates_backward_kernel(const float* dg, const float* dbeta, const float* a,
                                      const float* beta, int64_t n, int64_t heads,
                                      const float* a_log, const float* dt_bias, float* da,
                                      float* db) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t h = i % heads;
        const float z = a[i] + dt_bias[h];
        const float ds = z > kSoftplusThreshold ? 1.0f : sigmoidf(z);
        da[i] = dg[i] * -expf(a_log[h]) * ds;
        db[i] = dbeta[i] * beta[i] * (1.0f - beta[i]);
    }
}

// ── gated RMSNorm, one warp per row ────────────────────────────────────────────
// y = w ∘ (x · rstd) ∘ silu(z), rstd = 1/√(mean x² + eps)
__global__ void rmsnorm_gated_forward_kernel(const float* x, const float* z, int64_t rows,
                                             int64_t n, const float* w, float eps, float* y,
                                             float* rstd) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + r * n, *zr = z + r * n;
    double ss = 0;
    for (int64_t j = lane; j < n; j += 32) ss += static_cast<double>(xr[j]) * xr[j];
    ss = warp_sum(ss);
    const float inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
    if (lane == 0) rstd[r] = inv;
    for (int64_t j = lane; j < n; j += 32) y[r * n + j] = w[j] * (xr[j] * inv) * siluf(zr[j]);
}

// With x̂ = x · rstd and e = dy ∘ w ∘ silu(z) (the gradient of x̂):
//   dz = dy ∘ w ∘ x̂ ∘ silu'(z),  dx = rstd (e − x̂ mean(e ∘ x̂))
__global__ void rmsnorm_gated_backward_kernel(const float* dy, const float* x, const float* z,
                                              const float* w, const float* rstd, int64_t rows,
                                              int64_t n, float* dx, float* dz) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float *xr = x + r * n, *zr = z + r * n, *dyr = dy + r * n;
    const float rs = rstd[r];
    double s = 0;
    for (int64_t j = lane; j < n; j += 32) {
        const float xh = xr[j] * rs;
        s += static_cast<double>(dyr[j] * w[j] * siluf(zr[j])) * xh;
        dz[r * n + j] = dyr[j] * w[j] * xh * silu_gradf(zr[j]);
    }
    const float mean = static_cast<float>(warp_sum(s) / static_cast<double>(n));
    for (int64_t j = lane; j < n; j += 32)
        dx[r * n + j] = rs * (dyr[j] * w[j] * siluf(zr[j]) - xr[j] * rs * mean);
}

// The slab blockIdx.y of dw[j] = Σ_rows dy ∘ x̂ ∘ silu(z) (part: slabs × n).
__global__ void rmsnorm_gated_dw_kernel(const float* dy, const float* x, const float* z,
                                        const float* rstd, int64_t rows, int64_t n, double* part) {
    __shared__ double sum[kPhases][32];
    const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
    const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kSlabRows;
    const int64_t r1 = rows < r0 + kSlabRows ? rows : r0 + kSlabRows;
    double acc = 0;
    if (j < n)
        for (int64_t r = r0 + threadIdx.y; r < r1; r += kPhases) {
            const int64_t e = r * n + j;
            acc += static_cast<double>(dy[e] * (x[e] * rstd[r]) * siluf(z[e]));
        }
    sum[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y != 0 || j >= n) return;
    double s = 0;
    for (int p = 0; p < kPhases; ++p) s += sum[p][threadIdx.x];
    part[blockIdx.y * n + j] = s;
}

int64_t slabs_for(int64_t rows) {
    return (rows + kSlabRows - 1) / kSlabRows;
}

// dw (n) += the slabs of part (slabs × n).
void add_slabs(const Gpu& g, const DeviceBuffer<double>& part, int64_t slabs, int64_t n,
               float* dw) {
    add_slabs_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(part.get(), slabs, n, dw);
    CUDA_LAUNCH_CHECK();
}

}  // namespace

void conv_silu_forward(const Gpu& g, const float* x, int64_t windows, int64_t L, int64_t C,
                       const float* w, int64_t K, float* pre, float* y) {
    CORTIQ_ASSERT(K >= 1 && K <= kMaxKernel && C > 0, "conv: width {} (at most {}), {} channels", K,
                  kMaxKernel, C);
    const int64_t rows = windows * L;
    if (rows == 0) return;
    conv_forward_kernel<<<blocks_for(rows * C), kThreads, 0, g.stream()>>>(
        x, rows, L, C, w, static_cast<int>(K), pre, y);
    CUDA_LAUNCH_CHECK();
}

void conv_silu_backward(const Gpu& g, const float* dy, const float* x, const float* pre,
                        int64_t windows, int64_t L, int64_t C, const float* w, int64_t K, float* dx,
                        float* dw) {
    CORTIQ_ASSERT(K >= 1 && K <= kMaxKernel && C > 0, "conv: width {} (at most {}), {} channels", K,
                  kMaxKernel, C);
    const int64_t rows = windows * L;
    if (rows == 0) return;
    conv_dx_kernel<<<blocks_for(rows * C), kThreads, 0, g.stream()>>>(dy, pre, rows, L, C, w,
                                                                      static_cast<int>(K), dx);
    CUDA_LAUNCH_CHECK();
    if (!dw) return;
    const int64_t slabs = slabs_for(rows);
    CORTIQ_ASSERT(slabs <= 65535, "conv: {} rows", rows);
    DeviceBuffer<double> part(slabs * C * K, g.stream());
    const dim3 grid(static_cast<unsigned>((C + 31) / 32), static_cast<unsigned>(slabs));
    conv_dw_kernel<<<grid, dim3(32, kPhases), 0, g.stream()>>>(dy, x, pre, rows, L, C,
                                                               static_cast<int>(K), part.get());
    CUDA_LAUNCH_CHECK();
    add_slabs(g, part, slabs, C * K, dw);
}

void l2norm_forward(const Gpu& g, const float* x, int64_t rows, int64_t ld, int64_t heads,
                    int64_t d, float eps, float* y, float* inv) {
    const int64_t pairs = rows * heads;
    if (pairs == 0) return;
    l2norm_forward_kernel<<<row_blocks(pairs), 32 * kRowsPerBlock, 0, g.stream()>>>(
        x, pairs, ld, heads, d, eps, y, inv);
    CUDA_LAUNCH_CHECK();
}

void l2norm_backward(const Gpu& g, const float* dy, const float* y, const float* inv, int64_t rows,
                     int64_t ld, int64_t heads, int64_t d, float* dx) {
    const int64_t pairs = rows * heads;
    if (pairs == 0) return;
    l2norm_backward_kernel<<<row_blocks(pairs), 32 * kRowsPerBlock, 0, g.stream()>>>(
        dy, y, inv, pairs, ld, heads, d, dx);
    CUDA_LAUNCH_CHECK();
}

// The runtime's forward (model/cuda/delta_gates.cu), the same float32 operations.
void delta_gates_forward(const Gpu& g, const float* a, const float* b, int64_t rows, int64_t heads,
                         const float* a_log, const float* dt_bias, float* gate, float* beta) {
    model::cuda::delta_gates(a, b, rows, heads, a_log, dt_bias, gate, beta, g.stream());
}

void delta_gates_backward(const Gpu& g, const float* dgate, const float* dbeta, const float* a,
                          const float* beta, int64_t rows, int64_t heads, const float* a_log,
                          const float* dt_bias, float* da, float* db) {
    const int64_t n = rows * heads;
    if (n == 0) return;
    gates_backward_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(
        dgate, dbeta, a, beta, n, heads, a_log, dt_bias, da, db);
    CUDA_LAUNCH_CHECK();
}

void rmsnorm_gated_forward(const Gpu& g, const float* x, const float* z, int64_t rows, int64_t n,
                           const float* w, float eps, float* y, float* rstd) {
    if (rows == 0) return;
    rmsnorm_gated_forward_kernel<<<row_blocks(rows), 32 * kRowsPerBlock, 0, g.stream()>>>(
        x, z, rows, n, w, eps, y, rstd);
    CUDA_LAUNCH_CHECK();
}

void rmsnorm_gated_backward(const Gpu& g, const float* dy, const float* x, const float* z,
                            const float* w, const float* rstd, int64_t rows, int64_t n, float* dx,
                            float* dz, float* dw) {
    if (rows == 0) return;
    rmsnorm_gated_backward_kernel<<<row_blocks(rows), 32 * kRowsPerBlock, 0, g.stream()>>>(
        dy, x, z, w, rstd, rows, n, dx, dz);
    CUDA_LAUNCH_CHECK();
    if (!dw) return;
    const int64_t slabs = slabs_for(rows);
    CORTIQ_ASSERT(slabs <= 65535, "gated norm: {} rows", rows);
    DeviceBuffer<double> part(slabs * n, g.stream());
    const dim3 grid(static_cast<unsigned>((n + 31) / 32), static_cast<unsigned>(slabs));
    rmsnorm_gated_dw_kernel<<<grid, dim3(32, kPhases), 0, g.stream()>>>(dy, x, z, rstd, rows, n,
                                                                        part.get());
    CUDA_LAUNCH_CHECK();
    add_slabs(g, part, slabs, n, dw);
}

}  // namespace cortiq::tune::cuda
