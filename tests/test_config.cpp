// config.json parsing, defaults per model type, refusals, and the check of a
// checkpoint's tensors against the config.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "require.hpp"

namespace fs = std::filesystem;
using namespace cortiq;
using namespace cortiq::io;
using nlohmann::json;

namespace {

json base(const std::string& type) {
    return json{{"model_type", type},     {"hidden_size", 64},        {"intermediate_size", 128},
                {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                {"vocab_size", 100}};
}

std::string error_of(const json& j) {
    try {
        ModelConfig::from_json(j, "cfg.json");
    } catch (const Error& e) {
        return e.what();
    }
    return "";
}

}  // namespace

TEST(Config, LlamaDefaults) {
    const auto c = ModelConfig::from_json(base("llama"), "cfg.json");
    EXPECT_EQ(c.model_type, "llama");
    EXPECT_EQ(c.hidden_size, 64);
    EXPECT_EQ(c.head_dim, 16);  // hidden / heads
    EXPECT_EQ(c.num_kv_heads, 2);
    EXPECT_EQ(c.q_dim(), 64);
    EXPECT_EQ(c.kv_dim(), 32);
    EXPECT_DOUBLE_EQ(c.rope_theta, 10000.0);
    EXPECT_EQ(c.rope_scaling.type, "default");
    EXPECT_FALSE(c.tie_word_embeddings);
    EXPECT_FALSE(c.qkv_bias);
    EXPECT_FALSE(c.o_bias);
    EXPECT_FALSE(c.qk_norm);
    EXPECT_EQ(c.sliding_window, 0);

    auto j = base("llama");
    j.erase("num_key_value_heads");
    j["attention_bias"] = true;
    j["tie_word_embeddings"] = true;
    j["head_dim"] = 32;
    j["rms_norm_eps"] = 1e-5;
    j["eos_token_id"] = json::array({7, 9});
    const auto d = ModelConfig::from_json(j, "cfg.json");
    EXPECT_EQ(d.num_kv_heads, 4);  // defaults to heads
    EXPECT_EQ(d.head_dim, 32);
    EXPECT_TRUE(d.qkv_bias && d.o_bias && d.tie_word_embeddings);
    EXPECT_DOUBLE_EQ(d.rms_norm_eps, 1e-5);
    EXPECT_EQ(d.eos_token_ids, (std::vector<int32_t>{7, 9}));
}

TEST(Config, FamilyDefaults) {
    const auto q2 = ModelConfig::from_json(base("qwen2"), "cfg.json");
    EXPECT_TRUE(q2.qkv_bias);  // Qwen2: q/k/v biases by default
    EXPECT_FALSE(q2.o_bias);
    EXPECT_FALSE(q2.qk_norm);
    const auto q3 = ModelConfig::from_json(base("qwen3"), "cfg.json");
    EXPECT_TRUE(q3.qk_norm);
    EXPECT_FALSE(q3.qkv_bias);
    EXPECT_EQ(q3.head_dim, 128);  // Qwen3Config default
    EXPECT_DOUBLE_EQ(q3.rope_theta, 1e6);
    auto m = base("mistral");
    m["sliding_window"] = 4096;
    EXPECT_EQ(ModelConfig::from_json(m, "cfg.json").sliding_window, 4096);
    m["sliding_window"] = nullptr;
    EXPECT_EQ(ModelConfig::from_json(m, "cfg.json").sliding_window, 0);
}

TEST(Config, Rope) {
    auto j = base("llama");
    j["rope_parameters"] = {{"rope_theta", 500000.0}, {"rope_type", "default"}};
    EXPECT_DOUBLE_EQ(ModelConfig::from_json(j, "c").rope_theta, 500000.0);
    j["rope_theta"] = 500000.0;  // both, agreeing
    EXPECT_DOUBLE_EQ(ModelConfig::from_json(j, "c").rope_theta, 500000.0);
    j["rope_theta"] = 10000.0;  // both, disagreeing
    EXPECT_NE(error_of(j).find("disagree"), std::string::npos);

    auto l3 = base("llama");
    l3["rope_theta"] = 500000.0;
    l3["rope_scaling"] = {{"rope_type", "llama3"},
                          {"factor", 8.0},
                          {"low_freq_factor", 1.0},
                          {"high_freq_factor", 4.0},
                          {"original_max_position_embeddings", 8192}};
    const auto c = ModelConfig::from_json(l3, "c");
    EXPECT_EQ(c.rope_scaling.type, "llama3");
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
    EXPECT_EQ(c.rope_scaling.original_max_position, 8192);

    auto lin = base("llama");
    lin["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
    EXPECT_EQ(ModelConfig::from_json(lin, "c").rope_scaling.type, "linear");

    auto yarn = base("llama");
    yarn["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    EXPECT_NE(error_of(yarn).find("yarn"), std::string::npos);
}

TEST(Config, Refusals) {
    EXPECT_NE(error_of(base("gpt2")).find("'gpt2'"), std::string::npos);
    EXPECT_NE(error_of(base("gpt2")).find("cfg.json"), std::string::npos);
    json no_type = base("llama");
    no_type.erase("model_type");
    EXPECT_NE(error_of(no_type).find("model_type"), std::string::npos);
    json missing = base("llama");
    missing.erase("hidden_size");
    EXPECT_NE(error_of(missing).find("hidden_size"), std::string::npos);
    json gqa = base("llama");
    gqa["num_key_value_heads"] = 3;
    EXPECT_NE(error_of(gqa).find("multiple"), std::string::npos);
    json act = base("llama");
    act["hidden_act"] = "gelu";
    EXPECT_NE(error_of(act).find("gelu"), std::string::npos);
    json sw = base("qwen2");
    sw["use_sliding_window"] = true;
    EXPECT_NE(error_of(sw).find("use_sliding_window"), std::string::npos);
    json bad = base("llama");
    bad["hidden_size"] = "64";
    EXPECT_NE(error_of(bad).find("hidden_size"), std::string::npos);
    EXPECT_THROW(ModelConfig::parse("{not json", "x.json"), Error);
}

TEST(Config, CheckpointShapes) {
    auto j = base("llama");
    j["num_hidden_layers"] = 1;
    j["tie_word_embeddings"] = true;
    const auto c = ModelConfig::from_json(j, "cfg.json");
    const auto expected = expected_tensors(c);
    EXPECT_EQ(expected.size(), 1u + 9u + 1u);  // embed, 9 per layer, norm (tied: no lm_head)

    const fs::path dir = fs::temp_directory_path() / fmt::format("cortiq_cfg_{}", ::getpid());
    fs::create_directories(dir);
    const std::string path = (dir / "model.safetensors").string();
    auto write = [&](const std::string& skip, const std::string& bad) {
        SafetensorsWriter w;
        for (const auto& e : expected) {
            if (e.name == skip) continue;
            auto shape = e.shape;
            if (e.name == bad) shape.back() += 1;
            int64_t n = 1;
            for (auto d : shape) n *= d;
            w.add_f32(e.name, shape, std::vector<float>(static_cast<size_t>(n), 0.f));
        }
        w.write(path);
    };
    write("", "");
    EXPECT_NO_THROW(check_checkpoint(c, Checkpoint::open(path)));

    write("model.layers.0.mlp.up_proj.weight", "model.layers.0.self_attn.k_proj.weight");
    try {
        check_checkpoint(c, Checkpoint::open(path));
        FAIL() << "mismatch not detected";
    } catch (const Error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("missing tensor 'model.layers.0.mlp.up_proj.weight'"), std::string::npos)
            << msg;
        EXPECT_NE(msg.find("'model.layers.0.self_attn.k_proj.weight' has shape [32, 65]"),
                  std::string::npos)
            << msg;
        EXPECT_NE(msg.find(path), std::string::npos) << msg;
    }
    fs::remove_all(dir);
}

TEST(Config, SharedModels) {
    const fs::path data = cortiq::test::shared_data();
    REQUIRE_DATA_AT(data / "models");
    const auto s = ModelConfig::load((data / "models/stories260K").string());
    EXPECT_EQ(s.hidden_size, 64);
    EXPECT_EQ(s.num_heads, 8);
    EXPECT_EQ(s.num_kv_heads, 4);
    EXPECT_EQ(s.head_dim, 8);
    EXPECT_TRUE(s.tie_word_embeddings);
    EXPECT_DOUBLE_EQ(s.rms_norm_eps, 1e-5);
    const auto q = ModelConfig::load((data / "models/tiny-qwen3-6m/config.json").string());
    EXPECT_EQ(q.model_type, "qwen3");
    EXPECT_TRUE(q.qk_norm);
    EXPECT_EQ(q.head_dim, 64);
    EXPECT_DOUBLE_EQ(q.rope_theta, 10000.0);
    for (const char* m : {"stories260K", "tiny-llama-6m", "tiny-qwen3-6m"}) {
        const auto dir = (data / "models" / m).string();
        EXPECT_NO_THROW(check_checkpoint(ModelConfig::load(dir), Checkpoint::open(dir))) << m;
    }
}
