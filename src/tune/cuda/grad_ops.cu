// The element-wise operations and reductions of tune/cuda/grad_ops.hpp, each
// the device twin of the function of the same name in tune/grad_ops.cpp (the
// equations are written there). Row sums are taken in float64 as on the CPU.
#include <cmath>

#include "core/error.hpp"
#include "model/cuda/reduce.cuh"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

// the runtime's warp reductions (model/cuda/reduce.cuh)
using model::cuda::warp_max;
using model::cuda::warp_sum;

namespace {

constexpr int kThreads = 256;
constexpr int kRowsPerBlock = 4;  // warps per block for the per-row kernels

unsigned blocks_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

__global__ void scale_cols_kernel(const float* a, const float* s, int64_t rows, int64_t cols,
                                  float* out, bool accumulate) {
    const int64_t total = rows * cols;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float v = a[i] * s[i % cols];
        out[i] = accumulate ? out[i] + v : v;
    }
}

// acc_p[j] += Σ_i a_p[i, j] b_p[i, j] (· rs[i] when rs) for path p =
// blockIdx.y (a_p = a + p·sa, b_p = b + p·sb): 32 columns per block, 32 row
// phases summed in float64, then across the phases in shared memory.
__global__ void col_dots_kernel(const float* a, int64_t sa, const float* b, int64_t sb,
                                const float* rs, int64_t rows, int64_t cols, PathOut acc) {
    __shared__ double part[32][33];
    const int path = static_cast<int>(blockIdx.y);
    const float* ap = a + path * sa;
    const float* bp = b + path * sb;
    const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
    double s = 0;
    if (j < cols)
        for (int64_t i = threadIdx.y; i < rows; i += 32) {
            const double v = static_cast<double>(ap[i * cols + j]) * bp[i * cols + j];
            s += rs ? v * rs[i] : v;
        }
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < cols) {
        double t = 0;
        for (int p = 0; p < 32; ++p) t += part[p][threadIdx.x];
        acc.v[path][j] += static_cast<float>(t);
    }
}

void launch_col_dots(const Gpu& g, const float* a, int64_t sa, const float* b, int64_t sb,
                     const float* rs, const PathOut& acc, int paths, int64_t rows, int64_t cols) {
    if (rows == 0 || cols == 0) return;
    const dim3 grid(static_cast<unsigned>((cols + 31) / 32), static_cast<unsigned>(paths));
    col_dots_kernel<<<grid, dim3(32, 32), 0, g.stream()>>>(a, sa, b, sb, rs, rows, cols, acc);
    CUDA_LAUNCH_CHECK();
}

__global__ void add_into_kernel(float* y, const float* x, int64_t n) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] += x[i];
}

__global__ void add_bias_kernel(float* y, const float* b, int64_t rows, int64_t m) {
    const int64_t total = rows * m;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] += b[i % m];
}

// One warp per row.
__global__ void rmsnorm_forward_kernel(const float* x, int64_t rows, int64_t n, const float* w,
                                       float eps, float* y, float* rstd) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float* xr = x + r * n;
    double ss = 0;
    for (int64_t j = lane; j < n; j += 32) ss += static_cast<double>(xr[j]) * xr[j];
    ss = warp_sum(ss);
    const float inv = static_cast<float>(1.0 / sqrt(ss / static_cast<double>(n) + eps));
    if (lane == 0) rstd[r] = inv;
    for (int64_t j = lane; j < n; j += 32) y[r * n + j] = w[j] * (xr[j] * inv);
}

__global__ void rmsnorm_backward_kernel(const float* dy, const float* x, const float* w,
                                        const float* rstd, int64_t rows, int64_t n, float* dx) {
    const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (r >= rows) return;
    const float* xr = x + r * n;
    const float* dyr = dy + r * n;
    const float rs = rstd[r];
    double s = 0;  // Σ_j w_j dy_j x̂_j
    for (int64_t j = lane; j < n; j += 32) s += static_cast<double>(w[j]) * dyr[j] * (xr[j] * rs);
    s = warp_sum(s);
    const float mean = static_cast<float>(s / static_cast<double>(n));
    for (int64_t j = lane; j < n; j += 32) dx[r * n + j] = rs * (w[j] * dyr[j] - xr[j] * rs * mean);
}

