// Decode as `cortiq generate --device gpu` runs it (model::generate_batch on
// a model::GpuModel: prompts fed one by one, then one decode step for every
// sequence a token), on a random Llama of a 7B or 8B Llama-3 shape whose
// linear layers are packed at --bpw, side by side in one run with the same
// runtime on dense fp16 weights (WeightFormat::f16: `generate --dequant
// --dtype f16`). Prints tokens/s per runtime, batch and context, the packed
// runtime's ratio to fp16, and the time to the first token of a --prompt
// token prompt; --json FILE writes the rows for scripts/results/plot_decode.py.
//
//   bench_decode_gpu [--shapes 7b,8b] [--bpw 1.0] [--batch 1,4,16]
//                    [--ctx 256,2048] [--steps 64] [--prompt 512] [--layers 32]
//                    [--json FILE] [--only packed]
//
// The model file is written to a temporary folder and removed at exit: its
// signs are random bytes and its scales make each layer keep the size of its
// input, so the activations stay finite (the kernels' time does not depend
// on the values). Embedding and head are bf16, as in the checkpoints, and
// stay float (the packed runtime holds them in float32, the fp16 one in
// fp16). Times are wall-clock seconds of whole generate_batch calls after a
// warm-up call of the same shape (which captures the step graphs).
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"

#ifdef CORTIQ_HAVE_CUDA
#include <cuda_runtime.h>
#include <unistd.h>

#include "bench_common.hpp"
#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "core/half.hpp"
#include "io/safetensors.hpp"
#include "model/generate.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"

using namespace cortiq;
namespace fs = std::filesystem;

