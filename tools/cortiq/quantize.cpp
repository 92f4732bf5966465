// cortiq quantize / cortiq inspect.
#include "quantize/quantize.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <fstream>
#include <map>

#include "commands.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "dist/comm.hpp"

namespace cortiq::cli {

namespace {

struct QuantizeArgs {
    quant::QuantizeOptions o;
    std::string method = "nvg", paths = "auto", device = "cpu", match = "original", json;
    std::string calib_generated = "auto", kd_random = "auto", samples = "auto";
    std::string kd_lr_signs = "auto";
    std::string kd_min_gain = "auto";
    std::string tune_lr_schedule = "auto";
    int threads = 0;
    bool quiet = false, mpi = false;
};

// "auto" (→ `automatic`) or a number from 0 to 64 (windows per window, a step).
double parse_auto_number(const char* flag, const std::string& v, double automatic) {
    if (v == "auto") return automatic;
    size_t used = 0;
    double r = -1;
    try {
        r = std::stod(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    CORTIQ_CHECK(used == v.size() && r >= 0 && r <= 64,
                 "{}: auto or a number from 0 to 64, not \"{}\"", flag, v);
    return r;
}

// --samples: auto (quant::kSamplesAuto) or a positive count.
int64_t parse_samples(const std::string& v) {
    if (v == "auto") return quant::kSamplesAuto;
    size_t used = 0;
    int64_t n = 0;
    try {
        n = std::stoll(v, &used);
    } catch (const std::exception&) {
        used = 0;
    }
    CORTIQ_CHECK(used == v.size() && n > 0, "--samples: auto or a positive number, not \"{}\"", v);
    return n;
}

const std::map<std::string, tune::LrSchedule>& lr_schedules() {
    static const std::map<std::string, tune::LrSchedule> m{{"constant", tune::LrSchedule::constant},
                                                           {"cosine", tune::LrSchedule::cosine}};
    return m;
}

// The command line's words into options (every "auto" that needs no model).
void resolve_args(QuantizeArgs* a) {
    set_num_threads(a->threads);
    a->o.enc.method = encode::parse_method(a->method);
    a->o.enc.paths = encode::parse_paths(a->paths);
    a->o.device = encode::parse_device(a->device);
    a->o.match_original = a->match == "original";
    quant::resolve_tune_mode(a->o);  // "auto": by device and model
    a->o.calib_generated =
        parse_auto_number("--calib-generated", a->calib_generated, quant::kCalibGeneratedAuto);
    a->o.kd_random = parse_auto_number("--kd-random", a->kd_random, quant::kKdRandomAuto);
    a->o.kd.lr_signs = parse_auto_number("--kd-lr-signs", a->kd_lr_signs, quant::kKdLrSignsAuto);
    a->o.kd.min_gain = parse_auto_number("--kd-min-gain", a->kd_min_gain, quant::kKdMinGainAuto);
    CORTIQ_CHECK(a->o.kd.min_gain < 1, "--kd-min-gain: auto or a fraction below 1, not \"{}\"",
                 a->kd_min_gain);
    a->o.calib.samples = parse_samples(a->samples);
    a->o.tune_lr_schedule_auto = a->tune_lr_schedule == "auto";
    if (!a->o.tune_lr_schedule_auto) a->o.tune.lr_schedule = lr_schedules().at(a->tune_lr_schedule);
    if (!a->o.plan_path.empty()) a->o.plan_auto_default = false;
    if (a->o.plan_path == "auto" || a->o.plan_path == "uniform") {
        a->o.plan_auto = a->o.plan_path == "auto";
        a->o.plan_path.clear();
    }
    if (a->o.file_bpw > 0) {
        CORTIQ_CHECK(a->o.plan_path.empty(), "--file-bpw makes its own plan: drop --plan {}",
                     a->o.plan_path);
        a->o.plan_auto = true;
        a->o.plan_auto_default = false;
    }
    a->o.progress = !a->quiet;
    a->o.verbose = !a->quiet;
}

void run_quantize(QuantizeArgs* a) {
    resolve_args(a);
    // under mpirun (or --mpi) every rank runs this command; rank 0 reports
    dist::init(a->mpi);
    const auto rep = quant::quantize(a->o);
    if (!dist::is_root()) return;
    if (dist::distributed()) {
        // what the ranks shared: tuning only with several windows a step
        const bool tuned = rep.tune_seconds > 0;
        std::string shared = "calibrated and encoded";
        if (tuned && a->o.tune.batch_windows > 1) shared += ", tuned the blocks";
        if (tuned && a->o.kd.batch_windows > 1 && !rep.distilled.is_null()) shared += ", distilled";
        fmt::print("{} ranks {} together (rank 0 wrote the file)\n", dist::size(), shared);
    }
    fmt::print("{}\n", rep.summary());
    if (!a->json.empty()) {
        std::ofstream f(a->json);
        f << rep.to_json().dump(2) << "\n";
        CORTIQ_CHECK(f, "cannot write {}", a->json);
    }
}

void add_encoding_options(CLI::App* cmd, QuantizeArgs* a) {
    cmd->add_option("model", a->o.model_dir, "Hugging Face model folder")->required();
    cmd->add_option("--bpw", a->o.bpw,
                    "bits per weight of every decoder linear layer (and of lm_head with "
                    "--include-head)");
    cmd->add_option("--calib", a->o.calib_paths,
                    "calibration text file; repeat it (or A,B) to draw equal shares of the "
                    "windows from several texts")
        ->required()
        ->take_all()
        ->allow_extra_args(false)
        ->delimiter(',');
    cmd->add_option("-o,--out", a->o.out_path, "output .safetensors file")->required();
    cmd->add_option("--device", a->device, "cpu or gpu");
    cmd->add_option("--paths", a->paths, "auto, 1 or 2");
    cmd->add_option("--method", a->method, "nvg, nvg-noknots, svid or rtn-sign");
    cmd->add_option("--plan", a->o.plan_path,
                    "JSON: tensor-name glob -> bpw (null keeps it); auto: bits per tensor from "
                    "measured sensitivity, the uniform --bpw plan's bits in all, written to "
                    "OUT.plan.json; uniform: --bpw everywhere (default: auto when tuning a "
                    "hybrid model of at most 100 M parameters, else uniform)");
    cmd->add_option("--file-bpw", a->o.file_bpw,
                    "one budget for the whole file: this many bits per parameter of the source, "
                    "every stored byte counted (embedding and head may be compressed); implies "
                    "--plan auto")
        ->check(CLI::Range(0.05, 16.0));
    cmd->add_option("--sensitivity-windows", a->o.sensitivity_windows,
                    "--plan auto: held-out windows the sensitivity is measured on (default 8)")
        ->check(CLI::Range(1, 4096));
    cmd->add_flag("--include-head", a->o.include_head,
                  "also compress lm_head, last, on the compressed model's final hidden states "
                  "(a tied model keeps its float embedding)");
    cmd->add_option("--gptq-passes", a->o.enc.gptq_passes,
                    "greedy passes of each input-side column search (fewer: faster on the GPU, "
                    "slightly less accurate)")
        ->check(CLI::Range(1, 64));
    cmd->add_option("--gptq-multi", a->o.enc.gptq_multi,
                    "input-side column search by rounds of up to Q simultaneous flips, kept when "
                    "they improve (0, the default: the exact sequential scan; the CUDA encoder "
                    "takes up to 32)")
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--gptq-group", a->o.enc.gptq_group,
                    "input-side column search: columns in groups of G searched from the same "
                    "targets, each group's error fed to the later columns (1: every column sees "
                    "every earlier one's, the default on the CPU; auto: per search the largest "
                    "power of two up to rank/16, at most 64, the default with --device gpu)")
        ->transform(CLI::Transformer(std::map<std::string, int>{{"auto", 0}}))
        ->check(CLI::Range(0, 1 << 20));
    cmd->add_option("--itq-iters", a->o.enc.itq_iters,
                    "iterations of the sign-gauge rotation (ITQ, SPEC §3.3; 50, the default)")
        ->check(CLI::Range(0, 1000));
    cmd->add_option("--match", a->match,
                    "each layer's target: 'original' (default: the original model's outputs, "
                    "which corrects the drift of the compressed layers before it) or 'layer' (its "
                    "own outputs on the compressed model's inputs, as GPTQ)")
        ->check(CLI::IsMember({"layer", "original"}));
}

void add_calibration_options(CLI::App* cmd, QuantizeArgs* a) {
    cmd->add_option("--samples", a->samples,
                    "calibration windows (fit + held out); auto: 192 when tuning a model of at "
                    "most 100 M parameters (256 for a hybrid one), else 128");
    cmd->add_option("--seqlen", a->o.calib.seqlen,
                    "tokens per window (default: min(512, context))");
    cmd->add_option("--holdout", a->o.calib.holdout, "fraction of windows for the held-out Grams");
    cmd->add_option("--rho", a->o.enc.rho, "damping relative to mean diag(H_fit)");
    cmd->add_option("--gram-shrink", a->o.gram_shrink,
                    "shrink the fit Gram's off-diagonal by this fraction (0..1) before encoding: "
                    "less overfitting of the calibration text")
        ->check(CLI::Range(0.0, 1.0));
}

void add_tuning_options(CLI::App* cmd, QuantizeArgs* a) {
    cmd->add_option("--tune", a->o.tune_mode,
                    "output-aware tuning: auto (default: block+kd with --device gpu, none on "
                    "the CPU); none; block (each layer's BLR scales/signs fitted to "
                    "the original model's block outputs); block+kd (then the whole model "
                    "distilled on the original's next-token distribution); kd")
        ->check(CLI::IsMember({"auto", "none", "block", "block+kd", "kd"}));
    cmd->add_option("--kd-epochs", a->o.kd.epochs, "distillation: passes over the fit windows")
        ->check(CLI::Range(1, 1000));
    cmd->add_option("--kd-patience", a->o.kd.patience,
                    "distillation: stop after this many epochs without a held-out gain "
                    "(default 4; 0: all --kd-epochs)")
        ->check(CLI::Range(0, 1000));
    cmd->add_option("--kd-min-gain", a->kd_min_gain,
                    "distillation: a pass resets the patience only when it lowers the best "
                    "held-out KL by more than this fraction: auto (default: 0 for a model of at "
                    "most 100 M parameters, else 0.005) or a fraction below 1");
    cmd->add_option("--kd-batch", a->o.kd.batch_windows, "distillation: windows per step")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--kd-random", a->kd_random,
                    "distillation: windows of random token ids added, per fit window: auto "
                    "(default: 1, or 0 when --calib-generated adds sampled windows) or 0 to 64");
    cmd->add_option("--calib-random", a->o.calib_random,
                    "windows of random token ids added per calibration window, fit and held "
                    "out, for every stage (0: none)")
        ->check(CLI::Range(0.0, 64.0));
    cmd->add_option("--calib-generated", a->calib_generated,
                    "windows sampled from the original model (temperature 1) added per "
                    "calibration window, fit and held out, for every stage: auto (default: "
                    "0.5 when tuning a model of at most 100 M parameters, 1 for a hybrid one, else "
                    "0) or 0 to 64");
    cmd->add_option("--kd-lr", a->o.kd.lr_scales,
                    "distillation: Adam step on the log-scales (default: 3e-3 for a hybrid "
                    "model of at most 100 M parameters, else 1e-3)")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--kd-lr-signs", a->kd_lr_signs,
                    "distillation: Adam step on the sign latents: auto (default: 1e-4 for a "
                    "model of at most 100 M parameters, else 0) or a step (0: signs fixed, held "
                    "packed on the GPU)");
    cmd->add_option("--tune-epochs", a->o.tune.epochs,
                    "block tuning: passes over the fit windows (default: 16 for a hybrid model of "
                    "at most 100 M parameters, else 4)")
        ->check(CLI::Range(1, 1000));
    cmd->add_option("--tune-batch", a->o.tune.batch_windows, "block tuning: windows per step")
        ->check(CLI::Range(1, 1 << 20));
    cmd->add_option("--tune-lr", a->o.tune.lr_scales,
                    "block tuning: Adam step on the log-scales (default: 1e-2 for a hybrid "
                    "model of at most 100 M parameters, else 3e-3)")
        ->check(CLI::Range(0.0, 1.0));
    cmd->add_option("--tune-lr-signs", a->o.tune.lr_signs,
                    "block tuning: Adam step on the sign latents (0: signs fixed)");
    cmd->add_option("--tune-latent", a->o.tune.latent_init,
                    "block tuning: initial |latent| of each sign");
    cmd->add_option("--tune-lr-schedule", a->tune_lr_schedule,
                    "block tuning: the steps' rates over the epochs: auto (default: cosine for a "
                    "hybrid model of at most 100 M parameters, else constant), constant or cosine "
                    "(a half cosine from the rate towards 0 after the last epoch)")
        ->check(CLI::IsMember({"auto", "constant", "cosine"}));
    cmd->add_option("--kd-lr-schedule", a->o.kd.lr_schedule,
                    "distillation: the steps' rates over --kd-epochs: constant (default) or "
                    "cosine")
        ->transform(CLI::CheckedTransformer(lr_schedules()));
}

void add_run_options(CLI::App* cmd, QuantizeArgs* a) {
    cmd->add_option("--jobs", a->o.jobs, "tensors in flight per GPU (0: automatic)");
    cmd->add_option("--gpus", a->o.gpus,
                    "with --device gpu: the GPUs to use, e.g. 0,2 (default: every visible GPU "
                    "encodes; the first calibrates and tunes)")
        ->delimiter(',');
    cmd->add_option("--threads", a->threads, "host threads (0: all)");
    cmd->add_flag("--resume", a->o.resume, "continue an interrupted run from its journal");
    cmd->add_flag("--force", a->o.force, "overwrite the output / discard an old journal");
    cmd->add_option("--json", a->json, "write the run's summary as JSON to this file");
    cmd->add_flag("--mpi", a->mpi,
                  "run as one rank of an MPI job (implied when started by mpirun): the "
                  "calibration windows and each layer's tensors are shared out, the file is the "
                  "same as one process writes");
    cmd->add_flag("-q,--quiet", a->quiet, "no per-tensor lines or progress bar");
    cmd->add_flag("--profile", a->o.profile,
                  "seconds per encoder stage on each tensor's line and in total (with "
                  "--device gpu every stage then waits for the device)");
}

}  // namespace

