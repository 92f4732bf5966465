#include "runtime_args.hpp"

#include "core/error.hpp"

namespace cortiq::cli {

model::Device runtime_device(const std::string& device) {
    const model::Device d = model::parse_device(device);
    CORTIQ_CHECK(d == model::Device::cpu || model::gpu_available(), "--device gpu: {}",
                 model::gpu_unavailable_reason());
    return d;
}

void add_no_verify(CLI::App* cmd, bool& no_verify) {
    cmd->add_flag("--no-verify", no_verify,
                  "load the file without checking its checksums (a damaged file then runs)");
}

}  // namespace cortiq::cli
