// Activations to fp16 for the tensor cores (the batch path of
// model/cuda/blr_linear.cu), a per-vector scale folded in (g, or ℓ) and each
// row scaled by a power of two so that its largest value lies in [2^14, 2^15):
// LLM activations can pass fp16's 65504, and a power of two is undone exactly
// in the epilogue. One block per row: the row's max, then the row again.
#include "core/cuda/device.hpp"
#include "model/cuda/blr_batch.hpp"

namespace cortiq::model::cuda {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float value(const float* in, const __half* vec, float s, int64_t j) {
    return in[j] * __half2float(vec[j]) * s;
}

// The max over the block of each thread's v (every thread gets it).
__device__ float block_max(float v) {
    __shared__ float part[kThreads / 32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    v = part[0];
    for (int w = 1; w < kThreads / 32; ++w) v = fmaxf(v, part[w]);
    return v;
}

__global__ void __launch_bounds__(kThreads)
    rows_to_f16_kernel(const float* __restrict__ in, int64_t ld_in, const __half* __restrict__ vec,
                       const float* __restrict__ in_scale, int64_t cols, __half* __restrict__ out,
                       int64_t ld_out, float* __restrict__ inv) {
    const int64_t i = blockIdx.x;
    const float* row = in + i * ld_in;
    const float s = in_scale ? in_scale[i] : 1.0f;
    float mx = 0.0f;
    for (int64_t j = threadIdx.x; j < cols; j += kThreads)
        mx = fmaxf(mx, fabsf(value(row, vec, s, j)));
    mx = block_max(mx);
    // mx = f·2^E, f ∈ [0.5, 1): mx·2^(15−E) ∈ [2^14, 2^15); the clamp keeps
    // 2^±e a normal float.
    int e = 0;
    if (mx > 0.0f && isfinite(mx)) {
        int E = 0;
        frexpf(mx, &E);
        e = min(max(15 - E, -100), 100);
    }
    const float up = ldexpf(s, e);
    __half* o = out + i * ld_out;
    for (int64_t j = threadIdx.x; j < ld_out; j += kThreads)
        o[j] = j < cols ? __float2half_rn(value(row, vec, up, j)) : __float2half_rn(0.0f);
    if (threadIdx.x == 0) inv[i] = ldexpf(1.0f, -e);
}

}  // namespace

void rows_to_f16(const float* in, int64_t ld_in, const __half* vec, const float* in_scale,
                 int64_t rows, int64_t cols, __half* out, int64_t ld_out, float* inv,
                 cudaStream_t stream) {
    if (rows == 0) return;
    rows_to_f16_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
        in, ld_in, vec, in_scale, cols, out, ld_out, inv);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
