// Perplexity by the plain protocol: the whole text tokenised once without
// added special tokens, cut into non-overlapping windows of ctx tokens (the
// tail dropped), each window scored on its own (ctx − 1 predictions),
// PPL = exp(mean NLL). With `bos`, each window is BOS followed by ctx − 1
// text tokens (still ctx − 1 predictions, the first made from BOS alone).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/progress.hpp"
#include "model/llama.hpp"
#include "model/runtime.hpp"

namespace cortiq::io {
class Tokenizer;
}

namespace cortiq::eval {

struct PplOptions {
    int64_t ctx = 512;
    bool bos = false;
    int32_t bos_id = -1;      // required when bos
    int64_t max_windows = 0;  // 0: all windows
    bool progress = true;     // progress bar on stderr
    // Told of every batch of windows, with or without the bar ("ppl 12.34",
    // windows done, windows in all).
    ProgressCallback on_progress;
};

struct PplResult {
    double nll = 0;  // mean NLL per prediction (nats)
    double ppl = 0;
    int64_t tokens = 0;       // tokens in the text
    int64_t windows = 0;      // windows scored
    int64_t predictions = 0;  // windows × (ctx − 1)
    double seconds = 0;
    double tokens_per_second = 0;  // tokens forwarded (windows × ctx) per second

    std::string json() const;  // one line
    std::string summary() const;
};

// On any runtime (model::make_runtime: CPU or GPU); windows go to it in
// batches of rt.batch_windows(ctx).
PplResult perplexity(model::Runtime& rt, std::span<const int32_t> ids, const PplOptions& opt);
PplResult perplexity(model::Runtime& rt, const io::Tokenizer& tok, std::string_view text,
                     const PplOptions& opt);
// On the CPU.
PplResult perplexity(const model::Model& m, std::span<const int32_t> ids, const PplOptions& opt);
PplResult perplexity(const model::Model& m, const io::Tokenizer& tok, std::string_view text,
                     const PplOptions& opt);

// Σ over rows i < T−1 of −log softmax(logits[i])[tokens[i+1]] (double).
double window_nll(const MatF& logits, std::span<const int32_t> tokens);

}  // namespace cortiq::eval
