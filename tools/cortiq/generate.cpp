// cortiq generate MODEL --prompt TEXT [--max-tokens K] [--temp T] [--seed S] [--dequant]
//                      [--dtype f32|f16] [--kv auto|f32|f16] [--head auto|f32|f16]
//                      [--batch N | --prompts FILE]
//                      [--no-graph] [--no-verify] [--json]
#include "model/generate.hpp"

#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "core/memory_usage.hpp"
#include "core/parallel.hpp"
#include "io/model_tokenizer.hpp"
#include "io/text_file.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "runtime_args.hpp"

namespace cortiq::cli {

namespace {

struct GenerateArgs {
    std::string model, prompt, prompts_file, tokenizer, device = "cpu", kv = "auto", dtype = "f32";
    std::string head = "auto";
    int64_t max_tokens = 128, batch = 1;
    double temp = 0.0;
    uint64_t seed = 0;
    int threads = 0;
    bool ignore_eos = false, dequant = false, no_graph = false, no_verify = false, json = false;
};

// The prompts' texts: --prompt repeated --batch times, or one per non-empty
// line of --prompts.
std::vector<std::string> prompt_texts(const GenerateArgs& a) {
    if (a.prompts_file.empty())
        return std::vector<std::string>(static_cast<size_t>(a.batch), a.prompt);
    std::vector<std::string> out;
    const std::string text = io::read_text_file(a.prompts_file, "prompts");
    size_t at = 0;
    while (at <= text.size()) {
        const size_t end = std::min(text.find('\n', at), text.size());
        std::string line = text.substr(at, end - at);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) out.push_back(std::move(line));
        at = end + 1;
    }
    CORTIQ_CHECK(!out.empty(), "--prompts {}: no prompt (one per line)", a.prompts_file);
    return out;
}

model::RuntimeOptions runtime_options(const GenerateArgs& a, model::Device device) {
    CORTIQ_CHECK(a.dtype == "f32" || a.dtype == "f16", "--dtype must be f32 or f16, got '{}'",
                 a.dtype);
    CORTIQ_CHECK(a.dtype == "f32" || a.dequant,
                 "--dtype f16 runs dense fp16 weights: give it with --dequant");
    model::RuntimeOptions o;
    o.device = device;
    o.kv = model::parse_kv_format(a.kv);
    o.head = model::parse_head_format(a.head);  // auto: resolved by the runtime
    o.weights = a.dtype == "f16" ? model::WeightFormat::f16 : model::WeightFormat::native;
    o.graphs = !a.no_graph;
    return o;
}

// What a run made, for its report.
struct Outcome {
    std::vector<std::string> texts, out_text;
    std::vector<std::vector<int32_t>> prompts, out;
    model::GenerateTiming timing;
    double seconds = 0, tps = 0, decode_tps = 0;
    int64_t generated = 0;
};

// --json: the run on one line (the first sequence's fields at the top, every
// sequence's under "sequences" when there are several).
void print_json(const GenerateArgs& a, const model::Runtime& rt, const model::RuntimeOptions& ro,
                model::Device device, const Outcome& r) {
    const auto* gm = dynamic_cast<const model::GpuModel*>(&rt);
    nlohmann::ordered_json j;
    j["prompt"] = r.texts[0];
    j["text"] = r.out_text[0];
    j["prompt_tokens"] = r.prompts[0].size();
    j["generated_tokens"] = r.generated;
    j["ids"] = r.out[0];  // exact, where "text" may hold U+FFFD (below)
    if (r.prompts.size() > 1) {
        nlohmann::ordered_json seqs = nlohmann::ordered_json::array();
        for (size_t i = 0; i < r.out.size(); ++i)
            seqs.push_back({{"prompt", r.texts[i]},
                            {"prompt_tokens", r.prompts[i].size()},
                            {"text", r.out_text[i]},
                            {"ids", r.out[i]}});
        j["sequences"] = seqs;
    }
    j["batch"] = r.prompts.size();
    j["seconds"] = r.seconds;
    j["tokens_per_second"] = r.tps;
    j["prefill_seconds"] = r.timing.prefill_seconds;  // time to every sequence's first token
    j["decode_steps"] = r.timing.decode_steps;
    j["decode_seconds"] = r.timing.decode_seconds;
    j["decode_tokens_per_second"] = r.decode_tps;
    j["weight_bytes"] = rt.weight_bytes();
    j["device_bytes"] = rt.device_bytes();
    j["peak_rss_bytes"] = peak_rss_bytes();
    j["packed"] = !a.dequant;
    j["weights"] = a.dequant ? a.dtype : "packed";
    j["kv"] = device == model::Device::gpu && ro.kv != model::KvFormat::f32 ? "f16" : "f32";
    j["head"] =
        device == model::Device::gpu && (ro.head != model::HeadFormat::f32 || a.dtype == "f16")
            ? "f16"
            : "f32";
    if (gm) {
        j["graph_captures"] = gm->graph_captures();
        j["graph_replays"] = gm->graph_replays();
    }
    // A sampled sequence can hold byte tokens that are not valid UTF-8 (half
    // a character, a stray continuation byte); JSON text must be, so those
    // bytes become U+FFFD instead of an exception after the generation.
    fmt::print("{}\n", j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
}

// Each prompt's ids (BOS alone for an empty prompt where the tokenizer has one).
std::vector<std::vector<int32_t>> encode_prompts(const io::Tokenizer& tok,
                                                 const std::vector<std::string>& texts) {
    std::vector<std::vector<int32_t>> prompts;
    for (const std::string& t : texts) {
        std::vector<int32_t> p = tok.encode(t, /*add_special=*/true);
        if (p.empty() && tok.bos_id() >= 0) p.push_back(tok.bos_id());
        CORTIQ_CHECK(!p.empty(), "generate: empty prompt and the tokenizer has no BOS token");
        prompts.push_back(std::move(p));
    }
    return prompts;
}

void run(const GenerateArgs& a) {
    const model::Device device = runtime_device(a.device);
    CORTIQ_CHECK(a.batch >= 1 && a.batch <= 65535, "--batch must be 1..65535, got {}", a.batch);
    CORTIQ_CHECK(a.prompts_file.empty() || (a.batch == 1 && a.prompt.empty()),
                 "--prompts takes the place of --prompt and --batch");
    const model::RuntimeOptions ro = runtime_options(a, device);
    set_num_threads(a.threads);
    model::LoadOptions lo;
    // fp16 weights are made layer by layer on upload, from the packed model
    lo.dequant = a.dequant && ro.weights == model::WeightFormat::native;
    lo.verify = !a.no_verify;
    auto model = std::make_unique<model::Model>(model::Model::load(a.model, lo));
    const auto rt = model::make_runtime(*model, ro);
    if (device == model::Device::gpu) model.reset();  // the device holds its own copy
    const auto tok = io::load_model_tokenizer(a.model, a.tokenizer);
    Outcome r;
    r.texts = prompt_texts(a);
    r.prompts = encode_prompts(tok, r.texts);

    model::GenerateOptions opt;
    opt.max_tokens = a.max_tokens;
    opt.temperature = a.temp;
    opt.seed = a.seed;
    if (!a.ignore_eos) {
        opt.stop_ids = rt->config().eos_token_ids;
        if (tok.eos_id() >= 0) opt.stop_ids.push_back(tok.eos_id());
    }
    const bool one = r.prompts.size() == 1;
    if (!a.json && one) {
        fmt::print("{}", r.texts[0]);
        std::fflush(stdout);
    }
    r.out_text.resize(r.prompts.size());
    std::vector<int32_t> prev;
    for (const auto& p : r.prompts) prev.push_back(p.back());
    const auto t0 = std::chrono::steady_clock::now();
    r.out = model::generate_batch(
        *rt, r.prompts, opt,
        [&](int64_t s, int32_t id) {
            const size_t i = static_cast<size_t>(s);
            const std::string piece = tok.decode_token(id, prev[i]);
            prev[i] = id;
            if (a.json || !one) return void(r.out_text[i] += piece);
            fmt::print("{}", piece);
            std::fflush(stdout);
        },
        &r.timing);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (const auto& o : r.out) r.generated += static_cast<int64_t>(o.size());
    r.tps = r.seconds > 0 ? static_cast<double>(r.generated) / r.seconds : 0.0;
    const int64_t B = static_cast<int64_t>(r.prompts.size());
    // Decode throughput: tokens the decode steps made (one per sequence and
    // step, the done ones' included: they were computed) per second.
    r.decode_tps = r.timing.decode_seconds > 0
                       ? static_cast<double>(B * r.timing.decode_steps) / r.timing.decode_seconds
                       : 0.0;
    if (a.json) return print_json(a, *rt, ro, device, r);
    if (one) {
        fmt::print("\n");
    } else {
        for (size_t i = 0; i < r.out.size(); ++i)
            fmt::print("[{}] {}{}\n", i, r.texts[i], r.out_text[i]);
    }
    std::fflush(stdout);  // the text before the timing line, also when both go to one pipe
    fmt::print(stderr,
               "[{} sequence{}, {} prompt tokens, {} generated in {:.2f} s, {:.1f} tok/s; first "
               "tokens after {:.3f} s, decode {:.1f} tok/s; weights {:.2f} MB]\n",
               B, B == 1 ? "" : "s", r.prompts[0].size(), r.generated, r.seconds, r.tps,
               r.timing.prefill_seconds, r.decode_tps, rt->weight_bytes() / 1e6);
}

}  // namespace

void add_generate(CLI::App& app) {
    auto* cmd = app.add_subcommand("generate", "continue a prompt (greedy at --temp 0)");
    auto a = std::make_shared<GenerateArgs>();
    cmd->add_option("model", a->model, "Hugging Face model folder or cortiq file")->required();
    cmd->add_option("--prompt", a->prompt, "prompt text (empty: start from BOS)");
    cmd->add_option("--max-tokens", a->max_tokens, "tokens to generate")->capture_default_str();
    cmd->add_option("--temp", a->temp, "sampling temperature (0: greedy)")->capture_default_str();
    cmd->add_option("--seed", a->seed, "sampling seed")->capture_default_str();
    cmd->add_option("--device", a->device, "cpu or gpu")->capture_default_str();
    cmd->add_option("--threads", a->threads, "host threads (0: all cores)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "folder with tokenizer.json (default: the model's)");
    cmd->add_flag("--ignore-eos", a->ignore_eos, "do not stop at the end-of-sequence token");
    cmd->add_flag("--dequant", a->dequant,
                  "dequantise compressed layers at load (default: run them packed)");
    cmd->add_option("--dtype", a->dtype,
                    "with --dequant: the dense weights' format, f32, or f16 (GPU: the dense fp16 "
                    "runtime the packed one is measured against)")
        ->capture_default_str();
    cmd->add_option("--kv", a->kv,
                    "KV cache format: auto (f16 on the GPU, f32 on the CPU), f32, f16")
        ->capture_default_str();
    cmd->add_option("--head", a->head,
                    "a float output head's format: auto (f16 on the GPU, f32 on the CPU), f32, "
                    "f16 (GPU)")
        ->capture_default_str();
    cmd->add_option("--batch", a->batch, "decode N copies of --prompt together")
        ->capture_default_str();
    cmd->add_option("--prompts", a->prompts_file,
                    "a text file of prompts, one per line, decoded together");
    cmd->add_flag("--no-graph", a->no_graph,
                  "GPU: launch each decode step's kernels one by one instead of replaying a "
                  "captured CUDA graph");
    add_no_verify(cmd, a->no_verify);
    cmd->add_flag("--json", a->json, "print the text and figures as one JSON line");
    cmd->callback([a] { run(*a); });
}

}  // namespace cortiq::cli