// One thread per (row, head, pair j): sign +1 forward, −1 the transpose.
__global__ void rotate_kernel(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d,
                              int64_t rot, int64_t period, const float* cos, const float* sin,
                              float sign) {
    const int64_t half = rot / 2, total = rows * heads * half;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t j = t % half, h = (t / half) % heads, i = t / (half * heads);
        const int64_t c = (i % period) * half + j;
        float* xh = x + i * ld + h * d;
        const float a = xh[j], b = xh[j + half], cj = cos[c], sj = sign * sin[c];
        xh[j] = a * cj - b * sj;
        xh[j + half] = b * cj + a * sj;
    }
}

__global__ void query_gate_kernel(float* qg, float* q, float* gate, int64_t rows, int64_t heads,
                                  int64_t d, bool merge) {
    const int64_t total = rows * heads * d;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t j = t % d, rh = t / d;  // rh = row · heads + head
        float* src = qg + rh * 2 * d + j;
        if (merge) {
            src[0] = q[t];
            src[d] = gate[t];
        } else {
            q[t] = src[0];
            gate[t] = src[d];
        }
    }
}

__global__ void sigmoid_gate_kernel(const float* dy, const float* x, const float* gate, int64_t n,
                                    float* y_or_dx, float* dgate) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float sg = 1.0f / (1.0f + expf(-gate[i]));
        if (!dy) {
            y_or_dx[i] = x[i] * sg;
        } else {
            y_or_dx[i] = dy[i] * sg;
            dgate[i] = dy[i] * x[i] * sg * (1.0f - sg);
        }
    }
}

__global__ void swiglu_forward_kernel(const float* gate, const float* up, int64_t n, float* y) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}

__global__ void swiglu_backward_kernel(const float* dy, const float* gate, const float* up,
                                       int64_t n, float* dgate, float* dup) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float s = 1.0f / (1.0f + expf(-gate[i]));
        dgate[i] = dy[i] * up[i] * s * (1.0f + gate[i] * (1.0f - s));
        dup[i] = dy[i] * gate[i] * s;
    }
}

void col_dots_rs(const Gpu& g, const float* a, const float* b, const float* rs, int64_t rows,
                 int64_t cols, float* acc) {
    PathOut one;
    one.v[0] = acc;
    launch_col_dots(g, a, 0, b, 0, rs, one, 1, rows, cols);
}

