#include "io/config.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"
#include "io/safetensors.hpp"

namespace cortiq::io {

using nlohmann::json;

namespace {

const json* find(const json& j, const char* key) {
    auto it = j.find(key);
    return it == j.end() || it->is_null() ? nullptr : &*it;
}

int64_t get_int(const json& j, const char* key, const std::string& what, int64_t def = -1) {
    const json* v = find(j, key);
    if (!v) {
        CORTIQ_CHECK(def >= 0, "{}: missing '{}'", what, key);
        return def;
    }
    CORTIQ_CHECK(v->is_number_integer(), "{}: '{}' must be an integer, got {}", what, key,
                 v->dump());
    return v->get<int64_t>();
}

double get_double(const json& j, const char* key, const std::string& what, double def) {
    const json* v = find(j, key);
    if (!v) return def;
    CORTIQ_CHECK(v->is_number(), "{}: '{}' must be a number, got {}", what, key, v->dump());
    const double d = v->get<double>();
    CORTIQ_CHECK(std::isfinite(d), "{}: '{}' must be finite, got {}", what, key, v->dump());
    return d;
}

// A token id of the config (bos_token_id, eos_token_id, pad_token_id): absent
// or null gives nothing; otherwise an integer in [0, vocab_size).
std::vector<int32_t> get_token_ids(const json& j, const char* key, int64_t vocab,
                                   const std::string& what) {
    std::vector<int32_t> ids;
    const json* v = find(j, key);
    if (!v) return ids;
    auto one = [&](const json& x) {
        CORTIQ_CHECK(x.is_number_integer(), "{}: '{}' must be an integer token id, got {}", what,
                     key, x.dump());
        const bool in_range = x.is_number_unsigned()
                                  ? x.get<uint64_t>() < uint64_t(vocab)
                                  : x.get<int64_t>() >= 0 && x.get<int64_t>() < vocab;
        CORTIQ_CHECK(in_range, "{}: '{}' = {} is not a token id (vocab_size {})", what, key,
                     x.dump(), vocab);
        ids.push_back(static_cast<int32_t>(x.get<int64_t>()));
    };
    if (v->is_array()) {
        for (const auto& x : *v) one(x);
    } else {
        one(*v);
    }
    return ids;
}

bool get_bool(const json& j, const char* key, const std::string& what, bool def) {
    const json* v = find(j, key);
    if (!v) return def;
    CORTIQ_CHECK(v->is_boolean(), "{}: '{}' must be true or false, got {}", what, key, v->dump());
    return v->get<bool>();
}

// rope_scaling (transformers 4.x) or rope_parameters (5.x).
RopeScaling parse_rope_scaling(const json& r, const std::string& what) {
    RopeScaling s;
    CORTIQ_CHECK(r.is_object(), "{}: rope scaling must be an object, got {}", what, r.dump());
    const json* t = find(r, "rope_type");
    if (!t) t = find(r, "type");
    if (t) {
        CORTIQ_CHECK(t->is_string(), "{}: rope_type must be a string", what);
        s.type = t->get<std::string>();
    }
    if (s.type == "default") return s;
    if (s.type == "linear") {
        s.factor = get_double(r, "factor", what, 0.0);
        CORTIQ_CHECK(s.factor > 0, "{}: linear RoPE scaling needs factor > 0", what);
        return s;
    }
    if (s.type == "llama3") {
        s.factor = get_double(r, "factor", what, 0.0);
        s.low_freq_factor = get_double(r, "low_freq_factor", what, 1.0);
        s.high_freq_factor = get_double(r, "high_freq_factor", what, 4.0);
        s.original_max_position = get_int(r, "original_max_position_embeddings", what, 8192);
        CORTIQ_CHECK(
            s.factor > 0 && s.high_freq_factor > s.low_freq_factor && s.original_max_position > 0,
            "{}: bad llama3 RoPE scaling {}", what, r.dump());
        return s;
    }
    CORTIQ_FAIL("{}: RoPE scaling type '{}' is not supported (default, linear, llama3)", what,
                s.type);
}

// RoPE: top-level rope_theta (4.x) and/or rope_parameters (5.x), and the
// scaling of either.
void parse_rope(const json& j, const std::string& what, double def_theta, ModelConfig& c) {
    const json* top = find(j, "rope_theta");
    const json* params = find(j, "rope_parameters");
    double theta = def_theta;
    if (params) {
        CORTIQ_CHECK(params->is_object(), "{}: rope_parameters must be an object", what);
        theta = get_double(*params, "rope_theta", what, def_theta);
    }
    if (top) {
        CORTIQ_CHECK(top->is_number(), "{}: rope_theta must be a number", what);
        const double t = top->get<double>();
        CORTIQ_CHECK(!params || !find(*params, "rope_theta") || t == theta,
                     "{}: rope_theta {} and rope_parameters.rope_theta {} disagree", what, t,
                     theta);
        theta = t;
    }
    CORTIQ_CHECK(theta > 0, "{}: rope_theta must be positive", what);
    c.rope_theta = theta;
    if (const json* rs = find(j, "rope_scaling"))
        c.rope_scaling = parse_rope_scaling(*rs, what + " rope_scaling");
    else if (params)
        c.rope_scaling = parse_rope_scaling(*params, what + " rope_parameters");
}

// Qwen3.5's own fields (configuration_qwen3_5.py, Qwen3_5TextConfig): the
// layer types (or full_attention_interval, default 4: every 4th layer full
// attention), the Gated DeltaNet sizes, the gated attention, (1 + w) norms and
// the partial rotary factor (rope_parameters or top level, default 0.25).
void parse_qwen35(const json& j, const std::string& what, ModelConfig& c) {
    c.qk_norm = true;
    c.attn_gate = get_bool(j, "attn_output_gate", what, true);
    c.norm_offset = true;
    double prf = get_double(j, "partial_rotary_factor", what, 0.25);
    if (const json* rp = find(j, "rope_parameters"); rp && rp->is_object())
        prf = get_double(*rp, "partial_rotary_factor", what, prf);
    CORTIQ_CHECK(prf > 0 && prf <= 1, "{}: partial_rotary_factor {} must be in (0, 1]", what, prf);
    c.rotary_fraction = prf;
    CORTIQ_CHECK(c.rotary_dim() >= 2 && c.rotary_dim() % 2 == 0,
                 "{}: head_dim {} × partial_rotary_factor {} must give an even rotary size", what,
                 c.head_dim, prf);
    c.mixers.clear();
    if (const json* lt = find(j, "layer_types")) {
        CORTIQ_CHECK(lt->is_array() && static_cast<int64_t>(lt->size()) == c.num_layers,
                     "{}: layer_types must list {} layer types", what, c.num_layers);
        for (const auto& t : *lt) {
            const std::string s = t.is_string() ? t.get<std::string>() : t.dump();
            CORTIQ_CHECK(s == "linear_attention" || s == "full_attention",
                         "{}: layer type '{}' is not supported (linear_attention, full_attention)",
                         what, s);
            c.mixers.push_back(s == "linear_attention" ? Mixer::gated_delta : Mixer::attention);
        }
    } else {
        const int64_t every = get_int(j, "full_attention_interval", what, 4);
        CORTIQ_CHECK(every > 0, "{}: full_attention_interval must be positive", what);
        for (int64_t i = 0; i < c.num_layers; ++i)
            c.mixers.push_back((i + 1) % every ? Mixer::gated_delta : Mixer::attention);
    }
    DeltaNetConfig& d = c.delta;
    d.conv_kernel = get_int(j, "linear_conv_kernel_dim", what, 4);
    d.k_dim = get_int(j, "linear_key_head_dim", what, 128);
    d.v_dim = get_int(j, "linear_value_head_dim", what, 128);
    d.k_heads = get_int(j, "linear_num_key_heads", what, 16);
    d.v_heads = get_int(j, "linear_num_value_heads", what, 32);
    constexpr int64_t kMax = int64_t{1} << 16;
    CORTIQ_CHECK(d.conv_kernel > 0 && d.k_dim > 0 && d.v_dim > 0 && d.k_heads > 0 &&
                     d.v_heads > 0 && d.conv_kernel <= 64 && d.k_dim <= kMax && d.v_dim <= kMax &&
                     d.k_heads <= kMax && d.v_heads <= kMax && d.v_heads % d.k_heads == 0,
                 "{}: bad linear attention sizes (conv {}, key heads {} × {}, value heads {} × {}; "
                 "value heads must be a multiple of key heads)",
                 what, d.conv_kernel, d.k_heads, d.k_dim, d.v_heads, d.v_dim);
}

// A qwen3_5 (multimodal) config: its text_config, with the top level's token
// ids and tied embeddings where the text part does not set them.
json qwen35_text_config(const json& j, const std::string& what) {
    const json* t = find(j, "text_config");
    CORTIQ_CHECK(t && t->is_object(), "{}: model_type qwen3_5 needs a text_config object", what);
    json text = *t;
    for (const char* key : {"tie_word_embeddings", "bos_token_id", "eos_token_id", "pad_token_id"})
        if (!find(text, key) && find(j, key)) text[key] = j[key];
    if (get_bool(j, "tie_word_embeddings", what, false)) text["tie_word_embeddings"] = true;
    text["model_type"] = "qwen3_5_text";
    return text;
}

}  // namespace

int64_t ModelConfig::rotary_dim() const {
    // transformers: int(head_dim * partial_rotary_factor)
    return static_cast<int64_t>(static_cast<double>(head_dim) * rotary_fraction);
}

std::string ModelConfig::layer_prefix(int64_t layer) const {
    return fmt::format("{}layers.{}.", prefix, layer);
}

ModelConfig ModelConfig::from_json(const json& j, const std::string& what) {
    CORTIQ_CHECK(j.is_object(), "{}: not a JSON object", what);
    ModelConfig c;
    const json* mt = find(j, "model_type");
    CORTIQ_CHECK(mt && mt->is_string(), "{}: missing model_type", what);
    c.model_type = mt->get<std::string>();
    if (c.model_type == "qwen3_5")
        return from_json(qwen35_text_config(j, what), what + " text_config");
    const bool llama = c.model_type == "llama", mistral = c.model_type == "mistral",
               qwen2 = c.model_type == "qwen2", qwen3 = c.model_type == "qwen3",
               qwen35 = c.model_type == "qwen3_5_text";
    CORTIQ_CHECK(llama || mistral || qwen2 || qwen3 || qwen35,
                 "{}: model_type '{}' is not supported (llama, mistral, qwen2, qwen3, qwen3_5, "
                 "qwen3_5_text)",
                 what, c.model_type);

    c.hidden_size = get_int(j, "hidden_size", what);
    c.intermediate_size = get_int(j, "intermediate_size", what);
    c.num_layers = get_int(j, "num_hidden_layers", what);
    c.num_heads = get_int(j, "num_attention_heads", what);
    c.num_kv_heads = get_int(j, "num_key_value_heads", what, c.num_heads);
    c.vocab_size = get_int(j, "vocab_size", what);
    CORTIQ_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 &&
                     c.num_heads > 0 && c.num_kv_heads > 0 && c.vocab_size > 0,
                 "{}: sizes must be positive (hidden {}, intermediate {}, layers {}, heads {}, kv "
                 "heads {}, vocab {})",
                 what, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads,
                 c.num_kv_heads, c.vocab_size);
    // Upper bounds far beyond any real model, so that every size derived from
    // these (q_dim, shapes, element counts) stays well inside int64 and the
    // u32 fields of a payload header.
    constexpr int64_t kMaxDim = int64_t{1} << 24, kMaxLayers = 1 << 16;
    CORTIQ_CHECK(c.hidden_size <= kMaxDim && c.intermediate_size <= kMaxDim &&
                     c.num_heads <= kMaxDim && c.num_kv_heads <= kMaxDim &&
                     c.vocab_size <= int64_t{1} << 31 && c.num_layers <= kMaxLayers,
                 "{}: sizes out of range (hidden {}, intermediate {}, layers {}, heads {}, kv "
                 "heads {}, vocab {})",
                 what, c.hidden_size, c.intermediate_size, c.num_layers, c.num_heads,
                 c.num_kv_heads, c.vocab_size);
    CORTIQ_CHECK(c.num_heads % c.num_kv_heads == 0,
                 "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}", what,
                 c.num_heads, c.num_kv_heads);
    // Qwen3Config defaults head_dim to 128; the others derive it.
    const int64_t def_hd = qwen3 ? 128 : qwen35 ? 256 : c.hidden_size / c.num_heads;
    c.head_dim = get_int(j, "head_dim", what, def_hd);
    CORTIQ_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0 && c.head_dim <= kMaxDim &&
                     c.num_heads * c.head_dim <= kMaxDim,
                 "{}: head_dim {} must be positive, even, and heads × head_dim ≤ {}", what,
                 c.head_dim, kMaxDim);
    c.max_position_embeddings =
        get_int(j, "max_position_embeddings", what, llama ? 2048 : (qwen3 ? 40960 : 32768));
    CORTIQ_CHECK(c.max_position_embeddings > 0, "{}: max_position_embeddings must be positive",
                 what);

    // RoPE: top-level rope_theta (4.x) and/or rope_parameters (5.x).
    const double def_theta = qwen3 ? 1e6 : 10000.0;
    parse_rope(j, what, def_theta, c);

    c.rms_norm_eps = get_double(j, "rms_norm_eps", what, 1e-6);
    CORTIQ_CHECK(c.rms_norm_eps > 0, "{}: rms_norm_eps must be positive", what);
    c.tie_word_embeddings = get_bool(j, "tie_word_embeddings", what, false);

    const json* act = find(j, "hidden_act");
    if (act) {
        CORTIQ_CHECK(act->is_string(), "{}: hidden_act must be a string", what);
        const auto a = act->get<std::string>();
        CORTIQ_CHECK(a == "silu" || a == "swish", "{}: hidden_act '{}' is not supported (silu)",
                     what, a);
    }

    if (llama) {
        c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", what, false);
        c.mlp_bias = get_bool(j, "mlp_bias", what, false);
    } else if (qwen2) {
        c.qkv_bias = get_bool(j, "attention_bias", what, true);  // Qwen2: q/k/v biases
    } else if (qwen3 || qwen35) {
        c.qkv_bias = c.o_bias = get_bool(j, "attention_bias", what, false);
        c.qk_norm = true;
    }
    if (qwen35) parse_qwen35(j, what, c);
    if (mistral) {
        const int64_t w = get_int(j, "sliding_window", what, 0);
        CORTIQ_CHECK(w >= 0, "{}: sliding_window must be non-negative", what);
        c.sliding_window = w;
    } else if (qwen2 || qwen3 || qwen35) {
        CORTIQ_CHECK(!get_bool(j, "use_sliding_window", what, false),
                     "{}: use_sliding_window = true (per-layer sliding windows) is not supported",
                     what);
    }

    // Token ids index the embedding: each must be below vocab_size.
    const auto bos = get_token_ids(j, "bos_token_id", c.vocab_size, what);
    CORTIQ_CHECK(bos.size() <= 1, "{}: bos_token_id must be one id", what);
    if (!bos.empty()) c.bos_token_id = bos[0];
    c.eos_token_ids = get_token_ids(j, "eos_token_id", c.vocab_size, what);
    (void)get_token_ids(j, "pad_token_id", c.vocab_size, what);
    return c;
}

