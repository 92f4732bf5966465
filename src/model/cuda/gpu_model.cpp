// GpuModel: the weights on the device, a workspace sized for the largest
// batch seen, the KV cache, and the forward pass as a sequence of cuBLAS
// GEMMs and the kernels of kernels.hpp, in the order of model/block.cpp.
#include "model/gpu_model.hpp"

#include <numeric>

#include "model/cuda/gpu_model_impl.hpp"

namespace cortiq::model {

GpuModel::GpuModel(const Model& m) : impl_(std::make_unique<Impl>(m)) {}
GpuModel::~GpuModel() = default;
GpuModel::GpuModel(GpuModel&&) noexcept = default;
GpuModel& GpuModel::operator=(GpuModel&&) noexcept = default;

const io::ModelConfig& GpuModel::config() const {
    return impl_->cfg;
}

MatF GpuModel::forward(std::span<const int32_t> tokens) {
    const int64_t T = static_cast<int64_t>(tokens.size());
    impl_->load_tokens(tokens);
    impl_->run(1, T, 0, false, false);
    return impl_->download_logits(T);
}

double GpuModel::windows_nll(std::span<const int32_t> tokens, int64_t windows) {
    const int64_t R = static_cast<int64_t>(tokens.size());
    CORTIQ_ASSERT(windows > 0 && R % windows == 0, "{} tokens in {} windows", R, windows);
    const int64_t len = R / windows;
    Impl& g = *impl_;
    g.load_tokens(tokens);
    g.run(windows, len, 0, false, false);
    cuda::next_token_nll(g.ws.logits.get(), g.ws.tokens.get(), R, len, g.cfg.vocab_size,
                         g.ws.nll.get(), g.stream());
    std::vector<double> nll(static_cast<size_t>(R));
    CUDA_CHECK(cudaMemcpyAsync(nll.data(), g.ws.nll.get(), nll.size() * sizeof(double),
                               cudaMemcpyDeviceToHost, g.stream()));
    g.gpu.sync();
    return std::accumulate(nll.begin(), nll.end(), 0.0);
}

int64_t GpuModel::batch_windows(int64_t len) const {
    CORTIQ_ASSERT(len > 0);
    const int64_t by_rows = kBatchRows / len;
    const int64_t by_logits = kMaxLogitBytes / (len * impl_->cfg.vocab_size * 4);
    return std::clamp<int64_t>(std::min(by_rows, by_logits), 1, 65535);
}

void GpuModel::reset_cache(int64_t capacity) {
    CORTIQ_CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
    Impl::Cache& kc = impl_->cache;
    kc.length = 0;
    if (kc.capacity == capacity) return;
    const io::ModelConfig& c = impl_->cfg;
    kc = Impl::Cache{};  // free the old cache first
    for (int64_t l = 0; l < c.num_layers; ++l) {
        kc.k.emplace_back(capacity * c.kv_dim(), impl_->stream());
        kc.v.emplace_back(capacity * c.kv_dim(), impl_->stream());
    }
    kc.capacity = capacity;
}

MatF GpuModel::forward_cached(std::span<const int32_t> tokens, bool last_only) {
    Impl::Cache& kc = impl_->cache;
    const int64_t T = static_cast<int64_t>(tokens.size());
    CORTIQ_CHECK(kc.capacity > 0, "forward_cached: no KV cache (reset_cache first)");
    CORTIQ_CHECK(kc.length + T <= kc.capacity, "KV cache full: {} + {} tokens > capacity {}",
                 kc.length, T, kc.capacity);
    impl_->load_tokens(tokens);
    impl_->run(1, T, kc.length, true, last_only);
    kc.length += T;
    return impl_->download_logits(last_only ? 1 : T);
}

int64_t GpuModel::cache_length() const {
    return impl_->cache.length;
}

int64_t GpuModel::device_bytes() const {
    return impl_->bytes();
}

int64_t GpuModel::weight_bytes() const {
    return impl_->w.bytes;
}

}  // namespace cortiq::model
