// The quantize pipeline. For each decoder layer, in order:
//   1. the Grams of the q/k/v input over the fit and held-out windows, from
//      the hidden states that the already-compressed layers produce;
//   2. q/k/v encoded and put in place; then the o_proj input is collected with
//      the compressed q/k/v, o_proj encoded; then the MLP input with the
//      compressed attention, gate/up encoded; then down_proj's input;
//   3. the layer's payloads written to the journal; the hidden states moved
//      through the compressed layer.
#include "quantize/quantize.hpp"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "blr/sign.hpp"
#include "core/progress.hpp"
#include "encode/dispatch.hpp"
#include "io/hash.hpp"
#include "io/safetensors.hpp"
#include "io/text_file.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"
#include "model/ops.hpp"
#include "quantize/encode_group.hpp"
#include "quantize/journal.hpp"
#include "quantize/plan.hpp"

namespace cortiq::quant {

namespace fs = std::filesystem;

namespace {

constexpr int kFormatVersion = 1;

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

std::vector<std::string> checkpoint_files(const io::Checkpoint& ck) {
    std::vector<std::string> files;
    for (const auto& s : ck.shards()) files.push_back(s.path());
    return files;
}

}  // namespace

nlohmann::json TensorReport::to_json(bool with_seconds) const {
    nlohmann::json j = {{"method", method}, {"shape", {m, n}},    {"bpw_target", bpw_target},
                        {"bits", bits},     {"bpw", bpw},         {"rank", rank},
                        {"paths", paths},   {"err_fit", err_fit}, {"err_sel", err_sel},
                        {"line", line}};
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
    j["linear_params"] = linear_params;
    j["linear_bits"] = linear_bits;
    j["linear_bpw"] = linear_params ? static_cast<double>(linear_bits) / linear_params : 0.0;
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
        "{}: {} tensors encoded, linear layers {:.4f} bpw ({} params, {:.2f} MB of codes); "
        "file {:.2f} MB = {:.3f} bits per parameter; {:.1f}s (calibration {:.1f}s, encoding "
        "{:.1f}s){}",
        out_path, tensors.size(),
        linear_params ? static_cast<double>(linear_bits) / linear_params : 0.0, linear_params,
        linear_bits / 8e6, file_bytes / 1e6, total_params ? 8.0 * file_bytes / total_params : 0.0,
        seconds, calib_seconds, encode_seconds,
        resumed_layers ? fmt::format(", {} layers resumed", resumed_layers) : "");
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
    CORTIQ_CHECK(!o.include_head,
                 "--include-head: compressing lm_head is not implemented yet (the head stays as "
                 "it is)");
    const Plan plan(o.bpw, o.plan_path, o.include_head);
    if (o.device == encode::Device::gpu)
        CORTIQ_CHECK(encode::gpu_available(), "--device gpu: {}", encode::gpu_unavailable_reason());

    // ── inputs ──────────────────────────────────────────────────────────────
    model::Model mdl = model::Model::load(o.model_dir);
    const auto& cfg = mdl.config();
    const io::Checkpoint ck = io::Checkpoint::open(o.model_dir);
    const io::Tokenizer tok = io::Tokenizer::load(o.model_dir);
    const std::string calib_text = io::read_text_file(o.calib_path, "calibration text");
    calib::CalibOptions co = o.calib;
    if (co.seqlen <= 0)
        co.seqlen = std::min<int64_t>(
            512, cfg.max_position_embeddings > 0 ? cfg.max_position_embeddings : 512);
    const calib::CalibSet cs = calib::make_calib_set(tok, calib_text, co, o.calib_path);
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
        {"calib", fs::path(o.calib_path).filename().string()},
        {"calib_sha256", io::sha256_text(calib_text)},
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
    Progress bar("quantize", total_work, "weights", o.progress);

    // ── hidden states of every calibration window ───────────────────────────
    std::vector<MatF> xs_fit, xs_sel;
    for (const auto& w : cs.fit) xs_fit.push_back(mdl.embed(w));
    for (const auto& w : cs.sel) xs_sel.push_back(mdl.embed(w));

