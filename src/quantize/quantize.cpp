// The quantize pipeline, as a sequence of named steps (quantize/steps.hpp):
//   1. load and check: the output is free, the model, checkpoint, tokenizer
//      and calibration windows load, the run's settings (load.cpp);
//   2. plan: which tensors, at what budget (plan_work.cpp); with --plan auto
//      or --file-bpw the budgets from measured sensitivity (auto_plan.cpp,
//      sensitivity.cpp, allocate.hpp); a plan that names the embedding
//      encodes it first (encode_embedding.cpp);
//   3. for each decoder layer, in order (encode_layer.cpp): for each input
//      (q/k/v, o, gate/up, down) its Grams from the hidden states that the
//      already-compressed layers produce (calibrate_input.cpp), the tensors
//      that read it encoded and put in place; the layer journalled; the
//      hidden states moved through the compressed layer;
//   4. with --include-head, lm_head last (encode_head.cpp);
//   5. write the compressed checkpoint (write.cpp).
// Under mpirun (dist/comm.hpp) every rank runs steps 1–4 on its share of the
// calibration windows and of each layer's tensors (ranks.cpp); rank 0 alone
// keeps the journal, distils and writes.
#include "quantize/quantize.hpp"

#include <chrono>
#include <filesystem>
#include <optional>

#include "core/gpu.hpp"
#include "core/memory_usage.hpp"
#include "core/parallel.hpp"
#include "dist/comm.hpp"
#include "io/config.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

std::string resolve_tune_mode(const std::string& mode, encode::Device device) {
    if (mode != "auto") return mode;
    return device == encode::Device::gpu ? "block+kd" : "none";
}

void resolve_tune_mode(QuantizeOptions& o) {
    o.tune_mode = resolve_tune_mode(o.tune_mode, o.device);
}

void resolve_gptq_group(QuantizeOptions& o) {
    if (o.enc.gptq_group == kGptqGroupByDevice)
        o.enc.gptq_group = o.device == encode::Device::gpu ? 0 : 1;
}

namespace {

// Under mpirun rank 0 reports and writes; the other ranks work silently.
QuantizeOptions options_of_this_rank(const QuantizeOptions& o) {
    QuantizeOptions local = o;
    resolve_gptq_group(local);
    if (dist::is_root()) return local;
    local.progress = false;
    local.verbose = false;
    local.on_progress = nullptr;
    return local;
}

}  // namespace

