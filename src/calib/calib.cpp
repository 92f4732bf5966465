#include "calib/calib.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>
#include <random>

#include "core/blas_threads.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "io/tokenizer.hpp"

namespace cortiq::calib {

CalibSet make_calib_set(const std::vector<int32_t>& ids, const CalibOptions& o,
                        const std::string& what) {
    CORTIQ_CHECK(o.samples >= 2, "--samples must be at least 2 (one fit, one held out)");
    CORTIQ_CHECK(o.seqlen >= 2, "--seqlen must be at least 2");
    CORTIQ_CHECK(o.holdout > 0 && o.holdout < 1, "--holdout must be in (0, 1)");
    const int64_t need = o.samples * o.seqlen;
    const int64_t have = static_cast<int64_t>(ids.size());
    CORTIQ_CHECK(have >= need,
                 "calibration text {} has {} tokens; {} samples of {} tokens need {} (use a longer "
                 "text, fewer --samples or a shorter --seqlen)",
                 what, have, o.samples, o.seqlen, need);
    const int64_t nsel =
        std::max<int64_t>(1, static_cast<int64_t>(std::ceil(o.holdout * o.samples)));
    CORTIQ_CHECK(nsel < o.samples, "--holdout {} leaves no fit samples", o.holdout);
    // Windows spread over the whole text; every (samples / nsel)-th is held out
    // so both sets see every part of it.
    const int64_t windows = have / o.seqlen;
    CalibSet cs;
    cs.text_tokens = have;
    const double stride = static_cast<double>(windows) / static_cast<double>(o.samples);
    const double every = static_cast<double>(o.samples) / static_cast<double>(nsel);
    int64_t taken_sel = 0;
    for (int64_t s = 0; s < o.samples; ++s) {
        const int64_t w = static_cast<int64_t>(std::floor(s * stride));
        const int64_t b = w * o.seqlen;
        std::vector<int32_t> win(ids.begin() + b, ids.begin() + b + o.seqlen);
        const bool held =
            taken_sel < nsel && static_cast<int64_t>(std::floor((taken_sel + 0.5) * every)) == s;
        if (held) {
            cs.sel.push_back(std::move(win));
            ++taken_sel;
        } else {
            cs.fit.push_back(std::move(win));
        }
    }
    CORTIQ_ASSERT(taken_sel == nsel && !cs.fit.empty());
    return cs;
}

CalibSet make_calib_set(const io::Tokenizer& tok, const std::string& text, const CalibOptions& o,
                        const std::string& what) {
    return make_calib_set(tok.encode(text, false), o, what);
}

CalibSet make_calib_set(const std::vector<std::vector<int32_t>>& ids, const CalibOptions& o,
                        const std::vector<std::string>& what) {
    const int64_t k = static_cast<int64_t>(ids.size());
    CORTIQ_ASSERT(k >= 1 && what.size() == ids.size());
    if (k == 1) return make_calib_set(ids[0], o, what[0]);
    CORTIQ_CHECK(o.samples >= 2 * k,
                 "--samples {} is too few for {} calibration texts (at least 2 per text: one fit, "
                 "one held out)",
                 o.samples, k);
    std::vector<CalibSet> parts;
    CalibSet cs;
    for (int64_t i = 0; i < k; ++i) {
        CalibOptions oi = o;
        oi.samples = o.samples / k + (i < o.samples % k ? 1 : 0);
        parts.push_back(
            make_calib_set(ids[static_cast<size_t>(i)], oi, what[static_cast<size_t>(i)]));
        cs.text_tokens += parts.back().text_tokens;
    }
    // round-robin, text by text, within each set
    for (auto set : {&CalibSet::fit, &CalibSet::sel}) {
        for (size_t w = 0;; ++w) {
            bool any = false;
            for (auto& p : parts)
                if (w < (p.*set).size()) {
                    (cs.*set).push_back(std::move((p.*set)[w]));
                    any = true;
                }
            if (!any) break;
        }
    }
    return cs;
}

std::vector<std::vector<int32_t>> random_windows(int64_t count, int64_t len, int64_t vocab,
                                                 uint64_t seed) {
    CORTIQ_CHECK(vocab >= 1, "random windows need a vocabulary, got {} tokens", vocab);
    std::mt19937_64 rng(seed);
    std::uniform_int_distribution<int32_t> tok(0, static_cast<int32_t>(vocab - 1));
    std::vector<std::vector<int32_t>> out(static_cast<size_t>(std::max<int64_t>(count, 0)));
    for (auto& w : out) {
        w.resize(static_cast<size_t>(len));
        for (auto& v : w) v = tok(rng);
    }
    return out;
}

int64_t windows_to_add(int64_t windows, double per_window) {
    return static_cast<int64_t>(std::llround(per_window * static_cast<double>(windows)));
}

int64_t append_windows(std::vector<std::vector<int32_t>>& set, double per_window, const char* what,
                       const MakeWindows& make) {
    CORTIQ_CHECK(per_window >= 0 && std::isfinite(per_window),
                 "{} windows per window must be finite and non-negative, got {}", what, per_window);
    if (set.empty()) return 0;
    const int64_t n = windows_to_add(static_cast<int64_t>(set.size()), per_window);
    auto r = make(n, static_cast<int64_t>(set[0].size()));
    set.insert(set.end(), std::make_move_iterator(r.begin()), std::make_move_iterator(r.end()));
    return n;
}

int64_t append_random_windows(std::vector<std::vector<int32_t>>& set, double per_window,
                              int64_t vocab, uint64_t seed) {
    return append_windows(set, per_window, "random", [&](int64_t count, int64_t len) {
        return random_windows(count, len, vocab, seed);
    });
}

void add_random_windows(CalibSet& cs, double per_window, int64_t vocab, uint64_t seed) {
    append_random_windows(cs.fit, per_window, vocab, seed + 1);
    append_random_windows(cs.sel, per_window, vocab, seed + 2);
}

CalibSet make_calib_set(const io::Tokenizer& tok, const std::vector<std::string>& texts,
                        const CalibOptions& o, const std::vector<std::string>& what) {
    std::vector<std::vector<int32_t>> ids;
    for (const auto& t : texts) ids.push_back(tok.encode(t, false));
    return make_calib_set(ids, o, what);
}

namespace {

// The float32 products of a block of rows, by panels of kPanel output rows,
// each one single-threaded BLAS call, run on the threads there are: every
// element's rounding depends on its panel, which the shape fixes, never on
// the thread count. (OpenBLAS's threaded SSYRK and SGEMM round differently
// with 1 and 2 threads; the Grams, the drift targets and a close pick of the
// encoder followed, and the demo's quantize wrote different files with
// --threads 1 and 2.)
constexpr int64_t kPanel = 64;

// The upper triangle of xᵀ x (x: rows × cols), row-major into g (the lower
// part of each diagonal panel is written too, and ignored).
void gram_upper(const float* x, int64_t rows, int64_t cols, float* g) {
    const OneBlasThread one;
    parallel_for(0, (cols + kPanel - 1) / kPanel, [&](int64_t p) {
        const int64_t i0 = p * kPanel, i1 = std::min(cols, i0 + kPanel);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(i1 - i0),
                    static_cast<int>(cols - i0), static_cast<int>(rows), 1.0f, x + i0,
                    static_cast<int>(cols), x + i0, static_cast<int>(cols), 0.0f,
                    g + i0 * cols + i0, static_cast<int>(cols));
    });
}

// aᵀ b (a: rows × na, b: rows × nb), row-major into g.
void cross_product(const float* a, const float* b, int64_t rows, int64_t na, int64_t nb, float* g) {
    const OneBlasThread one;
    parallel_for(0, (na + kPanel - 1) / kPanel, [&](int64_t p) {
        const int64_t i0 = p * kPanel, i1 = std::min(na, i0 + kPanel);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(i1 - i0),
                    static_cast<int>(nb), static_cast<int>(rows), 1.0f, a + i0,
                    static_cast<int>(na), b, static_cast<int>(nb), 0.0f, g + i0 * nb,
                    static_cast<int>(nb));
    });
}

}  // namespace

