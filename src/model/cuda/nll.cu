// Fused log-softmax / NLL for perplexity: the T × vocab logits never leave
// the device, only one double per row does. One block per row: max, then
// Σ exp(l − max) in float per thread and float64 across threads (as
// model::logsumexp_rows sums float chunks in double).
#include "core/cuda/device.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/reduce.cuh"

namespace cortiq::model::cuda {

namespace {

constexpr int kThreads = 256;

__global__ void nll_kernel(const float* logits, const int32_t* tokens, int64_t T, int64_t vocab,
                           double* nll) {
    __shared__ float fscratch[32];
    __shared__ double dscratch[32];
    const int64_t r = blockIdx.x;
    if (r % T == T - 1) {  // the last row of a sequence predicts nothing
        if (threadIdx.x == 0) nll[r] = 0;
        return;
    }
    const float* l = logits + r * vocab;
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) mx = fmaxf(mx, l[j]);
    mx = block_max(mx, fscratch);
    float part = 0;
    for (int64_t j = threadIdx.x; j < vocab; j += kThreads) part += expf(l[j] - mx);
    const double sum = block_sum(static_cast<double>(part), dscratch);
    if (threadIdx.x == 0) nll[r] = static_cast<double>(mx) + log(sum) - l[tokens[r + 1]];
}

}  // namespace

void next_token_nll(const float* logits, const int32_t* tokens, int64_t rows, int64_t T,
                    int64_t vocab, double* nll, cudaStream_t stream) {
    if (rows == 0) return;
    nll_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, tokens, T, vocab, nll);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
