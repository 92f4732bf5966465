// Whether a GPU is usable (core/gpu.hpp), for a build with CUDA.
#include "core/gpu.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

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

}  // namespace cortiq
