// Which tensors a quantize run encodes and at what budget.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace cortiq::quant {

class Plan {
  public:
    // default_bpw for every decoder linear layer, and for lm_head.weight when
    // `include_head`; `plan_path` (optional) is a JSON object of glob pattern →
    // bpw (null or 0: keep unquantised); the last matching pattern wins. The
    // head is only ever encoded with `include_head` (a plan that names it
    // exactly without it is refused; a glob such as "*.weight" skips it).
    Plan(double default_bpw, const std::string& plan_path, bool include_head);
    // The same from the plan's JSON text; `origin` names it in errors.
    static Plan from_text(double default_bpw, const std::string& text, const std::string& origin,
                          bool include_head);
    // The budget of a tensor, or nothing when it stays as it is.
    std::optional<double> bpw_for(const std::string& tensor, bool is_head) const;
    // The embedding's budget: set only by a rule whose pattern mentions
    // "embed" (so "*.weight" leaves it as it is), else nothing.
    std::optional<double> embedding_bpw(const std::string& name) const;
    // Whether a pattern of the plan file matches the tensor.
    bool names(const std::string& tensor) const;
    std::string describe() const;  // for the settings record

  private:
    Plan(double default_bpw, bool include_head)
        : default_bpw_(default_bpw), include_head_(include_head) {}
    void parse(const std::string& text, const std::string& origin);
    double default_bpw_;
    bool include_head_;
    std::vector<std::pair<std::string, double>> rules_;  // 0 = keep
};

bool glob_match(const std::string& pattern, const std::string& s);

}  // namespace cortiq::quant
