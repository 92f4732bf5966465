// The losses of tuning on the device: the block loss of tune_block (the
// squared error to the targets and its reference Σ‖y − x‖², summed in
// float64, and the gradient scale · (out − y) that the backward starts from),
// and distillation's embedding lookup and KL divergence to the teacher.
// Every sum is taken in an order fixed by the sizes alone: each block writes
// its partial sum, and one block adds the partials in index order
// (ordered_sum_kernel), so a loss, and the epoch it chooses, do not depend on
// which block finishes first (no floating-point atomics).
#include <algorithm>

#include "tune/cuda/block_tune.hpp"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

namespace {

constexpr int kThreads = 256;

// parts[k · nparts + i] is block i's partial sum of quantity k.
__global__ void block_loss_kernel(const float* out, const float* y, const float* x, int64_t n,
                                  double* parts, float scale, float* dout) {
    __shared__ double part[2][kThreads / 32];
    double err = 0, ref = 0;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const float e = out[i] - y[i];
        if (dout) dout[i] = scale * e;
        const double de = static_cast<double>(out[i]) - y[i], dr = static_cast<double>(y[i]) - x[i];
        err += de * de;
        ref += dr * dr;
    }
    if (!parts) return;  // the whole block leaves together: no sync below is reached
    for (int o = 16; o > 0; o >>= 1) {
        err += __shfl_xor_sync(0xffffffffu, err, o);
        ref += __shfl_xor_sync(0xffffffffu, ref, o);
    }
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane == 0) {
        part[0][warp] = err;
        part[1][warp] = ref;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        double e = 0, r = 0;
        for (int w = 0; w < kThreads / 32; ++w) {
            e += part[0][w];
            r += part[1][w];
        }
        parts[blockIdx.x] = e;
        parts[gridDim.x + blockIdx.x] = r;
    }
}

// sums[k] += Σ_i parts[k · n + i] for k < count, one block of kThreads:
// thread t adds i = t, t + kThreads, ... in order, then the threads' sums
// meet in a fixed tree.
__global__ void ordered_sum_kernel(const double* parts, int64_t n, int count, double* sums) {
    __shared__ double tree[kThreads];
    for (int k = 0; k < count; ++k) {
        double v = 0;
        for (int64_t i = threadIdx.x; i < n; i += kThreads) v += parts[k * n + i];
        tree[threadIdx.x] = v;
        __syncthreads();
        for (int half = kThreads / 2; half > 0; half /= 2) {
            if (threadIdx.x < half) tree[threadIdx.x] += tree[threadIdx.x + half];
            __syncthreads();
        }
        if (threadIdx.x == 0) sums[k] += tree[0];
        __syncthreads();  // tree is refilled for the next k
    }
}

// The sum of v over the block, in every thread (blockDim.x = kThreads).
template <class T, class Op>
__device__ T block_reduce(T v, T* part, Op op) {
    for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    __syncthreads();  // part may still be read by the previous reduction
    if (lane == 0) part[warp] = v;
    __syncthreads();
    T r = part[0];
    for (int w = 1; w < kThreads / 32; ++w) r = op(r, part[w]);
    return r;
}

// The row's max and Σ exp(l − max) over the block (blockDim.x = kThreads),
// the sum in float64, in every thread.
__device__ void row_max_and_sum(const float* l, int64_t vocab, float* fpart, double* dpart,
                                float& mx, double& se) {
    mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) mx = fmaxf(mx, l[j]);
    mx = block_reduce(mx, fpart, [](float a, float b) { return fmaxf(a, b); });
    se = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads)
        se += exp(static_cast<double>(l[j] - mx));
    se = block_reduce(se, dpart, [](double a, double b) { return a + b; });
}

