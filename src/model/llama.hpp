// A Llama-family causal LM (llama, mistral, qwen2, qwen3, and the text part
// of Qwen3.5 with its Gated DeltaNet layers) in float32 on the CPU: loaded
// from a Hugging Face folder by tensor name, run as a batch of tokens
// (scoring) or incrementally through a KV cache (generation).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/matrix.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "model/block.hpp"
#include "model/embedding.hpp"
#include "model/linear.hpp"

namespace cortiq::io {
class Checkpoint;
}

namespace cortiq::model {

struct ForwardOptions {
    const LinearInputHook* hook = nullptr;  // called at every linear-layer input
    // If set: resized to num_layers and filled with every block's activations.
    std::vector<BlockActivations>* activations = nullptr;
    bool last_logits_only = false;  // logits of the last row only (1 × vocab)
};

// Buffers reused by repeated forwards (e.g. the windows of a ppl run): a
// size that repeats allocates nothing.
struct Workspace {
    BlockActivations block;  // used when activations are not kept
    MatF normed, logits;
    RopeTable rope;
};

struct LoadOptions {
    // Dequantise compressed layers to float32 at load (the old path, for
    // checking); by default they stay packed (model/blr_linear.hpp).
    bool dequant = false;
    // Check the file's checksums (io/checksum.hpp) before any weight is read;
    // a file without checksums loads either way.
    bool verify = true;
    // Leave the decoder layers' float linear weights in the mapped file
    // (model/mapped_linear.hpp): read when used, never held in host memory
    // (quantize --device gpu). Works through load(), which keeps the file
    // open for the model in `mapped_from`; from_checkpoint needs it set.
    bool map_linears = false;
    std::shared_ptr<const io::Checkpoint> mapped_from;
};

class Model {
  public:
    // `path`: a Hugging Face folder (config.json + safetensors, sharded or
    // not), or a single safetensors file whose metadata holds "config" (the
    // config.json text). Linear weights stored as U8 are BLR or sign payloads,
    // run packed (or dequantised on load with lo.dequant). Both check the
    // checkpoint's checksums first unless lo.verify is false.
    static Model load(const std::string& path, const LoadOptions& lo = {});
    static Model from_checkpoint(const io::ModelConfig& cfg, const io::Checkpoint& ckpt,
                                 const LoadOptions& lo = {});
    // A model that holds the same weights as this one: its float matrices and
    // payloads shared, not copied (the small vectors are). Replacing a layer
    // of either later (set_embedding, a Linear's w) leaves the other as it
    // was: quantize keeps the original model this way beside the one it
    // compresses, for one model's memory instead of two.
    Model share() const;

    const io::ModelConfig& config() const { return cfg_; }
    int64_t num_layers() const { return static_cast<int64_t>(layers_.size()); }
    const LayerWeights& layer(int64_t i) const { return layers_.at(static_cast<size_t>(i)); }
    LayerWeights& layer(int64_t i) { return layers_.at(static_cast<size_t>(i)); }
    // A linear layer by its HF name inside the block: "self_attn.q_proj",
    // "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    // "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"; in a Gated DeltaNet
    // layer "linear_attn.in_proj_qkv", "linear_attn.in_proj_z",
    // "linear_attn.in_proj_b", "linear_attn.in_proj_a", "linear_attn.out_proj".
    // (linear_names() lists the attention layers' ones.)
    Linear& linear(int64_t layer, std::string_view name);
    const Linear& linear(int64_t layer, std::string_view name) const;
    static const std::vector<std::string>& linear_names();
    // The rest of the weights (for copies to another device).
    // vocab × hidden: a float table or a compressed payload
    const Embedding& embedding() const { return embed_; }
    // The float table (asserts the embedding is not compressed).
    const MatF& embed_table() const { return embed_.table(); }
    const std::vector<float>& final_norm() const { return final_norm_; }
    // A tied head without a tensor of its own shares the embedding's storage
    // (float or compressed): head_shares_embedding().
    const Linear& lm_head() const { return lm_head_; }
    Linear& lm_head() { return lm_head_; }
    bool head_shares_embedding() const;
    // Replaces the embedding by one of the same shape (e.g. just compressed);
    // a head that shared the old one's storage shares the new one's.
    void set_embedding(Embedding e);

    // The steps of forward(), for block-by-block use.
    MatF embed(std::span<const int32_t> tokens) const;  // T × hidden
    // Block `layer` on a.x (rows at positions pos0..), filling a (a.out: output).
    // With `stop_after` (an input name of LinearInputHook): stop right after that
    // input's hook (a.out is then not computed).
    void block(int64_t layer, int64_t pos0, KvCache* cache, BlockActivations& a,
               const LinearInputHook* hook = nullptr, std::string_view stop_after = {}) const;
    MatF logits(const MatF& hidden) const;  // final norm + lm_head: T × vocab
    void logits(const MatF& hidden, MatF& normed, MatF& out) const;

    // Tokens at positions 0..T-1 → logits (T × vocab).
    MatF forward(std::span<const int32_t> tokens, const ForwardOptions& opt = {}) const;
    // The same into ws.logits (returned), reusing ws's buffers.
    const MatF& forward(std::span<const int32_t> tokens, Workspace& ws,
                        const ForwardOptions& opt = {}) const;
    // Tokens at positions cache.length.. appended to the cache → their logits.
    MatF forward(std::span<const int32_t> tokens, KvCache& cache,
                 const ForwardOptions& opt = {}) const;
    KvCache make_cache(int64_t capacity) const { return KvCache(cfg_, capacity); }

    int64_t num_params() const;
    // Bytes of weights held in memory: float tensors, packed layers as their
    // bits and f16 scales, a head shared with the embedding counted once.
    int64_t weight_bytes() const;

  private:
    void run(std::span<const int32_t> tokens, int64_t pos0, KvCache* cache,
             const ForwardOptions& opt, Workspace& ws) const;

    io::ModelConfig cfg_;
    Embedding embed_;  // vocab × hidden (its storage shared with a tied lm_head)
    std::vector<LayerWeights> layers_;
    std::vector<float> final_norm_;
    Linear lm_head_;
    std::vector<float> inv_freq_;
};

}  // namespace cortiq::model
