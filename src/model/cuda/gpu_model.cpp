// GpuModel: the weights on the device, a workspace sized for the largest
// batch seen, the KV cache, and the forward pass as a sequence of cuBLAS
// GEMMs and the kernels of kernels.hpp, in the order of model/block.cpp.
#include "model/gpu_model.hpp"

#include <algorithm>
#include <numeric>

#include "model/blr_linear.hpp"
#include "model/cuda/gpu_model_impl.hpp"

namespace cortiq::model {

GpuModel::GpuModel(const Model& m, const GpuOptions& o) {
    GpuOptions resolved = o;
    // the GPU's defaults for generation
    if (resolved.kv == KvFormat::automatic) resolved.kv = KvFormat::f16;
    if (resolved.head == HeadFormat::automatic) resolved.head = HeadFormat::f16;
    impl_ = std::make_unique<Impl>(m, resolved);
}
GpuModel::~GpuModel() = default;
GpuModel::GpuModel(GpuModel&&) noexcept = default;
GpuModel& GpuModel::operator=(GpuModel&&) noexcept = default;

const io::ModelConfig& GpuModel::config() const {
    return impl_->cfg;
}

MatF GpuModel::forward(std::span<const int32_t> tokens) {
    forward_on_device(tokens);
    return impl_->download_logits(static_cast<int64_t>(tokens.size()));
}

const float* GpuModel::forward_on_device(std::span<const int32_t> tokens) {
    impl_->load_tokens(tokens);
    impl_->run(1, static_cast<int64_t>(tokens.size()), nullptr, false);
    impl_->gpu.sync();
    return impl_->ws.logits.get();
}

const float* GpuModel::final_hidden_on_device(std::span<const int32_t> tokens) {
    impl_->load_tokens(tokens);
    impl_->run(1, static_cast<int64_t>(tokens.size()), nullptr, false, false);
    impl_->gpu.sync();
    return impl_->ws.n.get();
}

const float* GpuModel::head_on_device(const float* normed, int64_t rows) {
    CORTIQ_CHECK(rows > 0 && rows <= impl_->ws.rows, "the head of {} rows (at most {})", rows,
                 impl_->ws.rows);
    impl_->head(normed, rows);
    impl_->gpu.sync();
    return impl_->ws.logits.get();
}

double GpuModel::windows_nll(std::span<const int32_t> tokens, int64_t windows) {
    const int64_t R = static_cast<int64_t>(tokens.size());
    CORTIQ_ASSERT(windows > 0 && R % windows == 0, "{} tokens in {} windows", R, windows);
    const int64_t len = R / windows;
    Impl& g = *impl_;
    g.load_tokens(tokens);
    g.run(windows, len, nullptr, false);
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

void GpuModel::reset_cache(int64_t capacity, int64_t sequences) {
    CORTIQ_CHECK(capacity > 0, "KV cache capacity must be positive, got {}", capacity);
    CORTIQ_CHECK(sequences > 0 && sequences <= 65535, "KV cache: {} sequences", sequences);
    Impl& g = *impl_;
    Impl::Cache& kc = g.cache;
    const io::ModelConfig& c = g.cfg;
    const cudaStream_t st = g.stream();
    if (kc.capacity != capacity || kc.sequences != sequences) {
        g.graphs.clear();    // they hold the old cache's addresses
        kc = Impl::Cache{};  // free the old cache first
        const bool f16 = g.opt.kv == KvFormat::f16;
        const io::DeltaNetConfig& d = c.delta;
        const int64_t rows = capacity * sequences;
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const bool delta = c.is_delta(l);  // a DeltaNet layer keeps states, not keys
            const int64_t kv = delta ? 0 : rows * c.kv_dim();
            kc.k.emplace_back(f16 ? 0 : kv, st);
            kc.v.emplace_back(f16 ? 0 : kv, st);
            kc.k16.emplace_back(f16 ? kv : 0, st);
            kc.v16.emplace_back(f16 ? kv : 0, st);
            kc.conv.emplace_back(delta ? sequences * (d.conv_kernel - 1) * d.conv_dim() : 0, st);
            kc.state.emplace_back(delta ? sequences * d.v_heads * d.k_dim * d.v_dim : 0, st);
        }
        kc.pos = cortiq::cuda::DeviceBuffer<int32_t>(sequences, st);
        kc.capacity = capacity;
        kc.sequences = sequences;
    }
    kc.length.assign(static_cast<size_t>(sequences), 0);
    g.ensure_rope(capacity);
    // A new sequence starts from zero DeltaNet states.
    for (auto* part : {&kc.conv, &kc.state})
        for (DVec& b : *part)
            if (!b.empty())
                CUDA_CHECK(
                    cudaMemsetAsync(b.get(), 0, static_cast<size_t>(b.size()) * sizeof(float), st));
}

namespace {

// Checks that sequences seq0..seq0 + count − 1 exist and have room for
// `tokens` more positions each; returns their positions now.
std::vector<int32_t> cached_positions(const GpuModel::Impl& g, int64_t seq0, int64_t count,
                                      int64_t tokens) {
    const auto& kc = g.cache;
    CORTIQ_CHECK(kc.capacity > 0, "forward_cached: no KV cache (reset_cache first)");
    CORTIQ_CHECK(seq0 >= 0 && seq0 + count <= kc.sequences, "KV cache: sequence {} of {}",
                 seq0 + count - 1, kc.sequences);
    std::vector<int32_t> pos;
    for (int64_t s = seq0; s < seq0 + count; ++s) {
        const int64_t len = kc.length[static_cast<size_t>(s)];
        CORTIQ_CHECK(len + tokens <= kc.capacity, "KV cache full: {} + {} tokens > capacity {}",
                     len, tokens, kc.capacity);
        pos.push_back(static_cast<int32_t>(len));
    }
    return pos;
}

}  // namespace

MatF GpuModel::forward_cached(std::span<const int32_t> tokens, bool last_only, int64_t seq) {
    Impl& g = *impl_;
    const int64_t T = static_cast<int64_t>(tokens.size());
    const std::vector<int32_t> pos = cached_positions(g, seq, 1, T);
    g.load_tokens(tokens);
    CUDA_CHECK(cudaMemcpyAsync(g.cache.pos.get() + seq, pos.data(), sizeof(int32_t),
                               cudaMemcpyHostToDevice, g.stream()));
    const CacheStep cs{seq, g.cache.pos.get() + seq, pos[0] + T};
    if (T == 1)
        g.decode(1, cs);
    else
        g.run(1, T, &cs, last_only);
    g.cache.length[static_cast<size_t>(seq)] += T;
    return g.download_logits(last_only ? 1 : T);
}

MatF GpuModel::decode_step(std::span<const int32_t> tokens) {
    Impl& g = *impl_;
    const int64_t B = static_cast<int64_t>(tokens.size());
    CORTIQ_CHECK(B == g.cache.sequences, "decode_step: {} tokens for {} sequences", B,
                 g.cache.sequences);
    const std::vector<int32_t> pos = cached_positions(g, 0, B, 1);
    g.load_tokens(tokens);
    CUDA_CHECK(cudaMemcpyAsync(g.cache.pos.get(), pos.data(), pos.size() * sizeof(int32_t),
                               cudaMemcpyHostToDevice, g.stream()));
    const int64_t longest = *std::max_element(pos.begin(), pos.end());
    g.decode(B, CacheStep{0, g.cache.pos.get(), longest + 1});
    for (int64_t& len : g.cache.length) ++len;
    return g.download_logits(B);
}

int64_t GpuModel::cache_length(int64_t seq) const {
    const Impl::Cache& kc = impl_->cache;
    CORTIQ_CHECK(seq >= 0 && seq < std::max<int64_t>(kc.sequences, 1),
                 "KV cache: sequence {} of {}", seq, kc.sequences);
    return kc.length.empty() ? 0 : kc.length[static_cast<size_t>(seq)];
}

int64_t GpuModel::cache_sequences() const {
    return impl_->cache.sequences;
}

int64_t GpuModel::graph_replays() const {
    return impl_->replays;
}

int64_t GpuModel::graph_captures() const {
    return impl_->captures;
}

int64_t GpuModel::device_bytes() const {
    return impl_->bytes();
}

int64_t GpuModel::weight_bytes() const {
    return impl_->w.bytes;
}

// ── hooks for the calibration on the device ──────────────────────────────────

cortiq::cuda::Gpu& GpuModel::gpu() {
    return impl_->gpu;
}

int64_t GpuModel::batch_rows() const {
    return kBatchRows;
}

void GpuModel::embed_into(std::span<const int32_t> tokens, float* out) {
    Impl& g = *impl_;
    g.load_tokens(tokens);  // checks the ids, sizes the workspace
    cuda::embed_rows(g.w, g.ws.tokens.get(), static_cast<int64_t>(tokens.size()), g.cfg.hidden_size,
                     out, g.stream());
}

float* GpuModel::work_rows(int64_t rows) {
    impl_->ensure_work(rows);
    return impl_->ws.x.get();
}

void GpuModel::run_block(int64_t layer, int64_t batch, int64_t T, float* x,
                         const DeviceInputHook* hook, std::string_view stop_after) {
    Impl& g = *impl_;
    CORTIQ_CHECK(layer >= 0 && layer < g.cfg.num_layers, "layer {} of {}", layer, g.cfg.num_layers);
    g.ensure_rope(T);
    g.ensure_work(batch * T);
    g.block(static_cast<size_t>(layer), batch, T, nullptr, x, hook, stop_after);
}

const float* GpuModel::final_norm_rows(const float* x, int64_t rows) {
    Impl& g = *impl_;
    g.ensure_work(rows);
    cuda::rmsnorm(x, rows, g.cfg.hidden_size, g.w.final_norm.get(),
                  static_cast<float>(g.cfg.rms_norm_eps), g.ws.n.get(), g.stream());
    return g.ws.n.get();
}

namespace {

cuda::DeviceLinear& linear_named(cuda::DeviceLayer& l, std::string_view name) {
    if (name == "self_attn.q_proj") return l.q;
    if (name == "self_attn.k_proj") return l.k;
    if (name == "self_attn.v_proj") return l.v;
    if (name == "self_attn.o_proj") return l.o;
    if (name == "mlp.gate_proj") return l.gate;
    if (name == "mlp.up_proj") return l.up;
    if (name == "mlp.down_proj") return l.down;
    if (name == "linear_attn.in_proj_qkv") return l.delta.qkv;
    if (name == "linear_attn.in_proj_z") return l.delta.z;
    if (name == "linear_attn.in_proj_b") return l.delta.b;
    if (name == "linear_attn.in_proj_a") return l.delta.a;
    if (name == "linear_attn.out_proj") return l.delta.out;
    CORTIQ_FAIL("no linear layer named '{}' in a decoder block", name);
}

}  // namespace

void GpuModel::set_linear(int64_t layer, std::string_view name, const LinearWeights& w) {
    Impl& g = *impl_;
    CORTIQ_CHECK(layer >= 0 && layer < g.cfg.num_layers, "layer {} of {}", layer, g.cfg.num_layers);
    cuda::DeviceLinear& d = linear_named(g.w.layers[static_cast<size_t>(layer)], name);
    // a BLR layer's dense form on the device (a compressed 4096 × 11008 layer
    // formed on the host took seconds)
    cuda::set_weight_of(d, w, g.gpu.blas(), g.stream());
}

void GpuModel::load_layer(int64_t layer, const Model& m) {
    Impl& g = *impl_;
    CORTIQ_CHECK(m.num_layers() == g.cfg.num_layers && m.config().hidden_size == g.cfg.hidden_size,
                 "load_layer: a model of {} layers for one of {}", m.num_layers(),
                 g.cfg.num_layers);
    cuda::load_layer(g.w, m, layer, g.stream(), g.gpu.blas());
}

bool GpuModel::layer_loaded(int64_t layer) const {
    const Impl& g = *impl_;
    CORTIQ_CHECK(layer >= 0 && layer < g.cfg.num_layers, "layer {} of {}", layer, g.cfg.num_layers);
    return g.w.layers[static_cast<size_t>(layer)].resident;
}

void GpuModel::release_layers() {
    cuda::release_layers(impl_->w, impl_->stream());
}

}  // namespace cortiq::model
