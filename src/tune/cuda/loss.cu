// The losses of tuning on the device: the block loss of tune_block (the
// squared error to the targets and its reference Σ‖y − x‖², summed in
// float64, and the gradient scale · (out − y) that the backward starts from),
// and distillation's embedding lookup and KL divergence to the teacher.
#include <algorithm>

#include "tune/cuda/block_tune.hpp"
#include "tune/cuda/grad_ops.hpp"

namespace cortiq::tune::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void block_loss_kernel(const float* out, const float* y, const float* x, int64_t n,
                                  double* sums, float scale, float* dout) {
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
    if (!sums) return;  // the whole block leaves together: no sync below is reached
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
        atomicAdd(sums, e);
        atomicAdd(sums + 1, r);
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

// One block per row: lse = log Σ exp(l), KL = Σ p_t (log p_t − (l − lse)),
// dl = scale · (exp(l − lse) − p_t) — the CPU's formula, its sums in float64.
__global__ void kl_kernel(const float* logits, const float* tlogp, int64_t vocab, float scale,
                          double* sum, float* dlogits) {
    __shared__ double dpart[kThreads / 32];
    __shared__ float fpart[kThreads / 32];
    const int64_t row = blockIdx.x;
    const float* l = logits + row * vocab;
    const float* t = tlogp + row * vocab;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) mx = fmaxf(mx, l[j]);
    mx = block_reduce(mx, fpart, [](float a, float b) { return fmaxf(a, b); });
    double se = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads)
        se += exp(static_cast<double>(l[j] - mx));
    se = block_reduce(se, dpart, [](double a, double b) { return a + b; });
    const double lse = mx + log(se);
    double kl = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) {
        const double pt = exp(static_cast<double>(t[j]));
        const double ls = l[j] - lse;
        kl += pt * (t[j] - ls);
        if (dlogits) dlogits[row * vocab + j] = static_cast<float>(scale * (exp(ls) - pt));
    }
    kl = block_reduce(kl, dpart, [](double a, double b) { return a + b; });
    if (threadIdx.x == 0 && sum) atomicAdd(sum, kl);
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
    kl_kernel<<<static_cast<unsigned>(rows), kThreads, 0, g.stream()>>>(logits, teacher_logp, vocab,
                                                                        scale, sum, dlogits);
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
    block_loss_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, g.stream()>>>(
        out, y, x, n, sums, scale, dout);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
