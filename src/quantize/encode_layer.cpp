// A step of quantize(): one decoder layer. For each of its inputs in turn
// (q/k/v, o, gate/up, down): the Grams with everything before it compressed,
// the tensors that read it encoded and put in place (the next input then sees
// them); the layer's payloads journalled. A journalled layer is put in place
// from the journal instead.
#include <fmt/format.h>

#include <chrono>

#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "dist/comm.hpp"
#include "model/blr_linear.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

namespace {

void resume_layer(Run& run, int64_t layer, const LayerRecord& old) {
    install_record(run, layer, old);
    int64_t work = 0;
    for (const auto& r : old.reports) {
        run.report.tensors.push_back(r);
        work += r.m * r.n;
    }
    run.bar.advance(run.o.tune_blocks() ? 2 * work : work,  // encoded and tuned (quantize.cpp)
                    fmt::format("layer {} resumed", layer));
    ++run.report.resumed_layers;
}

// QuantizeOptions::test_grams_of_previous_layer: the Grams of `input` of the
// layer before (the first layer keeps its own); this layer's are kept for the
// next.
std::pair<MatD, MatD> previous_layer_grams(Run& run, const std::string& input,
                                           const InputGrams& grams) {
    std::pair<MatD, MatD> out{grams.h_fit, grams.h_sel};
    if (auto it = run.previous_grams.find(input); it != run.previous_grams.end())
        out = std::move(it->second);
    run.previous_grams[input] = {grams.h_fit, grams.h_sel};
    return out;
}

}  // namespace

void install_record(Run& run, int64_t layer, const LayerRecord& rec) {
    const std::string prefix = run.model.config().layer_prefix(layer);
    for (const auto& [name, bytes] : rec.payloads) {
        CORTIQ_CHECK(name.rfind(prefix, 0) == 0 && name.size() > prefix.size() + 7,
                     "journal: tensor '{}' is not one of layer {} ({}...)", name, layer, prefix);
        const std::string lin = name.substr(prefix.size());  // after "model.layers.N."
        install_payload(run, layer, lin.substr(0, lin.size() - 7), bytes);  // drop ".weight"
    }
}

void install_payload(Run& run, int64_t layer, const std::string& linear,
                     const std::vector<uint8_t>& bytes) {
    const std::string name = tensor_name(run.model.config(), layer, linear);
    auto& lin = run.model.linear(layer, linear);
    blr::validate_any(bytes, name, lin.out_features(), lin.in_features());
    // On the GPU the model keeps the packed layer and the calibration's copy
    // forms its dense weight on the device (model::GpuModel::set_linear); the
    // host's float64 product is the CPU path's, where the host model runs.
    if (run.o.device == encode::Device::gpu)
        lin.w = std::make_unique<model::BlrLinear>(blr::PackedWeight::from_payload(bytes, name));
    else
        lin.w = std::make_unique<model::DenseLinear>(blr::dequant_any(bytes));
    run.states.weight_changed(layer, linear);
    run.payloads[name] = bytes;
}

void encode_layer(Run& run, int64_t layer, const WorkPlan& work) {
    const QuantizeOptions& o = run.o;
    const io::ModelConfig& c = run.model.config();
    std::vector<JournalTensor> expected;  // what the layer's journal entry must hold
    for (const auto& g : input_groups(c, layer))
        for (const char* lin : g.linears)
            if (work.budget.count(tensor_name(c, layer, lin)))
                expected.push_back({tensor_name(c, layer, lin),
                                    run.model.linear(layer, lin).out_features(),
                                    run.model.linear(layer, lin).in_features()});
    if (auto old = load_journalled(run.journal, layer, expected))
        return resume_layer(run, layer, *old);
    LayerRecord rec;
    for (const auto& g : input_groups(c, layer)) {
        std::vector<GroupJob> jobs;
        for (const char* lin : g.linears) {
            const auto it = work.budget.find(tensor_name(c, layer, lin));
            if (it == work.budget.end()) continue;
            jobs.push_back(
                {lin, run.model.linear(layer, lin).w->dense().cast<double>(), it->second});
        }
        if (jobs.empty()) continue;
        const std::string what =
            fmt::format("{} (layer {} input of {})", o.model_dir, layer, g.input);
        // several ranks: who encodes each tensor (and makes its drift target)
        const std::vector<int> owners =
            dist::distributed() ? owners_of(jobs, dist::size()) : std::vector<int>();
        const InputGrams grams = calibrate_input(run, layer, g.input, jobs, what,
                                                 dist::distributed() ? &owners : nullptr);
        std::pair<MatD, MatD> swapped;  // the testing hook's Grams, else unused
        if (o.test_grams_of_previous_layer) swapped = previous_layer_grams(run, g.input, grams);
        const MatD& h_fit = o.test_grams_of_previous_layer ? swapped.first : grams.h_fit;
        const MatD& h_sel = o.test_grams_of_previous_layer ? swapped.second : grams.h_sel;
        std::vector<std::string> names;
        for (const GroupJob& j : jobs) names.push_back(tensor_name(c, layer, j.name));
        auto announce = [&](size_t i, const std::string& line, double alpha) {
            if (o.verbose)
                run.bar.print(fmt::format("{:<40} {}{}", names[i], line,
                                          alpha >= 0 ? fmt::format(" | drift {:.2f}", alpha) : ""));
            run.bar.advance(jobs[i].w.size(), names[i]);
        };
        const auto t0 = std::chrono::steady_clock::now();
        std::vector<EncodedTensor> enc;
        if (dist::distributed()) {
            enc = encode_on_ranks(run, jobs, names, owners, grams.drift_alpha, h_fit, h_sel, what,
                                  [&](size_t i, const EncodedTensor& t) {
                                      announce(i, t.report.line, t.report.drift_alpha);
                                  });
        } else {
            auto group = encode_group(jobs, h_fit, h_sel, o.enc, o.device, o.jobs, o.gpus,
                                      o.profile, what, [&](size_t i, const encode::Encoded& e) {
                                          announce(i, e.line + stage_note(e), grams.drift_alpha[i]);
                                      });
            for (size_t i = 0; i < jobs.size(); ++i) {
                run.report.encode_stages.merge(group[i].stages);
                enc.push_back({std::move(group[i].payload),
                               report_of(names[i], jobs[i], group[i], o.enc.method)});
                enc.back().report.drift_alpha = grams.drift_alpha[i];
            }
        }
        run.report.encode_seconds += seconds_since(t0);
        const auto t_install = std::chrono::steady_clock::now();
        for (size_t i = 0; i < jobs.size(); ++i) {
            install_payload(run, layer, jobs[i].name, enc[i].payload);
            const TensorReport& r = enc[i].report;
            rec.payloads.emplace_back(names[i], enc[i].payload);
            rec.reports.push_back(r);
            run.report.tensors.push_back(r);
        }
        run.report.install_seconds += seconds_since(t_install);
    }
    if (o.tune_blocks()) tune_layer(run, layer, rec);
    const auto t_journal = std::chrono::steady_clock::now();
    run.journal.save(layer, rec);
    run.report.journal_seconds += seconds_since(t_journal);
    CORTIQ_CHECK(layer != o.interrupt_after_layer, "interrupted after layer {} (test hook)", layer);
}

}  // namespace cortiq::quant
