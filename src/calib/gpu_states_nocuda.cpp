// Without the CUDA backend there is no GPU calibration: one clear error.
#ifndef CORTIQ_HAVE_CUDA
#include "calib/gpu_states.hpp"
#include "core/error.hpp"
#include "core/gpu.hpp"
#include "model/gpu_model.hpp"

namespace cortiq::calib {

struct GpuStates::Impl {};

GpuStates::GpuStates(const model::Model&, const CalibSet&) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
GpuStates::~GpuStates() = default;
double GpuStates::load_seconds() const {
    return 0.0;
}
MatD GpuStates::gram(int, int64_t, std::string_view) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
MatD GpuStates::cross_gram(int, int64_t, std::string_view, GpuStates&, MatD*) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
void GpuStates::advance(int, int64_t) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
std::vector<MatF> GpuStates::hidden(int) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
std::vector<MatF> GpuStates::block_outputs(int, int64_t) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
GpuStates::DeviceSet GpuStates::hidden_on_device(int) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
GpuStates::DeviceSet GpuStates::block_outputs_on_device(int, int64_t) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
void GpuStates::free_block_outputs() {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
void GpuStates::set_linear(int64_t, std::string_view, const model::LinearWeights&) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
const float* GpuStates::final_hidden(int, int64_t) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
const float* GpuStates::head_logits(const float*, int64_t) {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}

}  // namespace cortiq::calib
#endif
