#include "eval/ppl.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/progress.hpp"
#include "io/tokenizer.hpp"
#include "model/ops.hpp"

namespace cortiq::eval {

double window_nll(const MatF& logits, std::span<const int32_t> tokens) {
    return model::next_token_nll(logits, tokens);
}

PplResult perplexity(model::Runtime& rt, std::span<const int32_t> ids, const PplOptions& opt) {
    CORTIQ_CHECK(opt.ctx >= 2, "ppl: ctx must be at least 2, got {}", opt.ctx);
    CORTIQ_CHECK(!opt.bos || opt.bos_id >= 0,
                 "ppl: --bos given but the tokenizer has no BOS token");
    const int64_t text_per_window = opt.bos ? opt.ctx - 1 : opt.ctx;
    const int64_t n_tokens = static_cast<int64_t>(ids.size());
    int64_t windows = n_tokens / text_per_window;
    if (opt.max_windows > 0) windows = std::min(windows, opt.max_windows);
    CORTIQ_CHECK(windows > 0, "ppl: the text has {} tokens, fewer than one window of {}", n_tokens,
                 text_per_window);

    PplResult r;
    r.tokens = n_tokens;
    r.windows = windows;
    r.predictions = windows * (opt.ctx - 1);
    const int64_t batch = std::max<int64_t>(1, rt.batch_windows(opt.ctx));
    Progress bar("ppl", windows, "windows", opt.progress, opt.on_progress);
    std::vector<int32_t> buf;
    double nll = 0;
    for (int64_t w0 = 0; w0 < windows; w0 += batch) {
        const int64_t nw = std::min(batch, windows - w0);
        buf.resize(static_cast<size_t>(nw * opt.ctx));
        for (int64_t w = 0; w < nw; ++w) {  // window w0 + w at buf[w·ctx ..]
            const auto src = ids.subspan(static_cast<size_t>((w0 + w) * text_per_window),
                                         static_cast<size_t>(text_per_window));
            auto dst = buf.begin() + static_cast<std::ptrdiff_t>(w * opt.ctx);
            if (opt.bos) *dst++ = opt.bos_id;
            std::copy(src.begin(), src.end(), dst);
        }
        nll += rt.windows_nll(buf, nw);
        const double mean = nll / static_cast<double>((w0 + nw) * (opt.ctx - 1));
        bar.advance(nw, fmt::format("ppl {:.4f}", std::exp(mean)));
    }
    r.seconds = bar.elapsed();
    bar.finish();
    r.nll = nll / static_cast<double>(r.predictions);
    r.ppl = std::exp(r.nll);
    r.tokens_per_second = r.seconds > 0 ? static_cast<double>(windows * opt.ctx) / r.seconds : 0.0;
    return r;
}

PplResult perplexity(model::Runtime& rt, const io::Tokenizer& tok, std::string_view text,
                     const PplOptions& opt) {
    const auto ids = tok.encode(text, /*add_special=*/false);
    PplOptions o = opt;
    if (o.bos && o.bos_id < 0) o.bos_id = tok.bos_id();
    return perplexity(rt, ids, o);
}

PplResult perplexity(const model::Model& m, std::span<const int32_t> ids, const PplOptions& opt) {
    const auto rt = model::make_runtime(m, model::Device::cpu);
    return perplexity(*rt, ids, opt);
}

PplResult perplexity(const model::Model& m, const io::Tokenizer& tok, std::string_view text,
                     const PplOptions& opt) {
    const auto rt = model::make_runtime(m, model::Device::cpu);
    return perplexity(*rt, tok, text, opt);
}

std::string PplResult::json() const {
    nlohmann::ordered_json j;
    j["ppl"] = ppl;
    j["nll"] = nll;
    j["tokens"] = tokens;
    j["windows"] = windows;
    j["predictions"] = predictions;
    j["seconds"] = seconds;
    j["tokens_per_second"] = tokens_per_second;
    return j.dump();
}

std::string PplResult::summary() const {
    return fmt::format(
        "ppl {:.4f} | nll {:.5f} | {} windows, {} predictions, {} tokens | {:.1f} s, "
        "{:.0f} tok/s",
        ppl, nll, windows, predictions, tokens, seconds, tokens_per_second);
}

}  // namespace cortiq::eval
