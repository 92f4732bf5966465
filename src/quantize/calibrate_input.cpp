// A step of encode_layer: the Grams of one input of a decoder layer, from the
// hidden states the already-compressed layers produce; with --match original,
// each target moved towards the original model's outputs (drift_target,
// drift_shrinkage).
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "core/profile.hpp"
#include "linalg/blas.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

void shrink_to_diagonal(MatD& h, double s) {
    CORTIQ_CHECK(s >= 0 && s <= 1, "--gram-shrink must lie in [0, 1], got {}", s);
    if (s == 0) return;
    for (int64_t i = 0; i < h.rows(); ++i)
        for (int64_t j = 0; j < h.cols(); ++j)
            if (i != j) h(i, j) *= 1 - s;
}

InputGrams calibrate_input(Run& run, int64_t layer, const char* input, std::vector<GroupJob>& jobs,
                           const std::string& what) {
    const auto t0 = std::chrono::steady_clock::now();
    auto [h_fit, h_sel] = run.states.grams(layer, input);
    InputGrams g{std::move(h_fit), std::move(h_sel), std::vector<double>(jobs.size(), -1.0)};
    Profile& parts = run.report.calib_parts;
    parts.add("grams", seconds_since(t0));
    if (run.o.match_original) {
        const auto t_cross = std::chrono::steady_clock::now();
        const auto [cross_fit, cross_sel] = run.states.cross_grams(layer, input);
        parts.add("cross_grams", seconds_since(t_cross));
        ScopedStage drift_stage(&parts, "drift");
        // the encoder's damping c = ρ · mean diag(H_fit) (SPEC §2)
        const double c = run.o.enc.rho * la::trace(g.h_fit) / static_cast<double>(g.h_fit.rows());
        CORTIQ_CHECK(std::isfinite(c) && c >= 0,
                     "{}: the fit Gram's diagonal is not finite and non-negative", what);
        for (size_t i = 0; i < jobs.size(); ++i) {
            MatD d = drift_target(jobs[i].w, cross_fit, g.h_fit, c);
            for (int64_t k = 0; k < d.size(); ++k) d.data()[k] -= jobs[i].w.data()[k];
            g.drift_alpha[i] = drift_shrinkage(jobs[i].w, d, cross_sel, g.h_sel);
            for (int64_t k = 0; k < d.size(); ++k)
                jobs[i].w.data()[k] += g.drift_alpha[i] * d.data()[k];
        }
    }
    shrink_to_diagonal(g.h_fit, run.o.gram_shrink);
    run.report.calib_seconds += seconds_since(t0);
    return g;
}

}  // namespace cortiq::quant
