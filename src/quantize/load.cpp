// Step 1 of quantize(): check the output, load the model, its checkpoint and
// tokenizer, cut the calibration windows and record the run's settings.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>

#include "calib/generated.hpp"
#include "core/gpu.hpp"
#include "core/progress.hpp"
#include "io/hash.hpp"
#include "io/text_file.hpp"
#include "io/tokenizer.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

namespace fs = std::filesystem;

namespace {

std::vector<std::string> checkpoint_files(const io::Checkpoint& ck) {
    std::vector<std::string> files;
    for (const auto& s : ck.shards()) files.push_back(s.path());
    return files;
}

// Where the automatic calibration settings (--calib-generated, --samples)
// take their larger values: a tuned run of a model small enough to sample.
bool tuned_small_model(const QuantizeOptions& o, int64_t params) {
    return o.tuned() && params <= kCalibGeneratedAutoParams;
}

}  // namespace

void check_output(const QuantizeOptions& o) {
    CORTIQ_CHECK(!o.out_path.empty(), "-o OUT.safetensors is required");
    CORTIQ_CHECK(o.force || !fs::exists(o.out_path), "{} exists (pass --force to overwrite it)",
                 o.out_path);
    const fs::path parent = fs::absolute(o.out_path).parent_path();
    CORTIQ_CHECK(fs::is_directory(parent), "output folder {} does not exist", parent.string());
}

double resolve_calib_generated(const QuantizeOptions& o, int64_t params, bool hybrid) {
    if (o.calib_generated >= 0) return o.calib_generated;
    if (tuned_small_model(o, params)) return hybrid ? kCalibGeneratedHybrid : 0.5;
    if (o.tuned() && o.verbose)
        fmt::print(stderr,
                   "calibration: --calib-generated auto is 0 for {:.0f} M parameters (sampling "
                   "runs token by token on the CPU); --calib-generated 0.5 helps off the "
                   "calibration text's domain (docs/tuning.md)\n",
                   static_cast<double>(params) / 1e6);
    return 0.0;
}

int64_t resolve_samples(const QuantizeOptions& o, int64_t params, bool hybrid) {
    if (o.calib.samples != kSamplesAuto) return o.calib.samples;
    if (!tuned_small_model(o, params)) return calib::CalibOptions{}.samples;
    return hybrid ? kSamplesTunedHybrid : kSamplesTuned;
}

bool resolve_plan_auto(const QuantizeOptions& o, int64_t params, bool hybrid) {
    // rtn-sign has no rank to plan
    return o.plan_auto ||
           (o.plan_auto_default && o.plan_path.empty() && o.file_bpw <= 0 &&
            o.enc.method != encode::Method::rtn_sign && hybrid && tuned_small_model(o, params));
}

int resolve_tune_epochs(const QuantizeOptions& o, int64_t params, bool hybrid) {
    if (o.tune.epochs != kTuneEpochsAuto) return o.tune.epochs;
    return hybrid && tuned_small_model(o, params) ? kTuneEpochsHybrid : tune::TuneOptions{}.epochs;
}

double resolve_tune_lr(const QuantizeOptions& o, int64_t params, bool hybrid) {
    if (o.tune.lr_scales != kLrAuto) return o.tune.lr_scales;
    return hybrid && tuned_small_model(o, params) ? kTuneLrHybrid : tune::TuneOptions{}.lr_scales;
}

tune::LrSchedule resolve_tune_lr_schedule(const QuantizeOptions& o, int64_t params, bool hybrid) {
    if (!o.tune_lr_schedule_auto) return o.tune.lr_schedule;
    return hybrid && tuned_small_model(o, params) ? kTuneLrScheduleHybrid
                                                  : tune::LrSchedule::constant;
}

double resolve_kd_lr(const QuantizeOptions& o, int64_t params, bool hybrid) {
    if (o.kd.lr_scales != kLrAuto) return o.kd.lr_scales;
    return hybrid && tuned_small_model(o, params) ? kKdLrHybrid : QuantizeOptions{}.kd.lr_scales;
}

double resolve_kd_random(const QuantizeOptions& o, double generated) {
    if (o.kd_random >= 0) return o.kd_random;
    return generated > 0 ? 0.0 : 1.0;
}

double resolve_kd_lr_signs(const QuantizeOptions& o, int64_t params) {
    if (o.kd.lr_signs != kKdLrSignsAuto) return o.kd.lr_signs;
    return params <= kCalibGeneratedAutoParams ? kKdLrSignsSmall : 0.0;
}