unsigned row_blocks(int64_t rows) {
    return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

void ensure(DVec& b, int64_t n, cudaStream_t stream) {
    if (b.size() != n) b = DVec(n, stream);
}

void scale_cols(const Gpu& g, const float* a, const float* s, int64_t rows, int64_t cols,
                float* out, bool accumulate) {
    if (rows * cols == 0) return;
    scale_cols_kernel<<<blocks_for(rows * cols), kThreads, 0, g.stream()>>>(a, s, rows, cols, out,
                                                                            accumulate);
    CUDA_LAUNCH_CHECK();
}

void col_dots(const Gpu& g, const float* a, const float* b, int64_t rows, int64_t cols,
              float* acc) {
    col_dots_rs(g, a, b, nullptr, rows, cols, acc);
}

void col_dots_paths(const Gpu& g, const float* a, int64_t sa, const float* b, int64_t sb,
                    const PathOut& acc, int paths, int64_t rows, int64_t cols) {
    CORTIQ_ASSERT(paths >= 1 && paths <= kMaxBlrPaths, "a BLR layer of {} paths (1 to {})", paths,
                  kMaxBlrPaths);
    launch_col_dots(g, a, sa, b, sb, nullptr, acc, paths, rows, cols);
}

void add_into(const Gpu& g, float* y, const float* x, int64_t n) {
    if (n == 0) return;
    add_into_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(y, x, n);
    CUDA_LAUNCH_CHECK();
}

void add_bias(const Gpu& g, float* y, const float* b, int64_t rows, int64_t m) {
    if (rows * m == 0) return;
    add_bias_kernel<<<blocks_for(rows * m), kThreads, 0, g.stream()>>>(y, b, rows, m);
    CUDA_LAUNCH_CHECK();
}

void rmsnorm_forward(const Gpu& g, const float* x, int64_t rows, int64_t n, const float* w,
                     float eps, float* y, float* rstd) {
    if (rows == 0) return;
    rmsnorm_forward_kernel<<<row_blocks(rows), 32 * kRowsPerBlock, 0, g.stream()>>>(x, rows, n, w,
                                                                                    eps, y, rstd);
    CUDA_LAUNCH_CHECK();
}

void rmsnorm_backward(const Gpu& g, const float* dy, const float* x, const float* w,
                      const float* rstd, int64_t rows, int64_t n, float* dx, float* dw) {
    if (rows == 0) return;
    rmsnorm_backward_kernel<<<row_blocks(rows), 32 * kRowsPerBlock, 0, g.stream()>>>(dy, x, w, rstd,
                                                                                     rows, n, dx);
    CUDA_LAUNCH_CHECK();
    if (dw) col_dots_rs(g, dy, x, rstd, rows, n, dw);  // dw += Σ_rows dy ∘ x̂
}

void rope_forward(const Gpu& g, float* x, int64_t rows, int64_t ld, int64_t heads, int64_t d,
                  int64_t rot, int64_t period, const float* cos, const float* sin) {
    if (rows == 0) return;
    rotate_kernel<<<blocks_for(rows * heads * (rot / 2)), kThreads, 0, g.stream()>>>(
        x, rows, ld, heads, d, rot, period, cos, sin, 1.0f);
    CUDA_LAUNCH_CHECK();
}

void rope_backward(const Gpu& g, float* dx, int64_t rows, int64_t ld, int64_t heads, int64_t d,
                   int64_t rot, int64_t period, const float* cos, const float* sin) {
    if (rows == 0) return;
    rotate_kernel<<<blocks_for(rows * heads * (rot / 2)), kThreads, 0, g.stream()>>>(
        dx, rows, ld, heads, d, rot, period, cos, sin, -1.0f);
    CUDA_LAUNCH_CHECK();
}

void split_query_gate(const Gpu& g, const float* qg, int64_t rows, int64_t heads, int64_t d,
                      float* q, float* gate) {
    if (rows * heads * d == 0) return;
    query_gate_kernel<<<blocks_for(rows * heads * d), kThreads, 0, g.stream()>>>(
        const_cast<float*>(qg), q, gate, rows, heads, d, false);
    CUDA_LAUNCH_CHECK();
}

void merge_query_gate(const Gpu& g, const float* q, const float* gate, int64_t rows, int64_t heads,
                      int64_t d, float* qg) {
    if (rows * heads * d == 0) return;
    query_gate_kernel<<<blocks_for(rows * heads * d), kThreads, 0, g.stream()>>>(
        qg, const_cast<float*>(q), const_cast<float*>(gate), rows, heads, d, true);
    CUDA_LAUNCH_CHECK();
}

void sigmoid_gate_forward(const Gpu& g, const float* x, const float* gate, int64_t n, float* y) {
    if (n == 0) return;
    sigmoid_gate_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(nullptr, x, gate, n, y,
                                                                    nullptr);
    CUDA_LAUNCH_CHECK();
}

void sigmoid_gate_backward(const Gpu& g, const float* dy, const float* x, const float* gate,
                           int64_t n, float* dx, float* dgate) {
    if (n == 0) return;
    sigmoid_gate_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(dy, x, gate, n, dx, dgate);
    CUDA_LAUNCH_CHECK();
}

void swiglu_forward(const Gpu& g, const float* gate, const float* up, int64_t n, float* y) {
    if (n == 0) return;
    swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(gate, up, n, y);
    CUDA_LAUNCH_CHECK();
}

void swiglu_backward(const Gpu& g, const float* dy, const float* gate, const float* up, int64_t n,
                     float* dgate, float* dup) {
    if (n == 0) return;
    swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, g.stream()>>>(dy, gate, up, n, dgate, dup);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
