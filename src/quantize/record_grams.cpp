// Grams of one linear layer's input recorded from the float model over a text
// (for `cortiq bench --from-model M --tensor T --calib TEXT`).
#include "quantize/record_grams.hpp"

#include <fmt/format.h>

#include <regex>

#include "calib/calib.hpp"
#include "io/text_file.hpp"
#include "io/tokenizer.hpp"
#include "model/llama.hpp"

namespace cortiq::quant {

encode::BenchInput bench_input_recorded(const std::string& model_dir, const std::string& tensor,
                                        const std::vector<std::string>& calib_paths,
                                        int64_t samples, int64_t seqlen) {
    // model.layers.N.… (Llama family) or model.language_model.layers.N.…
    // (Qwen3.5 checkpoints, whose DeltaNet layers have linear_attn.*)
    static const std::regex re(
        R"(model\.(?:language_model\.)?layers\.(\d+)\.(self_attn|mlp|linear_attn)\.(\w+)\.weight)");
    std::smatch mt;
    CORTIQ_CHECK(std::regex_match(tensor, mt, re),
                 "--tensor {}: recorded Grams need a decoder linear layer "
                 "(model.[language_model.]layers.N.self_attn|mlp|linear_attn.X.weight)",
                 tensor);
    const int64_t layer = std::stoll(mt[1]);
    const std::string block = mt[2], proj = mt[3];
    const std::string lin_name = block + "." + proj;
    // the input each linear reads, under the name the forward's hook gives it
    const std::string input =
        block == "linear_attn"
            ? (proj == "out_proj" ? "linear_attn.out_proj" : "linear_attn.in_proj_qkv")
        : proj == "q_proj" || proj == "k_proj" || proj == "v_proj" ? "self_attn.q_proj"
        : proj == "o_proj"                                         ? "self_attn.o_proj"
        : proj == "gate_proj" || proj == "up_proj"                 ? "mlp.gate_proj"
                                                                   : "mlp.down_proj";
    const model::Model mdl = model::Model::load(model_dir);
    CORTIQ_CHECK(layer < mdl.num_layers(), "--tensor {}: the model has {} layers", tensor,
                 mdl.num_layers());
    const io::Tokenizer tok = io::Tokenizer::load(model_dir);
    calib::CalibOptions co;
    co.samples = samples;
    co.seqlen = seqlen;
    std::vector<std::string> texts;
    std::string names;
    for (const auto& p : calib_paths) {
        texts.push_back(io::read_text_file(p, "calibration text"));
        if (!names.empty()) names += ',';
        names += p;
    }
    const auto cs = calib::make_calib_set(tok, texts, co, calib_paths);
    const model::Linear& lin = mdl.linear(layer, lin_name);
    CORTIQ_CHECK(lin.w != nullptr, "--tensor {}: layer {} of {} has no {} (another layer type)",
                 tensor, layer, model_dir, lin_name);
    const MatF w = lin.w->dense();
    calib::GramAccumulator fit(w.cols()), sel(w.cols());
    calib::GramAccumulator* target = nullptr;
    const model::LinearInputHook hook = [&](int64_t l, std::string_view in, const float* x,
                                            int64_t rows, int64_t cols) {
        if (l == layer && in == input) target->add(x, rows, cols);
    };
    model::BlockActivations act;
    for (auto [set, acc] : {std::pair{&cs.fit, &fit}, std::pair{&cs.sel, &sel}}) {
        target = acc;
        for (const auto& win : *set) {
            MatF x = mdl.embed(win);
            for (int64_t l = 0; l <= layer; ++l) {
                act.x = std::move(x);
                mdl.block(l, 0, nullptr, act, &hook);
                x = std::move(act.out);
            }
        }
    }
    return {w.cast<double>(), fit.mean(), sel.mean(),
            fmt::format("{}:{} (Grams from {} over {}+{} windows of {})", model_dir, tensor, names,
                        cs.fit.size(), cs.sel.size(), seqlen)};
}

}  // namespace cortiq::quant