ModelConfig ModelConfig::parse(const std::string& json_text, const std::string& what) {
    json j = json::parse(json_text, nullptr, /*allow_exceptions=*/false);
    CORTIQ_CHECK(!j.is_discarded(), "{}: not valid JSON", what);
    return from_json(j, what);
}

ModelConfig ModelConfig::load(const std::string& path) {
    std::filesystem::path p(path);
    if (std::filesystem::is_directory(p)) p /= "config.json";
    std::ifstream in(p);
    CORTIQ_CHECK(in, "{}: cannot open", p.string());
    std::stringstream ss;
    ss << in.rdbuf();
    return parse(ss.str(), p.string());
}

std::string ModelConfig::summary() const {
    std::string rope = fmt::format("rope θ {:g}", rope_theta);
    if (rope_scaling.type != "default")
        rope += fmt::format(" {} ×{:g}", rope_scaling.type, rope_scaling.factor);
    return fmt::format(
               "{}: {} layers, hidden {}, intermediate {}, heads {}/{} × {}, vocab {}, {}, eps "
               "{:g}{}{}{}",
               model_type, num_layers, hidden_size, intermediate_size, num_heads, num_kv_heads,
               head_dim, vocab_size, rope, rms_norm_eps, tie_word_embeddings ? ", tied" : "",
               qkv_bias ? ", qkv bias" : "", qk_norm ? ", qk norm" : "") +
           hybrid_summary();
}

