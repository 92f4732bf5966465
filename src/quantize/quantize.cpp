// The quantize pipeline. For each decoder layer, in order:
//   1. the Grams of the q/k/v input over the fit and held-out windows, from
//      the hidden states that the already-compressed layers produce;
//   2. q/k/v encoded and put in place; then the o_proj input is collected with
//      the compressed q/k/v, o_proj encoded; then the MLP input with the
//      compressed attention, gate/up encoded; then down_proj's input;
//   3. the layer's payloads written to the journal; the hidden states moved
//      through the compressed layer.
// With --include-head, lm_head is the last job: its input, the final RMSNorm
// of the hidden states that the compressed layers produce, gives its Grams;
// it is journalled like a layer. A tied model keeps its float embedding and
// gets a separate compressed "lm_head.weight".
#include "quantize/quantize.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "blr/sign.hpp"
#include "calib/sequential.hpp"
#include "core/progress.hpp"
#include "encode/dispatch.hpp"
#include "io/hash.hpp"
#include "io/safetensors.hpp"
#include "io/text_file.hpp"
#include "io/tokenizer.hpp"
#include "linalg/blas.hpp"
#include "model/llama.hpp"
#include "quantize/encode_group.hpp"
#include "quantize/journal.hpp"
#include "quantize/plan.hpp"