QuantizeReport quantize(const QuantizeOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    QuantizeOptions o = options_of_this_rank(options);  // defaults resolved on load
    QuantizeReport rep;
    rep.out_path = o.out_path;
    // GPU ranks would each calibrate on every window and tune alone: not
    // built or tested, so refused before any work rather than run untested
    CORTIQ_CHECK(!dist::distributed() || o.device == encode::Device::cpu,
                 "quantize over {} ranks runs with --device cpu only; for one host's GPUs run one "
                 "process with --device gpu --gpus LIST",
                 dist::size());
    if (dist::is_root()) check_output(o);
    if (!o.gpus.empty()) {
        CORTIQ_CHECK(o.device == encode::Device::gpu, "--gpus needs --device gpu");
        use_gpu(o.gpus.front());  // calibration and tuning run on the first
    }
    const Plan plan(o.bpw, o.plan_path, o.include_head);
    const auto load_start = std::chrono::steady_clock::now();
    Inputs in = load_and_check(o, plan);
    rep.load_seconds = seconds_since(load_start);
    WorkPlan work = plan_work(plan, in.model);
    CORTIQ_CHECK(!o.plan_auto || o.enc.method != encode::Method::rtn_sign,
                 "--plan auto and --file-bpw choose ranks: --method rtn-sign has none");
    check_file_budget(o, in, work);  // a budget that cannot be met leaves no journal
    const Journal journal =
        dist::is_root() ? Journal(o.out_path, in.settings, o.resume, o.force) : Journal::inactive();
    if (o.plan_auto || o.file_bpw > 0) {
        const std::string text = make_auto_plan(o, in, work, journal, rep);
        // the head is compressed when the plan gives it a budget
        const bool head = o.include_head || nlohmann::json::parse(text).contains(kHead);
        const Plan chosen = Plan::from_text(o.bpw, text, o.out_path + ".plan.json", head);
        work = plan_work(chosen, in.model);
        // the output records the plan it encoded with, as `--plan FILE` would
        in.settings["plan"] = chosen.describe();
        in.settings.erase("plan_auto");
        in.settings.erase("file_bpw");
    }
    rep.kept_small = work.kept_small;
    std::map<std::string, std::vector<uint8_t>> embed_payload;
    // With block tuning each decoder layer's weights count twice, encoded and
    // tuned, so that the ETA includes the tuning (at the 7B shape a layer's
    // tuning took about as long as its encoding: docs/encoder_speed.md).
    const int64_t table = in.model.config().vocab_size * in.model.config().hidden_size;
    const int64_t untuned = (work.head_bpw ? table : 0) + (work.embed_bpw ? table : 0);
    Progress bar("quantize", work.weights + (o.tune_blocks() ? work.weights - untuned : 0),
                 "weights", o.progress, o.on_progress);
    // --match original and tuning: the uncompressed model beside the one
    // being compressed, sharing its float weights until they are replaced
    // (one model's host memory, and the checkpoint read once)
    std::optional<model::Model> original;
    if (o.match_original || o.tune_mode != "none") original.emplace(in.model.share());
    if (work.embed_bpw) {  // first: every layer is then calibrated on the compressed rows
        EmbeddingStep step{o, in.model, in.calib, journal, bar, rep, embed_payload};
        encode_embedding(step, *work.embed_bpw);
    }

    // the hidden states of every calibration window, on the forward device
    const auto calib_start = std::chrono::steady_clock::now();
    calib::SequentialCalib states(
        in.model, in.calib,
        o.device == encode::Device::gpu ? model::Device::gpu : model::Device::cpu,
        original ? &*original : nullptr);
    rep.add_calib("start", seconds_since(calib_start));

    Run run{o, in.model, states, bar, journal, rep, std::move(embed_payload), {}};
    for (int64_t l = 0; l < in.model.num_layers(); ++l) {
        adapt_threads();  // another job may have started or ended on this machine
        encode_layer(run, l, work);
        // the last layer's output is only needed for the head
        if (l + 1 == in.model.num_layers() && !work.head_bpw) break;
        const auto advance_start = std::chrono::steady_clock::now();
        states.advance(l);
        rep.add_calib("advance", seconds_since(advance_start));
    }
    if (work.head_bpw) encode_head(run, in.checkpoint, *work.head_bpw);
    // rank 0 distils and writes; with several windows a distillation step
    // (--kd-batch > 1) every rank distils, each its share of a step's windows
    const bool kd_together = dist::distributed() && o.tune_kd() && o.kd.batch_windows > 1;
    if (!dist::is_root() && !kd_together) return rep;
    bar.finish();  // distillation draws its own line (its ETA is its own)
    if (o.tune_kd()) {
        // on the GPU the calibration's copies and states leave the device first
        states.release_gpu();
        distill_model(run, in.calib, *original, in.kd_random);
    }
    if (!dist::is_root()) return rep;

    const auto write_start = std::chrono::steady_clock::now();
    write_output(o, in.checkpoint, in.settings, run.payloads, rep);
    rep.write_seconds = seconds_since(write_start);
    journal.remove();
    rep.file_bytes = static_cast<int64_t>(std::filesystem::file_size(o.out_path));
    rep.peak_host_bytes = peak_rss_bytes();
    if (o.device == encode::Device::gpu) rep.peak_gpu_pool_bytes = gpu_pool_peak_bytes();
    rep.seconds = seconds_since(t0);
    return rep;
}

}  // namespace cortiq::quant
