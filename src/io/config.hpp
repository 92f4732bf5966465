// config.json of a Hugging Face causal LM → ModelConfig, for the decoder
// families cortiq runs: llama, mistral, qwen2, qwen3. Defaults follow the
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

struct ModelConfig {
    std::string model_type;  // llama, mistral, qwen2, qwen3
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

    // `what` names the source (e.g. the file) in errors.
    static ModelConfig from_json(const nlohmann::json& j, const std::string& what);
    // A config.json file or a folder holding one.
    static ModelConfig load(const std::string& path);
    static ModelConfig parse(const std::string& json_text, const std::string& what);

    int64_t q_dim() const { return num_heads * head_dim; }
    int64_t kv_dim() const { return num_kv_heads * head_dim; }
    std::string summary() const;  // one line
};

struct ExpectedTensor {
    std::string name;
    std::vector<int64_t> shape;
};
// Every tensor the runtime reads, with the shape config implies (HF names:
// model.embed_tokens.weight, model.layers.{i}.self_attn.q_proj.weight, ...).
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c);

// Throws one error listing every missing tensor and shape mismatch (up to a
// few dozen), naming the checkpoint. U8 tensors (BLR payloads) are checked
// against their shape when the model is loaded, not here.
void check_checkpoint(const ModelConfig& c, const Checkpoint& ckpt);

}  // namespace cortiq::io
