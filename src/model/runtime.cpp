#include "model/runtime.hpp"

#include <algorithm>

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

    void reset_cache(int64_t capacity, int64_t sequences) override {
        CORTIQ_CHECK(sequences > 0, "KV cache: {} sequences", sequences);
        caches_.resize(static_cast<size_t>(sequences));
        for (KvCache& c : caches_) {
            if (c.capacity != capacity)
                c = m_.make_cache(capacity);
            else
                c.clear();
        }
    }
    MatF forward_cached(std::span<const int32_t> tokens, bool last_only, int64_t seq) override {
        ForwardOptions fo;
        fo.last_logits_only = last_only;
        return m_.forward(tokens, cache(seq), fo);
    }
    // One sequence after another: on the CPU a batch of single tokens gains
    // nothing from one pass (each product is a GEMV over the same weights).
    MatF decode_step(std::span<const int32_t> tokens) override {
        const int64_t B = static_cast<int64_t>(tokens.size());
        CORTIQ_CHECK(B == cache_sequences(), "decode_step: {} tokens for {} sequences", B,
                     cache_sequences());
        MatF out(B, m_.config().vocab_size);
        for (int64_t s = 0; s < B; ++s) {
            const MatF l = forward_cached(tokens.subspan(static_cast<size_t>(s), 1), true, s);
            std::copy(l.data(), l.data() + l.size(), out.data() + s * out.cols());
        }
        return out;
    }
    int64_t cache_length(int64_t seq) const override {
        check_seq(seq);
        return caches_[static_cast<size_t>(seq)].length;
    }
    int64_t cache_sequences() const override { return static_cast<int64_t>(caches_.size()); }
    int64_t weight_bytes() const override { return m_.weight_bytes(); }

  private:
    void check_seq(int64_t seq) const {
        CORTIQ_CHECK(seq >= 0 && seq < cache_sequences(),
                     "KV cache: sequence {} of {} (reset_cache first)", seq, cache_sequences());
    }
    KvCache& cache(int64_t seq) {
        check_seq(seq);
        return caches_[static_cast<size_t>(seq)];
    }

    const Model& m_;
    Workspace ws_;
    std::vector<KvCache> caches_;
};

}  // namespace

KvFormat parse_kv_format(std::string_view s) {
    if (s == "auto") return KvFormat::automatic;
    if (s == "f32") return KvFormat::f32;
    if (s == "f16") return KvFormat::f16;
    CORTIQ_FAIL("--kv must be auto, f32 or f16, got '{}'", s);
}

HeadFormat parse_head_format(std::string_view s) {
    if (s == "auto") return HeadFormat::automatic;
    if (s == "f32") return HeadFormat::f32;
    if (s == "f16") return HeadFormat::f16;
    CORTIQ_FAIL("--head must be auto, f32 or f16, got '{}'", s);
}

std::unique_ptr<Runtime> make_runtime(const Model& m, Device d) {
    RuntimeOptions o;
    o.device = d;
    return make_runtime(m, o);
}

std::unique_ptr<Runtime> make_runtime(const Model& m, const RuntimeOptions& o) {
    if (o.device == Device::cpu) {
        CORTIQ_CHECK(o.kv != KvFormat::f16,
                     "an fp16 KV cache is GPU-only (--kv f16 needs --device gpu)");
        CORTIQ_CHECK(o.weights == WeightFormat::native,
                     "fp16 weights are GPU-only (--dtype f16 needs --device gpu)");
        CORTIQ_CHECK(o.head != HeadFormat::f16,
                     "an fp16 head is GPU-only (--head f16 needs --device gpu)");
        return std::make_unique<CpuRuntime>(m);
    }
    CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    GpuOptions g;
    g.kv = o.kv;  // automatic: the GpuModel's f16
    g.weights = o.weights;
    g.head = o.head;  // automatic: the GpuModel's f16
    g.graphs = o.graphs;
    return std::make_unique<GpuModel>(m, g);
}

}  // namespace cortiq::model
