// Calibration data (SPEC §2): token windows cut from a text, a held-out
// fraction kept apart for the held-out Grams, and Gram accumulation in
// float64 from float32 activations.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::io {
class Tokenizer;
}

namespace cortiq::calib {

struct CalibOptions {
    int64_t samples = 128;   // windows in all (fit + held out)
    int64_t seqlen = 512;    // tokens per window
    double holdout = 0.125;  // fraction of the windows held out (at least one)
};

struct CalibSet {
    std::vector<std::vector<int32_t>> fit, sel;  // token windows
    int64_t text_tokens = 0;
};

// Tokenises `text` (no added special tokens) and cuts `samples` windows of
// `seqlen` tokens spread evenly over the text; the last ⌈holdout·samples⌉
// windows (in text order, every k-th) form the held-out set. Throws naming
// `what` and the tokens needed when the text is too short.
CalibSet make_calib_set(const io::Tokenizer& tok, const std::string& text, const CalibOptions& o,
                        const std::string& what);
CalibSet make_calib_set(const std::vector<int32_t>& ids, const CalibOptions& o,
                        const std::string& what);

// Several texts (`--calib A --calib B`): each gives an equal share of the
// windows (the first `samples mod k` one more), cut and split as above within
// that text, so the fit and the held-out sets both sample every text in the
// same proportion; the windows are interleaved text by text. One text is the
// single-text set exactly. Throws naming the text that is too short.
CalibSet make_calib_set(const std::vector<std::vector<int32_t>>& ids, const CalibOptions& o,
                        const std::vector<std::string>& what);
CalibSet make_calib_set(const io::Tokenizer& tok, const std::vector<std::string>& texts,
                        const CalibOptions& o, const std::vector<std::string>& what);

// `count` windows of `len` token ids drawn uniformly from [0, vocab) with a
// fixed seed: inputs no text provides, for which the original model's
// outputs are still a target (data-free calibration and distillation).
std::vector<std::vector<int32_t>> random_windows(int64_t count, int64_t len, int64_t vocab,
                                                 uint64_t seed);

// Appends round(per_window · |set|) windows made by make(count, len), len the
// set's window length (none to an empty set), and returns how many; `what`
// names them in the error for a negative or non-finite per_window.
using MakeWindows = std::function<std::vector<std::vector<int32_t>>(int64_t count, int64_t len)>;
// round(per_window · windows): how many append_windows adds to a set of `windows`.
int64_t windows_to_add(int64_t windows, double per_window);
int64_t append_windows(std::vector<std::vector<int32_t>>& set, double per_window, const char* what,
                       const MakeWindows& make);

// append_windows of random_windows (--kd-random's windows).
int64_t append_random_windows(std::vector<std::vector<int32_t>>& set, double per_window,
                              int64_t vocab, uint64_t seed);

// append_random_windows to the fit and to the held-out windows (seeds derived
// from `seed`), after the text's (--calib-random).
void add_random_windows(CalibSet& cs, double per_window, int64_t vocab, uint64_t seed);

// (1/T) Σ x xᵀ over the rows x of every added block, in float64.
class GramAccumulator {
  public:
    explicit GramAccumulator(int64_t n = 0) : sum_(n, n) {}
    void add(const float* x, int64_t rows, int64_t cols);
    int64_t tokens() const { return tokens_; }
    int64_t dim() const { return sum_.rows(); }
    MatD mean() const;
    // The running sum (upper triangle) and its token count, to pass a sum on
    // to another rank, which goes on adding to it (calib/sequential.cpp).
    const MatD& sum() const { return sum_; }
    void restore(MatD sum, int64_t tokens) {
        sum_ = std::move(sum);
        tokens_ = tokens;
    }

  private:
    MatD sum_;
    int64_t tokens_ = 0;
};

// (1/T) Σ a bᵀ over paired rows a (width na) and b (width nb), in float64:
// the cross Gram of the original model's and the compressed model's inputs
// of one linear layer (quantize --match original).
class CrossGramAccumulator {
  public:
    CrossGramAccumulator(int64_t na, int64_t nb) : sum_(na, nb) {}
    void add(const float* a, const float* b, int64_t rows);
    MatD mean() const;
    const MatD& sum() const { return sum_; }  // as GramAccumulator's
    int64_t tokens() const { return tokens_; }
    void restore(MatD sum, int64_t tokens) {
        sum_ = std::move(sum);
        tokens_ = tokens;
    }

  private:
    MatD sum_;
    int64_t tokens_ = 0;
};

}  // namespace cortiq::calib
