#include "model/runtime.hpp"

#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

Device parse_device(std::string_view s) {
    if (s == "cpu") return Device::cpu;
    if (s == "gpu") return Device::gpu;
    CORTIQ_FAIL("--device must be cpu or gpu, got '{}'", s);
}

namespace {

// The float32 CPU Model, one window at a time (its GEMMs are already
// threaded over the rows of one window).
class CpuRuntime final : public Runtime {
  public:
    explicit CpuRuntime(const Model& m) : m_(m) {}

    const io::ModelConfig& config() const override { return m_.config(); }
    Device device() const override { return Device::cpu; }

    MatF forward(std::span<const int32_t> tokens) override { return m_.forward(tokens, ws_); }

    double windows_nll(std::span<const int32_t> tokens, int64_t windows) override {
        CORTIQ_ASSERT(windows > 0 && static_cast<int64_t>(tokens.size()) % windows == 0);
        const size_t len = tokens.size() / static_cast<size_t>(windows);
        double s = 0;
        for (int64_t w = 0; w < windows; ++w) {
            const auto win = tokens.subspan(static_cast<size_t>(w) * len, len);
            s += next_token_nll(m_.forward(win, ws_), win);
        }
        return s;
    }
    int64_t batch_windows(int64_t) const override { return 1; }

    void reset_cache(int64_t capacity) override {
        if (cache_.capacity != capacity)
            cache_ = m_.make_cache(capacity);
        else
            cache_.clear();
    }
    MatF forward_cached(std::span<const int32_t> tokens, bool last_only) override {
        ForwardOptions fo;
        fo.last_logits_only = last_only;
        return m_.forward(tokens, cache_, fo);
    }
    int64_t cache_length() const override { return cache_.length; }
    int64_t weight_bytes() const override { return m_.weight_bytes(); }

  private:
    const Model& m_;
    Workspace ws_;
    KvCache cache_;
};

}  // namespace

std::unique_ptr<Runtime> make_runtime(const Model& m, Device d) {
    if (d == Device::cpu) return std::make_unique<CpuRuntime>(m);
    CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    return std::make_unique<GpuModel>(m);
}

}  // namespace cortiq::model