void add_quantize(CLI::App& app) {
    auto a = std::make_shared<QuantizeArgs>();
    a->o.calib.seqlen = 0;  // model default
    a->o.tune_mode = "auto";
    a->o.tune.epochs = quant::kTuneEpochsAuto;  // a number replaces it (checked below)
    a->o.tune.lr_scales = quant::kLrAuto;       // as do these (by the model, load_and_check)
    a->o.kd.lr_scales = quant::kLrAuto;
    a->o.plan_auto_default = true;  // --plan or --file-bpw turns it off
    auto* cmd = app.add_subcommand("quantize", "compress a Hugging Face checkpoint");
    add_encoding_options(cmd, a.get());
    add_calibration_options(cmd, a.get());
    add_tuning_options(cmd, a.get());
    add_run_options(cmd, a.get());
    cmd->callback([a] { run_quantize(a.get()); });
}

void add_inspect(CLI::App& app) {
    auto path = std::make_shared<std::string>();
    auto json = std::make_shared<bool>(false);
    auto* cmd = app.add_subcommand(
        "inspect", "list the tensors of a cortiq file, check their checksums and payloads");
    cmd->add_option("file", *path, "compressed .safetensors file")->required();
    cmd->add_flag("--json", *json, "print JSON");
    cmd->callback([path, json] {
        const auto r = quant::inspect(*path, *json);
        fmt::print("{}", r.text);
        std::fflush(stdout);  // the listing before the error, also when both go to one pipe
        CORTIQ_CHECK(r.damage.empty(), "{}", r.damage);
    });
}

}  // namespace cortiq::cli
