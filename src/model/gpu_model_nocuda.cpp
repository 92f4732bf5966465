// Without the CUDA backend a GpuModel cannot be made: one clear error, the
// same as every other --device gpu request.
#ifndef CORTIQ_HAVE_CUDA
#include "core/error.hpp"
#include "model/gpu_model.hpp"

namespace cortiq::model {

struct GpuModel::Impl {};

namespace {
[[noreturn]] void no_gpu() {
    CORTIQ_FAIL("--device gpu: {}", gpu_unavailable_reason());
}
}  // namespace

GpuModel::GpuModel(const Model&, const GpuOptions&) {
    no_gpu();
}
GpuModel::~GpuModel() = default;
GpuModel::GpuModel(GpuModel&&) noexcept = default;
GpuModel& GpuModel::operator=(GpuModel&&) noexcept = default;
const io::ModelConfig& GpuModel::config() const {
    no_gpu();
}
MatF GpuModel::forward(std::span<const int32_t>) {
    no_gpu();
}
double GpuModel::windows_nll(std::span<const int32_t>, int64_t) {
    no_gpu();
}
int64_t GpuModel::batch_windows(int64_t) const {
    no_gpu();
}
void GpuModel::reset_cache(int64_t, int64_t) {
    no_gpu();
}
MatF GpuModel::forward_cached(std::span<const int32_t>, bool, int64_t) {
    no_gpu();
}
MatF GpuModel::decode_step(std::span<const int32_t>) {
    no_gpu();
}
int64_t GpuModel::cache_length(int64_t) const {
    no_gpu();
}
int64_t GpuModel::cache_sequences() const {
    no_gpu();
}
int64_t GpuModel::graph_replays() const {
    no_gpu();
}
int64_t GpuModel::graph_captures() const {
    no_gpu();
}
int64_t GpuModel::device_bytes() const {
    no_gpu();
}
int64_t GpuModel::weight_bytes() const {
    no_gpu();
}
const float* GpuModel::forward_on_device(std::span<const int32_t>) {
    no_gpu();
}
const float* GpuModel::final_hidden_on_device(std::span<const int32_t>) {
    no_gpu();
}
const float* GpuModel::head_on_device(const float*, int64_t) {
    no_gpu();
}
cortiq::cuda::Gpu& GpuModel::gpu() {
    no_gpu();
}
int64_t GpuModel::batch_rows() const {
    no_gpu();
}
void GpuModel::embed_into(std::span<const int32_t>, float*) {
    no_gpu();
}
float* GpuModel::work_rows(int64_t) {
    no_gpu();
}
void GpuModel::run_block(int64_t, int64_t, int64_t, float*, const DeviceInputHook*,
                         std::string_view) {
    no_gpu();
}
const float* GpuModel::final_norm_rows(const float*, int64_t) {
    no_gpu();
}
void GpuModel::set_linear(int64_t, std::string_view, const LinearWeights&) {
    no_gpu();
}
void GpuModel::load_layer(int64_t, const Model&) {
    no_gpu();
}
bool GpuModel::layer_loaded(int64_t) const {
    no_gpu();
}
void GpuModel::release_layers() {
    no_gpu();
}

}  // namespace cortiq::model
#endif
