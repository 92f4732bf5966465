#include "quantize/plan.hpp"

#include <fmt/format.h>
#include <fnmatch.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace cortiq::quant {

bool glob_match(const std::string& pattern, const std::string& s) {
    return fnmatch(pattern.c_str(), s.c_str(), 0) == 0;
}

Plan::Plan(double default_bpw, const std::string& plan_path, bool include_head)
    : Plan(default_bpw, include_head) {
    CORTIQ_CHECK(default_bpw > 0 && default_bpw <= 16, "--bpw must be in (0, 16] (got {})",
                 default_bpw);
    if (plan_path.empty()) return;
    std::ifstream f(plan_path);
    CORTIQ_CHECK(f, "cannot open plan file {}", plan_path);
    std::stringstream ss;
    ss << f.rdbuf();
    parse(ss.str(), "plan file " + plan_path);
}

Plan Plan::from_text(double default_bpw, const std::string& text, const std::string& origin,
                     bool include_head) {
    Plan p(default_bpw, "", include_head);
    p.parse(text, origin);
    return p;
}

void Plan::parse(const std::string& text, const std::string& origin) {
    nlohmann::ordered_json j;
    try {
        j = nlohmann::ordered_json::parse(text);
    } catch (const std::exception& e) {
        CORTIQ_FAIL("{}: invalid JSON: {}", origin, e.what());
    }
    CORTIQ_CHECK(j.is_object(), "{}: expected an object of pattern → bpw", origin);
    for (auto& [pat, v] : j.items()) {
        double b = 0;
        if (v.is_number())
            b = v.get<double>();
        else
            CORTIQ_CHECK(v.is_null() || (v.is_string() && v.get<std::string>() == "keep"),
                         "{}: '{}' must map to a number, null or \"keep\"", origin, pat);
        CORTIQ_CHECK(b >= 0 && b <= 16, "{}: bpw {} for '{}' out of range", origin, b, pat);
        CORTIQ_CHECK(include_head_ || b == 0 || !glob_match(pat, "lm_head.weight") ||
                         pat.find_first_of("*?[") != std::string::npos,
                     "{}: '{}' gives lm_head a budget: pass --include-head to compress the head",
                     origin, pat);
        rules_.emplace_back(pat, b);
    }
}

std::optional<double> Plan::bpw_for(const std::string& tensor, bool is_head) const {
    if (is_head && !include_head_) return std::nullopt;  // no glob reaches it without the flag
    std::optional<double> b = default_bpw_;
    for (const auto& [pat, v] : rules_)
        if (glob_match(pat, tensor)) b = v > 0 ? std::optional<double>(v) : std::nullopt;
    return b;
}

std::optional<double> Plan::embedding_bpw(const std::string& name) const {
    std::optional<double> b;
    for (const auto& [pat, v] : rules_)
        if (pat.find("embed") != std::string::npos && glob_match(pat, name))
            b = v > 0 ? std::optional<double>(v) : std::nullopt;
    return b;
}

bool Plan::names(const std::string& tensor) const {
    for (const auto& r : rules_)
        if (glob_match(r.first, tensor)) return true;
    return false;
}

std::string Plan::describe() const {
    std::string s = fmt::format("default {} head {}", default_bpw_, include_head_);
    for (const auto& [p, v] : rules_) s += fmt::format("; {}={}", p, v);
    return s;
}

}  // namespace cortiq::quant