std::string ModelConfig::hybrid_summary() const {
    if (!hybrid()) return "";
    const auto n_delta = std::count(mixers.begin(), mixers.end(), Mixer::gated_delta);
    return fmt::format(
        "; {} Gated DeltaNet layers (key heads {} × {}, value heads {} × {}, conv {}) and {} "
        "full attention{}, rotary {} of {}",
        n_delta, delta.k_heads, delta.k_dim, delta.v_heads, delta.v_dim, delta.conv_kernel,
        num_layers - n_delta, attn_gate ? " with output gates" : "", rotary_dim(), head_dim);
}

namespace {

// The tensors of a Gated DeltaNet mixer (Qwen3_5GatedDeltaNet).
void expected_delta(const ModelConfig& c, const std::string& p, std::vector<ExpectedTensor>& out) {
    const DeltaNetConfig& d = c.delta;
    const int64_t h = c.hidden_size, v = d.value_dim();
    out.push_back({p + "linear_attn.in_proj_qkv.weight", {d.conv_dim(), h}});
    out.push_back({p + "linear_attn.in_proj_z.weight", {v, h}});
    out.push_back({p + "linear_attn.in_proj_b.weight", {d.v_heads, h}});
    out.push_back({p + "linear_attn.in_proj_a.weight", {d.v_heads, h}});
    out.push_back({p + "linear_attn.conv1d.weight", {d.conv_dim(), 1, d.conv_kernel}});
    out.push_back({p + "linear_attn.A_log", {d.v_heads}});
    out.push_back({p + "linear_attn.dt_bias", {d.v_heads}});
    out.push_back({p + "linear_attn.norm.weight", {d.v_dim}});
    out.push_back({p + "linear_attn.out_proj.weight", {h, v}});
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
    const int64_t h = c.hidden_size, f = c.intermediate_size, q = c.q_dim(), kv = c.kv_dim();
    std::vector<ExpectedTensor> out;
    out.push_back({c.prefix + "embed_tokens.weight", {c.vocab_size, h}});
    for (int64_t i = 0; i < c.num_layers; ++i) {
        const std::string p = c.layer_prefix(i);
        out.push_back({p + "input_layernorm.weight", {h}});
        out.push_back({p + "post_attention_layernorm.weight", {h}});
        out.push_back({p + "mlp.gate_proj.weight", {f, h}});
        out.push_back({p + "mlp.up_proj.weight", {f, h}});
        out.push_back({p + "mlp.down_proj.weight", {h, f}});
        if (c.mlp_bias) {
            out.push_back({p + "mlp.gate_proj.bias", {f}});
            out.push_back({p + "mlp.up_proj.bias", {f}});
            out.push_back({p + "mlp.down_proj.bias", {h}});
        }
        if (c.is_delta(i)) {
            expected_delta(c, p, out);
            continue;
        }
        out.push_back({p + "self_attn.q_proj.weight", {c.q_proj_dim(), h}});
        out.push_back({p + "self_attn.k_proj.weight", {kv, h}});
        out.push_back({p + "self_attn.v_proj.weight", {kv, h}});
        out.push_back({p + "self_attn.o_proj.weight", {h, q}});
        if (c.qkv_bias) {
            out.push_back({p + "self_attn.q_proj.bias", {c.q_proj_dim()}});
            out.push_back({p + "self_attn.k_proj.bias", {kv}});
            out.push_back({p + "self_attn.v_proj.bias", {kv}});
        }
        if (c.o_bias) out.push_back({p + "self_attn.o_proj.bias", {h}});
        if (c.qk_norm) {
            out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}});
            out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}});
        }
    }
    out.push_back({c.prefix + "norm.weight", {h}});
    if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, h}});
    return out;
}

