// cortiq ppl MODEL --text FILE [--ctx 512] [--bos] [--device cpu|gpu] [--threads N] [--dequant]
//                 [--no-verify] [--json]
#include "eval/ppl.hpp"

#include <fmt/format.h>

#include <memory>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "core/memory_usage.hpp"
#include "core/parallel.hpp"
#include "io/model_tokenizer.hpp"
#include "io/text_file.hpp"
#include "model/llama.hpp"
#include "runtime_args.hpp"

namespace cortiq::cli {

namespace {

struct PplArgs {
    std::string model, text, tokenizer, device = "cpu";
    int64_t ctx = 512, max_windows = 0;
    int threads = 0;
    bool bos = false, json = false, quiet = false, dequant = false, no_verify = false;
};

void run(const PplArgs& a) {
    const model::Device device = runtime_device(a.device);
    set_num_threads(a.threads);
    model::LoadOptions lo;
    lo.dequant = a.dequant;
    lo.verify = !a.no_verify;
    auto model = std::make_unique<model::Model>(model::Model::load(a.model, lo));
    const auto rt = model::make_runtime(*model, device);
    if (device == model::Device::gpu) model.reset();  // the device holds its own copy
    const auto tok = io::load_model_tokenizer(a.model, a.tokenizer);
    const std::string text = io::read_text_file(a.text, "text");
    eval::PplOptions opt;
    opt.ctx = a.ctx;
    opt.bos = a.bos;
    opt.max_windows = a.max_windows;
    opt.progress = !a.quiet;
    const auto r = eval::perplexity(*rt, tok, text, opt);
    const int64_t weight_bytes = rt->weight_bytes(), device_bytes = rt->device_bytes();
    if (a.json) {
        auto j = nlohmann::ordered_json::parse(r.json());
        j["weight_bytes"] = weight_bytes;
        j["device_bytes"] = device_bytes;
        j["peak_rss_bytes"] = peak_rss_bytes();
        j["packed"] = !a.dequant;
        fmt::print("{}\n", j.dump());
    } else {
        fmt::print("{}: {} | weights {:.2f} MB{}, peak RSS {:.1f} MB\n", a.text, r.summary(),
                   weight_bytes / 1e6, device == model::Device::gpu ? " on the device" : "",
                   peak_rss_bytes() / 1e6);
    }
}

}  // namespace

void add_ppl(CLI::App& app) {
    auto* cmd = app.add_subcommand("ppl", "perplexity on a text (plain protocol)");
    auto a = std::make_shared<PplArgs>();
    cmd->add_option("model", a->model, "Hugging Face model folder or cortiq file")->required();
    cmd->add_option("--text", a->text, "text file, tokenised whole")->required();
    cmd->add_option("--ctx", a->ctx, "window length in tokens")->capture_default_str();
    cmd->add_option("--device", a->device, "cpu or gpu")->capture_default_str();
    cmd->add_flag("--bos", a->bos, "start each window with BOS (then ctx-1 text tokens)");
    cmd->add_option("--threads", a->threads, "host threads (0: all cores)");
    cmd->add_option("--max-windows", a->max_windows, "score only the first N windows (0: all)");
    cmd->add_option("--tokenizer", a->tokenizer,
                    "folder with tokenizer.json (default: the model's)");
    cmd->add_flag("--dequant", a->dequant,
                  "dequantise compressed layers to float32 at load (default: run them packed)");
    add_no_verify(cmd, a->no_verify);
    cmd->add_flag("--json", a->json, "print the result as one JSON line");
    cmd->add_flag("--quiet", a->quiet, "no progress bar");
    cmd->callback([a] { run(*a); });
}

}  // namespace cortiq::cli
