// Appends keys and values to the KV cache at positions read from the device
// (a captured decode step replays the same launch for every token) or given
// by the host; float32 or fp16 cache. One thread per value, consecutive
// threads on consecutive values of a row: coalesced reads and writes.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "core/error.hpp"
#include "model/cuda/kernels.hpp"
#include "model/cuda/pdl.cuh"

namespace cortiq::model::cuda {

namespace {

__device__ __forceinline__ void put(float* p, float x) {
    *p = x;
}
__device__ __forceinline__ void put(__half* p, float x) {
    *p = __float2half_rn(x);
}

template <class KV>
__global__ void kv_store_kernel(const float* k, const float* v, int64_t rows, int64_t T,
                                int64_t kv_dim, KV* kc, KV* vc, int64_t capacity, int64_t pos0,
                                const int32_t* pos) {
    pdl_start();
    const int64_t total = rows * kv_dim;
    for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; t < total;
         t += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = t / kv_dim, c = t % kv_dim, b = r / T;
        const int64_t p = (pos ? static_cast<int64_t>(pos[b]) : pos0) + r % T;
        const int64_t dst = (b * capacity + p) * kv_dim + c;
        put(kc + dst, k[t]);
        put(vc + dst, v[t]);
    }
}

}  // namespace

void kv_store(const float* k, const float* v, int64_t batch, int64_t T, int64_t kv_dim,
              const KvCacheView& cache, int64_t pos0, const int32_t* pos, cudaStream_t stream) {
    const bool f16 = cache.k_f16 != nullptr;
    CORTIQ_ASSERT(f16 ? cache.v_f16 && !cache.k_f32 : cache.k_f32 && cache.v_f32,
                  "a KV cache is float32 or fp16");
    CORTIQ_ASSERT(pos || pos0 + T <= cache.capacity, "positions up to {} in a cache of {}",
                  pos0 + T, cache.capacity);
    const int64_t total = batch * T * kv_dim;
    if (total == 0) return;
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65536)));
    if (f16)
        launch_pdl(kv_store_kernel<__half>, grid, 256, 0, stream, k, v, batch * T, T, kv_dim,
                   cache.k_f16, cache.v_f16, cache.capacity, pos0, pos);
    else
        launch_pdl(kv_store_kernel<float>, grid, 256, 0, stream, k, v, batch * T, T, kv_dim,
                   cache.k_f32, cache.v_f32, cache.capacity, pos0, pos);
}

}  // namespace cortiq::model::cuda