void GramAccumulator::add(const float* x, int64_t rows, int64_t cols) {
    CORTIQ_ASSERT(cols == sum_.rows(), "Gram of width {} fed {} columns", sum_.rows(), cols);
    if (rows == 0) return;
    // float32 product per block (rows ≤ a few thousand), summed in float64.
    std::vector<float> g(static_cast<size_t>(cols * cols), 0.0f);
    gram_upper(x, rows, cols, g.data());
    for (int64_t i = 0; i < cols; ++i)
        for (int64_t j = i; j < cols; ++j) sum_(i, j) += g[static_cast<size_t>(i * cols + j)];
    tokens_ += rows;
}

MatD GramAccumulator::mean() const {
    const int64_t n = sum_.rows();
    MatD h(n, n);
    const double inv = tokens_ ? 1.0 / static_cast<double>(tokens_) : 0.0;
    for (int64_t i = 0; i < n; ++i)
        for (int64_t j = i; j < n; ++j) h(i, j) = h(j, i) = sum_(i, j) * inv;
    return h;
}

void CrossGramAccumulator::add(const float* a, const float* b, int64_t rows) {
    if (rows == 0) return;
    const int64_t na = sum_.rows(), nb = sum_.cols();
    std::vector<float> g(static_cast<size_t>(na * nb), 0.0f);
    if (na == nb && std::memcmp(a, b, static_cast<size_t>(rows * na) * sizeof(float)) == 0) {
        // Both models give this window the same input (nothing before it is
        // compressed yet): GramAccumulator's product, mirrored, so that C = H
        // bit for bit and the drift correction is exactly zero, not the
        // difference of two roundings (of two products), which decided α at
        // random and changed with the BLAS's threads.
        gram_upper(a, rows, na, g.data());
        for (int64_t i = 0; i < na; ++i)
            for (int64_t j = i; j < na; ++j) {
                sum_(i, j) += g[static_cast<size_t>(i * na + j)];
                if (j != i) sum_(j, i) += g[static_cast<size_t>(i * na + j)];
            }
        tokens_ += rows;
        return;
    }
    cross_product(a, b, rows, na, nb, g.data());
    for (int64_t i = 0; i < na; ++i)
        for (int64_t j = 0; j < nb; ++j) sum_(i, j) += g[static_cast<size_t>(i * nb + j)];
    tokens_ += rows;
}

MatD CrossGramAccumulator::mean() const {
    MatD c = sum_;
    const double inv = tokens_ ? 1.0 / static_cast<double>(tokens_) : 0.0;
    for (int64_t i = 0; i < c.rows(); ++i)
        for (int64_t j = 0; j < c.cols(); ++j) c(i, j) *= inv;
    return c;
}

}  // namespace cortiq::calib