namespace cortiq::quant {

namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 1;
constexpr const char* kHead = "lm_head.weight";
constexpr int64_t kHeadKey = -1;  // the head's journal entry

// The four inputs of a decoder block and the linear layers that read each.
struct InputGroup {
    const char* input;  // hook name
    std::vector<const char*> linears;
};
const std::vector<InputGroup>& input_groups() {
    static const std::vector<InputGroup> g = {
        {"self_attn.q_proj", {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"}},
        {"self_attn.o_proj", {"self_attn.o_proj"}},
        {"mlp.gate_proj", {"mlp.gate_proj", "mlp.up_proj"}},
        {"mlp.down_proj", {"mlp.down_proj"}},
    };
    return g;
}

std::string tensor_name(int64_t layer, const std::string& linear) {
    return fmt::format("model.layers.{}.{}.weight", layer, linear);
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

std::vector<std::string> checkpoint_files(const io::Checkpoint& ck) {
    std::vector<std::string> files;
    for (const auto& s : ck.shards()) files.push_back(s.path());
    return files;
}

}  // namespace

MatD drift_target(const MatD& w, const MatD& cross, const MatD& h_fit, double damping) {
    const int64_t n = w.cols();
    CORTIQ_CHECK(cross.rows() == n && cross.cols() == n && h_fit.rows() == n,
                 "drift target: weight of {} inputs, cross Gram {}x{}, Gram {}x{}", n, cross.rows(),
                 cross.cols(), h_fit.rows(), h_fit.cols());
    MatD a = h_fit, c = cross;
    for (int64_t i = 0; i < n; ++i) {
        a(i, i) += damping;
        c(i, i) += damping;
    }
    // W_tᵀ = A⁻¹ (W (C + cI))ᵀ, A symmetric
    return la::solve_spd(a, la::gemm(w, false, c, false).transposed()).transposed();
}

double drift_shrinkage(const MatD& w, const MatD& d, const MatD& cross_sel, const MatD& h_sel) {
    MatD diff = cross_sel;
    for (int64_t i = 0; i < diff.size(); ++i) diff.data()[i] -= h_sel.data()[i];
    const double num = la::frob_dot(la::gemm(w, false, diff, false), d);
    const double den = la::frob_dot(la::gemm(d, false, h_sel, false), d);
    if (!(den > 0)) return 0.0;  // no correction (D = 0) or no held-out signal
    return std::clamp(num / den, 0.0, 1.0);
}

nlohmann::json TensorReport::to_json(bool with_seconds) const {
    nlohmann::json j = {{"method", method}, {"shape", {m, n}},    {"bpw_target", bpw_target},
                        {"bits", bits},     {"bpw", bpw},         {"rank", rank},
                        {"paths", paths},   {"err_fit", err_fit}, {"err_sel", err_sel},
                        {"line", line}};
    if (drift_alpha >= 0) j["drift_alpha"] = drift_alpha;
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

nlohmann::json QuantizeReport::to_json() const {
    nlohmann::json j;
    j["out"] = out_path;
    j["seconds"] = seconds;
    j["encode_seconds"] = encode_seconds;
    j["calib_seconds"] = calib_seconds;
    j["resumed_layers"] = resumed_layers;
    j["resumed_head"] = resumed_head;
    j["linear_includes_head"] = head_params > 0;
    j["linear_params"] = linear_params;
    j["linear_bits"] = linear_bits;
    j["linear_bpw"] = ratio(linear_bits, linear_params);
    j["head_params"] = head_params;
    j["head_bits"] = head_bits;
    j["decoder_linear_bpw"] = ratio(linear_bits - head_bits, linear_params - head_params);
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
        "{}: {} tensors encoded, linear layers{} {:.4f} bpw ({} params, {:.2f} MB of codes{}); "
        "file {:.2f} MB = {:.3f} bits per parameter; {:.1f}s (calibration {:.1f}s, encoding "
        "{:.1f}s){}{}",
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
        resumed_layers ? fmt::format(", {} layers resumed", resumed_layers) : "",
        resumed_head ? ", lm_head resumed" : "");
}

QuantizeReport quantize(const QuantizeOptions& o) {
    const auto t0 = std::chrono::steady_clock::now();
    QuantizeReport rep;
    rep.out_path = o.out_path;
    CORTIQ_CHECK(!o.out_path.empty(), "-o OUT.safetensors is required");
    CORTIQ_CHECK(o.force || !fs::exists(o.out_path), "{} exists (pass --force to overwrite it)",
                 o.out_path);
    {
        const fs::path parent = fs::absolute(o.out_path).parent_path();
        CORTIQ_CHECK(fs::is_directory(parent), "output folder {} does not exist", parent.string());
    }
    const Plan plan(o.bpw, o.plan_path, o.include_head);
    if (o.device == encode::Device::gpu)
        CORTIQ_CHECK(encode::gpu_available(), "--device gpu: {}", encode::gpu_unavailable_reason());

    // ── inputs ──────────────────────────────────────────────────────────────
    model::Model mdl = model::Model::load(o.model_dir);
    const auto& cfg = mdl.config();
    const io::Checkpoint ck = io::Checkpoint::open(o.model_dir);
    const io::Tokenizer tok = io::Tokenizer::load(o.model_dir);
    CORTIQ_CHECK(!o.calib_paths.empty(), "quantize: no calibration text (--calib)");
    std::vector<std::string> calib_texts;
    for (const auto& p : o.calib_paths)
        calib_texts.push_back(io::read_text_file(p, "calibration text"));
    calib::CalibOptions co = o.calib;
    if (co.seqlen <= 0)
        co.seqlen = std::min<int64_t>(
            512, cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 512);
    const calib::CalibSet cs = calib::make_calib_set(tok, calib_texts, co, o.calib_paths);
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
    const std::string source_hash = io::sha256_files(checkpoint_files(ck));

    nlohmann::json settings = {
        {"format_version", kFormatVersion},
        {"source", fs::path(o.model_dir).filename().string()},
        {"source_sha256", source_hash},
        {"method", encode::method_name(o.enc.method)},
        {"plan", plan.describe()},
        {"paths", o.enc.paths == encode::PathsChoice::automatic ? "auto"
                  : o.enc.paths == encode::PathsChoice::one     ? "1"
                                                                : "2"},
        {"rho", o.enc.rho},
        {"gptq_passes", o.enc.gptq_passes},
        {"match", o.match_original ? "original" : "layer"},
        {"calib", calib_names},
        {"calib_sha256", calib_hashes},
        {"samples_fit", cs.fit.size()},
        {"samples_sel", cs.sel.size()},
        {"seqlen", co.seqlen},
        {"device", o.device == encode::Device::gpu ? "gpu" : "cpu"},
    };
    Journal journal(o.out_path, settings, o.resume, o.force);

    // ── which tensors, and the work they represent (for the ETA) ────────────
    std::map<std::string, double> budget;
    int64_t total_work = 0;
    for (int64_t l = 0; l < mdl.num_layers(); ++l)
        for (const auto& g : input_groups())
            for (const char* lin : g.linears) {
                const std::string name = tensor_name(l, lin);
                if (auto b = plan.bpw_for(name, false)) {
                    budget[name] = *b;
                    const auto& L = mdl.linear(l, lin);
                    total_work += L.in_features() * L.out_features();
                }
            }
    const std::optional<double> head_bpw = plan.bpw_for(kHead, true);
    if (head_bpw) total_work += cfg.vocab_size * cfg.hidden_size;
    Progress bar("quantize", total_work, "weights", o.progress);

    // ── hidden states of every calibration window, on the forward device ──
    const auto tc0 = std::chrono::steady_clock::now();
    std::optional<model::Model> original;  // --match original: the uncompressed model
    if (o.match_original) original.emplace(model::Model::load(o.model_dir));
    calib::SequentialCalib states(
        mdl, cs, o.device == encode::Device::gpu ? model::Device::gpu : model::Device::cpu,
        original ? &*original : nullptr);
    rep.calib_seconds += seconds_since(tc0);

    std::map<std::string, std::vector<uint8_t>> payloads;
    auto install = [&](int64_t l, const std::string& lin, const std::vector<uint8_t>& bytes) {
        const std::string name = tensor_name(l, lin);
        auto& L = mdl.linear(l, lin);
        blr::validate_any(bytes, name, L.out_features(), L.in_features());
        L.w = std::make_unique<model::DenseLinear>(blr::dequant_any(bytes));
        states.weight_changed(l, lin);
        payloads[name] = bytes;
    };

    for (int64_t l = 0; l < mdl.num_layers(); ++l) {
        if (auto old = journal.load(l)) {
            for (const auto& [name, bytes] : old->payloads) {
                const std::string lin =
                    name.substr(name.find('.', 13) + 1);           // after "model.layers.N."
                install(l, lin.substr(0, lin.size() - 7), bytes);  // drop ".weight"
            }
            int64_t work = 0;
            for (const auto& r : old->reports) {
                rep.tensors.push_back(r);
                work += r.m * r.n;
            }
            bar.advance(work, fmt::format("layer {} resumed", l));
            ++rep.resumed_layers;
        } else {
            LayerRecord rec;
            for (const auto& g : input_groups()) {
                std::vector<GroupJob> jobs;
                for (const char* lin : g.linears) {
                    const std::string name = tensor_name(l, lin);
                    if (!budget.count(name)) continue;
                    jobs.push_back(
                        {lin, mdl.linear(l, lin).w->dense().cast<double>(), budget[name]});
                }
                if (jobs.empty()) continue;
                // Grams of this input, with everything before it already compressed.
                const auto tc = std::chrono::steady_clock::now();
                const auto [h_fit, h_sel] = states.grams(l, g.input);
                const std::string what =
                    fmt::format("{} (layer {} input of {})", o.model_dir, l, g.input);
                std::vector<double> alpha(jobs.size(), -1.0);
                if (original) {
                    const auto [cross_fit, cross_sel] = states.cross_grams(l, g.input);
                    // the encoder's damping c = ρ · mean diag(H_fit) (SPEC §2)
                    const double c =
                        o.enc.rho * la::trace(h_fit) / static_cast<double>(h_fit.rows());
                    CORTIQ_CHECK(std::isfinite(c) && c >= 0,
                                 "{}: the fit Gram's diagonal is not finite and non-negative",
                                 what);
                    for (size_t i = 0; i < jobs.size(); ++i) {
                        MatD d = drift_target(jobs[i].w, cross_fit, h_fit, c);
                        for (int64_t k = 0; k < d.size(); ++k) d.data()[k] -= jobs[i].w.data()[k];
                        alpha[i] = drift_shrinkage(jobs[i].w, d, cross_sel, h_sel);
                        for (int64_t k = 0; k < d.size(); ++k)
                            jobs[i].w.data()[k] += alpha[i] * d.data()[k];
                    }
                }
                rep.calib_seconds += seconds_since(tc);
                const auto te = std::chrono::steady_clock::now();
                const auto enc = encode_group(
                    jobs, h_fit, h_sel, o.enc, o.device, o.jobs, what,
                    [&](size_t i, const encode::Encoded& e) {
                        const std::string name = tensor_name(l, jobs[i].name);
                        if (o.verbose)
                            bar.print(fmt::format(
                                "{:<40} {}{}", name, e.line,
                                alpha[i] >= 0 ? fmt::format(" | drift {:.2f}", alpha[i]) : ""));
                        bar.advance(jobs[i].w.size(), name);
                    });
                rep.encode_seconds += seconds_since(te);
                for (size_t i = 0; i < jobs.size(); ++i) {
                    const std::string name = tensor_name(l, jobs[i].name);
                    install(l, jobs[i].name, enc[i].payload);
                    TensorReport r = report_of(name, jobs[i], enc[i], o.enc.method);
                    r.drift_alpha = alpha[i];
                    rec.payloads.emplace_back(name, enc[i].payload);
                    rec.reports.push_back(r);
                    rep.tensors.push_back(r);
                }
            }
            journal.save(l, rec);
            CORTIQ_CHECK(l != o.interrupt_after_layer, "interrupted after layer {} (test hook)", l);
        }
        // move the hidden states through the compressed layer (the last
        // layer's output is only needed for the head)
        if (l + 1 == mdl.num_layers() && !head_bpw) break;
        const auto tc = std::chrono::steady_clock::now();
        states.advance(l);
        rep.calib_seconds += seconds_since(tc);
    }

    // ── lm_head, on the final RMSNorm of the compressed model's hidden states ─
    if (head_bpw) {
        const int64_t vocab = cfg.vocab_size, hidden = cfg.hidden_size;
        if (auto old = journal.load(kHeadKey)) {
            CORTIQ_CHECK(old->payloads.size() == 1 && old->payloads[0].first == kHead &&
                             old->reports.size() == 1,
                         "{}: the head's journal entry is malformed; pass --force to start over",
                         journal.dir());
            blr::validate_any(old->payloads[0].second, kHead, vocab, hidden);
            payloads[kHead] = old->payloads[0].second;
            rep.tensors.push_back(old->reports[0]);
            bar.advance(vocab * hidden, "lm_head resumed");
            rep.resumed_head = true;
        } else {
            // a tied checkpoint stores the head as the embedding
            const std::string src =
                ck.has(kHead) || !cfg.tie_word_embeddings ? kHead : "model.embed_tokens.weight";
            std::vector<GroupJob> jobs;
            jobs.push_back({kHead, ck.load_matf(src).cast<double>(), *head_bpw});
            CORTIQ_CHECK(jobs[0].w.rows() == vocab && jobs[0].w.cols() == hidden,
                         "{}: tensor '{}' has shape [{}, {}], expected [{}, {}]", o.model_dir, src,
                         jobs[0].w.rows(), jobs[0].w.cols(), vocab, hidden);
            const auto tc = std::chrono::steady_clock::now();
            const auto [h_fit, h_sel] = states.head_grams();
            rep.calib_seconds += seconds_since(tc);
            const auto te = std::chrono::steady_clock::now();
            const auto enc = encode_group(
                jobs, h_fit, h_sel, o.enc, o.device, o.jobs,
                fmt::format("{} (lm_head)", o.model_dir), [&](size_t, const encode::Encoded& e) {
                    if (o.verbose) bar.print(fmt::format("{:<40} {}", kHead, e.line));
                    bar.advance(vocab * hidden, kHead);
                });
            rep.encode_seconds += seconds_since(te);
            blr::validate_any(enc[0].payload, kHead, vocab, hidden);
            payloads[kHead] = enc[0].payload;
            LayerRecord rec;
            rec.payloads.emplace_back(kHead, enc[0].payload);
            rec.reports.push_back(report_of(kHead, jobs[0], enc[0], o.enc.method));
            rep.tensors.push_back(rec.reports[0]);
            journal.save(kHeadKey, rec);
            CORTIQ_CHECK(o.interrupt_after_layer != mdl.num_layers(),
                         "interrupted after lm_head (test hook)");
        }
    }
    bar.finish();

    // ── the compressed checkpoint ──────────────────────────────────────────
    // Every source tensor in name order (its payload instead where encoded),
    // plus the head of a tied model, which has no tensor of its own there.
    // total_params counts the source's parameters (a tied head once, as the
    // embedding); linear_* count every encoded tensor, the head included.
    std::vector<std::string> names = ck.names();
    if (payloads.count(kHead) && !ck.has(kHead)) {
        names.push_back(kHead);
        std::sort(names.begin(), names.end());
    }
    io::SafetensorsWriter wr;
    for (const auto& name : names) {
        if (ck.has(name)) rep.total_params += ck.info(name).numel();
        auto it = payloads.find(name);
        if (it != payloads.end()) {
            wr.add(name, io::DType::U8, {static_cast<int64_t>(it->second.size())},
                   std::span<const uint8_t>(it->second));
        } else {
            const auto& info = ck.info(name);
            wr.add(name, info.dtype, info.shape, ck.bytes(name));
        }
    }
    for (const auto& r : rep.tensors) {
        rep.linear_params += r.m * r.n;
        rep.linear_bits += r.bits;
        if (r.name == kHead) {
            rep.head_params = r.m * r.n;
            rep.head_bits = r.bits;
        }
    }
    nlohmann::json tensors = nlohmann::json::object();
    for (const auto& r : rep.tensors) tensors[r.name] = r.to_json(false);
    nlohmann::json meta = settings;
    meta["linear_bits"] = rep.linear_bits;
    meta["linear_params"] = rep.linear_params;
    meta["linear_bpw"] = ratio(rep.linear_bits, rep.linear_params);
    meta["linear_includes_head"] = rep.head_params > 0;
    wr.set_metadata("format", "cortiq-blr");
    wr.set_metadata("format_version", std::to_string(kFormatVersion));
    wr.set_metadata("cortiq", meta.dump());
    wr.set_metadata("cortiq.tensors", tensors.dump());
    wr.set_metadata("config",
                    io::read_text_file((fs::path(o.model_dir) / "config.json").string(), "config"));
    wr.set_metadata(
        "tokenizer.json",
        io::read_text_file((fs::path(o.model_dir) / "tokenizer.json").string(), "tokenizer"));
    if (fs::exists(fs::path(o.model_dir) / "tokenizer_config.json"))
        wr.set_metadata(
            "tokenizer_config.json",
            io::read_text_file((fs::path(o.model_dir) / "tokenizer_config.json").string(),
                               "tokenizer config"));
    wr.write(o.out_path);
    journal.remove();
    rep.file_bytes = static_cast<int64_t>(fs::file_size(o.out_path));
    rep.seconds = seconds_since(t0);
    return rep;
}

}  // namespace cortiq::quant
