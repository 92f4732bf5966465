// cortiq generate MODEL --prompt TEXT [--max-tokens K] [--temp T] [--seed S] [--dequant]
//                      [--no-verify] [--json]
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
#include "model/llama.hpp"
#include "runtime_args.hpp"

namespace cortiq::cli {

namespace {

struct GenerateArgs {
    std::string model, prompt, tokenizer, device = "cpu";
    int64_t max_tokens = 128;
    double temp = 0.0;
    uint64_t seed = 0;
    int threads = 0;
    bool ignore_eos = false, dequant = false, no_verify = false, json = false;
};

void run(const GenerateArgs& a) {
    const model::Device device = runtime_device(a.device);
    set_num_threads(a.threads);
    model::LoadOptions lo;
    lo.dequant = a.dequant;
    lo.verify = !a.no_verify;
    auto model = std::make_unique<model::Model>(model::Model::load(a.model, lo));
    const auto rt = model::make_runtime(*model, device);
    if (device == model::Device::gpu) model.reset();  // the device holds its own copy
    const auto tok = io::load_model_tokenizer(a.model, a.tokenizer);
    std::vector<int32_t> prompt = tok.encode(a.prompt, /*add_special=*/true);
    if (prompt.empty() && tok.bos_id() >= 0) prompt.push_back(tok.bos_id());
    CORTIQ_CHECK(!prompt.empty(), "generate: empty prompt and the tokenizer has no BOS token");

    model::GenerateOptions opt;
    opt.max_tokens = a.max_tokens;
    opt.temperature = a.temp;
    opt.seed = a.seed;
    if (!a.ignore_eos) {
        opt.stop_ids = rt->config().eos_token_ids;
        if (tok.eos_id() >= 0) opt.stop_ids.push_back(tok.eos_id());
    }
    if (!a.json) {
        fmt::print("{}", a.prompt);
        std::fflush(stdout);
    }
    std::string text;
    int32_t prev = prompt.back();
    const auto t0 = std::chrono::steady_clock::now();
    const auto out = model::generate(*rt, prompt, opt, [&](int32_t id) {
        const std::string piece = tok.decode_token(id, prev);
        prev = id;
        if (a.json) return void(text += piece);
        fmt::print("{}", piece);
        std::fflush(stdout);
    });
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tps = s > 0 ? static_cast<double>(out.size()) / s : 0.0;
    if (a.json) {
        nlohmann::ordered_json j;
        j["prompt"] = a.prompt;
        j["text"] = text;
        j["prompt_tokens"] = prompt.size();
        j["generated_tokens"] = out.size();
        j["ids"] = out;  // exact, where "text" may hold U+FFFD (below)
        j["seconds"] = s;
        j["tokens_per_second"] = tps;
        j["weight_bytes"] = rt->weight_bytes();
        j["device_bytes"] = rt->device_bytes();
        j["peak_rss_bytes"] = peak_rss_bytes();
        j["packed"] = !a.dequant;
        // A sampled sequence can hold byte tokens that are not valid UTF-8 (half
        // a character, a stray continuation byte); JSON text must be, so those
        // bytes become U+FFFD instead of an exception after the generation.
        fmt::print("{}\n",
                   j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace));
        return;
    }
    fmt::print("\n");
    std::fflush(stdout);  // the text before the timing line, also when both go to one pipe
    fmt::print(stderr,
               "[{} prompt tokens, {} generated in {:.2f} s, {:.1f} tok/s; weights {:.2f} MB]\n",
               prompt.size(), out.size(), s, tps, rt->weight_bytes() / 1e6);
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
                  "dequantise compressed layers to float32 at load (default: run them packed)");
    add_no_verify(cmd, a->no_verify);
    cmd->add_flag("--json", a->json, "print the text and figures as one JSON line");
    cmd->callback([a] { run(*a); });
}

}  // namespace cortiq::cli
