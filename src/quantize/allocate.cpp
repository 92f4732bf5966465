#include "quantize/allocate.hpp"

#include <algorithm>
#include <cmath>

#include "blr/model.hpp"
#include "core/error.hpp"

namespace cortiq::quant {

double TensorCost::cost(double bpw) const {
    CORTIQ_ASSERT(!b.empty() && b.size() == kl.size());
    auto ln = [](double v) { return std::log(std::max(v, 1e-12)); };
    if (bpw <= b.front()) return kl.front();
    for (size_t k = 1; k < b.size(); ++k)
        if (bpw <= b[k]) {
            const double u = (bpw - b[k - 1]) / (b[k] - b[k - 1]);
            return std::exp((1 - u) * ln(kl[k - 1]) + u * ln(kl[k]));
        }
    return kl.back();
}

double payload_bits(int64_t m, int64_t n, double bpw) {
    int64_t most = 0;
    for (int p : {1, 2})
        if (const int64_t r = blr::rank_for(m, n, bpw, p); r >= 1)
            most = std::max(most, blr::bits(m, n, r, p));
    // below one path's rank 1 the encoder still stores rank 1
    return static_cast<double>(most > 0 ? most : blr::bits(m, n, 1, 1));
}

double TensorCost::bits(double bpw) const {
    if (m <= 0 || n <= 0) return static_cast<double>(weights) * bpw;
    return payload_bits(m, n, bpw);
}

namespace {

// Tensor i's best budget at price λ (ties: the fewer bits), and whether kept.
std::pair<double, bool> best_at(const TensorCost& t, double lambda,
                                const std::vector<double>& grid) {
    double best_b = grid.front(), best = INFINITY;
    for (double b : grid) {
        const double v = t.cost(b) + lambda * t.bits(b);
        if (v < best) best = v, best_b = b;
    }
    if (t.may_keep && lambda * static_cast<double>(t.weights) * t.keep_bits < best)
        return {t.keep_bits, true};
    return {best_b, false};
}

Allocation at_price(const std::vector<TensorCost>& ts, double lambda,
                    const std::vector<double>& grid) {
    Allocation a;
    for (const auto& t : ts) {
        const auto [b, kept] = best_at(t, lambda, grid);
        a.bpw.push_back(b);
        a.kept.push_back(kept);
        a.bits += kept ? static_cast<double>(t.weights) * b : t.bits(b);
        a.predicted_kl += kept ? 0.0 : t.cost(b);
    }
    return a;
}

}  // namespace

Allocation allocate_bits(const std::vector<TensorCost>& tensors, double budget_bits,
                         const AllocationOptions& opt) {
    CORTIQ_CHECK(!tensors.empty(), "no tensor to allocate bits to");
    std::vector<double> grid;
    for (double b = opt.min_bpw; b <= opt.max_bpw + 1e-9; b += opt.step)
        grid.push_back(std::round(b * 1e6) / 1e6);
    double floor_bits = 0;
    for (const auto& t : tensors) floor_bits += t.bits(grid.front());
    CORTIQ_CHECK(floor_bits <= budget_bits,
                 "a budget of {:.0f} bits cannot hold these tensors even at {} bpw ({:.0f} bits)",
                 budget_bits, opt.min_bpw, floor_bits);
    // bits(λ) falls as λ grows: bisect on log λ for the smallest price that fits
    double lo = 1e-30, hi = 1.0;
    while (at_price(tensors, hi, grid).bits > budget_bits) hi *= 16;
    for (int it = 0; it < 200; ++it) {
        const double mid = std::sqrt(lo * hi);
        if (at_price(tensors, mid, grid).bits > budget_bits)
            lo = mid;
        else
            hi = mid;
        if (hi / lo < 1 + 1e-12) break;
    }
    Allocation a = at_price(tensors, hi, grid);
    // the price's steps leave bits unspent: give grid steps, one at a time, to
    // the tensor whose cost falls most per bit while they fit
    for (;;) {
        int best = -1;
        double gain = 0;
        for (size_t i = 0; i < tensors.size(); ++i) {
            if (a.kept[i] || a.bpw[i] + opt.step > opt.max_bpw + 1e-9) continue;
            const double extra = tensors[i].bits(a.bpw[i] + opt.step) - tensors[i].bits(a.bpw[i]);
            if (extra <= 0 || a.bits + extra > budget_bits) continue;
            const double g =
                (tensors[i].cost(a.bpw[i]) - tensors[i].cost(a.bpw[i] + opt.step)) / extra;
            if (g > gain) gain = g, best = static_cast<int>(i);
        }
        if (best < 0) break;
        const auto& t = tensors[static_cast<size_t>(best)];
        const double next = std::round((a.bpw[best] + opt.step) * 1e6) / 1e6;
        a.predicted_kl += t.cost(next) - t.cost(a.bpw[best]);
        a.bits += t.bits(next) - t.bits(a.bpw[best]);
        a.bpw[best] = next;
    }
    return a;
}

}  // namespace cortiq::quant
