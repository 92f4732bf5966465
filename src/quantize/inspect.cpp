// cortiq inspect: every tensor of a compressed file with its checksum and
// payload checked.
#include <fmt/format.h>

#include <map>
#include <set>

#include "blr/sign.hpp"
#include "core/error.hpp"
#include "io/checksum.hpp"
#include "io/config.hpp"
#include "io/safetensors.hpp"
#include "quantize/quantize.hpp"

namespace cortiq::quant {

namespace {

// The tensors of the file that the runtime does not read (a vision tower, a
// multi-token-prediction head, ...), carried unchanged by quantize: counted
// by their first name parts ("model.visual", "mtp"). Empty without a config
// in the metadata.
std::map<std::string, int64_t> carried_groups(const io::SafetensorsFile& f,
                                              const std::string& path) {
    std::map<std::string, int64_t> groups;
    const auto it = f.metadata().find("config");
    if (it == f.metadata().end()) return groups;
    io::ModelConfig c;
    try {
        c = io::ModelConfig::parse(it->second, path + " metadata config");
    } catch (const Error&) {
        return groups;  // a config the runtime cannot read: no note (the payloads still listed)
    }
    io::resolve_prefix(c, io::Checkpoint::open(path));
    std::set<std::string> read = {"lm_head.weight"};
    for (const auto& e : io::expected_tensors(c)) read.insert(e.name);
    for (const auto& t : f.tensors()) {
        if (read.count(t.name)) continue;
        const size_t dot = t.name.find('.');
        const size_t end = t.name.rfind("model.", 0) == 0 ? t.name.find('.', dot + 1) : dot;
        ++groups[t.name.substr(0, end)];
    }
    return groups;
}

// The summary's words on the checksums, and the damage message naming the
// file and everything damaged (empty when nothing is).
std::string checksum_words(const io::ChecksumCheck& c) {
    if (!c.present) return "all payloads valid; no checksums (written before cortiq had them)";
    if (c.ok())
        return fmt::format("all payloads valid; checksums match ({} tensors and the header)",
                           c.tensors_checked);
    std::string s = "payloads of intact tensors valid; CHECKSUM MISMATCH:";
    if (!c.header_error.empty()) s += " the header is damaged;";
    if (!c.damaged.empty())
        s +=
            fmt::format(" {} damaged tensor{}", c.damaged.size(), c.damaged.size() == 1 ? "" : "s");
    return s;
}

std::string damage_message(const io::ChecksumCheck& c, const std::string& path) {
    if (c.ok()) return {};
    std::string s;
    if (!c.header_error.empty())
        s = fmt::format("{}: the header is damaged: {} (checksum mismatch)", path, c.header_error);
    for (const auto& p : c.problems) s += fmt::format("{}{}: {}", s.empty() ? "" : "\n", path, p);
    return s;
}

void add_checksums_json(nlohmann::json& out, const io::ChecksumCheck& c) {
    out["checksums"] = {{"present", c.present},
                        {"ok", c.present && c.ok()},
                        {"header_ok", c.header_error.empty()},
                        {"damaged", c.damaged}};
}

}  // namespace

Inspection inspect(const std::string& path, bool as_json) {
    const auto f = io::SafetensorsFile::open(path);
    // before the payloads are read: a damaged one is named as such, not
    // refused for what the damage did to its layout
    const auto sums = io::check_checksums(f);
    std::set<std::string> damaged(sums.damaged.begin(), sums.damaged.end());
    const auto& meta = f.metadata();
    nlohmann::json reports = nlohmann::json::object();
    if (auto it = meta.find("cortiq.tensors"); it != meta.end())
        reports = nlohmann::json::parse(it->second, nullptr, false);
    nlohmann::json out;
    out["file"] = path;
    if (auto it = meta.find("cortiq"); it != meta.end())
        out["run"] = nlohmann::json::parse(it->second, nullptr, false);
    std::string s;
    int64_t total_params = 0, blr_params = 0, blr_bits = 0;
    s += fmt::format("{:<44} {:>14} {:>6} {:>8} {:>6} {:>5} {:>8} {:>8}\n", "tensor", "shape",
                     "kind", "bpw", "rank", "paths", "fit", "sel");
    for (const auto& t : f.tensors()) {
        const std::string what = fmt::format("{}: tensor '{}'", path, t.name);
        nlohmann::json row;
        if (damaged.count(t.name)) {
            s += fmt::format("{:<44} {:>14} {:>6} DAMAGED (checksum mismatch)\n", t.name,
                             t.shape_str(), io::dtype_name(t.dtype));
            row = {{"shape", t.shape},
                   {"kind", std::string(io::dtype_name(t.dtype))},
                   {"damaged", true}};
        } else if (t.dtype == io::DType::U8) {
            const auto ps = blr::payload_shape(f.bytes(t), what);  // validates
            const double bpw = static_cast<double>(ps.bits) / static_cast<double>(ps.m * ps.n);
            const auto rj = reports.is_object() && reports.contains(t.name) ? reports[t.name]
                                                                            : nlohmann::json();
            const double fit = rj.is_object() ? rj.value("err_fit", -1.0) : -1.0;
            const double sel = rj.is_object() ? rj.value("err_sel", -1.0) : -1.0;
            s += fmt::format("{:<44} {:>14} {:>6} {:>8.4f} {:>6} {:>5} {:>8.4f} {:>8.4f}\n", t.name,
                             fmt::format("[{}, {}]", ps.m, ps.n), ps.paths ? "blr" : "sign", bpw,
                             ps.rank, ps.paths, fit, sel);
            row = {{"shape", {ps.m, ps.n}},
                   {"kind", ps.paths ? "blr" : "sign"},
                   {"bpw", bpw},
                   {"bits", ps.bits},
                   {"rank", ps.rank},
                   {"paths", ps.paths},
                   {"err_fit", fit},
                   {"err_sel", sel}};
            total_params += ps.m * ps.n;
            blr_params += ps.m * ps.n;
            blr_bits += ps.bits;
        } else {
            s += fmt::format("{:<44} {:>14} {:>6}\n", t.name, t.shape_str(),
                             io::dtype_name(t.dtype));
            row = {{"shape", t.shape}, {"kind", std::string(io::dtype_name(t.dtype))}};
            total_params += t.numel();
        }
        out["tensors"][t.name] = row;
    }
    const double bpw = blr_params ? static_cast<double>(blr_bits) / blr_params : 0.0;
    s += fmt::format("{} tensors; compressed {} of {} parameters at {:.4f} bpw; {}\n",
                     f.tensors().size(), blr_params, total_params, bpw, checksum_words(sums));
    const auto carried = carried_groups(f, path);
    if (!carried.empty()) {
        std::string list;
        for (const auto& [g, n] : carried)
            list += fmt::format("{}{}.* ({} tensors)", list.empty() ? "" : ", ", g, n);
        s += fmt::format("carried unchanged, not run by cortiq: {}\n", list);
    }
    out["carried"] = carried;
    out["compressed_params"] = blr_params;
    out["total_params"] = total_params;
    out["compressed_bpw"] = bpw;
    add_checksums_json(out, sums);
    return {as_json ? out.dump(2) + "\n" : s, damage_message(sums, path)};
}

}  // namespace cortiq::quant
