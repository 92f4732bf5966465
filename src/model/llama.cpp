#include "model/llama.hpp"

#include <filesystem>

#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "core/blas_threads.hpp"
#include "io/checksum.hpp"
#include "io/safetensors.hpp"
#include "model/blr_linear.hpp"
#include "model/mapped_linear.hpp"
#include "model/ops.hpp"

namespace cortiq::model {

namespace {

// A float vector of exactly n values.
std::vector<float> load_vec(const io::Checkpoint& ckpt, const std::string& name, int64_t n) {
    auto v = ckpt.load_floats(name);
    CORTIQ_CHECK(static_cast<int64_t>(v.size()) == n, "{}: tensor '{}' has {} values, expected {}",
                 ckpt.file_of(name).path(), name, v.size(), n);
    return v;
}

// A weight of m × n as the runtime holds it: a float matrix, or the packed
// form of a U8 BLR / sign payload of that shape (dequantised to floats with
// LoadOptions::dequant). One of the two is set.
struct LoadedWeight {
    std::shared_ptr<const MatF> dense;
    std::shared_ptr<const blr::PackedWeight> packed;
};

LoadedWeight load_weight(const io::Checkpoint& ckpt, const std::string& name, int64_t m, int64_t n,
                         const LoadOptions& lo) {
    const io::TensorInfo& t = ckpt.info(name);
    const std::string& file = ckpt.file_of(name).path();
    if (t.dtype == io::DType::U8) {
        const auto bytes = ckpt.bytes(name);
        const std::string what = fmt::format("{}: tensor '{}'", file, name);
        blr::validate_any(bytes, what, m, n);
        if (lo.dequant) return {std::make_shared<const MatF>(blr::dequant_any(bytes)), nullptr};
        return {nullptr, std::make_shared<const blr::PackedWeight>(
                             blr::PackedWeight::from_payload(bytes, what))};
    }
    MatF w = ckpt.load_matf(name);
    CORTIQ_CHECK(w.rows() == m && w.cols() == n && t.shape.size() == 2,
                 "{}: tensor '{}' has shape {}, expected [{}, {}]", file, name, t.shape_str(), m,
                 n);
    return {std::make_shared<const MatF>(std::move(w)), nullptr};
}

// The layer that runs a loaded weight: packed, or dense.
std::unique_ptr<LinearWeights> linear_of(const LoadedWeight& w) {
    if (w.packed) return std::make_unique<BlrLinear>(w.packed);
    return std::make_unique<DenseLinear>(w.dense);
}

// `prefix`.weight (load_weight, or with lo.map_linears a float weight left
// in the mapped file) and, if `bias`, `prefix`.bias.
Linear load_linear(const io::Checkpoint& ckpt, const std::string& prefix, int64_t m, int64_t n,
                   bool bias, const LoadOptions& lo) {
    Linear lin;
    const std::string name = prefix + ".weight";
    if (lo.map_linears &&
        ckpt.info(name).dtype != io::DType::U8)  // from_checkpoint checked the file
        lin.w = std::make_unique<MappedLinear>(lo.mapped_from, name, m, n);
    else
        lin.w = linear_of(load_weight(ckpt, name, m, n, lo));
    if (bias) lin.bias = load_vec(ckpt, prefix + ".bias", m);
    return lin;
}

// The embedding (vocab × hidden, load_weight; with lo.map_linears a float
// table left in the mapped file, as the layers are).
Embedding load_embedding(const io::Checkpoint& ckpt, const std::string& name, int64_t vocab,
                         int64_t hidden, const LoadOptions& lo) {
    if (lo.map_linears && ckpt.info(name).dtype != io::DType::U8)
        return Embedding(std::make_shared<const MappedLinear>(lo.mapped_from, name, vocab, hidden));
    const LoadedWeight w = load_weight(ckpt, name, vocab, hidden, lo);
    return w.packed ? Embedding(w.packed) : Embedding(w.dense);
}

// A tied head: the embedding's own storage, packed, dense, or the same
// tensor of the mapped file.
std::unique_ptr<LinearWeights> tied_head(const Embedding& e) {
    if (const auto& w = e.mapped_ptr())  // its own state: what its products keep is its own
        return std::make_unique<MappedLinear>(w->checkpoint(), w->tensor_name(), e.vocab(),
                                              e.dim());
    return linear_of({e.table_ptr(), e.packed_ptr()});
}

// An RMSNorm weight of n values; with Qwen3.5's (1 + w) norms the stored
// weight is 1 + w (float32, as transformers computes it).
std::vector<float> load_norm(const io::Checkpoint& ckpt, const std::string& name, int64_t n,
                             bool offset) {
    auto v = load_vec(ckpt, name, n);
    if (offset)
        for (float& x : v) x = 1.0f + x;
    return v;
}

// The Gated DeltaNet weights of the layer at prefix p (p + "linear_attn.").
DeltaNetWeights load_delta(const io::ModelConfig& c, const io::Checkpoint& ckpt,
                           const std::string& p, const LoadOptions& lo) {
    const io::DeltaNetConfig& d = c.delta;
    const int64_t H = c.hidden_size;
    const std::string q = p + "linear_attn.";
    DeltaNetWeights w;
    w.qkv = load_linear(ckpt, q + "in_proj_qkv", d.conv_dim(), H, false, lo);
    w.z = load_linear(ckpt, q + "in_proj_z", d.value_dim(), H, false, lo);
    w.b = load_linear(ckpt, q + "in_proj_b", d.v_heads, H, false, lo);
    w.a = load_linear(ckpt, q + "in_proj_a", d.v_heads, H, false, lo);
    w.out = load_linear(ckpt, q + "out_proj", H, d.value_dim(), false, lo);
    const auto conv = load_vec(ckpt, q + "conv1d.weight", d.conv_dim() * d.conv_kernel);
    w.conv = MatF(d.conv_dim(), d.conv_kernel);  // [conv_dim, 1, kernel] row-major
    std::copy(conv.begin(), conv.end(), w.conv.data());
    w.a_log = load_vec(ckpt, q + "A_log", d.v_heads);
    w.dt_bias = load_vec(ckpt, q + "dt_bias", d.v_heads);
    w.norm = load_vec(ckpt, q + "norm.weight", d.v_dim);  // the gated norm scales by w
    return w;
}

}  // namespace

const std::vector<std::string>& Model::linear_names() {
    static const std::vector<std::string> kNames = {
        "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
        "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};
    return kNames;
}

Linear& Model::linear(int64_t layer, std::string_view name) {
    LayerWeights& w = this->layer(layer);
    if (name == "self_attn.q_proj") return w.q;
    if (name == "self_attn.k_proj") return w.k;
    if (name == "self_attn.v_proj") return w.v;
    if (name == "self_attn.o_proj") return w.o;
    if (name == "mlp.gate_proj") return w.gate;
    if (name == "mlp.up_proj") return w.up;
    if (name == "mlp.down_proj") return w.down;
    if (name == "linear_attn.in_proj_qkv") return w.delta.qkv;
    if (name == "linear_attn.in_proj_z") return w.delta.z;
    if (name == "linear_attn.in_proj_b") return w.delta.b;
    if (name == "linear_attn.in_proj_a") return w.delta.a;
    if (name == "linear_attn.out_proj") return w.delta.out;
    CORTIQ_FAIL(
        "no linear layer named '{}' (self_attn.q_proj ... mlp.down_proj, "
        "linear_attn.in_proj_qkv ... linear_attn.out_proj)",
        name);
}

const Linear& Model::linear(int64_t layer, std::string_view name) const {
    return const_cast<Model*>(this)->linear(layer, name);
}

Model Model::from_checkpoint(const io::ModelConfig& cfg, const io::Checkpoint& ckpt,
                             const LoadOptions& lo) {
    if (lo.verify) io::verify_checksums(ckpt);
    io::ModelConfig c = cfg;
    io::resolve_prefix(c, ckpt);
    io::check_checkpoint(c, ckpt);
    Model m;
    m.cfg_ = c;
    const int64_t H = c.hidden_size, F = c.intermediate_size;
    const bool off = c.norm_offset;
    CORTIQ_CHECK(!lo.map_linears || lo.mapped_from.get() == &ckpt,
                 "{}: mapped linear layers need the checkpoint in LoadOptions::mapped_from",
                 ckpt.path());
    m.embed_ = load_embedding(ckpt, c.prefix + "embed_tokens.weight", c.vocab_size, H, lo);
    m.layers_.resize(static_cast<size_t>(c.num_layers));
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string p = c.layer_prefix(i);
        LayerWeights& w = m.layers_[static_cast<size_t>(i)];
        w.input_norm = load_norm(ckpt, p + "input_layernorm.weight", H, off);
        w.post_attn_norm = load_norm(ckpt, p + "post_attention_layernorm.weight", H, off);
        w.gate = load_linear(ckpt, p + "mlp.gate_proj", F, H, c.mlp_bias, lo);
        w.up = load_linear(ckpt, p + "mlp.up_proj", F, H, c.mlp_bias, lo);
        w.down = load_linear(ckpt, p + "mlp.down_proj", H, F, c.mlp_bias, lo);
        if (c.is_delta(i)) {
            w.mixer = io::Mixer::gated_delta;
            w.delta = load_delta(c, ckpt, p, lo);
            continue;
        }
        if (c.qk_norm) {
            w.q_norm = load_norm(ckpt, p + "self_attn.q_norm.weight", c.head_dim, off);
            w.k_norm = load_norm(ckpt, p + "self_attn.k_norm.weight", c.head_dim, off);
        }
        w.q = load_linear(ckpt, p + "self_attn.q_proj", c.q_proj_dim(), H, c.qkv_bias, lo);
        w.k = load_linear(ckpt, p + "self_attn.k_proj", c.kv_dim(), H, c.qkv_bias, lo);
        w.v = load_linear(ckpt, p + "self_attn.v_proj", c.kv_dim(), H, c.qkv_bias, lo);
        w.o = load_linear(ckpt, p + "self_attn.o_proj", H, c.q_dim(), c.o_bias, lo);
    }
    m.final_norm_ = load_norm(ckpt, c.prefix + "norm.weight", H, off);
    // A tied head is the embedding, unless the file holds its own lm_head.weight
    // (`cortiq quantize --include-head` writes a compressed one and keeps the
    // float embedding).
    if (c.tie_word_embeddings && !ckpt.has("lm_head.weight"))
        m.lm_head_.w = tied_head(m.embed_);
    else
        m.lm_head_ = load_linear(ckpt, "lm_head", c.vocab_size, H, false, lo);
    m.inv_freq_ = rope_inv_freq(c);
    return m;
}

Model Model::load(const std::string& path, const LoadOptions& lo) {
    LoadOptions opts = lo;
    const auto ckpt = std::make_shared<const io::Checkpoint>(io::Checkpoint::open(path));
    if (lo.map_linears) opts.mapped_from = ckpt;  // the file stays open for the model's layers
    if (std::filesystem::is_directory(path))
        return from_checkpoint(io::ModelConfig::load(path), *ckpt, opts);
    // before the metadata's config is read: a damaged header is named as such
    if (lo.verify) io::verify_checksums(*ckpt);
    opts.verify = false;
    auto it = ckpt->metadata().find("config");
    CORTIQ_CHECK(it != ckpt->metadata().end(),
                 "{}: a single safetensors file needs the model config in its metadata "
                 "(\"config\"); pass the model folder instead",
                 path);
    return from_checkpoint(io::ModelConfig::parse(it->second, path + " metadata config"), *ckpt,
                           opts);
}

MatF Model::embed(std::span<const int32_t> tokens) const {
    return embed_.rows(tokens);
}

void Model::set_embedding(Embedding e) {
    CORTIQ_CHECK(e.vocab() == embed_.vocab() && e.dim() == embed_.dim(),
                 "an embedding of {}x{} for a model of {}x{}", e.vocab(), e.dim(), embed_.vocab(),
                 embed_.dim());
    const bool shared = head_shares_embedding();
    embed_ = std::move(e);
    if (shared) lm_head_.w = tied_head(embed_);
}

Model Model::share() const {
    Model m;
    m.cfg_ = cfg_;
    m.embed_ = embed_;
    for (const LayerWeights& l : layers_) {
        LayerWeights c;
        c.mixer = l.mixer;
        c.input_norm = l.input_norm;
        c.post_attn_norm = l.post_attn_norm;
        c.q_norm = l.q_norm;
        c.k_norm = l.k_norm;
        for (auto [dst, src] : {std::pair{&c.q, &l.q},
                                {&c.k, &l.k},
                                {&c.v, &l.v},
                                {&c.o, &l.o},
                                {&c.gate, &l.gate},
                                {&c.up, &l.up},
                                {&c.down, &l.down},
                                {&c.delta.qkv, &l.delta.qkv},
                                {&c.delta.z, &l.delta.z},
                                {&c.delta.b, &l.delta.b},
                                {&c.delta.a, &l.delta.a},
                                {&c.delta.out, &l.delta.out}})
            *dst = src->share();
        c.delta.conv = l.delta.conv;
        c.delta.a_log = l.delta.a_log;
        c.delta.dt_bias = l.delta.dt_bias;
        c.delta.norm = l.delta.norm;
        m.layers_.push_back(std::move(c));
    }
    m.final_norm_ = final_norm_;
    m.lm_head_ = lm_head_.share();
    m.inv_freq_ = inv_freq_;
    return m;
}

bool Model::head_shares_embedding() const {
    if (const auto* f = dynamic_cast<const MappedLinear*>(lm_head_.w.get())) {
        const auto& e = embed_.mapped_ptr();
        return e && f->checkpoint() == e->checkpoint() && f->tensor_name() == e->tensor_name();
    }
    if (const auto* d = dynamic_cast<const DenseLinear*>(lm_head_.w.get()))
        return embed_.table_ptr() && &d->weight() == embed_.table_ptr().get();
    if (const auto* b = dynamic_cast<const BlrLinear*>(lm_head_.w.get()))
        return embed_.packed_ptr() && b->packed_ptr() == embed_.packed_ptr();
    return false;
}

void Model::block(int64_t layer, int64_t pos0, KvCache* cache, BlockActivations& a,
                  const LinearInputHook* hook, std::string_view stop_after) const {
    const RopeTable rope = rope_table(inv_freq_, pos0, a.x.rows());
    BlockContext ctx;
    ctx.cfg = &cfg_;
    ctx.rope = &rope;
    ctx.layer = layer;
    ctx.pos0 = pos0;
    ctx.cache = cache;
    ctx.hook = hook;
    ctx.stop_after = stop_after;
    block_forward(this->layer(layer), ctx, a);
}

void Model::logits(const MatF& hidden, MatF& normed, MatF& out) const {
    SingleThreadedBlas single_blas;  // OpenMP drives the parallelism (model/ops.hpp)
    if (normed.rows() != hidden.rows() || normed.cols() != hidden.cols() ||
        static_cast<int64_t>(normed.vec().size()) != hidden.size())
        normed = MatF(hidden.rows(), hidden.cols());
    rmsnorm(hidden.data(), hidden.rows(), hidden.cols(), final_norm_.data(),
            static_cast<float>(cfg_.rms_norm_eps), normed.data());
    lm_head_.forward(normed, out);
}

MatF Model::logits(const MatF& hidden) const {
    MatF normed, out;
    logits(hidden, normed, out);
    return out;
}

void Model::run(std::span<const int32_t> tokens, int64_t pos0, KvCache* cache,
                const ForwardOptions& opt, Workspace& ws) const {
    CORTIQ_CHECK(!tokens.empty(), "forward: no tokens");
    SingleThreadedBlas single_blas;  // OpenMP drives the parallelism (model/ops.hpp)
    const int64_t T = static_cast<int64_t>(tokens.size());
    if (ws.rope.pos0 != pos0 || ws.rope.rows != T ||
        ws.rope.half != static_cast<int64_t>(inv_freq_.size()))
        ws.rope = rope_table(inv_freq_, pos0, T);
    BlockContext ctx;
    ctx.cfg = &cfg_;
    ctx.rope = &ws.rope;
    ctx.pos0 = pos0;
    ctx.cache = cache;
    ctx.hook = opt.hook;
    if (opt.activations) opt.activations->resize(layers_.size());
    ws.block.x = embed(tokens);
    for (int64_t l = 0; l < num_layers(); ++l) {
        ctx.layer = l;
        if (opt.activations) {
            auto& acts = *opt.activations;
            const size_t i = static_cast<size_t>(l);
            acts[i].x = i == 0 ? ws.block.x : acts[i - 1].out;
            block_forward(layers_[i], ctx, acts[i]);
        } else {
            block_forward(layers_[static_cast<size_t>(l)], ctx, ws.block);
            std::swap(ws.block.x, ws.block.out);  // the output feeds the next block
        }
    }
    const MatF& hidden = opt.activations ? opt.activations->back().out : ws.block.x;
    if (opt.last_logits_only) {
        MatF last(1, hidden.cols());
        std::copy_n(hidden.row(hidden.rows() - 1), hidden.cols(), last.data());
        logits(last, ws.normed, ws.logits);
    } else {
        logits(hidden, ws.normed, ws.logits);
    }
}

const MatF& Model::forward(std::span<const int32_t> tokens, Workspace& ws,
                           const ForwardOptions& opt) const {
    run(tokens, 0, nullptr, opt, ws);
    return ws.logits;
}

MatF Model::forward(std::span<const int32_t> tokens, const ForwardOptions& opt) const {
    Workspace ws;
    run(tokens, 0, nullptr, opt, ws);
    return std::move(ws.logits);
}

MatF Model::forward(std::span<const int32_t> tokens, KvCache& cache,
                    const ForwardOptions& opt) const {
    CORTIQ_CHECK(static_cast<int64_t>(cache.k.size()) == num_layers(),
                 "KV cache has {} layers, model {}", cache.k.size(), num_layers());
    const int64_t T = static_cast<int64_t>(tokens.size());
    CORTIQ_CHECK(cache.length + T <= cache.capacity, "KV cache full: {} + {} tokens > capacity {}",
                 cache.length, T, cache.capacity);
    Workspace ws;
    run(tokens, cache.length, &cache, opt, ws);
    cache.length += T;
    return std::move(ws.logits);
}

namespace {

// Float values of a layer outside its linear layers (norms, DeltaNet extras).
int64_t small_values(const LayerWeights& w) {
    return static_cast<int64_t>(w.input_norm.size() + w.post_attn_norm.size() + w.q_norm.size() +
                                w.k_norm.size() + w.delta.a_log.size() + w.delta.dt_bias.size() +
                                w.delta.norm.size()) +
           w.delta.conv.size();
}

}  // namespace

int64_t Model::num_params() const {
    int64_t n = embed_.vocab() * embed_.dim() + static_cast<int64_t>(final_norm_.size());
    auto lin = [](const Linear& l) {
        return l.in_features() * l.out_features() + static_cast<int64_t>(l.bias.size());
    };
    for (const auto& w : layers_) {
        n += small_values(w);
        for (const Linear* l : w.linears()) n += lin(*l);
    }
    if (!head_shares_embedding()) n += lin(lm_head_);
    return n;
}

int64_t Model::weight_bytes() const {
    auto lin = [](const Linear& l) {
        return l.w->resident_bytes() + 4 * static_cast<int64_t>(l.bias.size());
    };
    int64_t b = embed_.resident_bytes() + 4 * static_cast<int64_t>(final_norm_.size());
    for (const auto& w : layers_) {
        b += 4 * small_values(w);
        for (const Linear* l : w.linears()) b += lin(*l);
    }
    // a mapped tied head keeps its own float copy once a host product used it
    if (!head_shares_embedding() || embed_.mapped()) b += lin(lm_head_);
    return b;
}

}  // namespace cortiq::model
