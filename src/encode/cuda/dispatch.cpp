// GPU availability for the CUDA encoder.
#include "encode/dispatch.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include "core/error.hpp"

namespace cortiq::encode {

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

}  // namespace cortiq::encode