double resolve_kd_min_gain(const QuantizeOptions& o, int64_t params) {
    if (o.kd.min_gain != kKdMinGainAuto) return o.kd.min_gain;
    return params <= kCalibGeneratedAutoParams ? 0.0 : kKdMinGainLarge;
}

void check_kd_sign_memory(double lr_signs, int64_t weights, double bpw, int64_t device_bytes) {
    if (lr_signs <= 0 || device_bytes <= 0) return;
    const double need = 20.0 * bpw * static_cast<double>(weights);
    CORTIQ_CHECK(need <= static_cast<double>(device_bytes),
                 "--kd-lr-signs {}: moving the signs in distillation needs about {:.0f} GB of "
                 "device memory for {:.2f} B weights at {} bpw (each sign as a float, its "
                 "gradient, latent and two Adam moments), more than this GPU's {:.0f} GB; use "
                 "--kd-lr-signs 0 (the default above 100 M parameters) or --tune block",
                 lr_signs, need / 1e9, static_cast<double>(weights) / 1e9, bpw,
                 static_cast<double>(device_bytes) / 1e9);
}

namespace {

// --calib-generated: `generated` windows sampled from the original model per
// calibration window join the fit and held-out sets, with a progress line.
void add_sampled_windows(const QuantizeOptions& o, Inputs& in, const io::Tokenizer& tok,
                         double generated, int64_t seqlen) {
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t start = tok.bos_id() >= 0 ? tok.bos_id() : std::max(tok.eos_id(), 0);
    // a line with an ETA: token by token on the CPU, seconds for a 6M
    // model, much longer for large ones
    Progress bar("sampling",
                 calib::windows_to_add(static_cast<int64_t>(in.calib.fit.size()), generated) +
                     calib::windows_to_add(static_cast<int64_t>(in.calib.sel.size()), generated),
                 "windows", o.progress, o.on_progress);
    const int64_t n =
        calib::add_generated_windows(in.calib, generated, in.model, start, kCalibGeneratedSeed,
                                     [&](int64_t k) { bar.advance(k); });
    bar.finish();
    if (o.verbose)
        fmt::print(
            stderr, "calibration: {} windows of {} tokens sampled from the model in {:.1f} s\n", n,
            seqlen, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// What the output and its journal record of the run: a resume must match
// every entry (tune/kd settings recorded when they apply, the non-default
// variants only when chosen, so files of the defaults keep their settings).
nlohmann::json settings_of(const QuantizeOptions& o, const Inputs& in, const Plan& plan,
                           const std::vector<std::string>& calib_texts, double generated,
                           int64_t seqlen) {
    // one file: its name and hash, as before; several: comma-separated lists
    std::string calib_names, calib_hashes;
    for (size_t i = 0; i < calib_texts.size(); ++i) {
        if (i) {
            calib_names += ',';
            calib_hashes += ',';
        }
        calib_names += fs::path(o.calib_paths[i]).filename().string();
        calib_hashes += io::sha256_text(calib_texts[i]);
    }
    nlohmann::json settings = {
        {"format_version", kFormatVersion},
        {"source", fs::path(o.model_dir).filename().string()},
        {"source_sha256", io::sha256_files(checkpoint_files(in.checkpoint))},
        {"method", encode::method_name(o.enc.method)},
        {"plan", plan.describe()},
        {"paths", o.enc.paths == encode::PathsChoice::automatic ? "auto"
                  : o.enc.paths == encode::PathsChoice::one     ? "1"
                                                                : "2"},
        {"rho", o.enc.rho},
        {"gram_shrink", o.gram_shrink},
        {"gptq_passes", o.enc.gptq_passes},
        {"match", o.match_original ? "original" : "layer"},
        {"calib", calib_names},
        {"calib_sha256", calib_hashes},
        {"samples_fit", in.calib.fit.size()},
        {"samples_sel", in.calib.sel.size()},
        {"calib_random_per_window", o.calib_random},
        {"calib_generated_per_window", generated},
        {"seqlen", seqlen},
        {"device", o.device == encode::Device::gpu ? "gpu" : "cpu"},
    };
    // the column search's variants, recorded when not the exact default (so a
    // resume cannot mix searches; files of the default keep their settings)
    if (o.enc.gptq_multi != 0) settings["gptq_multi"] = o.enc.gptq_multi;
    if (o.enc.gptq_group == 0)
        settings["gptq_group"] = "auto";
    else if (o.enc.gptq_group != 1)
        settings["gptq_group"] = o.enc.gptq_group;
    if (o.enc.itq_iters != encode::Options{}.itq_iters) settings["itq_iters"] = o.enc.itq_iters;
    // the journal's key: a resume must make (or read back) the same plan
    if (o.plan_auto) settings["plan_auto"] = {{"windows", o.sensitivity_windows}};
    if (o.file_bpw > 0) settings["file_bpw"] = o.file_bpw;
    if (o.tune_mode != "none")
        settings["tune"] = {{"mode", o.tune_mode},
                            {"epochs", o.tune.epochs},
                            {"batch_windows", o.tune.batch_windows},
                            {"lr_scales", o.tune.lr_scales},
                            {"lr_signs", o.tune.lr_signs},
                            {"latent_init", o.tune.latent_init},
                            {"lr_norms", o.tune.lr_norms}};
    // recorded when not the default (files of the default keep their settings)
    if (o.tune_mode != "none" && o.tune.lr_schedule != tune::LrSchedule::constant)
        settings["tune"]["lr_schedule"] = "cosine";
    if (o.tune_kd())
        settings["kd"] = {
            {"epochs", o.kd.epochs},           {"batch_windows", o.kd.batch_windows},
            {"lr_scales", o.kd.lr_scales},     {"lr_signs", o.kd.lr_signs},
            {"latent_init", o.kd.latent_init}, {"random_windows_per_fit_window", in.kd_random},
            {"patience", o.kd.patience},       {"min_gain", o.kd.min_gain}};
    if (o.tune_kd() && o.kd.lr_schedule != tune::LrSchedule::constant)
        settings["kd"]["lr_schedule"] = "cosine";
    return settings;
}

}  // namespace

Inputs load_and_check(QuantizeOptions& o, const Plan& plan) {
    if (o.device == encode::Device::gpu)
        CORTIQ_CHECK(gpu_available(), "--device gpu: {}", gpu_unavailable_reason());
    model::LoadOptions lo;
    lo.map_linears = o.map_weights.value_or(o.device == encode::Device::gpu);
    Inputs in{model::Model::load(o.model_dir, lo), io::Checkpoint::open(o.model_dir), {}, {}, 0.0};
    const auto& cfg = in.model.config();
    o.plan_auto = resolve_plan_auto(o, in.model.num_params(), cfg.hybrid());
    o.tune.epochs = resolve_tune_epochs(o, in.model.num_params(), cfg.hybrid());
    o.tune.lr_scales = resolve_tune_lr(o, in.model.num_params(), cfg.hybrid());
    o.tune.lr_schedule = resolve_tune_lr_schedule(o, in.model.num_params(), cfg.hybrid());
    o.kd.lr_scales = resolve_kd_lr(o, in.model.num_params(), cfg.hybrid());
    o.kd.lr_signs = resolve_kd_lr_signs(o, in.model.num_params());
    o.kd.min_gain = resolve_kd_min_gain(o, in.model.num_params());
    if (o.device == encode::Device::gpu && o.tune_kd()) {
        // the decoder layers' weights: all but the embedding and an untied head
        const int64_t tables = cfg.vocab_size * cfg.hidden_size;
        check_kd_sign_memory(
            o.kd.lr_signs,
            in.model.num_params() - (in.model.head_shares_embedding() ? 1 : 2) * tables,
            o.file_bpw > 0 ? o.file_bpw : o.bpw, gpu_total_bytes());
    }
    const io::Tokenizer tok = io::Tokenizer::load(o.model_dir);
    CORTIQ_CHECK(!o.calib_paths.empty(), "quantize: no calibration text (--calib)");
    std::vector<std::string> calib_texts;
    for (const auto& p : o.calib_paths)
        calib_texts.push_back(io::read_text_file(p, "calibration text"));
    calib::CalibOptions co = o.calib;
    co.samples = resolve_samples(o, in.model.num_params(), cfg.hybrid());
    if (co.seqlen <= 0)
        co.seqlen = std::min<int64_t>(
            512, cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 512);
    in.calib = calib::make_calib_set(tok, calib_texts, co, o.calib_paths);
    // --calib-random: windows of random token ids join the text's, fit and
    // held out, for every stage (Grams, drift, block tuning, distillation)
    calib::add_random_windows(in.calib, o.calib_random, cfg.vocab_size, kCalibRandomSeed);
    // --calib-generated: windows sampled from the original model, the same way
    const double generated = resolve_calib_generated(o, in.model.num_params(), cfg.hybrid());
    in.kd_random = resolve_kd_random(o, generated);
    if (generated > 0) add_sampled_windows(o, in, tok, generated, co.seqlen);
    in.settings = settings_of(o, in, plan, calib_texts, generated, co.seqlen);
    return in;
}

}  // namespace cortiq::quant
