// Whether a GPU is usable (core/gpu.hpp), for a build with CUDA.
#include "core/gpu.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace cortiq {

std::string gpu_unavailable_reason() {
    int count = 0;
    const cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return fmt::format("no CUDA device visible ({})", cudaGetErrorString(e));
    if (count == 0) return "no CUDA device visible";
    return "";
}

bool gpu_available() {
    return gpu_unavailable_reason().empty();
}

int gpu_count() {
    int count = 0;
    return cudaGetDeviceCount(&count) == cudaSuccess ? count : 0;
}

void use_gpu(int id) {
    const int count = gpu_count();
    CORTIQ_CHECK(id >= 0 && id < count, "GPU {} does not exist: {} visible", id, count);
    const cudaError_t e = cudaSetDevice(id);
    CORTIQ_CHECK(e == cudaSuccess, "cannot use GPU {}: {}", id, cudaGetErrorString(e));
}

int64_t gpu_total_bytes() {
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
        (void)cudaGetLastError();  // a report, not a failure
        return 0;
    }
    return static_cast<int64_t>(total);
}

int64_t gpu_pool_peak_bytes() {
    int64_t total = 0;
    for (int d = 0; d < gpu_count(); ++d) {
        cudaMemPool_t pool = nullptr;
        uint64_t high = 0;  // the attribute is a cuuint64_t (cuda.h): 64 bits
        if (cudaDeviceGetDefaultMemPool(&pool, d) != cudaSuccess ||
            cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemHigh, &high) != cudaSuccess) {
            (void)cudaGetLastError();  // a report, not a failure
            continue;
        }
        total += static_cast<int64_t>(high);
    }
    return total;
}

}  // namespace cortiq