void resolve_prefix(ModelConfig& c, const Checkpoint& ckpt) {
    c.prefix =
        ckpt.has("model.language_model.embed_tokens.weight") ? "model.language_model." : "model.";
}

void check_checkpoint(const ModelConfig& c, const Checkpoint& ckpt) {
    std::vector<std::string> problems;
    size_t count = 0;
    for (const auto& e : expected_tensors(c)) {
        std::string problem;
        if (!ckpt.has(e.name)) {
            problem = fmt::format("missing tensor '{}' (expected shape [{}])", e.name,
                                  fmt::join(e.shape, ", "));
        } else {
            const TensorInfo& t = ckpt.info(e.name);
            if (t.dtype == DType::U8) continue;  // a BLR payload, validated when loaded
            if (!is_float(t.dtype))
                problem = fmt::format("tensor '{}' has dtype {}, expected a float type", e.name,
                                      dtype_name(t.dtype));
            else if (t.shape != e.shape)
                problem = fmt::format("tensor '{}' has shape {}, config implies [{}]", e.name,
                                      t.shape_str(), fmt::join(e.shape, ", "));
        }
        if (problem.empty()) continue;
        if (problems.size() < 24) problems.push_back(std::move(problem));
        ++count;
    }
    if (count == 0) return;
    CORTIQ_FAIL(
        "{}: checkpoint does not match the config ({}):\n  {}{}", ckpt.path(), c.summary(),
        fmt::join(problems, "\n  "),
        count > problems.size() ? fmt::format("\n  ... and {} more", count - problems.size()) : "");
}

}  // namespace cortiq::io