// One block per row: lse = log Σ exp(l), KL = Σ p_t (log p_t − (l − lse)),
// dl = scale · (exp(l − lse) − p_t) — the CPU's formula, its sums in float64;
// the row's KL goes to row_kl[row].
__global__ void kl_kernel(const float* logits, const float* tlogp, int64_t vocab, float scale,
                          double* row_kl, float* dlogits) {
    __shared__ double dpart[kThreads / 32];
    __shared__ float fpart[kThreads / 32];
    const int64_t row = blockIdx.x;
    const float* l = logits + row * vocab;
    const float* t = tlogp + row * vocab;
    float mx;
    double se;
    row_max_and_sum(l, vocab, fpart, dpart, mx, se);
    const double lse = mx + log(se);
    double kl = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
        const double pt = exp(static_cast<double>(t[j]));
        const double ls = l[j] - lse;
        kl += pt * (t[j] - ls);
        if (dlogits) dlogits[row * vocab + j] = static_cast<float>(scale * (exp(ls) - pt));
    }
    kl = block_reduce(kl, dpart, [](double a, double b) { return a + b; });
    if (threadIdx.x == 0 && row_kl) row_kl[row] = kl;
}

// One block per row: out = l − (max + log Σ exp(l − max)), the sum in
// float64 — log_softmax_rows (tune/distill.hpp) on the device.
__global__ void log_softmax_kernel(const float* logits, int64_t vocab, float* out) {
    __shared__ double dpart[kThreads / 32];
    __shared__ float fpart[kThreads / 32];
    const int64_t row = blockIdx.x;
    const float* l = logits + row * vocab;
    float mx;
    double se;
    row_max_and_sum(l, vocab, fpart, dpart, mx, se);
    const float lse = mx + static_cast<float>(log(se));
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) out[row * vocab + j] = l[j] - lse;
}

__global__ void embedding_kernel(const float* table, int64_t dim, const int32_t* tokens,
                                 int64_t rows, float* out) {
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * dim;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        out[i] = table[static_cast<int64_t>(tokens[i / dim]) * dim + i % dim];
}

}  // namespace

void kl_loss(const Gpu& g, const float* logits, const float* teacher_logp, int64_t rows,
             int64_t vocab, float scale, double* sum, float* dlogits) {
    if (rows == 0) return;
    cortiq::cuda::DeviceBuffer<double> row_kl(sum ? rows : 0, g.stream());
    kl_kernel<<<static_cast<unsigned>(rows), kThreads, 0, g.stream()>>>(
        logits, teacher_logp, vocab, scale, sum ? row_kl.get() : nullptr, dlogits);
    CUDA_LAUNCH_CHECK();
    if (!sum) return;
    ordered_sum_kernel<<<1, kThreads, 0, g.stream()>>>(row_kl.get(), rows, 1, sum);
    CUDA_LAUNCH_CHECK();
}

void log_softmax_rows(const Gpu& g, const float* logits, int64_t rows, int64_t vocab, float* out) {
    if (rows == 0) return;
    log_softmax_kernel<<<static_cast<unsigned>(rows), kThreads, 0, g.stream()>>>(logits, vocab,
                                                                                 out);
    CUDA_LAUNCH_CHECK();
}

void embedding_forward(const Gpu& g, const float* table, int64_t dim, const int32_t* tokens,
                       int64_t rows, float* out) {
    if (rows == 0) return;
    const int64_t blocks = std::min<int64_t>((rows * dim + kThreads - 1) / kThreads, 4096);
    embedding_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, g.stream()>>>(table, dim, tokens,
                                                                                 rows, out);
    CUDA_LAUNCH_CHECK();
}

void block_loss(const Gpu& g, const float* out, const float* y, const float* x, int64_t n,
                double* sums, float scale, float* dout) {
    if (n == 0) return;
    const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 1024);
    cortiq::cuda::DeviceBuffer<double> parts(sums ? 2 * blocks : 0, g.stream());
    block_loss_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, g.stream()>>>(
        out, y, x, n, sums ? parts.get() : nullptr, scale, dout);
    CUDA_LAUNCH_CHECK();
    if (!sums) return;
    ordered_sum_kernel<<<1, kThreads, 0, g.stream()>>>(parts.get(), blocks, 2, sums);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
