// `cortiq quantize`: a Hugging Face checkpoint and calibration text in, a
// compressed safetensors file out (SPEC §4–§5). Sequential calibration as in
// GPTQ's true-sequential mode; a journal of finished layers for --resume.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "calib/calib.hpp"
#include "core/progress.hpp"
#include "encode/bench.hpp"
#include "encode/options.hpp"
#include "tune/block_tune.hpp"

namespace cortiq::quant {

// enc.gptq_group until resolved: `auto` (0) with --device gpu, the exact
// search (1, the CPU reference) on the CPU. After default tuning `auto`
// moves the perplexities less than the calibration text does, and the GPU
// encodes a 4096×11008 tensor in 4.85 s instead of 32.3 (docs/encoder_speed.md).
inline constexpr int kGptqGroupByDevice = -1;
inline encode::Options with_gptq_group_by_device() {
    encode::Options e;
    e.gptq_group = kGptqGroupByDevice;
    return e;
}

struct QuantizeOptions {
    std::string model_dir, out_path;
    std::vector<std::string> calib_paths;  // one or more texts (equal shares of the windows)
    double bpw = 1.0;
    std::string plan_path;  // JSON {tensor-name glob: bpw | null (keep)}
    bool include_head = false;
    // --plan auto: bits per tensor from measured sensitivity (allocate.hpp),
    // the uniform plan's bits in all; the plan is written to OUT.plan.json.
    bool plan_auto = false;
    // No plan given (the command line without --plan or --file-bpw): a tuned
    // hybrid model of at most kCalibGeneratedAutoParams parameters gets --plan
    // auto (resolve_plan_auto); `--plan uniform` keeps the uniform plan.
    bool plan_auto_default = false;
    // --file-bpw F (> 0): the plan auto-made under one budget for the whole
    // file, F × the source's parameters bits, every stored byte counted; the
    // embedding and an untied head may be compressed (or kept) too.
    double file_bpw = 0;
    // The held-out windows the sensitivity pass measures on (at most).
    int64_t sensitivity_windows = 8;
    // method, paths, rho, ...; the column search's group starts at
    // kGptqGroupByDevice, which resolve_gptq_group sets from the device
    encode::Options enc = with_gptq_group_by_device();
    encode::Device device = encode::Device::cpu;
    // The decoder layers' float weights left in the mapped checkpoint and
    // read when used (model::LoadOptions::map_linears), so that the host
    // never holds the whole model: unset, with --device gpu (where the
    // layers run on the device); the same file either way.
    std::optional<bool> map_weights;
    int jobs = 0;  // tensors in flight on the GPU (0: automatic)
    // --gpus 0,2: the GPUs that encode (each layer's tensors spread over them);
    // the first also calibrates and tunes. Empty: every visible GPU encodes,
    // the current one calibrates.
    std::vector<int> gpus;
    calib::CalibOptions calib;
    // Each linear layer's target: true (the default), the original model's
    // outputs, ‖W X_o − Ŵ X_c‖, so the drift of the compressed layers before
    // it is corrected (see drift_target); false, its own outputs on the
    // compressed model's inputs, GPTQ's true-sequential objective ‖(W − Ŵ) X_c‖.
    bool match_original = true;
    // Shrinks the fit Gram toward its diagonal before encoding,
    //   H ← (1 − s)·H + s·diag(H),
    // so the encoder trusts the calibration text's input correlations less
    // (they overfit a narrow text; the diagonal — each input's energy — carries
    // over to other texts better). 0 keeps H as measured. 0.7 measured best
    // on texts of other domains than the calibration's (docs/tuning.md).
    double gram_shrink = 0.7;
    // Output-aware tuning after each decoder layer is encoded:
    // "none", or "block" (tune/block_tune.hpp: the layer's BLR scales, and
    // signs when tune.lr_signs > 0, fitted to the original model's block
    // outputs). Needs the original model, loaded whatever --match says.
    // "block+kd" (or "kd"): then logit distillation of the whole model
    // (tune/distill.hpp) with the options in `kd`.
    // "auto" (the command line's default) is resolved by resolve_tune_mode.
    std::string tune_mode = "none";
    tune::TuneOptions tune;
    // true: tune.lr_schedule is chosen by the model (resolve_tune_lr_schedule)
    bool tune_lr_schedule_auto = false;
    // 20 epochs with signs: on the GPU with the default 128 windows the
    // held-out KL of tiny-llama-6m was lowest at epochs 7 to 15, and the
    // held-out windows keep the best epoch anyway; 20 against 10 epochs gave
    // 89.0 / 126.6 against 91.6 / 137.1 on Austen / KJV for about 1 s more on
    // the H200, where the teacher's pass dominates (docs/tuning.md). With
    // --kd-random 1 the epoch kept was 3 of 20 at 0.9 bpw (both 6M models),
    // so 17 passes bought nothing there: a patience of 4 stops those runs
    // after epoch 7 with the same result, and lets a run that keeps gaining
    // go on to 20.
    // lr_signs kKdLrSignsAuto (the command line's default) is resolved by
    // resolve_kd_lr_signs: the signs move only in a model small enough for
    // their latents (below).
    tune::TuneOptions kd = {.epochs = 20,
                            .batch_windows = 1,
                            .lr_scales = 1e-3,
                            .lr_signs = -1.0,
                            .latent_init = 1e-2,
                            .lr_norms = 0.0,
                            .patience = 4,
                            .min_gain = -1.0,
                            .on_progress = {}};
    // Distillation also on windows of uniformly random token ids, this many
    // per fit window (the teacher's outputs on them; no text). The
    // calibration text exercises few of the embedding's directions; random
    // tokens exercise them all, so the student keeps the teacher's behaviour
    // on tokens the calibration text lacks. Measured (tiny-llama-6m, 0.9 bpw,
    // 32 windows, CPU, 6 epochs): 38.27 / 118.1 / 170.1 → 36.65 / 92.47 /
    // 131.1 on tinystories-valid / austen-heldout / kjv-heldout with 1.0
    // (docs/tuning.md). kKdRandomAuto (the default): 1 without sampled
    // calibration windows, 0 with them (resolve_kd_random): the model's own
    // samples cover what the random windows were for, and on the H200 both 6M
    // models scored better on every text and budget without the random ones
    // (tiny-llama-6m at 0.9 bpw: 35.18 / 59.13 / 66.93 with them, 33.47 /
    // 56.37 / 62.33 without, in 62 s instead of 80 s).
    double kd_random = -1.0;
    // Windows of random token ids per calibration window, added to the fit and
    // held-out windows of every stage (calib::add_random_windows).
    double calib_random = 0.0;
    // Windows sampled from the original model (temperature 1) per calibration
    // window, added the same way (calib/generated.hpp): its own samples cover
    // the domains it was trained on, not only the calibration text's.
    // kCalibGeneratedAuto (the command line's default): 0.5 when tuning a model
    // of at most kCalibGeneratedAutoParams parameters, else 0. Measured on
    // tiny-llama-6m at 0.9 bpw with tuning (docs/tuning.md): 0.5 took
    // tinystories / Austen / KJV from 36.65 / 92.47 / 131.1 to 36.52 / 62.83 /
    // 67.59; 1 to 38.15 / 59.48 / 62.20. Sampling runs token by token on the
    // CPU, seconds for such models but hours for billions of parameters.
    double calib_generated = 0.0;
    bool tune_blocks() const { return tune_mode == "block" || tune_mode == "block+kd"; }
    bool tune_kd() const { return tune_mode == "kd" || tune_mode == "block+kd"; }
    bool tuned() const { return tune_blocks() || tune_kd(); }
    bool resume = false, force = false, progress = true, verbose = true;
    // Told of every encoded tensor (core/progress.hpp), with or without the
    // progress bar: (tensor name, weights done, weights in all).
    ProgressCallback on_progress;
    // Seconds per encoder stage: on each tensor's line (verbose), in total in
    // the summary and in --json ("encode_stages"). On the GPU every stage then
    // synchronises the device, so the tensors in flight overlap less.
    bool profile = false;
    // Testing hook: throw an Error right after the journal entry of this layer
    // is written (num_layers: of the head), as a killed run would stop (-1:
    // never).
    int64_t interrupt_after_layer = -1;
    // Testing hook (no command-line option): every input of a decoder layer
    // l ≥ 1 is encoded, and its errors measured, with the Grams of the same
    // input of layer l − 1 — the defect of Grams mixed up between layers of
    // one shape, which the tests must catch (tests/test_quantize_quality.cpp).
    bool test_grams_of_previous_layer = false;
};

inline constexpr double kCalibGeneratedAuto = -1.0;
// kd.lr_signs = kKdLrSignsAuto: kKdLrSignsSmall for a model of at most
// kCalibGeneratedAutoParams parameters, else 0 (the signs fixed, the scales
// and norms distilled). Distillation holds every layer at once: moving the
// signs needs a float latent, its gradient and two Adam moments for each, 16
// bytes a weight beside the signs themselves, about 130 GB of device memory
// for a 7B model, where fixed signs stay packed at one bit (DBlrPath) and
// their two gradient products are skipped (a pass about half as long).
inline constexpr double kKdLrSignsAuto = -1.0;
inline constexpr double kKdLrSignsSmall = 1e-4;
inline constexpr double kKdRandomAuto = -1.0;
// kd.min_gain = kKdMinGainAuto (the command line's default): 0 for a model of
// at most kCalibGeneratedAutoParams parameters (every gain resets the
// patience, as the small models' measurements were made), kKdMinGainLarge
// above, where a pass costs seconds to minutes (29 s for the 0.8B-shaped
// Qwen3.5 on an H100): there a gain of 0.07 % (its held-out KL 0.1387 at
// pass 4, 0.1386 at pass 7) would reset patience 4 for four passes more.
// In that run a gain of 5 % followed at pass 8, so the rule changed nothing
// (docs/tuning.md).
inline constexpr double kKdMinGainAuto = -1.0;
inline constexpr double kKdMinGainLarge = 0.005;
inline constexpr int64_t kCalibGeneratedAutoParams = 100'000'000;
// calib.samples = kSamplesAuto (the command line's --samples auto):
// kSamplesTuned windows when tuning a model of at most
// kCalibGeneratedAutoParams parameters, else the CalibOptions default (128).
// Measured on the H200 with the other defaults (docs/tuning.md): 192 windows
// instead of 128 lowered tinystories-valid perplexity on both 6M models at
// 0.42, 0.9 and 2.0 bpw (tiny-llama-6m at 0.9: 33.47 → 31.12, Austen 56.37 →
// 55.10, KJV 62.33 → 57.93) for 90.6 s instead of 62.4 s.
inline constexpr int64_t kSamplesAuto = -1;
inline constexpr int64_t kSamplesTuned = 192;
// A hybrid model (Qwen3.5: Gated DeltaNet layers) tuned at that size gets
// kSamplesTunedHybrid windows and kCalibGeneratedHybrid sampled windows per
// window. Measured on an H100 (tiny-qwen35-6m at 0.898 bpw, every other
// default, docs/tuning.md): 192 windows and 0.5 gave 35.30 / 82.20 / 78.19 on
// tinystories-valid / austen-heldout / kjv-heldout, 256 and 1.0 gave 35.14 /
// 63.29 / 64.26 (256 and 0.5 is not measured; 192 and 1.0 gave 37.30 / 66.24 /
// 69.41, 192 and 0.75 37.20 / 75.51 / 70.22).
inline constexpr int64_t kSamplesTunedHybrid = 256;
inline constexpr double kCalibGeneratedHybrid = 1.0;
// tune.epochs = kTuneEpochsAuto (the command line's default): block tuning
// takes kTuneEpochsHybrid passes for such a hybrid model, which also gets
// --plan auto by default (plan_auto_default), else tune::TuneOptions'
// epochs. Measured on an H100 (tiny-qwen35-6m at 0.898 bpw with the hybrid
// calibration above, four runs sharing the GPU, docs/tuning.md): the uniform
// plan and 4 epochs gave 34.59 / 61.48 / 65.50; 8 epochs 35.89 / 61.68 /
// 64.86; --plan auto 35.04 / 57.75 / 60.58; both 34.27 / 56.31 / 58.79.
inline constexpr int kTuneEpochsAuto = -1;
inline constexpr int kTuneEpochsHybrid = 16;
// tune.lr_scales and kd.lr_scales = kLrAuto (the command line's defaults):
// such a hybrid model's block tuning and distillation take larger steps on
// the log-scales, kTuneLrHybrid and kKdLrHybrid, with kTuneEpochsHybrid
// epochs; other models tune::TuneOptions' 3e-3 and QuantizeOptions' 1e-3.
// Measured on the CPU (docs/tuning.md, "Steps and epochs for the hybrid
// blocks"): 8 epochs, 3e-3 and 1e-3 gave tiny-qwen35-6m at 0.898 bpw 34.92 /
// 58.05 / 60.28; 16 epochs, 1e-2 and 3e-3 gave 33.52 / 56.17 / 57.57.
inline constexpr double kLrAuto = -1.0;
inline constexpr double kTuneLrHybrid = 1e-2;
inline constexpr double kKdLrHybrid = 3e-3;
// tune_lr_schedule_auto (the command line's default): such a hybrid model's
// block tuning takes its steps on a half cosine (tune/epochs.hpp), other
// models a constant rate. Measured on an H200 (docs/tuning.md, "A cosine
// schedule for block tuning"; tiny-qwen35-6m at 0.898 bpw, two runs sharing
// the GPU): constant 34.57 / 56.08 / 58.39, cosine 33.66 / 52.79 / 55.29;
// with the constant rate the first layer's block tuning kept its start (no
// epoch lowered its held-out error), with the cosine every layer's last
// epoch was kept.
inline constexpr tune::LrSchedule kTuneLrScheduleHybrid = tune::LrSchedule::cosine;

struct TensorReport {
    std::string name, method, line;
    int64_t m = 0, n = 0, rank = 0, bits = 0;
    int paths = 0;
    double bpw_target = 0, bpw = 0, err_fit = 0, err_sel = 0, seconds = 0;
    double drift_alpha = -1;  // --match original: the correction kept (drift_shrinkage); else -1
    nlohmann::json to_json(bool with_seconds) const;
    static TensorReport from_json(const std::string& name, const nlohmann::json& j);
};

struct QuantizeReport {
    std::vector<TensorReport> tensors;
    // Every encoded tensor, lm_head included when it is compressed (head_*
    // repeat its share; 0 when it stays as it is).
    int64_t linear_params = 0, linear_bits = 0;
    int64_t head_params = 0, head_bits = 0;
    // Peak memory of the run: host resident set (core/memory_usage.hpp) and,
    // with --device gpu, the device pools' high-water mark (core/gpu.hpp).
    int64_t peak_host_bytes = 0, peak_gpu_pool_bytes = 0;
    // --plan auto / --file-bpw: the measurement, the allocation, the plan file
    nlohmann::json plan;
    double sensitivity_seconds = 0;
    // A compressed embedding (a plan rule that names it), outside linear_*.
    int64_t embed_params = 0, embed_bits = 0;
    // The source checkpoint's parameters (a tied head counted once, as the
    // embedding) and the output's size.
    int64_t total_params = 0, file_bytes = 0;
    double seconds = 0, encode_seconds = 0, calib_seconds = 0, tune_seconds = 0;
    // Loading the model, checkpoint, tokenizer and calibration windows (the
    // sampled ones of --calib-generated included), and writing the output.
    double load_seconds = 0, write_seconds = 0;
    // each compressed layer put back into the model being calibrated (on the
    // GPU its dense weight formed there), and each layer's journal entry
    double install_seconds = 0, journal_seconds = 0;
    // QuantizeOptions::profile: the encoder's seconds per stage, summed over
    // the tensors encoded in this run (tensors in flight together add up
    // past the wall time).
    Profile encode_stages;
    // QuantizeOptions::profile with tuning: block tuning's seconds per stage
    // (forward, backward, adam, evaluate) summed over the layers, and the
    // distillation's (kd_...; tune::TuneOptions::profile).
    Profile tune_stages;
    // Where calib_seconds went, always recorded (seconds, not synchronising
    // anything more): "start" (loading the original model, the first hidden
    // states), "grams" (each input's Grams, with --match original its cross
    // Grams too, on the host), "layer loads" (--device gpu: the decoder
    // layers of both models put on the device as a layer's Grams first need
    // them; the rest of "grams" is the passes themselves),
    // "drift" (--match original: the corrected targets, float64, on the GPU
    // with --device gpu),
    // "advance" (each compressed layer's outputs), "head" (lm_head's Grams).
    Profile calib_parts;
    // Adds to calib_seconds and to its part.
    void add_calib(const char* part, double seconds) {
        calib_seconds += seconds;
        calib_parts.add(part, seconds);
    }
    // One entry per tuned block: layer, losses before/after, epoch kept, flips.
    nlohmann::json tuned_blocks = nlohmann::json::array();
    nlohmann::json distilled;  // --tune ...+kd: KL before/after, epoch kept, flips, seconds
    int resumed_layers = 0;
    bool resumed_head = false;
    // Tensors too small to compress usefully, left as they are (Qwen3.5's
    // in_proj_b / in_proj_a; quantize/steps.hpp small_by_default).
    std::vector<std::string> kept_small;
    std::string out_path;
    nlohmann::json to_json() const;
    std::string summary() const;
    std::string kept_small_note() const;  // the summary's part on kept_small, or ""
    std::string plan_note() const;        // the summary's part on --plan auto, or ""
};

QuantizeReport quantize(const QuantizeOptions& o);

// --tune auto: the best tuning the device runs in about the time of the
// encoding: "block+kd" with --device gpu (block tuning and distillation run
// on the GPU, tune/cuda; Qwen3.5's hybrid blocks too), "none" on the CPU
// (minutes per layer on a few cores; ask for it with --tune block or
// block+kd). Any other mode is returned as it is.
std::string resolve_tune_mode(const std::string& mode, encode::Device device);
// Sets o.tune_mode from "auto" (resolve_tune_mode).
void resolve_tune_mode(QuantizeOptions& o);
// Sets o.enc.gptq_group from kGptqGroupByDevice (quantize() does it too).
void resolve_gptq_group(QuantizeOptions& o);

// The least-squares target of --match original. With C = (1/T) Σ x_o x_cᵀ
// (original and compressed inputs), H the Gram of the compressed inputs and
// the damping c of the encoder's metric A = H + c·I, the damping taken as a
// pull towards the original weight,
//   ‖W X_o − Ŵ X_c‖² + c‖Ŵ − W‖² = tr((Ŵ − W_t) A (Ŵ − W_t)ᵀ) + const,
//   W_t = W (C + c·I) A⁻¹ = W + W (C − H) A⁻¹,
// so encoding W_t in the metric A (what the encoder does with H_fit and ρ)
// minimises the error against the original outputs; without drift (C = H)
// W_t = W.
MatD drift_target(const MatD& w, const MatD& cross, const MatD& h_fit, double damping);
// The correction alone, D = W_t − W = W (C − H) A⁻¹, formed from C − H before
// the products: exactly 0 where the inputs have not drifted (C = H bit for
// bit, as at the first layer's first input), not the rounding of W_t − W,
// which depended on the BLAS's thread count and set α at random there.
MatD drift_step(const MatD& w, const MatD& cross, const MatD& h_fit, double damping);
// What drift_step needs of one input, shared by every weight that reads it:
// C − H and the Cholesky factor of A = H + c·I (la::spd_factor), made once.
struct DriftFit {
    MatD diff, factor;
};
DriftFit drift_fit(const MatD& cross, const MatD& h_fit, double damping);
// drift_step from an input's DriftFit: the same bits as the form above.
MatD drift_step(const MatD& w, const DriftFit& fit);

// How much of the correction D = W_t − W to keep: the α in [0, 1] that
// minimises the same objective over the held-out windows,
//   ‖W X_o − (W + α D) X_c‖²  →  α = ⟨W (C_sel − H_sel), D⟩ / ⟨D H_sel, D⟩,
// (quadratic in α, clamped). With ample calibration α ≈ 1; with little, the
// fit windows' correction partly fits their noise and the held-out windows
// say how much of it to trust.
double drift_shrinkage(const MatD& w, const MatD& d, const MatD& cross_sel, const MatD& h_sel);

// H ← (1 − s)·H + s·diag(H) in place (QuantizeOptions::gram_shrink): the
// off-diagonal entries scaled by 1 − s. Keeps H symmetric positive
// semi-definite (a convex combination of two such matrices).
void shrink_to_diagonal(MatD& h, double s);

// A file's listing and what is damaged in it.
struct Inspection {
    std::string text;  // the listing, or JSON with `json`
    // Empty when the checksums match or the file has none; else one message
    // naming the file and each damaged tensor (or the header).
    std::string damage;
};

// One line per tensor (name, shape, kind, bpw, rank, paths, errors) after
// checking every checksum and validating every intact payload; throws on the
// first invalid payload. Damaged tensors are marked and listed in `damage`.
Inspection inspect(const std::string& path, bool json = false);

}  // namespace cortiq::quant
