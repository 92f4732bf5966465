// Without CUDA no GPU is usable (core/gpu.hpp).
#ifndef CORTIQ_HAVE_CUDA
#include "core/gpu.hpp"

namespace cortiq {

bool gpu_available() {
    return false;
}
std::string gpu_unavailable_reason() {
    return "this cortiq was built without CUDA";
}

}  // namespace cortiq
#endif
