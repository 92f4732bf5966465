// The steps of quantize() (quantize.cpp), in the order it runs them:
//   load_and_check → plan_work (→ make_auto_plan → plan_work) →
//   encode_embedding → per decoder layer: encode_layer (for each input:
//   calibrate_input, then the encoder) → encode_head → write_output.
// Internal to src/quantize.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "calib/calib.hpp"
#include "calib/sequential.hpp"
#include "core/progress.hpp"
#include "io/safetensors.hpp"
#include "model/gpu_model.hpp"
#include "model/llama.hpp"
#include "quantize/allocate.hpp"
#include "quantize/encode_group.hpp"
#include "quantize/journal.hpp"
#include "quantize/plan.hpp"
#include "quantize/quantize.hpp"
#include "tune/block.hpp"

namespace cortiq::quant {

inline constexpr int kFormatVersion = 1;
// The seed of --calib-random's windows (fixed: a run is reproducible).
inline constexpr uint64_t kCalibRandomSeed = 0xca11b;
inline constexpr uint64_t kCalibGeneratedSeed = 0x6e4e7a7e;
inline constexpr const char* kHead = "lm_head.weight";

// "model.layers.{layer}.{linear}.weight" (under the config's text prefix)
std::string tensor_name(const io::ModelConfig& c, int64_t layer, const std::string& linear);

// The inputs of a decoder block and the linear layers that read each: q/k/v,
// o, gate/up, down; in a Gated DeltaNet layer in_proj_qkv/z/b/a and out_proj
// instead of the attention's.
struct InputGroup {
    const char* input;  // hook name
    std::vector<const char*> linears;
};
const std::vector<InputGroup>& input_groups(const io::ModelConfig& c, int64_t layer);

// Linear layers too small to compress usefully (Qwen3.5's in_proj_b and
// in_proj_a: one row per value head): kept as they are unless a --plan
// pattern names them.
bool small_by_default(const std::string& linear);

// ── load and check (load.cpp) ─────────────────────────────────────────────────
// The output path is free (or --force), its folder exists, a GPU is there
// when asked for.
void check_output(const QuantizeOptions& o);
struct Inputs {
    model::Model model;
    io::Checkpoint checkpoint;
    calib::CalibSet calib;
    // The run's settings: the output's metadata and the journal's key.
    nlohmann::json settings;
    // Random-token windows per fit window for distillation, auto resolved.
    double kd_random = 0.0;
};
// Resolves o's model-dependent defaults in place (resolve_plan_auto,
// resolve_tune_epochs) once the model is loaded, before the run's settings.
Inputs load_and_check(QuantizeOptions& o, const Plan& plan);
// --calib-generated with kCalibGeneratedAuto resolved for a model of `params`
// (`hybrid`: with Gated DeltaNet layers, quantize.hpp's kCalibGeneratedHybrid).
double resolve_calib_generated(const QuantizeOptions& o, int64_t params, bool hybrid = false);
// Calibration windows with kSamplesAuto resolved for a model of `params`
// (`hybrid`: kSamplesTunedHybrid).
int64_t resolve_samples(const QuantizeOptions& o, int64_t params, bool hybrid = false);
// --plan auto: given, or by default for a tuned small hybrid model
// (plan_auto_default; measured in quantize.hpp beside kTuneEpochsHybrid).
bool resolve_plan_auto(const QuantizeOptions& o, int64_t params, bool hybrid);
// Block tuning's epochs with kTuneEpochsAuto resolved.
int resolve_tune_epochs(const QuantizeOptions& o, int64_t params, bool hybrid);
// Block tuning's and distillation's steps on the log-scales with kLrAuto
// resolved (kTuneLrHybrid, kKdLrHybrid).
double resolve_tune_lr(const QuantizeOptions& o, int64_t params, bool hybrid);
// Block tuning's schedule with tune_lr_schedule_auto resolved (kTuneLrScheduleHybrid).
tune::LrSchedule resolve_tune_lr_schedule(const QuantizeOptions& o, int64_t params, bool hybrid);
double resolve_kd_lr(const QuantizeOptions& o, int64_t params, bool hybrid);
// --kd-random with kKdRandomAuto resolved: 0 with sampled calibration windows
// (`generated` per window), else 1.
double resolve_kd_random(const QuantizeOptions& o, double generated);
double resolve_kd_lr_signs(const QuantizeOptions& o, int64_t params);
double resolve_kd_min_gain(const QuantizeOptions& o, int64_t params);
// Distillation with moving signs (kd.lr_signs > 0) on the GPU holds, for
// every sign of the model, the sign as a float, its gradient, its latent and
// two Adam moments: 20 bytes a sign, about bpw signs a weight. Throws one
// clear error before any work when that alone passes device_bytes (the
// GPU's memory in all; 0: unknown, no check).
void check_kd_sign_memory(double lr_signs, int64_t weights, double bpw, int64_t device_bytes);

// ── plan (plan_work.cpp) ───────────────────────────────────────────────────────
struct WorkPlan {
    std::map<std::string, double> budget;  // decoder tensor name → bpw
    std::vector<std::string> kept_small;   // small_by_default tensors left as they are
    std::optional<double> head_bpw;        // --include-head
    std::optional<double> embed_bpw;       // a plan rule that names the embedding
    int64_t weights = 0;                   // weights to encode (the progress ETA)
};
WorkPlan plan_work(const Plan& plan, const model::Model& m);

// What the layer and head steps share.
struct Run {
    const QuantizeOptions& o;
    model::Model& model;
    calib::SequentialCalib& states;
    Progress& bar;
    const Journal& journal;
    QuantizeReport& report;
    std::map<std::string, std::vector<uint8_t>> payloads;  // tensor name → BLR payload
    // QuantizeOptions::test_grams_of_previous_layer: the last layer's
    // (H_fit, H_sel) per input name.
    std::map<std::string, std::pair<MatD, MatD>> previous_grams;
};

// ── calibrate one input of a layer (calibrate_input.cpp) ─────────────────────
struct InputGrams {
    MatD h_fit, h_sel;
    std::vector<double> drift_alpha;  // per job (--match original), else -1
};
// The Grams of `input` of block `layer` with everything before it compressed;
// with --match original each job's target moved towards the original outputs.
// `owners` (several ranks): the rank that encodes each job; the drift targets
// are made only for this rank's jobs (the others' drift_alpha stay −1).
InputGrams calibrate_input(Run& run, int64_t layer, const char* input, std::vector<GroupJob>& jobs,
                           const std::string& what, const std::vector<int>* owners = nullptr);

// The payload becomes the layer's weight, for the model and its states (and
// the output's payloads); `linear` as Model::linear_names().
void install_payload(Run& run, int64_t layer, const std::string& linear,
                     const std::vector<uint8_t>& bytes);
// Every payload of a layer's record (from the journal, or from another rank)
// put in place; a tensor not of `layer` is refused.
void install_record(Run& run, int64_t layer, const LayerRecord& rec);

// ── compress the embedding (encode_embedding.cpp) ────────────────────────────
// "model.embed_tokens.weight" under the config's text prefix.
std::string embedding_name(const io::ModelConfig& c);
// s_t per token of the vocabulary: s_t² = V·(½ freq_t + ½/V), freq over the
// fit windows (mean of s_t² over the vocabulary: 1).
std::vector<double> embedding_row_weights(const calib::CalibSet& cs, int64_t vocab);
// diag(s) · table in float64: what the embedding is encoded as.
MatD rows_weighted(const MatF& table, const std::vector<double>& s);
struct EmbeddingStep {
    const QuantizeOptions& o;
    model::Model& model;
    const calib::CalibSet& calib;
    const Journal& journal;
    Progress& bar;
    QuantizeReport& report;
    std::map<std::string, std::vector<uint8_t>>& payloads;
};
// From the journal, or encoded (rows weighted by token frequency, rank 0 under
// mpirun) and journalled; then the model's embedding (and a tied head that
// shares it) becomes the payload.
void encode_embedding(EmbeddingStep& step, double bpw);

// ── --plan auto: measured sensitivity (sensitivity.cpp) ──────────────────────
struct SensitivityRequest {
    const QuantizeOptions& o;
    model::Model& model;  // float; every weight is back in place on return
    const calib::CalibSet& calib;
    const std::vector<std::vector<int32_t>>& windows;  // where the KL is measured
    std::set<std::string> decoder;                     // decoder tensors to measure
    bool embedding = false, head = false;              // and these
    double b0 = 1.0;                                   // the reference budget
    double embed_keep_bits = 16, head_keep_bits = 16;  // their bits when kept
    // The reference distributions are kept at every measured position, two
    // floats per vocabulary entry, in at most this many bytes: a large
    // vocabulary is measured at every k-th position of each window (the
    // last of each k: the most context). tiny-llama-6m's 8 windows of 512 at
    // 4,096 words: every position; a 128,256-word vocabulary: every 16th.
    int64_t reference_bytes = int64_t{256} << 20;
};
struct Sensitivity {
    std::vector<TensorCost> costs;  // embedding first, decoder tensors in order, head last
    std::vector<double> proxy_err;  // the quick encode's relative error at b₀, per tensor
    double b0 = 1.0;
    int64_t windows = 0;
    int64_t stride = 1;  // the positions measured: every stride-th of each window
    double seconds = 0;
    double encode_seconds = 0;  // of which the quick encodes (the rest: forward passes)
};
Sensitivity measure_sensitivity(const SensitivityRequest& rq, Progress& bar);
// --plan auto / --file-bpw (auto_plan.cpp): the plan's JSON text, measured
// and allocated against the uniform plan's work (or read back from the
// journal on resume), written to OUT.plan.json; every rank returns it.
std::string make_auto_plan(const QuantizeOptions& o, Inputs& in, const WorkPlan& uniform,
                           const Journal& journal, QuantizeReport& rep);
// --file-bpw: throws, before any journal exists, when the tensors that stay as
// they are and the metadata already take the whole budget.
void check_file_budget(const QuantizeOptions& o, const Inputs& in, const WorkPlan& uniform);

// ── several ranks under mpirun (ranks.cpp) ─────────────────────────────────────
// One encoded tensor: its payload and its report.
struct EncodedTensor {
    std::vector<uint8_t> payload;
    TensorReport report;
};
// `rec` from rank `root` on every rank (nothing with one process).
void broadcast_record(LayerRecord& rec, int root);
// tune::TuneRanks::fold over the ranks of the job (ranks.cpp).
void fold_over_ranks(std::vector<uint8_t>& running,
                     const std::function<void(std::vector<uint8_t>&)>& mine);
// Rank 0's journal entry of `key` (Journal::load) on every rank.
std::optional<LayerRecord> load_journalled(const Journal& journal, int64_t key,
                                           const std::vector<JournalTensor>& expected);
// Which rank encodes each job: the largest first, each to the rank with the
// fewest weights so far (ties: the lowest rank). Which rank encodes a tensor
// does not change its bytes, only when the layer is done.
std::vector<int> owners_of(const std::vector<GroupJob>& jobs, int ranks);
// Each job encoded by its owner as encode_group would, its report's
// drift_alpha set from `drift_alpha`, then broadcast; every rank returns every
// result in job order, on_done(i, result) called in that order. `names`: the
// jobs' tensor names.
std::vector<EncodedTensor> encode_on_ranks(
    Run& run, const std::vector<GroupJob>& jobs, const std::vector<std::string>& names,
    const std::vector<int>& owners, const std::vector<double>& drift_alpha, const MatD& h_fit,
    const MatD& h_sel, const std::string& what,
    const std::function<void(size_t, const EncodedTensor&)>& on_done);

// ── encode one decoder layer (encode_layer.cpp) ──────────────────────────────
// From the journal when it holds the layer, else calibrated, encoded, put in
// place and journalled.
void encode_layer(Run& run, int64_t layer, const WorkPlan& work);

// ── tune one encoded decoder layer (tune_layer.cpp) ──────────────────────────
// --tune block: the layer's BLR payloads tuned against the original model's
// block outputs and put in place (same rank and paths); a journalled record
// then holds the tuned payloads.
void tune_layer(Run& run, int64_t layer, LayerRecord& rec);
// The shapes tuning needs (throws for blocks it has no backward pass for).
tune::BlockDims dims_of(const io::ModelConfig& c);
// Block `layer` as tuning holds it: its BLR payloads as factors, every other
// linear layer dense. with_signs false: the BLR layers' scales alone (their
// signs are not unpacked; su and sv empty).
tune::BlockParamsT<float> block_params(const Run& run, int64_t layer, bool with_signs = true);
// The BLR layers of p packed and put in place (and into rec's payloads).
void install_block(Run& run, int64_t layer, const tune::BlockParamsT<float>& p, LayerRecord* rec);
// The BLR scales of `from` into `to`, a block of the same layers.
void copy_scales(const tune::BlockParamsT<float>& from, tune::BlockParamsT<float>& to);

// ── distil the whole compressed model (distill_model.cpp) ────────────────────
// --tune ...+kd: every block's BLR layers tuned together on the KL divergence
// to the original model's next-token distribution over the calibration
// windows (tune/distill.hpp), then put in place.
// kd_random: random-token windows added per fit window. With --device gpu
// the calibration's device memory must be free (SequentialCalib::release_gpu).
void distill_model(Run& run, const calib::CalibSet& cs, const model::Model& original,
                   double kd_random);

// ── encode the head (encode_head.cpp) ────────────────────────────────────────
void encode_head(Run& run, const io::Checkpoint& ck, double bpw);

// ── write (write.cpp) ─────────────────────────────────────────────────────────
// Every source tensor in name order, its payload instead where encoded; fills
// the report's totals.
void write_output(const QuantizeOptions& o, const io::Checkpoint& ck,
                  const nlohmann::json& settings,
                  const std::map<std::string, std::vector<uint8_t>>& payloads,
                  QuantizeReport& report);

TensorReport report_of(const std::string& name, const GroupJob& job, const encode::Encoded& e,
                       encode::Method method);
// " | stages latents 0.12s (10%) | ..." for a tensor's line when it was
// profiled (QuantizeOptions::profile), else "".
std::string stage_note(const encode::Encoded& e);
double ratio(int64_t a, int64_t b);

}  // namespace cortiq::quant
