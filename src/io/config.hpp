// config.json of a Hugging Face causal LM → ModelConfig, for the decoder
// families cortiq runs: llama, mistral, qwen2, qwen3, and the text part of
// Qwen3.5 (qwen3_5 with its text_config, or qwen3_5_text). Defaults follow the
// transformers config classes; anything the runtime cannot honour (another
// model_type, activation, RoPE scaling type, per-layer sliding windows) is
// refused by name.
#pragma once

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <utility>
#include <vector>

namespace cortiq::io {

class Checkpoint;

struct RopeScaling {
    std::string type = "default";  // "default", "linear" or "llama3"
    double factor = 1.0;
    double low_freq_factor = 1.0;          // llama3
    double high_freq_factor = 4.0;         // llama3
    int64_t original_max_position = 8192;  // llama3
};

// The token mixer of a decoder layer: softmax attention, or Qwen3.5's Gated
// DeltaNet (linear attention with a recurrent state).
enum class Mixer { attention, gated_delta };

// Gated DeltaNet sizes (Qwen3.5 linear_* fields). Each key head serves
// v_heads / k_heads consecutive value heads.
struct DeltaNetConfig {
    int64_t k_heads = 0, v_heads = 0;  // linear_num_key_heads, linear_num_value_heads
    int64_t k_dim = 0, v_dim = 0;      // linear_key_head_dim, linear_value_head_dim
    int64_t conv_kernel = 0;           // linear_conv_kernel_dim
    int64_t key_dim() const { return k_heads * k_dim; }
    int64_t value_dim() const { return v_heads * v_dim; }
    int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q, k, v channels
};

struct ModelConfig {
    std::string model_type;  // llama, mistral, qwen2, qwen3, qwen3_5_text
    int64_t hidden_size = 0;
    int64_t intermediate_size = 0;
    int64_t num_layers = 0;
    int64_t num_heads = 0;
    int64_t num_kv_heads = 0;
    int64_t head_dim = 0;
    int64_t vocab_size = 0;
    int64_t max_position_embeddings = 0;
    double rope_theta = 10000.0;
    RopeScaling rope_scaling;
    double rms_norm_eps = 1e-6;
    bool tie_word_embeddings = false;
    bool qkv_bias = false;       // biases on q/k/v_proj (attention_bias; qwen2: always)
    bool o_bias = false;         // bias on o_proj (llama and qwen3 attention_bias)
    bool mlp_bias = false;       // biases on gate/up/down (llama mlp_bias)
    bool qk_norm = false;        // qwen3: RMSNorm over head_dim on q and k before RoPE
    int64_t sliding_window = 0;  // mistral: keys older than this many positions are masked; 0 none
    int32_t bos_token_id = -1;
    std::vector<int32_t> eos_token_ids;
    // Qwen3.5:
    std::vector<Mixer> mixers;     // per layer (layer_types); empty: attention everywhere
    DeltaNetConfig delta;          // the Gated DeltaNet layers' sizes
    bool attn_gate = false;        // q_proj makes query and a sigmoid output gate, per head
    bool norm_offset = false;      // RMSNorms (but the DeltaNet's gated one) scale by 1 + w
    double rotary_fraction = 1.0;  // partial_rotary_factor: RoPE on the first part of a head
    // Where the text model's tensors live: "model." (causal LM) or
    // "model.language_model." (the multimodal layout); set from the
    // checkpoint by resolve_prefix.
    std::string prefix = "model.";

    // `what` names the source (e.g. the file) in errors.
    static ModelConfig from_json(const nlohmann::json& j, const std::string& what);
    // A config.json file or a folder holding one.
    static ModelConfig load(const std::string& path);
    static ModelConfig parse(const std::string& json_text, const std::string& what);

    int64_t q_dim() const { return num_heads * head_dim; }
    // q_proj's outputs: the query, and with attn_gate the gate beside it.
    int64_t q_proj_dim() const { return attn_gate ? 2 * q_dim() : q_dim(); }
    int64_t rotary_dim() const;  // head dims RoPE turns (even; head_dim unless partial)
    bool is_delta(int64_t layer) const {
        return !mixers.empty() && mixers.at(static_cast<size_t>(layer)) == Mixer::gated_delta;
    }
    bool hybrid() const { return !mixers.empty(); }
    std::string layer_prefix(int64_t layer) const;  // e.g. "model.layers.3."
    int64_t kv_dim() const { return num_kv_heads * head_dim; }
    std::string summary() const;         // one line
    std::string hybrid_summary() const;  // the Qwen3.5 part of summary(), or ""
};

struct ExpectedTensor {
    std::string name;
    std::vector<int64_t> shape;
};
// Every tensor the runtime reads, with the shape config implies (HF names
// under c.prefix: model.embed_tokens.weight,
// model.layers.{i}.self_attn.q_proj.weight, ...; Qwen3.5's DeltaNet layers
// model.layers.{i}.linear_attn.*).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c);

// Sets c.prefix to where the checkpoint keeps the text model:
// "model.language_model." when it holds that embedding, else "model.".
void resolve_prefix(ModelConfig& c, const Checkpoint& ckpt);

// Throws one error listing every missing tensor and shape mismatch (up to a
// few dozen), naming the checkpoint. U8 tensors (BLR payloads) are checked
// against their shape when the model is loaded, not here.
void check_checkpoint(const ModelConfig& c, const Checkpoint& ckpt);

}  // namespace cortiq::io
