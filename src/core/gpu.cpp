// Without CUDA no GPU is usable (core/gpu.hpp).
#ifndef CORTIQ_HAVE_CUDA
#include "core/gpu.hpp"

#include "core/error.hpp"

namespace cortiq {

bool gpu_available() {
    return false;
}
std::string gpu_unavailable_reason() {
    return "this cortiq was built without CUDA";
}
int gpu_count() {
    return 0;
}
void use_gpu(int id) {
    CORTIQ_FAIL("GPU {}: {}", id, gpu_unavailable_reason());
}
int64_t gpu_pool_peak_bytes() {
    return 0;
}
int64_t gpu_total_bytes() {
    return 0;
}

}  // namespace cortiq
#endif
