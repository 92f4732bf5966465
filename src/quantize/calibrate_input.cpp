// A step of encode_layer: the Grams of one input of a decoder layer, from the
// hidden states the already-compressed layers produce; with --match original,
// each target moved towards the original model's outputs (drift_target,
// drift_shrinkage).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <tuple>

#include "calib/gpu_drift.hpp"
#include "core/blas_threads.hpp"
#include "core/profile.hpp"
#include "dist/comm.hpp"
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

namespace {

// The drift targets on the GPU (calib/gpu_drift.hpp) with --device gpu, unless
// CORTIQ_DRIFT_HOST=1 (to compare): at the 7B shape a layer's calibration
// took 131.8 s with the host's float64 products on 16 cores and 21.8 s with
// them on the H200, 3.0 s of it the drift (CalibGpu.DriftOnTheGpuMatchesTheHost
// checks the two within 1e-9).
bool drift_on_gpu(const QuantizeOptions& o) {
    static const bool host = std::getenv("CORTIQ_DRIFT_HOST") != nullptr;
    return !host && o.device == encode::Device::gpu;
}

}  // namespace

InputGrams calibrate_input(Run& run, int64_t layer, const char* input, std::vector<GroupJob>& jobs,
                           const std::string& what, const std::vector<int>* owners) {
    const auto t0 = std::chrono::steady_clock::now();
    const double loads0 = run.states.layer_load_seconds();
    InputGrams g{{}, {}, std::vector<double>(jobs.size(), -1.0)};
    MatD cross_fit, cross_sel;
    if (run.o.match_original) {
        calib::SequentialCalib::GramSet all = run.states.grams_with_cross(layer, input);
        g.h_fit = std::move(all.h_fit);
        g.h_sel = std::move(all.h_sel);
        cross_fit = std::move(all.cross_fit);
        cross_sel = std::move(all.cross_sel);
    } else {
        std::tie(g.h_fit, g.h_sel) = run.states.grams(layer, input);
    }
    Profile& parts = run.report.calib_parts;
    const double loads = run.states.layer_load_seconds() - loads0;  // GPU: the layer's first input
    parts.add("grams", seconds_since(t0) - loads);
    if (loads > 0) parts.add("layer loads", loads);
    if (run.o.match_original) {
        ScopedStage drift_stage(&parts, "drift");
        // the encoder's damping c = ρ · mean diag(H_fit) (SPEC §2)
        const double c = run.o.enc.rho * la::trace(g.h_fit) / static_cast<double>(g.h_fit.rows());
        CORTIQ_CHECK(std::isfinite(c) && c >= 0,
                     "{}: the fit Gram's diagonal is not finite and non-negative", what);
        std::vector<calib::DriftStep> steps;
        if (drift_on_gpu(run.o)) {
            std::vector<const MatD*> ws;
            for (const GroupJob& j : jobs) ws.push_back(&j.w);
            steps = calib::drift_steps_gpu(ws, cross_fit, g.h_fit, c, cross_sel, g.h_sel);
        } else {
            // One BLAS thread per call: OpenBLAS's threaded products and
            // solves round differently with 1 and 2 threads (see calib.cpp's
            // panels); drift_step and drift_shrinkage spread fixed row panels
            // over the OpenMP threads instead.
            const OneBlasThread one;
            const DriftFit fit = drift_fit(cross_fit, g.h_fit, c);  // once for every weight
            for (size_t i = 0; i < jobs.size(); ++i) {
                if (owners && (*owners)[i] != dist::rank()) {  // another rank encodes it
                    steps.push_back({MatD(), -1.0});
                    continue;
                }
                calib::DriftStep s{drift_step(jobs[i].w, fit), 0.0};
                s.alpha = drift_shrinkage(jobs[i].w, s.d, cross_sel, g.h_sel);
                steps.push_back(std::move(s));
            }
        }
        for (size_t i = 0; i < jobs.size(); ++i) {
            g.drift_alpha[i] = steps[i].alpha;
            for (int64_t k = 0; k < steps[i].d.size(); ++k)
                jobs[i].w.data()[k] += steps[i].alpha * steps[i].d.data()[k];
        }
    }
    shrink_to_diagonal(g.h_fit, run.o.gram_shrink);
    run.report.calib_seconds += seconds_since(t0);
    return g;
}

}  // namespace cortiq::quant
