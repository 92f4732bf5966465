// A step of quantize() when the plan gives the embedding a budget
// (model.embed_tokens.weight): encoded first, so that every layer is
// calibrated on the rows the runtime will look up. Journalled like a layer.
//
// The embedding is a map from one-hot token vectors, so its input Gram is the
// diagonal of token frequencies: what matters is each row's error weighted by
// how often the token occurs. Encoding W' = diag(s) W against the identity
// Gram on the hidden side and then dividing each output scale h_t by s_t
// minimises Σ_t s_t² ‖w_t − ŵ_t‖² exactly (the BLR set is closed under
// scaling its rows). s_t² mixes the calibration windows' token frequencies
// with the uniform distribution, half and half, so that the tokens a
// calibration text lacks (another domain's words) keep a real share.
#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "blr/model.hpp"
#include "blr/packed.hpp"
#include "blr/sign.hpp"
#include "dist/comm.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

std::string embedding_name(const io::ModelConfig& c) {
    return c.prefix + "embed_tokens.weight";
}

std::vector<double> embedding_row_weights(const calib::CalibSet& cs, int64_t vocab) {
    std::vector<double> count(static_cast<size_t>(vocab), 0.0);
    double total = 0;
    for (const auto& win : cs.fit)
        for (int32_t t : win)
            if (t >= 0 && t < vocab) {
                count[static_cast<size_t>(t)] += 1;
                total += 1;
            }
    std::vector<double> s(static_cast<size_t>(vocab));
    for (int64_t t = 0; t < vocab; ++t) {
        // s_t² = V·(½ freq_t + ½ / V): mean 1 over the vocabulary
        const double f = total > 0 ? count[static_cast<size_t>(t)] / total : 1.0 / vocab;
        s[static_cast<size_t>(t)] = std::sqrt(0.5 * vocab * f + 0.5);
    }
    return s;
}

MatD rows_weighted(const MatF& table, const std::vector<double>& s) {
    MatD w = table.cast<double>();
    for (int64_t t = 0; t < w.rows(); ++t)
        for (int64_t j = 0; j < w.cols(); ++j) w(t, j) *= s[static_cast<size_t>(t)];
    return w;
}

namespace {

EncodedTensor encode_rows_weighted(const QuantizeOptions& o, const model::Model& m,
                                   const calib::CalibSet& cs, double bpw) {
    const auto& cfg = m.config();
    const int64_t vocab = cfg.vocab_size, hidden = cfg.hidden_size;
    const std::string name = embedding_name(cfg);
    CORTIQ_CHECK(o.enc.method != encode::Method::rtn_sign,
                 "{}: --method rtn-sign cannot compress the embedding (plan names '{}')",
                 o.model_dir, name);
    const std::vector<double> s = embedding_row_weights(cs, vocab);
    GroupJob job{name, rows_weighted(*m.embedding().float_table(), s), bpw};
    const MatD identity = MatD::identity(hidden);
    auto enc = encode_group({job}, identity, identity, o.enc, o.device, o.jobs, o.gpus, false,
                            fmt::format("{} (embedding)", o.model_dir),
                            [](size_t, const encode::Encoded&) {});
    // undo the row weights in the output scales: Ŵ = diag(1/s) Ŵ'
    blr::Factors f = blr::unpack(enc[0].payload);
    for (auto& p : f.paths)
        for (int64_t t = 0; t < vocab; ++t) p.h[t] /= s[static_cast<size_t>(t)];
    std::vector<uint8_t> payload = blr::pack(f);
    blr::validate_any(payload, name, vocab, hidden);
    EncodedTensor out{std::move(payload), report_of(name, job, enc[0], o.enc.method)};
    out.report.line += " | rows weighted by token frequency";
    return out;
}

}  // namespace

void encode_embedding(EmbeddingStep& step, double bpw) {
    const QuantizeOptions& o = step.o;
    const auto& cfg = step.model.config();
    const int64_t vocab = cfg.vocab_size, hidden = cfg.hidden_size;
    const std::string name = embedding_name(cfg);
    LayerRecord rec;
    bool resumed = false;
    if (auto old = load_journalled(step.journal, kEmbedKey, {{name, vocab, hidden}})) {
        rec = std::move(*old);
        resumed = true;
    } else {
        const auto start = std::chrono::steady_clock::now();
        if (dist::is_root()) {  // one rank encodes; the others receive its bytes
            EncodedTensor e = encode_rows_weighted(o, step.model, step.calib, bpw);
            rec.payloads.emplace_back(name, std::move(e.payload));
            rec.reports.push_back(std::move(e.report));
        }
        broadcast_record(rec, 0);
        step.report.encode_seconds += seconds_since(start);
        step.journal.save(kEmbedKey, rec);
    }
    const auto& bytes = rec.payloads.at(0).second;
    step.model.set_embedding(model::Embedding(
        std::make_shared<const blr::PackedWeight>(blr::PackedWeight::from_payload(bytes, name))));
    step.payloads[name] = bytes;
    step.report.tensors.push_back(rec.reports.at(0));
    if (o.verbose)
        step.bar.print(
            fmt::format("{:<40} {}{}", name, rec.reports[0].line, resumed ? " (resumed)" : ""));
    step.bar.advance(vocab * hidden, resumed ? "embedding resumed" : name);
}

}  // namespace cortiq::quant
