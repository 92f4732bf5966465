// --plan auto and --file-bpw (quantize.hpp): the sensitivity pass
// (sensitivity.cpp), the allocation (allocate.hpp) and the plan file it
// becomes, OUT.plan.json, which `--plan OUT.plan.json` reads back into the
// same bytes. The plan is kept in the journal too, so a resumed run encodes
// with the plan it started with instead of measuring again.
#include <filesystem>

#include "core/progress.hpp"
#include "dist/comm.hpp"
#include "io/atomic_file.hpp"
#include "io/carried_files.hpp"
#include "io/text_file.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

namespace fs = std::filesystem;

namespace {

// Bytes of the output that no allocation changes: every tensor left as it is
// and the header, whose metadata carries the config, the tokenizer, the
// settings and a report per tensor. The metadata are estimated from above (JSON
// escaping measured, 640 bytes per tensor entry, report and checksum).
int64_t fixed_file_bytes(const QuantizeOptions& o, const io::Checkpoint& ck,
                         const std::set<std::string>& allocated) {
    int64_t bytes = 8 + 4096;
    const auto names = ck.names();
    for (const auto& n : names) {
        bytes += 640;
        if (!allocated.count(n)) bytes += static_cast<int64_t>(ck.info(n).nbytes());
    }
    bytes += 640;  // a compressed head of a tied model is one tensor more
    const fs::path dir(o.model_dir);
    std::vector<std::string> carried = {"config.json", std::string(io::kTokenizerFile)};
    for (auto f : io::kOptionalCarriedFiles) carried.emplace_back(f);
    for (const auto& f : carried)
        if (fs::exists(dir / f))
            bytes += static_cast<int64_t>(
                nlohmann::json(io::read_text_file((dir / f).string(), "model")).dump().size());
    return bytes;
}

// The source's parameters as write_output counts them (a tied head once).
int64_t source_params(const io::Checkpoint& ck) {
    int64_t n = 0;
    for (const auto& name : ck.names()) n += ck.info(name).numel();
    return n;
}

// Whether the head is a tensor of the allocation: with --include-head, or,
// under --file-bpw, when it has its own tensor (a tied head kept is the
// embedding: no bits of its own).
bool head_allocated(const QuantizeOptions& o, const Inputs& in, const WorkPlan& uniform) {
    return uniform.head_bpw.has_value() || (o.file_bpw > 0 && !in.model.head_shares_embedding());
}

struct FileBudget {
    int64_t params = 0, fixed = 0;  // the source's parameters, the bytes no plan changes
    double bits = 0;                // what the allocation may spend
};

FileBudget file_budget(const QuantizeOptions& o, const Inputs& in, const WorkPlan& uniform) {
    std::set<std::string> allocated;
    for (const auto& [name, b] : uniform.budget) allocated.insert(name);
    allocated.insert(embedding_name(in.model.config()));
    if (head_allocated(o, in, uniform)) allocated.insert(kHead);
    FileBudget f;
    f.params = source_params(in.checkpoint);
    f.fixed = fixed_file_bytes(o, in.checkpoint, allocated);
    f.bits = o.file_bpw * static_cast<double>(f.params) - 8.0 * static_cast<double>(f.fixed);
    CORTIQ_CHECK(f.bits > 0,
                 "--file-bpw {}: the tensors that stay as they are and the metadata already "
                 "take {} bytes, {:.3f} bits per parameter",
                 o.file_bpw, f.fixed, 8.0 * f.fixed / static_cast<double>(f.params));
    return f;
}

std::string plan_text(const Sensitivity& sens, const Allocation& a) {
    nlohmann::ordered_json j = nlohmann::ordered_json::object();
    for (size_t i = 0; i < sens.costs.size(); ++i)
        if (!a.kept[i]) j[sens.costs[i].name] = a.bpw[i];
    return j.dump(1) + "\n";
}

// The sensitivity pass and the allocation: the plan's text, rep.plan filled.
std::string measured_plan(const QuantizeOptions& o, Inputs& in, const WorkPlan& uniform,
                          QuantizeReport& rep) {
    const auto& c = in.model.config();
    const int64_t table = c.vocab_size * c.hidden_size;
    const bool file = o.file_bpw > 0;
    const auto& held_out = in.calib.sel.empty() ? in.calib.fit : in.calib.sel;
    const std::vector<std::vector<int32_t>> windows(
        held_out.begin(),
        held_out.begin() +
            std::min<int64_t>(o.sensitivity_windows, static_cast<int64_t>(held_out.size())));
    SensitivityRequest req{o,   in.model, in.calib, windows,           {}, false, false,
                           1.0, 16.0,     16.0,     int64_t{256} << 20};
    // the tensors to measure, their weights and the uniform plan's payload bits
    int64_t weights = 0;
    double budget = 0;
    for (const auto& [name, b] : uniform.budget) {
        req.decoder.insert(name);
        const auto& shape = in.checkpoint.info(name).shape;
        weights += shape.at(0) * shape.at(1);
        budget += payload_bits(shape.at(0), shape.at(1), b);
    }
    req.embedding = file;
    req.head = head_allocated(o, in, uniform);
    const std::string emb = embedding_name(c);
    const auto bits_of = [&](const std::string& n) {
        return in.checkpoint.has(n)
                   ? 8.0 * static_cast<double>(io::dtype_size(in.checkpoint.info(n).dtype))
                   : 0.0;
    };
    req.embed_keep_bits = bits_of(emb);
    req.head_keep_bits = bits_of(kHead);
    if (uniform.head_bpw && req.head)
        budget += payload_bits(c.vocab_size, c.hidden_size, *uniform.head_bpw);
    double candidates = static_cast<double>(weights) + (req.head ? table : 0);
    if (file) {
        candidates += static_cast<double>(table);
        const FileBudget f = file_budget(o, in, uniform);
        budget = f.bits;
        rep.plan["fixed_bytes_estimate"] = f.fixed;
        rep.plan["params"] = f.params;
    }
    req.b0 = file ? std::clamp(budget / candidates, 0.3, 4.0) : o.bpw;
    Progress bar("sensitivity", static_cast<int64_t>(candidates), "weights", o.progress, nullptr);
    const Sensitivity sens = measure_sensitivity(req, bar);
    bar.finish();
    AllocationOptions ao;  // inside the measured range (allocate.hpp)
    ao.min_bpw = sens.costs.front().b.front();
    ao.max_bpw = sens.costs.front().b.back();
    const Allocation a = allocate_bits(sens.costs, budget, ao);
    rep.sensitivity_seconds = sens.seconds;
    rep.plan["budget_bits"] = budget;
    rep.plan["allocated_bits"] = a.bits;
    rep.plan["b0"] = sens.b0;
    rep.plan["windows"] = sens.windows;
    rep.plan["position_stride"] = sens.stride;
    rep.plan["seconds"] = sens.seconds;
    rep.plan["encode_seconds"] = sens.encode_seconds;
    rep.plan["predicted_kl"] = a.predicted_kl;
    double uniform_kl = 0;
    nlohmann::json per = nlohmann::json::object();
    for (size_t i = 0; i < sens.costs.size(); ++i) {
        const auto& cst = sens.costs[i];
        uniform_kl += cst.cost(sens.b0);
        per[cst.name] = {{"bpw", a.kept[i] ? nlohmann::json("kept") : nlohmann::json(a.bpw[i])},
                         {"measured_bpw", cst.b},
                         {"measured_kl", cst.kl},
                         {"proxy_err_at_b0", sens.proxy_err[i]},
                         {"predicted_kl", a.kept[i] ? 0.0 : cst.cost(a.bpw[i])}};
    }
    rep.plan["predicted_kl_at_b0_everywhere"] = uniform_kl;
    rep.plan["tensors"] = per;
    return plan_text(sens, a);
}

}  // namespace

void check_file_budget(const QuantizeOptions& o, const Inputs& in, const WorkPlan& uniform) {
    if (o.file_bpw > 0) file_budget(o, in, uniform);
}

std::string make_auto_plan(const QuantizeOptions& o, Inputs& in, const WorkPlan& uniform,
                           const Journal& journal, QuantizeReport& rep) {
    const std::string plan_path = o.out_path + ".plan.json";
    const std::string kept = journal.dir().empty() ? "" : journal.dir() + "/plan.json";
    std::vector<uint8_t> text;
    if (dist::is_root()) {
        std::string t;
        if (!kept.empty() && fs::exists(kept)) {
            t = io::read_text_file(kept, "journal plan");
            rep.plan = {{"resumed", true}};
        } else {
            t = measured_plan(o, in, uniform, rep);
            if (!kept.empty()) io::write_file_atomic(kept, t);
        }
        io::write_file_atomic(plan_path, t);
        rep.plan["file"] = plan_path;
        text.assign(t.begin(), t.end());
    }
    if (dist::distributed()) dist::broadcast(text, 0);  // every rank plans with rank 0's text
    return std::string(text.begin(), text.end());
}

}  // namespace cortiq::quant
