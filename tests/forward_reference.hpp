// Shared by the forward-pass tests (test_forward.cpp on the CPU,
// test_forward_gpu.cpp on the GPU): where the data is, the golden logits
// from transformers, the error metric, and small random models with a plain
// double-precision reference forward pass written from the equations,
// independent of src/model.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/rng.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "require.hpp"

namespace cortiq::test {

namespace fs = std::filesystem;
using nlohmann::json;

// $VAR if set (a copy of the data elsewhere, e.g. on a GPU machine), else
// the path fixed at build time.
inline fs::path env_or(const char* var, const char* fallback) {
    const char* v = std::getenv(var);
    return fs::path(v && *v ? v : fallback);
}

inline const fs::path kData = shared_data();
inline const fs::path kGolden = env_or("CORTIQ_SOURCE_DIR", CORTIQ_SOURCE_DIR) / "tests/golden";

// ‖a − b‖ / ‖b‖ over n values.
inline double rel_err(const float* a, const float* b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
        const double d = static_cast<double>(a[i]) - b[i];
        num += d * d;
        den += static_cast<double>(b[i]) * b[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

struct Golden {
    std::vector<std::vector<int32_t>> seqs;
    std::vector<int64_t> shape;  // [seqs, T, vocab]
    std::vector<float> logits;
};

inline Golden load_golden(const std::string& name) {
    Golden g;
    std::ifstream in(kGolden / (name + ".json"));
    EXPECT_TRUE(in) << name;
    json j = json::parse(in);
    g.seqs = j.at("seqs").get<std::vector<std::vector<int32_t>>>();
    g.shape = j.at("logits_shape").get<std::vector<int64_t>>();
    const int64_t n = g.shape[0] * g.shape[1] * g.shape[2];
    g.logits.resize(static_cast<size_t>(n));
    std::ifstream bin(kGolden / (name + ".logits.f32"), std::ios::binary);
    bin.read(reinterpret_cast<char*>(g.logits.data()), n * 4);
    EXPECT_EQ(bin.gcount(), n * 4) << name;
    return g;
}

// A small random model written as a HF folder, and a plain double-precision
// forward pass written from the equations, independent of src/model.
struct SyntheticModel {
    json cfg;
    std::map<std::string, std::vector<double>> w;
    fs::path dir;

    SyntheticModel(json config, uint64_t seed, const std::string& tag) : cfg(std::move(config)) {
        const auto c = io::ModelConfig::from_json(cfg, tag);
        Rng rng(seed);
        dir = fs::temp_directory_path() / fmt::format("cortiq_fwd_{}_{}", ::getpid(), tag);
        fs::create_directories(dir);
        io::SafetensorsWriter wr;
        for (const auto& e : io::expected_tensors(c)) {
            int64_t n = 1;
            for (auto d : e.shape) n *= d;
            const bool norm = e.name.find("norm") != std::string::npos;
            const double scale = norm ? 0.2 : 1.0 / std::sqrt(static_cast<double>(e.shape.back()));
            std::vector<double> v(static_cast<size_t>(n));
            std::vector<float> f(v.size());
            for (size_t i = 0; i < v.size(); ++i) {
                f[i] = static_cast<float>((norm ? 1.0 : 0.0) + scale * rng.normal());
                v[i] = f[i];
            }
            w[e.name] = v;
            wr.add_f32(e.name, e.shape, f);
        }
        wr.write((dir / "model.safetensors").string());
        std::ofstream(dir / "config.json") << cfg.dump(2);
    }
    ~SyntheticModel() { fs::remove_all(dir); }

    // y = W x (+ b) for W m × n stored row-major.
    std::vector<double> lin(const std::string& p, const std::vector<double>& x) const {
        const auto& W = w.at(p + ".weight");
        const size_t n = x.size(), m = W.size() / n;
        std::vector<double> y(m, 0.0);
        for (size_t i = 0; i < m; ++i)
            for (size_t j = 0; j < n; ++j) y[i] += W[i * n + j] * x[j];
        if (auto it = w.find(p + ".bias"); it != w.end())
            for (size_t i = 0; i < m; ++i) y[i] += it->second[i];
        return y;
    }
    static std::vector<double> rms(const std::vector<double>& x, const std::vector<double>& g,
                                   double eps) {
        double s = 0;
        for (double v : x) s += v * v;
        const double inv = 1 / std::sqrt(s / x.size() + eps);
        std::vector<double> y(x.size());
        for (size_t i = 0; i < x.size(); ++i) y[i] = g[i] * x[i] * inv;
        return y;
    }

    std::vector<std::vector<double>> forward(const std::vector<int32_t>& toks) const {
        const auto c = io::ModelConfig::from_json(cfg, "ref");
        const int64_t T = toks.size(), H = c.hidden_size, hd = c.head_dim, nh = c.num_heads,
                      nkv = c.num_kv_heads;
        const double eps = c.rms_norm_eps;
        // inv_freq with scaling, from the transformers definitions.
        std::vector<double> inv(hd / 2);
        for (int64_t i = 0; i < hd / 2; ++i) {
            double f = std::pow(c.rope_theta, -2.0 * i / hd);
            const auto& s = c.rope_scaling;
            if (s.type == "linear") f /= s.factor;
            if (s.type == "llama3") {
                const double wl = 2 * M_PI / f, lo = s.original_max_position / s.low_freq_factor,
                             hi = s.original_max_position / s.high_freq_factor;
                if (wl > lo)
                    f /= s.factor;
                else if (wl >= hi) {
                    const double sm = (s.original_max_position / wl - s.low_freq_factor) /
                                      (s.high_freq_factor - s.low_freq_factor);
                    f = (1 - sm) * f / s.factor + sm * f;
                }
            }
            inv[i] = f;
        }
        auto rope = [&](std::vector<double>& v, int64_t heads, int64_t pos) {
            for (int64_t h = 0; h < heads; ++h)
                for (int64_t i = 0; i < hd / 2; ++i) {
                    double& a = v[h * hd + i];
                    double& b = v[h * hd + i + hd / 2];
                    const double cs = std::cos(pos * inv[i]), sn = std::sin(pos * inv[i]);
                    const double a2 = a * cs - b * sn, b2 = b * cs + a * sn;
                    a = a2;
                    b = b2;
                }
        };
        std::vector<std::vector<double>> x(T);
        const auto& E = w.at("model.embed_tokens.weight");
        for (int64_t t = 0; t < T; ++t)
            x[t].assign(E.begin() + toks[t] * H, E.begin() + (toks[t] + 1) * H);
        for (int64_t l = 0; l < c.num_layers; ++l) {
            const std::string p = fmt::format("model.layers.{}.", l);
            std::vector<std::vector<double>> q(T), k(T), v(T);
            for (int64_t t = 0; t < T; ++t) {
                const auto n1 = rms(x[t], w.at(p + "input_layernorm.weight"), eps);
                q[t] = lin(p + "self_attn.q_proj", n1);
                k[t] = lin(p + "self_attn.k_proj", n1);
                v[t] = lin(p + "self_attn.v_proj", n1);
                if (c.qk_norm) {
                    for (int64_t h = 0; h < nh; ++h) {
                        std::vector<double> s(q[t].begin() + h * hd, q[t].begin() + (h + 1) * hd);
                        s = rms(s, w.at(p + "self_attn.q_norm.weight"), eps);
                        std::copy(s.begin(), s.end(), q[t].begin() + h * hd);
                    }
                    for (int64_t h = 0; h < nkv; ++h) {
                        std::vector<double> s(k[t].begin() + h * hd, k[t].begin() + (h + 1) * hd);
                        s = rms(s, w.at(p + "self_attn.k_norm.weight"), eps);
                        std::copy(s.begin(), s.end(), k[t].begin() + h * hd);
                    }
                }
                rope(q[t], nh, t);
                rope(k[t], nkv, t);
            }
            for (int64_t t = 0; t < T; ++t) {
                std::vector<double> att(nh * hd, 0.0);
                for (int64_t h = 0; h < nh; ++h) {
                    const int64_t g = h / (nh / nkv);
                    std::vector<double> s(t + 1, -INFINITY);
                    double mx = -INFINITY;
                    for (int64_t j = 0; j <= t; ++j) {
                        if (c.sliding_window > 0 && j <= t - c.sliding_window) continue;
                        double d = 0;
                        for (int64_t e = 0; e < hd; ++e) d += q[t][h * hd + e] * k[j][g * hd + e];
                        s[j] = d / std::sqrt(double(hd));
                        mx = std::max(mx, s[j]);
                    }
                    double sum = 0;
                    for (auto& z : s) sum += z = std::exp(z - mx);
                    for (int64_t j = 0; j <= t; ++j)
                        for (int64_t e = 0; e < hd; ++e)
                            att[h * hd + e] += s[j] / sum * v[j][g * hd + e];
                }
                const auto o = lin(p + "self_attn.o_proj", att);
                for (int64_t i = 0; i < H; ++i) x[t][i] += o[i];
                const auto n2 = rms(x[t], w.at(p + "post_attention_layernorm.weight"), eps);
                const auto gt = lin(p + "mlp.gate_proj", n2), up = lin(p + "mlp.up_proj", n2);
                std::vector<double> a(gt.size());
                for (size_t i = 0; i < a.size(); ++i) a[i] = gt[i] / (1 + std::exp(-gt[i])) * up[i];
                const auto dn = lin(p + "mlp.down_proj", a);
                for (int64_t i = 0; i < H; ++i) x[t][i] += dn[i];
            }
        }
        std::vector<std::vector<double>> logits(T);
        const std::string head = c.tie_word_embeddings ? "model.embed_tokens" : "lm_head";
        for (int64_t t = 0; t < T; ++t) {
            const auto n = rms(x[t], w.at("model.norm.weight"), eps);
            const auto& Wh = w.at(head + ".weight");
            logits[t].assign(c.vocab_size, 0.0);
            for (int64_t i = 0; i < c.vocab_size; ++i)
                for (int64_t j = 0; j < H; ++j) logits[t][i] += Wh[i * H + j] * n[j];
        }
        return logits;
    }
};

inline json small(const std::string& type) {
    return json{{"model_type", type},       {"hidden_size", 32},
                {"intermediate_size", 48},  {"num_hidden_layers", 2},
                {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                {"vocab_size", 50},         {"rms_norm_eps", 1e-5},
                {"rope_theta", 10000.0},    {"max_position_embeddings", 64}};
}

// A small llama with a tied head, attention and MLP biases and llama3 RoPE
// scaling: every optional piece of the Llama family at once.
inline json small_llama3_tied_biased() {
    auto c = small("llama");
    c["tie_word_embeddings"] = true;
    c["attention_bias"] = true;
    c["mlp_bias"] = true;
    c["rope_scaling"] = {{"rope_type", "llama3"},
                         {"factor", 8.0},
                         {"low_freq_factor", 1.0},
                         {"high_freq_factor", 4.0},
                         {"original_max_position_embeddings", 16}};
    return c;
}

}  // namespace cortiq::test