namespace {

struct Shape {
    std::string name;
    int64_t hidden, inter, heads, kv_heads, vocab;
    double rope_theta;
};

Shape shape_of(const std::string& s) {
    if (s == "7b") return {"7B Llama", 4096, 11008, 32, 32, 32000, 10000.0};
    if (s == "8b") return {"8B Llama-3", 4096, 14336, 32, 8, 128256, 500000.0};
    CORTIQ_FAIL("--shapes: 7b or 8b, got '{}'", s);
}

uint64_t splitmix(uint64_t& s) {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

// A payload of rank blr::rank_for(m, n, bpw): random signs; scales with
// h·ℓ·g = 1/√(r·n), so ‖Ŵx‖ ≈ ‖x‖ for random signs.
std::vector<uint8_t> random_payload(int64_t m, int64_t n, double bpw, uint64_t seed) {
    blr::Factors f;
    f.m = m;
    f.n = n;
    f.r = blr::rank_for(m, n, bpw, 1);
    CORTIQ_CHECK(f.r > 0, "{}x{} at {} bpw: no rank fits", m, n, bpw);
    blr::Path p;
    p.h.assign(static_cast<size_t>(m), 1.0);
    p.g.assign(static_cast<size_t>(n), 1.0);
    p.l.assign(static_cast<size_t>(f.r), 1.0 / std::sqrt(static_cast<double>(f.r * n)));
    f.paths.push_back(std::move(p));
    std::vector<uint8_t> out = blr::pack_scales(f);
    const uint64_t bits = blr::sign_bits_total(m, n, f.r, 1);
    uint8_t* s = out.data() + blr::off_signs(m, n, f.r, 1);
    uint64_t state = seed;
    for (uint64_t i = 0; i < bits / 8; ++i) s[i] = static_cast<uint8_t>(splitmix(state));
    if (bits % 8) s[bits / 8] = static_cast<uint8_t>(splitmix(state) & ((1u << (bits % 8)) - 1));
    return out;
}

std::vector<uint8_t> random_bf16(int64_t count, float scale, uint64_t seed) {
    std::vector<uint8_t> out(static_cast<size_t>(2 * count));
    uint64_t state = seed;
    for (int64_t i = 0; i < count; ++i) {
        const float u = static_cast<float>(splitmix(state) >> 40) / 16777216.0f - 0.5f;
        const uint16_t b = float_to_bf16(2.0f * scale * u);
        std::memcpy(out.data() + 2 * i, &b, 2);
    }
    return out;
}

void write_model(const Shape& sh, int64_t layers, double bpw, const fs::path& path) {
    io::SafetensorsWriter w;
    nlohmann::json cfg = {{"architectures", {"LlamaForCausalLM"}},
                          {"model_type", "llama"},
                          {"hidden_size", sh.hidden},
                          {"intermediate_size", sh.inter},
                          {"num_hidden_layers", layers},
                          {"num_attention_heads", sh.heads},
                          {"num_key_value_heads", sh.kv_heads},
                          {"vocab_size", sh.vocab},
                          {"rms_norm_eps", 1e-5},
                          {"rope_theta", sh.rope_theta},
                          {"max_position_embeddings", 8192},
                          {"tie_word_embeddings", false},
                          {"bos_token_id", 1},
                          {"eos_token_id", 2}};
    w.set_metadata("config", cfg.dump());
    const int64_t H = sh.hidden, kv = sh.kv_heads * (H / sh.heads);
    w.add("model.embed_tokens.weight", io::DType::BF16, {sh.vocab, H},
          random_bf16(sh.vocab * H, 1.0f, 1));
    w.add("lm_head.weight", io::DType::BF16, {sh.vocab, H},
          random_bf16(sh.vocab * H, 1.0f / std::sqrt(static_cast<float>(H)), 2));
    const std::vector<float> ones(static_cast<size_t>(H), 1.0f);
    w.add_f32("model.norm.weight", {H}, ones);
    uint64_t seed = 3;
    for (int64_t l = 0; l < layers; ++l) {
        const std::string p = fmt::format("model.layers.{}.", l);
        w.add_f32(p + "input_layernorm.weight", {H}, ones);
        w.add_f32(p + "post_attention_layernorm.weight", {H}, ones);
        const std::pair<const char*, std::pair<int64_t, int64_t>> linears[] = {
            {"self_attn.q_proj", {H, H}},     {"self_attn.k_proj", {kv, H}},
            {"self_attn.v_proj", {kv, H}},    {"self_attn.o_proj", {H, H}},
            {"mlp.gate_proj", {sh.inter, H}}, {"mlp.up_proj", {sh.inter, H}},
            {"mlp.down_proj", {H, sh.inter}}};
        for (const auto& [name, mn] : linears) {
            auto bytes = random_payload(mn.first, mn.second, bpw, ++seed * 7919);
            const auto size = static_cast<int64_t>(bytes.size());
            w.add(p + name + ".weight", io::DType::U8, {size}, std::move(bytes));
        }
    }
    w.write(path.string());
}

struct Config {
    std::string label;
    model::GpuOptions o;
    // CORTIQ_F16_DECODE_FROM while the runtime is made (PackedScratch reads
    // it then), or empty: the default
    std::string f16_from;
};

struct Row {
    std::string shape, runtime, kv, head;
    bool graphs;
    int64_t batch, ctx;
    double tokens_per_s, ms_per_step;
    int64_t weight_bytes;
};

std::vector<int32_t> random_prompt(int64_t n, int64_t vocab, uint64_t seed) {
    std::vector<int32_t> p(static_cast<size_t>(n));
    uint64_t s = seed;
    for (auto& t : p) t = static_cast<int32_t>(3 + splitmix(s) % static_cast<uint64_t>(vocab - 3));
    return p;
}

// tokens/s of `steps` decode steps of B sequences after prompts of ctx
// tokens, and the seconds of the prompts (prefill): the second of two
// identical calls.
std::pair<double, double> measure(model::GpuModel& g, int64_t B, int64_t ctx, int64_t steps) {
    std::vector<std::vector<int32_t>> prompts;
    for (int64_t s = 0; s < B; ++s)
        prompts.push_back(random_prompt(ctx, g.config().vocab_size, 100 + s));
    model::GenerateOptions opt;
    opt.max_tokens = steps + 1;  // the first comes from the prompt
    model::GenerateTiming t;
    model::generate_batch(g, prompts, opt, {}, &t);  // warm-up: sizes, graphs
    model::generate_batch(g, prompts, opt, {}, &t);
    return {static_cast<double>(B * t.decode_steps) / t.decode_seconds, t.prefill_seconds};
}

}  // namespace

int main(int argc, char** argv) try {
    std::string shapes = "7b,8b", batch_list = "1,4,16", ctx_list = "256,2048", json_path;
    double bpw = 1.0;
    int64_t steps = 64, prompt = 512, layers = 32;
    std::string only;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--shapes")
            shapes = v;
        else if (k == "--bpw")
            bpw = std::stod(v);
        else if (k == "--batch")
            batch_list = v;
        else if (k == "--ctx")
            ctx_list = v;
        else if (k == "--steps")
            steps = std::stoll(v);
        else if (k == "--prompt")
            prompt = std::stoll(v);
        else if (k == "--layers")
            layers = std::stoll(v);
        else if (k == "--json")
            json_path = v;
        else if (k == "--only")
            only = v;
        else
            CORTIQ_FAIL("unknown flag {}", k);
    }
    const auto batches = bench::parse_list<int64_t>(batch_list);
    const auto ctxs = bench::parse_list<int64_t>(ctx_list);
    const char* base = std::getenv("TMPDIR");
    std::string dir_tmpl =
        (base && *base ? std::string(base) : std::string("/tmp")) + "/cortiq_decode_XXXXXX";
    std::vector<char> buf(dir_tmpl.begin(), dir_tmpl.end());
    buf.push_back('\0');
    CORTIQ_CHECK(mkdtemp(buf.data()) != nullptr, "cannot make a temporary folder");
    const fs::path dir(buf.data());
    struct Cleanup {
        fs::path d;
        ~Cleanup() {
            std::error_code ec;
            fs::remove_all(d, ec);
        }
    } cleanup{dir};

