#include "blr/sign_planes.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>

namespace cortiq::blr {

Planes planes_of(const float* v, int64_t cols) {
    Planes p;
    p.cols = cols;
    const int64_t chunks = (cols + kPlaneChunk - 1) / kPlaneChunk;
    p.words.assign(static_cast<size_t>(chunks * kPlaneChunkWords), 0u);
    p.sigma.assign(static_cast<size_t>(chunks), 0.0f);
    p.sigma_sum_q.assign(static_cast<size_t>(chunks), 0.0f);
    p.sigma_sum_abs_q.assign(static_cast<size_t>(chunks), 0.0f);
    constexpr float kQMax = 32767.0f;
    for (int64_t c = 0; c < chunks; ++c) {
        const int64_t j0 = c * kPlaneChunk, j1 = std::min(cols, j0 + kPlaneChunk);
        float mx = 0.0f;
        bool finite = true;
        for (int64_t j = j0; j < j1; ++j) {
            finite = finite && std::isfinite(v[j]);
            mx = std::max(mx, std::fabs(v[j]));
        }
        if (!finite) {
            p.sigma[static_cast<size_t>(c)] = std::numeric_limits<float>::quiet_NaN();
            p.sigma_sum_q[static_cast<size_t>(c)] = std::numeric_limits<float>::quiet_NaN();
            p.sigma_sum_abs_q[static_cast<size_t>(c)] = std::numeric_limits<float>::quiet_NaN();
            continue;
        }
        if (!(mx > 0.0f)) continue;
        const float sigma = mx / kQMax, inv = kQMax / mx;
        int sum = 0, sum_abs = 0;
        uint32_t* w = p.words.data() + c * kPlaneChunkWords;
        for (int64_t j = j0; j < j1; ++j) {
            // the device's __float2int_rn: round half to even, of the float product
            const float prod = v[j] * inv;
            const int q = std::clamp(static_cast<int>(std::nearbyint(prod)), -32767, 32767);
            sum += q;
            sum_abs += std::abs(q);
            const auto bits = static_cast<uint32_t>(q);
            const int64_t k = j - j0;
            for (int b = 0; b < kPlanes; ++b)
                if ((bits >> b) & 1u) w[16 * b + k / 32] |= 1u << (k % 32);
        }
        p.sigma[static_cast<size_t>(c)] = sigma;
        p.sigma_sum_q[static_cast<size_t>(c)] = sigma * static_cast<float>(sum);
        p.sigma_sum_abs_q[static_cast<size_t>(c)] = sigma * static_cast<float>(sum_abs);
    }
    return p;
}

int32_t plane_value(const Planes& p, int64_t j) {
    const int64_t c = j / kPlaneChunk, k = j % kPlaneChunk;
    const uint32_t* w = p.words.data() + c * kPlaneChunkWords;
    int32_t q = 0;
    for (int b = 0; b < kPlanes; ++b)
        if ((w[16 * b + k / 32] >> (k % 32)) & 1u) q += b == kPlanes - 1 ? -(1 << b) : (1 << b);
    return q;
}

double plane_dot(const uint32_t* row, const Planes& p) {
    const int64_t chunks = static_cast<int64_t>(p.sigma.size());
    const int64_t row_words = (p.cols + 31) / 32;
    double total = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
        const uint32_t* w = p.words.data() + c * kPlaneChunkWords;
        int64_t x = 0;  // Σ_p w_p popc(b AND plane_p), exact
        for (int b = 0; b < kPlanes; ++b) {
            int64_t d = 0;
            for (int k = 0; k < 16; ++k) {
                const int64_t word = 16 * c + k;  // of the row
                if (word < row_words) d += std::popcount(row[word] & w[16 * b + k]);
            }
            x += (b == kPlanes - 1 ? -(int64_t{1} << b) : (int64_t{1} << b)) * d;
        }
        const auto cs = static_cast<size_t>(c);
        total += static_cast<double>(p.sigma_sum_q[cs]) -
                 2.0 * static_cast<double>(p.sigma[cs]) * static_cast<double>(x);
    }
    return total;
}

float wide_bound(float l_max, const Planes& x) {
    // the device's order: lane l sums chunks l, l + 32, … in order, then the
    // 32 lanes by a butterfly (lane ^ 16, 8, 4, 2, 1)
    float lane[32] = {};
    for (size_t c = 0; c < x.sigma_sum_abs_q.size(); ++c) lane[c % 32] += x.sigma_sum_abs_q[c];
    for (int o = 16; o > 0; o >>= 1) {
        float next[32];
        for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ o];
        std::copy(next, next + 32, lane);
    }
    return l_max * lane[0] * (1.0f + 1.0f / 4096.0f);
}

int32_t wide_q(float t, float bound) {
    const float inv = bound > 0.0f ? static_cast<float>(kWideQMax) / bound : 0.0f;  // NaN: 0
    const float prod = t * inv;
    if (std::isnan(prod)) return 0;  // the device's cvt of NaN
    const double r = std::nearbyint(static_cast<double>(prod));
    return static_cast<int32_t>(std::clamp<double>(r, -kWideQMax, kWideQMax));
}

}  // namespace cortiq::blr
