// A step of quantize() with --include-head: lm_head, last, on the Grams of the
// final RMSNorm of the hidden states the compressed layers produce. A tied
// model keeps its float embedding and gets a separate compressed
// "lm_head.weight". Journalled like a layer.
#include <fmt/format.h>

#include <chrono>

#include "blr/sign.hpp"
#include "dist/comm.hpp"
#include "quantize/steps.hpp"

namespace cortiq::quant {

void encode_head(Run& run, const io::Checkpoint& ck, double bpw) {
    const QuantizeOptions& o = run.o;
    const auto& cfg = run.model.config();
    const int64_t vocab = cfg.vocab_size, hidden = cfg.hidden_size;
    if (auto old =
            load_journalled(run.journal, kHeadKey, {{kHead, vocab, hidden}})) {  // checked there
        run.payloads[kHead] = old->payloads[0].second;
        run.report.tensors.push_back(old->reports[0]);
        run.bar.advance(vocab * hidden, "lm_head resumed");
        run.report.resumed_head = true;
        return;
    }
    // a tied checkpoint stores the head as the embedding (under the text
    // model's prefix: model.language_model. in Qwen3.5's multimodal layout)
    const std::string src =
        ck.has(kHead) || !cfg.tie_word_embeddings ? kHead : cfg.prefix + "embed_tokens.weight";
    std::vector<GroupJob> jobs;
    jobs.push_back({kHead, ck.load_matf(src).cast<double>(), bpw});
    CORTIQ_CHECK(jobs[0].w.rows() == vocab && jobs[0].w.cols() == hidden,
                 "{}: tensor '{}' has shape [{}, {}], expected [{}, {}]", o.model_dir, src,
                 jobs[0].w.rows(), jobs[0].w.cols(), vocab, hidden);
    const auto calib_start = std::chrono::steady_clock::now();
    const auto [h_fit, h_sel] = run.states.head_grams();
    run.report.add_calib("head", seconds_since(calib_start));
    const auto encode_start = std::chrono::steady_clock::now();
    EncodedTensor head;
    const std::string what = fmt::format("{} (lm_head)", o.model_dir);
    if (dist::distributed()) {
        head = std::move(
            encode_on_ranks(run, jobs, {kHead}, {0}, {-1.0}, h_fit, h_sel, what,
                            [&](size_t, const EncodedTensor& t) {
                                if (o.verbose)
                                    run.bar.print(fmt::format("{:<40} {}", kHead, t.report.line));
                                run.bar.advance(vocab * hidden, kHead);
                            })[0]);
    } else {
        auto enc = encode_group(
            jobs, h_fit, h_sel, o.enc, o.device, o.jobs, o.gpus, o.profile, what,
            [&](size_t, const encode::Encoded& e) {
                if (o.verbose)
                    run.bar.print(fmt::format("{:<40} {}{}", kHead, e.line, stage_note(e)));
                run.bar.advance(vocab * hidden, kHead);
            });
        run.report.encode_stages.merge(enc[0].stages);
        head = {std::move(enc[0].payload), report_of(kHead, jobs[0], enc[0], o.enc.method)};
    }
    run.report.encode_seconds += seconds_since(encode_start);
    blr::validate_any(head.payload, kHead, vocab, hidden);
    run.payloads[kHead] = head.payload;
    LayerRecord rec;
    rec.payloads.emplace_back(kHead, head.payload);
    rec.reports.push_back(head.report);
    run.report.tensors.push_back(rec.reports[0]);
    run.journal.save(kHeadKey, rec);
    CORTIQ_CHECK(o.interrupt_after_layer != run.model.num_layers(),
                 "interrupted after lm_head (test hook)");
}

}  // namespace cortiq::quant