    std::vector<Row> rows;
    nlohmann::json ttft = nlohmann::json::array();
    for (const std::string& sname : bench::parse_list<std::string>(shapes)) {
        const Shape sh = shape_of(sname);
        const fs::path file = dir / (sname + ".safetensors");
        const auto t0 = std::chrono::steady_clock::now();
        write_model(sh, layers, bpw, file);
        const model::Model m = model::Model::load(file.string());
        fs::remove(file);
        fmt::print(stderr, "{}: {} layers at {} bpw made in {:.1f} s\n", sh.name, layers, bpw,
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
        // generate's defaults (graph, fp16 cache and head), then one of them
        // changed at a time (B = 1 only), then the dense fp16 runtime
        std::vector<Config> configs(6);
        for (Config& c : configs) {
            c.label = "packed";
            c.o.kv = model::KvFormat::f16;
            c.o.head = model::HeadFormat::f16;
        }
        configs[1].o.graphs = false;
        configs[2].o.kv = model::KvFormat::f32;
        configs[3].o.head = model::HeadFormat::f32;
        configs[4].label = "fp16";
        configs[4].o.weights = model::WeightFormat::f16;
        // every batch on the binary tensor cores (Decode::planes), none on the fp16 ones
        configs[5].label = "packed, planes";
        configs[5].f16_from = "17";
        for (const Config& c : configs) {
            // --only packed: generate's defaults on the packed runtime alone
            if (only == "packed" &&
                (c.label != "packed" || !c.o.graphs || c.o.kv != model::KvFormat::f16 ||
                 c.o.head != model::HeadFormat::f16))
                continue;
            if (!c.f16_from.empty()) setenv("CORTIQ_F16_DECODE_FROM", c.f16_from.c_str(), 1);
            model::GpuModel g(m, c.o);
            if (!c.f16_from.empty()) unsetenv("CORTIQ_F16_DECODE_FROM");
            const bool full =
                c.o.graphs && c.o.kv == model::KvFormat::f16 && c.o.head == model::HeadFormat::f16;
            for (const int64_t ctx : ctxs)
                for (const int64_t B : batches) {
                    if (!full && B != 1) continue;  // the rows of one change: B = 1
                    const auto [tps, prefill] = measure(g, B, ctx, steps);
                    const bool head16 = c.o.head == model::HeadFormat::f16 ||
                                        c.o.weights == model::WeightFormat::f16;
                    rows.push_back({sh.name, c.label,
                                    c.o.kv == model::KvFormat::f16 ? "f16" : "f32",
                                    head16 ? "f16" : "f32", c.o.graphs, B, ctx, tps, 1e3 * B / tps,
                                    g.weight_bytes()});
                    fmt::print(stderr, "  {} kv {} head {} graph {} B {} ctx {}: {:.1f} tok/s\n",
                               c.label, rows.back().kv, rows.back().head, c.o.graphs, B, ctx, tps);
                }
            if (full && c.f16_from.empty()) {
                const auto [tps, prefill] = measure(g, 1, prompt, 2);
                (void)tps;
                ttft.push_back({{"shape", sh.name},
                                {"runtime", c.label},
                                {"prompt", prompt},
                                {"seconds", prefill}});
            }
        }
    }
    fmt::print(
        "| shape | runtime | KV cache | head | graph | B | context | tokens/s | ms/step | packed "
        "÷ fp16 |\n|---|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : rows) {
        double fp16 = 0;
        for (const Row& f : rows)
            if (f.shape == r.shape && f.runtime == "fp16" && f.batch == r.batch && f.ctx == r.ctx)
                fp16 = f.tokens_per_s;
        fmt::print("| {} | {} | {} | {} | {} | {} | {} | {:.1f} | {:.3f} | {} |\n", r.shape,
                   r.runtime, r.kv, r.head, r.graphs ? "yes" : "no", r.batch, r.ctx, r.tokens_per_s,
                   r.ms_per_step, fp16 > 0 ? fmt::format("{:.2f}×", r.tokens_per_s / fp16) : "");
    }
    fmt::print(
        "\n| shape | runtime | prompt tokens | time to first token (s) |\n|---|---|---|---|\n");
    for (const auto& t : ttft)
        fmt::print("| {} | {} | {} | {:.4f} |\n", t["shape"].get<std::string>(),
                   t["runtime"].get<std::string>(), t["prompt"].get<int64_t>(),
                   t["seconds"].get<double>());
    if (!json_path.empty()) {
        nlohmann::json j;
        cudaDeviceProp prop{};
        if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) j["device"] = prop.name;
        j["bpw"] = bpw;
        j["steps"] = steps;
        j["layers"] = layers;
        for (const Row& r : rows)
            j["rows"].push_back({{"shape", r.shape},
                                 {"runtime", r.runtime},
                                 {"kv", r.kv},
                                 {"head", r.head},
                                 {"graphs", r.graphs},
                                 {"batch", r.batch},
                                 {"ctx", r.ctx},
                                 {"tokens_per_s", r.tokens_per_s},
                                 {"ms_per_step", r.ms_per_step},
                                 {"weight_bytes", r.weight_bytes}});
        j["ttft"] = ttft;
        std::ofstream(json_path) << j.dump(1) << "\n";
    }
    return 0;
} catch (const std::exception& e) {
    fmt::print(stderr, "bench_decode_gpu: {}\n", e.what());
    return 1;
}
#else
int main() {
    fmt::print("bench_decode_gpu: this build has no CUDA\n");
    return 0;
}
#endif
