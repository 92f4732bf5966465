#include "runtime_args.hpp"

#include "core/error.hpp"

namespace cortiq::cli {

model::Device runtime_device(const std::string& device) {
    const model::Device d = model::parse_device(device);
    CORTIQ_CHECK(d == model::Device::cpu || model::gpu_available(), "--device gpu: {}",
                 model::gpu_unavailable_reason());
    return d;
}

}  // namespace cortiq::cli
