#include "blr/gauge.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/error.hpp"

namespace cortiq::blr {

namespace {

// log |x| over the non-zero entries: the mean, the smallest and the largest.
struct LogRange {
    double mean = 0, lo = 0, hi = 0;
    bool any = false;
};

LogRange log_range(const VecD& v, const char* name) {
    LogRange r;
    double s = 0;
    int64_t k = 0;
    r.lo = std::numeric_limits<double>::infinity();
    r.hi = -r.lo;
    for (double x : v) {
        CORTIQ_ASSERT(std::isfinite(x), "pack: a non-finite {} scale ({})", name, x);
        if (x == 0) continue;
        const double lx = std::log(std::abs(x));
        s += lx;
        r.lo = std::min(r.lo, lx);
        r.hi = std::max(r.hi, lx);
        ++k;
    }
    r.any = k > 0;
    r.mean = k ? s / static_cast<double>(k) : 0.0;
    if (!r.any) r.lo = r.hi = 0;
    return r;
}

}  // namespace

Gauge f16_gauge(const VecD& h, const VecD& l, const VecD& g) {
    const LogRange rh = log_range(h, "output (h)"), rl = log_range(l, "latent (l)"),
                   rg = log_range(g, "input (g)");
    // Gauge: scale h by a = e^{t−μh}, g by b = e^{t−μg}, ℓ by 1/(ab), with
    // t the mean of the three log-magnitudes, so all three centre on e^t.
    const double t = (rh.mean + rl.mean + rg.mean) / 3.0;
    const double x0 = t - rh.mean, y0 = t - rg.mean;  // log a, log b

    // Largest stored magnitude: below f16's 65504 with room for rounding.
    const double kMax = std::log(65000.0);
    const double kInf = std::numeric_limits<double>::infinity();
    for (const double min_stored : {0x1p-14, 0x1p-23}) {  // normal, then subnormal f16
        const double kMin = std::log(min_stored);
        // log a ∈ [Lh, Uh], log b ∈ [Lg, Ug], −(log a + log b) ∈ [Ll, Ul]
        auto lo_of = [&](const LogRange& r) { return r.any ? kMin - r.lo : -kInf; };
        auto hi_of = [&](const LogRange& r) { return r.any ? kMax - r.hi : kInf; };
        const double Lh = lo_of(rh), Uh = hi_of(rh), Lg = lo_of(rg), Ug = hi_of(rg);
        const double Ll = lo_of(rl), Ul = hi_of(rl);
        const double smin = std::max(Lh + Lg, -Ul), smax = std::min(Uh + Ug, -Ll);
        if (Lh > Uh || Lg > Ug || Ll > Ul || smin > smax) continue;
        // The nearest feasible point to (x0, y0): clamp the sum, then split it.
        const double s = std::clamp(x0 + y0, smin, smax);
        const double xlo = std::max(Lh, s - Ug), xhi = std::min(Uh, s - Lg);
        const double x = std::clamp(x0 + (s - x0 - y0) / 2, xlo, xhi);
        return {std::exp(x), std::exp(s - x)};
    }
    CORTIQ_FAIL(
        "BLR scales span too wide a range for f16: output scales |h| from {:.3g} to {:.3g}, "
        "latent |l| from {:.3g} to {:.3g}, input |g| from {:.3g} to {:.3g} (a weight with a "
        "dynamic range of about 1e{:.0f} between rows or columns cannot be stored at this "
        "precision; keep this tensor uncompressed with --plan)",
        std::exp(rh.lo), std::exp(rh.hi), std::exp(rl.lo), std::exp(rl.hi), std::exp(rg.lo),
        std::exp(rg.hi), std::max({rh.hi - rh.lo, rl.hi - rl.lo, rg.hi - rg.lo}) / std::log(10.0));
}

double f16_balance(const VecD& h, const VecD& g) {
    const LogRange rh = log_range(h, "output (h)"), rg = log_range(g, "input (g)");
    const double kMax = std::log(65000.0), kInf = std::numeric_limits<double>::infinity();
    for (const double min_stored : {0x1p-14, 0x1p-23}) {
        const double kMin = std::log(min_stored);
        // log a ∈ [Lh, Uh] (for h) and −log a ∈ [Lg, Ug] (for g)
        const double lo = std::max(rh.any ? kMin - rh.lo : -kInf, rg.any ? rg.hi - kMax : -kInf);
        const double hi = std::min(rh.any ? kMax - rh.hi : kInf, rg.any ? rg.lo - kMin : kInf);
        if (lo <= hi) return std::exp(std::clamp(0.0, lo, hi));
    }
    CORTIQ_FAIL(
        "sign payload scales span too wide a range for f16: output scales |h| from {:.3g} to "
        "{:.3g}, input |g| from {:.3g} to {:.3g}; keep this tensor uncompressed with --plan",
        std::exp(rh.lo), std::exp(rh.hi), std::exp(rg.lo), std::exp(rg.hi));
}

}  // namespace cortiq::blr
