// The quality of a quantize run measured apart from the run, for bounds that
// hold on any machine because they compare within one run: every encoded
// tensor's held-out error recomputed from the output file, and the baselines
// encoded on those very Grams.
//
// The Grams are the test's own: the output file loaded (dequantised), the
// run's held-out windows cut again from the calibration text, and every
// linear layer's input recorded through the model's forward hook. In a
// sequential run without --match original and without tuning, the input the
// encoder of layer l saw is exactly what the finished model feeds layer l
// (everything before it was compressed with its final payload), so
//   err_true = ‖(W − Ŵ) X_sel‖ / ‖W X_sel‖
// is the run's held-out error err_sel up to float rounding — unless the run
// encoded or measured against the wrong Grams.
#pragma once

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "blr/sign.hpp"
#include "calib/calib.hpp"
#include "core/error.hpp"
#include "io/text_file.hpp"
#include "io/tokenizer.hpp"
#include "linalg/blas.hpp"
#include "model/llama.hpp"
#include "quantize/encode_group.hpp"
#include "quantize/quantize.hpp"
#include "quantize/steps.hpp"

namespace cortiq::test {

struct TensorQuality {
    std::string name;
    double err_true = 0;      // the payload against the true held-out Grams
    double err_reported = 0;  // the run's err_sel
    int64_t bits = 0;
    double err_rtn = 0;  // rtn-sign encoded on the same Grams (held out)
    int64_t bits_rtn = 0;
    double err_cpu = -1;  // with_cpu_encoder: the CPU encoder (the run's method) on them
};

// A --plan giving every decoder linear layer of `model_dir` (but those kept
// small by default) the bits per weight that rtn-sign stores for its shape,
// so that the NVG file is compared with rtn-sign at equal or fewer bytes
// (rtn-sign stores m·n signs and its scales: 1.56 bpw for 64 × 64).
inline void write_rtn_budget_plan(const std::string& model_dir, const std::string& path) {
    const model::Model m = model::Model::load(model_dir);
    nlohmann::json plan = nlohmann::json::object();
    for (int64_t l = 0; l < m.num_layers(); ++l)
        for (const auto& g : quant::input_groups(m.config(), l))
            for (const char* lin : g.linears) {
                if (quant::small_by_default(lin)) continue;
                const int64_t rows = m.linear(l, lin).out_features();
                const int64_t cols = m.linear(l, lin).in_features();
                plan[quant::tensor_name(m.config(), l, lin)] =
                    static_cast<double>(blr::sign_bits(rows, cols)) /
                    static_cast<double>(rows * cols);
            }
    std::ofstream(path) << plan.dump();
}

// (1/T) Σ x xᵀ of every linear layer's input of `m` over `windows`, keyed
// "layer/input" (the forward hook's input names).
inline std::map<std::string, MatD> input_grams(const model::Model& m,
                                               const std::vector<std::vector<int32_t>>& windows) {
    std::map<std::string, calib::GramAccumulator> acc;
    const model::LinearInputHook hook = [&](int64_t l, std::string_view in, const float* x,
                                            int64_t rows, int64_t cols) {
        auto [it, fresh] = acc.try_emplace(std::to_string(l) + "/" + std::string(in), cols);
        it->second.add(x, rows, cols);
    };
    model::BlockActivations act;
    for (const auto& win : windows) {
        MatF x = m.embed(win);
        for (int64_t l = 0; l < m.num_layers(); ++l) {
            act.x = std::move(x);
            m.block(l, 0, nullptr, act, &hook);
            x = std::move(act.out);
        }
    }
    std::map<std::string, MatD> out;
    for (const auto& [k, a] : acc) out.emplace(k, a.mean());
    return out;
}

// tr(E H Eᵀ) / tr(W H Wᵀ), E = W − Ŵ, square-rooted.
inline double rel_err_in(const MatD& w, const MatD& w_hat, const MatD& h) {
    MatD e = w;
    for (int64_t k = 0; k < e.size(); ++k) e.data()[k] -= w_hat.data()[k];
    return std::sqrt(la::frob_dot(e, la::gemm(e, false, h, false)) /
                     la::frob_dot(w, la::gemm(w, false, h, false)));
}

// One entry per tensor of `rep` (a finished run of `o`), in the report's order.
inline std::vector<TensorQuality> tensor_quality(const quant::QuantizeOptions& o,
                                                 const quant::QuantizeReport& rep,
                                                 bool with_cpu_encoder = false) {
    CORTIQ_CHECK(!o.match_original && !o.tuned() && o.calib_random == 0 && o.calib_generated == 0 &&
                     o.calib.samples > 0 && o.calib.seqlen > 0,
                 "tensor_quality needs a plain sequential run (its inputs are recomputed)");
    const io::Tokenizer tok = io::Tokenizer::load(o.model_dir);
    std::vector<std::string> texts;
    for (const auto& p : o.calib_paths) texts.push_back(io::read_text_file(p, "calibration text"));
    const calib::CalibSet cs = calib::make_calib_set(tok, texts, o.calib, o.calib_paths);
    const model::Model orig = model::Model::load(o.model_dir);
    model::LoadOptions dequant;
    dequant.dequant = true;
    const model::Model mq = model::Model::load(o.out_path, dequant);
    const auto fit = input_grams(mq, cs.fit), sel = input_grams(mq, cs.sel);
    std::map<std::string, const quant::TensorReport*> by_name;
    for (const auto& r : rep.tensors) by_name[r.name] = &r;
    std::map<std::string, TensorQuality> found;
    const auto noop = [](size_t, const encode::Encoded&) {};
    // the CPU's search (the reference) where the run left the choice to the device
    encode::Options cpu_enc = o.enc;
    if (cpu_enc.gptq_group == quant::kGptqGroupByDevice) cpu_enc.gptq_group = 1;
    for (int64_t l = 0; l < mq.num_layers(); ++l) {
        for (const auto& g : quant::input_groups(mq.config(), l)) {
            const std::string key = std::to_string(l) + "/" + g.input;
            for (const char* lin : g.linears) {
                const std::string name = quant::tensor_name(mq.config(), l, lin);
                const auto it = by_name.find(name);
                if (it == by_name.end()) continue;  // kept as it is
                const quant::TensorReport& r = *it->second;
                TensorQuality q;
                q.name = name;
                q.err_reported = r.err_sel;
                q.bits = r.bits;
                const MatD w = orig.linear(l, lin).w->dense().cast<double>();
                const MatD w_hat = mq.linear(l, lin).w->dense().cast<double>();
                const MatD& h_sel = sel.at(key);
                q.err_true = rel_err_in(w, w_hat, h_sel);
                MatD h_fit = fit.at(key);
                quant::shrink_to_diagonal(h_fit, o.gram_shrink);
                // the baseline (and the CPU encoder) on the same Grams, as
                // quantize's own CPU path encodes a group
                encode::Options eo = cpu_enc;
                eo.method = encode::Method::rtn_sign;
                const std::vector<quant::GroupJob> job = {{lin, w, r.bpw_target}};
                const auto rtn = quant::encode_group(job, h_fit, h_sel, eo, encode::Device::cpu, 0,
                                                     {}, false, name, noop);
                q.err_rtn = rtn[0].err_sel;
                q.bits_rtn = rtn[0].bits;
                if (with_cpu_encoder) {
                    const auto cpu = quant::encode_group(
                        job, h_fit, h_sel, cpu_enc, encode::Device::cpu, 0, {}, false, name, noop);
                    q.err_cpu = cpu[0].err_sel;
                }
                found.emplace(name, q);
            }
        }
    }
    std::vector<TensorQuality> out;
    for (const auto& r : rep.tensors) {
        CORTIQ_CHECK(found.count(r.name), "tensor_quality: {} is no decoder linear layer", r.name);
        out.push_back(found.at(r.name));
    }
    return out;
}

// The bounds a sound run meets, one message per tensor that misses one:
//   - the held-out error the run reports is the payload's against the true
//     held-out Grams, to `agree` relative (float32 activations summed in
//     another order; stories260K: equal to the 5 digits printed);
//   - the payload is no larger than rtn-sign's, and its true held-out error
//     below rtn-sign's on the same Grams times the slack of the first key of
//     `slack` its name contains (1 for the others).
inline std::vector<std::string> quality_misses(const std::vector<TensorQuality>& qs,
                                               const std::map<std::string, double>& slack = {},
                                               double agree = 1e-3) {
    std::vector<std::string> misses;
    for (const auto& q : qs) {
        double factor = 1.0;
        for (const auto& [key, f] : slack)
            if (q.name.find(key) != std::string::npos) {
                factor = f;
                break;
            }
        if (!(std::abs(q.err_true - q.err_reported) <= agree * q.err_true))
            misses.push_back(q.name + ": reported held-out error " +
                             std::to_string(q.err_reported) + ", true " +
                             std::to_string(q.err_true));
        if (q.bits > q.bits_rtn)
            misses.push_back(q.name + ": " + std::to_string(q.bits) + " bits, rtn-sign " +
                             std::to_string(q.bits_rtn));
        if (!(q.err_true < factor * q.err_rtn))
            misses.push_back(q.name + ": true held-out error " + std::to_string(q.err_true) +
                             ", rtn-sign " + std::to_string(q.err_rtn) + " (slack " +
                             std::to_string(factor) + ")");
    }
    return misses;
}

// stories260K's slack: at equal bytes NVG's held-out error is below
// rtn-sign's on 30 of its 35 tensors (0.62x to 0.99x); the five v_proj (32 ×
// 64, at rtn-sign's 1.875 bpw) measured 1.021x to 1.080x. 1.15 for them.
inline const std::map<std::string, double> kStoriesSlack = {{"v_proj", 1.15}};

}  // namespace cortiq::test