    std::map<std::string, std::vector<uint8_t>> payloads;
    auto install = [&](int64_t l, const std::string& lin, const std::vector<uint8_t>& bytes) {
        const std::string name = tensor_name(l, lin);
        auto& L = mdl.linear(l, lin);
        blr::validate_any(bytes, name, L.out_features(), L.in_features());
        L.w = std::make_unique<model::DenseLinear>(blr::dequant_any(bytes));
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
                const int64_t n = jobs[0].w.cols();
                calib::GramAccumulator acc_fit(n), acc_sel(n);
                calib::GramAccumulator* target = nullptr;
                const model::LinearInputHook hook = [&](int64_t, std::string_view input,
                                                        const float* x, int64_t rows,
                                                        int64_t cols) {
                    if (input == g.input) target->add(x, rows, cols);
                };
                model::BlockActivations act;
                target = &acc_fit;
                for (const auto& x : xs_fit) {
                    act.x = x;
                    mdl.block(l, 0, nullptr, act, &hook);
                }
                target = &acc_sel;
                for (const auto& x : xs_sel) {
                    act.x = x;
                    mdl.block(l, 0, nullptr, act, &hook);
                }
                const MatD h_fit = acc_fit.mean(), h_sel = acc_sel.mean();
                rep.calib_seconds += seconds_since(tc);
                const auto te = std::chrono::steady_clock::now();
                const std::string what =
                    fmt::format("{} (layer {} input of {})", o.model_dir, l, g.input);
                const auto enc =
                    encode_group(jobs, h_fit, h_sel, o.enc, o.device, o.jobs, what,
                                 [&](size_t i, const encode::Encoded& e) {
                                     const std::string name = tensor_name(l, jobs[i].name);
                                     if (o.verbose)
                                         bar.print(fmt::format("{:<40} {}", name, e.line));
                                     bar.advance(jobs[i].w.size(), name);
                                 });
                rep.encode_seconds += seconds_since(te);
                for (size_t i = 0; i < jobs.size(); ++i) {
                    const std::string name = tensor_name(l, jobs[i].name);
                    install(l, jobs[i].name, enc[i].payload);
                    TensorReport r;
                    r.name = name;
                    r.method = encode::method_name(o.enc.method);
                    r.line = enc[i].line;
                    r.m = jobs[i].w.rows();
                    r.n = jobs[i].w.cols();
                    r.rank = enc[i].rank;
                    r.bits = enc[i].bits;
                    r.paths = enc[i].paths;
                    r.bpw_target = jobs[i].bpw;
                    r.bpw = enc[i].bpw;
                    r.err_fit = enc[i].err_fit;
                    r.err_sel = enc[i].err_sel;
                    r.seconds = enc[i].seconds;
                    rec.payloads.emplace_back(name, enc[i].payload);
                    rec.reports.push_back(r);
                    rep.tensors.push_back(r);
                }
            }
            journal.save(l, rec);
            CORTIQ_CHECK(l != o.interrupt_after_layer, "interrupted after layer {} (test hook)", l);
        }
        // move the hidden states through the compressed layer
        const auto tc = std::chrono::steady_clock::now();
        model::BlockActivations act;
        for (auto* xs : {&xs_fit, &xs_sel})
            for (auto& x : *xs) {
                act.x = std::move(x);
                mdl.block(l, 0, nullptr, act);
                x = std::move(act.out);
            }
        rep.calib_seconds += seconds_since(tc);
    }
    bar.finish();

    // ── the compressed checkpoint ──────────────────────────────────────────
    io::SafetensorsWriter wr;
    std::set<std::string> written;
    for (const auto& name : ck.names()) {
        const auto& info = ck.info(name);
        rep.total_params += info.numel();
        auto it = payloads.find(name);
        if (it != payloads.end()) {
            wr.add(name, io::DType::U8, {static_cast<int64_t>(it->second.size())},
                   std::span<const uint8_t>(it->second));
            rep.linear_params += info.numel();
        } else {
            wr.add(name, info.dtype, info.shape, ck.bytes(name));
        }
    }
    for (const auto& r : rep.tensors) rep.linear_bits += r.bits;
    nlohmann::json tensors = nlohmann::json::object();
    for (const auto& r : rep.tensors) tensors[r.name] = r.to_json(false);
    nlohmann::json meta = settings;
    meta["linear_bits"] = rep.linear_bits;
    meta["linear_params"] = rep.linear_params;
    meta["linear_bpw"] =
        rep.linear_params ? static_cast<double>(rep.linear_bits) / rep.linear_params : 0.0;
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
