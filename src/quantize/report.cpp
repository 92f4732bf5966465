// The reports of a quantize run: per tensor and for the whole run (the
// summary line, the --json summary, the journal's records).
#include <fmt/format.h>

#include <cmath>
#include <string>

#include "quantize/steps.hpp"

namespace cortiq::quant {

std::string stage_note(const encode::Encoded& e) {
    return e.stages.entries().empty() ? "" : " | stages " + e.stages.line();
}

TensorReport report_of(const std::string& name, const GroupJob& job, const encode::Encoded& e,
                       encode::Method method) {
    TensorReport r;
    r.name = name;
    r.method = encode::method_name(method);
    r.line = e.line;
    r.m = job.w.rows();
    r.n = job.w.cols();
    r.rank = e.rank;
    r.bits = e.bits;
    r.paths = e.paths;
    r.bpw_target = job.bpw;
    r.bpw = e.bpw;
    r.err_fit = e.err_fit;
    r.err_sel = e.err_sel;
    r.seconds = e.seconds;
    return r;
}

double ratio(int64_t a, int64_t b) {
    return b ? static_cast<double>(a) / b : 0.0;
}

// x to 9 significant digits. The errors and the drift weight are float64 sums
// whose last bits follow how OpenBLAS splits them over threads; the payloads
// do not. Rounded, the metadata (and so the file's bytes, and a resume's) do
// not depend on the thread count either, unless two values a few ulps apart
// straddle a rounding boundary (about one chance in 10⁶ per value).
static double diagnostic(double x) {
    if (!std::isfinite(x) || x == 0) return x;
    return std::stod(fmt::format("{:.9g}", x));
}

nlohmann::json TensorReport::to_json(bool with_seconds) const {
    nlohmann::json j = {{"method", method},
                        {"shape", {m, n}},
                        {"bpw_target", bpw_target},
                        {"bits", bits},
                        {"bpw", bpw},
                        {"rank", rank},
                        {"paths", paths},
                        {"err_fit", diagnostic(err_fit)},
                        {"err_sel", diagnostic(err_sel)},
                        {"line", line}};
    if (drift_alpha >= 0) j["drift_alpha"] = diagnostic(drift_alpha);
    if (with_seconds) j["seconds"] = seconds;
    return j;
}

TensorReport TensorReport::from_json(const std::string& name, const nlohmann::json& j) {
    TensorReport r;
    r.name = name;
    r.method = j.at("method").get<std::string>();
    r.m = j.at("shape").at(0).get<int64_t>();
    r.n = j.at("shape").at(1).get<int64_t>();
    r.bpw_target = j.at("bpw_target").get<double>();
    r.bits = j.at("bits").get<int64_t>();
    r.bpw = j.at("bpw").get<double>();
    r.rank = j.at("rank").get<int64_t>();
    r.paths = j.at("paths").get<int>();
    r.err_fit = j.at("err_fit").get<double>();
    r.err_sel = j.at("err_sel").get<double>();
    r.line = j.value("line", "");
    r.drift_alpha = j.value("drift_alpha", -1.0);
    r.seconds = j.value("seconds", 0.0);
    return r;
}

namespace {

// {stage: seconds} of a profile (an empty object when nothing was recorded).
nlohmann::json seconds_by_stage(const Profile& p) {
    nlohmann::json st = nlohmann::json::object();
    for (const auto& e : p.entries()) st[e.stage] = e.seconds;
    return st;
}

}  // namespace

nlohmann::json QuantizeReport::to_json() const {
    nlohmann::json j;
    j["out"] = out_path;
    j["seconds"] = seconds;
    j["encode_seconds"] = encode_seconds;
    j["calib_seconds"] = calib_seconds;
    j["tune_seconds"] = tune_seconds;
    j["calib_parts"] = seconds_by_stage(calib_parts);
    // Where the run's time went, one figure per part (the parts leave out
    // only planning and the head's and embedding's bookkeeping).
    double block_tuning = 0;
    for (const auto& b : tuned_blocks) block_tuning += b.value("seconds", 0.0);
    j["parts"] = {{"load", load_seconds},
                  {"sensitivity", sensitivity_seconds},
                  {"calibration", calib_seconds},
                  {"encoding", encode_seconds},
                  {"block_tuning", block_tuning},
                  {"distillation", distilled.is_null() ? 0.0 : distilled.value("seconds", 0.0)},
                  {"installing", install_seconds},
                  {"journal", journal_seconds},
                  {"writing", write_seconds}};
    if (!encode_stages.entries().empty()) j["encode_stages"] = seconds_by_stage(encode_stages);
    if (!tune_stages.entries().empty()) j["tune_stages"] = seconds_by_stage(tune_stages);
    if (!plan.is_null()) j["plan"] = plan;
    if (!tuned_blocks.empty()) j["tuned_blocks"] = tuned_blocks;
    if (!distilled.is_null()) j["distilled"] = distilled;
    j["resumed_layers"] = resumed_layers;
    j["resumed_head"] = resumed_head;
    j["kept_small"] = kept_small;
    j["linear_includes_head"] = head_params > 0;
    j["linear_params"] = linear_params;
    j["linear_bits"] = linear_bits;
    j["linear_bpw"] = ratio(linear_bits, linear_params);
    j["head_params"] = head_params;
    j["head_bits"] = head_bits;
    j["embed_params"] = embed_params;
    j["embed_bits"] = embed_bits;
    j["decoder_linear_bpw"] = ratio(linear_bits - head_bits, linear_params - head_params);
    j["peak_host_bytes"] = peak_host_bytes;
    j["peak_gpu_pool_bytes"] = peak_gpu_pool_bytes;
    j["total_params"] = total_params;
    j["file_bytes"] = file_bytes;
    j["file_bits_per_param"] = total_params ? 8.0 * file_bytes / total_params : 0.0;
    nlohmann::json t = nlohmann::json::object();
    for (const auto& r : tensors) t[r.name] = r.to_json(true);
    j["tensors"] = t;
    return j;
}

std::string QuantizeReport::summary() const {
    return fmt::format(
               "{}: {} tensors encoded, linear layers{} {:.4f} bpw ({} params, {:.2f} MB of "
               "codes{}); "
               "file {:.2f} MB = {:.3f} bits per parameter; {:.1f}s (calibration {:.1f}s, encoding "
               "{:.1f}s{}){}{}",
               out_path, tensors.size(), head_params ? " incl. lm_head" : "",
               ratio(linear_bits, linear_params), linear_params, linear_bits / 8e6,
               head_params ? fmt::format("; lm_head {:.4f} bpw{}", ratio(head_bits, head_params),
                                         linear_params > head_params
                                             ? fmt::format(", decoder layers {:.4f} bpw",
                                                           ratio(linear_bits - head_bits,
                                                                 linear_params - head_params))
                                             : "")
                           : "",
               file_bytes / 1e6, total_params ? 8.0 * file_bytes / total_params : 0.0, seconds,
               calib_seconds, encode_seconds,
               tune_seconds > 0 ? fmt::format(", tuning {:.1f}s", tune_seconds) : "",
               resumed_layers ? fmt::format(", {} layers resumed", resumed_layers) : "",
               resumed_head ? ", lm_head resumed" : "") +
           (embed_params ? fmt::format("; embedding {:.4f} bpw ({:.2f} MB)",
                                       ratio(embed_bits, embed_params), embed_bits / 8e6)
                         : "") +
           kept_small_note() + plan_note() +
           (peak_host_bytes > 0
                ? fmt::format("; peak memory: host {:.2f} GB{}", peak_host_bytes / 1e9,
                              peak_gpu_pool_bytes > 0
                                  ? fmt::format(", GPU pools {:.2f} GB", peak_gpu_pool_bytes / 1e9)
                                  : "")
                : "") +
           (encode_stages.entries().empty()
                ? ""
                : "\ncalibration: " + calib_parts.line() +
                      "\nencoder stages (summed over tensors): " + encode_stages.line()) +
           (tune_stages.entries().empty()
                ? ""
                : "\ntuning stages (kd_: distillation): " + tune_stages.line());
}

std::string QuantizeReport::plan_note() const {
    if (plan.is_null() || !plan.contains("file")) return "";
    if (plan.value("resumed", false))
        return fmt::format("; plan auto read back from the journal ({})",
                           plan["file"].get<std::string>());
    double lo = INFINITY, hi = 0;
    int kept = 0;
    for (const auto& [name, t] : plan["tensors"].items()) {
        if (!t["bpw"].is_number()) {
            ++kept;
            continue;
        }
        lo = std::min(lo, t["bpw"].get<double>());
        hi = std::max(hi, t["bpw"].get<double>());
    }
    return fmt::format(
        "; plan auto: {} tensors at {:.2f} to {:.2f} bpw{} from {:.1f} s of measurement, "
        "predicted KL {:.4f} against {:.4f} at {:.2f} bpw everywhere, written to {}",
        plan["tensors"].size() - static_cast<size_t>(kept), lo, hi,
        kept ? fmt::format(" ({} kept as they are)", kept) : "", sensitivity_seconds,
        plan["predicted_kl"].get<double>(), plan["predicted_kl_at_b0_everywhere"].get<double>(),
        plan["b0"].get<double>(), plan["file"].get<std::string>());
}

std::string QuantizeReport::kept_small_note() const {
    if (kept_small.empty()) return "";
    int64_t b = 0, a = 0;
    for (const auto& n : kept_small) {
        b += n.ends_with("in_proj_b.weight");
        a += n.ends_with("in_proj_a.weight");
    }
    return fmt::format(
        "; {} small tensors kept as they are ({} in_proj_b, {} in_proj_a; a --plan "
        "pattern that names them compresses them)",
        kept_small.size(), b, a);
}

}  // namespace cortiq::quant
