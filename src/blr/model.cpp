#include "blr/model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "blr/layout.hpp"
#include "core/half.hpp"
#include "linalg/blas.hpp"

namespace cortiq::blr {

static_assert(std::endian::native == std::endian::little, "cortiq assumes a little-endian host");

MatD Model::hsl(size_t p) const {
    const Path& q = paths[p];
    MatD o(m, r);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < r; ++k) o(i, k) = q.h[i] * q.su(i, k) * q.l[k];
    return o;
}

MatD Model::gs(size_t p) const {
    const Path& q = paths[p];
    MatD o(n, r);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < r; ++k) o(j, k) = q.g[j] * q.sv(j, k);
    return o;
}

MatD Model::dense() const {
    MatD w(m, n);
    for (size_t p = 0; p < paths.size(); ++p)
        la::gemm_into(1.0, hsl(p), false, gs(p), true, 1.0, w);
    return w;
}

int64_t bits(int64_t m, int64_t n, int64_t r, int paths) {
    return static_cast<int64_t>(paths) * (r * (m + n) + 16 * (m + n + r));
}

int64_t rank_for(int64_t m, int64_t n, double bpw, int paths) {
    const double budget = bpw * static_cast<double>(m) * static_cast<double>(n);
    // bits is increasing in r: r ≤ (budget/P − 16(m+n)) / (m+n+16)
    const double rf =
        (budget / paths - 16.0 * static_cast<double>(m + n)) / static_cast<double>(m + n + 16);
    if (rf < 1) return 0;
    int64_t r = std::min<int64_t>(static_cast<int64_t>(rf), std::min(m, n));
    while (r > 0 && static_cast<double>(bits(m, n, r, paths)) > budget) --r;
    while (r < std::min(m, n) && static_cast<double>(bits(m, n, r + 1, paths)) <= budget) ++r;
    return r;
}

namespace {

double log_mean_abs(const VecD& v) {
    double s = 0;
    int64_t k = 0;
    for (double x : v)
        if (x != 0 && std::isfinite(x)) {
            s += std::log(std::abs(x));
            ++k;
        }
    return k ? s / static_cast<double>(k) : 0.0;
}

void put_u16(uint8_t* p, uint16_t v) {
    std::memcpy(p, &v, 2);
}
uint16_t get_u16(const uint8_t* p) {
    uint16_t v;
    std::memcpy(&v, p, 2);
    return v;
}
void put_u64(uint8_t* p, uint64_t v) {
    std::memcpy(p, &v, 8);
}
uint64_t get_u64(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}

}  // namespace

std::vector<uint8_t> pack(const Model& model, Model* stored) {
    const uint64_t m = model.m, n = model.n, r = model.r, np = model.paths.size();
    CORTIQ_ASSERT(np >= 1 && np <= 2 && r >= 1, "pack: {} paths, rank {}", np, r);
    std::vector<uint8_t> out(payload_bytes(m, n, r, np), 0);
    Header hd{kMagic,
              kVersion,
              static_cast<uint16_t>(np),
              static_cast<uint32_t>(m),
              static_cast<uint32_t>(n),
              static_cast<uint32_t>(r),
              static_cast<uint32_t>(words_for(r)),
              static_cast<uint32_t>(words_for(n)),
              0};
    std::memcpy(out.data(), &hd, sizeof hd);
    if (stored) *stored = model;
    for (uint64_t p = 0; p < np; ++p) {
        const Path& q = model.paths[p];
        CORTIQ_ASSERT(q.h.size() == m && q.l.size() == r && q.g.size() == n);
        CORTIQ_ASSERT(q.su.rows() == static_cast<int64_t>(m) &&
                      q.su.cols() == static_cast<int64_t>(r));
        CORTIQ_ASSERT(q.sv.rows() == static_cast<int64_t>(n) &&
                      q.sv.cols() == static_cast<int64_t>(r));
        // Gauge: scale h by a = e^{t−μh}, g by b = e^{t−μg}, ℓ by 1/(ab), with
        // t the mean of the three log-magnitudes, so all three centre on e^t.
        const double mh = log_mean_abs(q.h), ml = log_mean_abs(q.l), mg = log_mean_abs(q.g);
        const double t = (mh + ml + mg) / 3.0;
        const double a = std::exp(t - mh), b = std::exp(t - mg), c = 1.0 / (a * b);
        uint8_t* base = out.data() + sizeof(Header) + p * path_bytes(m, n, r);
        Path* sp = stored ? &stored->paths[p] : nullptr;
        auto put = [&](const VecD& v, double s, uint64_t off, VecD* dst) {
            for (size_t i = 0; i < v.size(); ++i) {
                const uint16_t hv = float_to_half(static_cast<float>(v[i] * s));
                CORTIQ_ASSERT(std::isfinite(half_to_float(hv)), "scale {} overflows f16", v[i] * s);
                put_u16(base + off + 2 * i, hv);
                if (dst) (*dst)[i] = half_to_float(hv);
            }
        };
        put(q.h, a, off_h(), sp ? &sp->h : nullptr);
        put(q.l, c, off_l(m), sp ? &sp->l : nullptr);
        put(q.g, b, off_g(m, r), sp ? &sp->g : nullptr);
        const uint64_t wu = words_for(r), wv = words_for(n);
        uint8_t* su = base + off_su(m, n, r);
        for (uint64_t i = 0; i < m; ++i)
            for (uint64_t w = 0; w < wu; ++w) {
                uint64_t bitsw = 0;
                for (uint64_t k = w * 64; k < std::min(r, w * 64 + 64); ++k)
                    if (q.su(i, k) < 0) bitsw |= uint64_t{1} << (k - w * 64);
                put_u64(su + 8 * (i * wu + w), bitsw);
            }
        uint8_t* svt = base + off_svt(m, n, r);
        for (uint64_t k = 0; k < r; ++k)
            for (uint64_t w = 0; w < wv; ++w) {
                uint64_t bitsw = 0;
                for (uint64_t j = w * 64; j < std::min(n, w * 64 + 64); ++j)
                    if (q.sv(j, k) < 0) bitsw |= uint64_t{1} << (j - w * 64);
                put_u64(svt + 8 * (k * wv + w), bitsw);
            }
    }
    return out;
}

void validate(std::span<const uint8_t> bytes, const std::string& what, int64_t expect_m,
              int64_t expect_n) {
    CORTIQ_CHECK(bytes.size() >= sizeof(Header), "{}: {} bytes, shorter than the 32-byte header",
                 what, bytes.size());
    Header hd;
    std::memcpy(&hd, bytes.data(), sizeof hd);
    CORTIQ_CHECK(hd.magic == kMagic, "{}: bad magic 0x{:08x} (not a BLR payload)", what, hd.magic);
    CORTIQ_CHECK(hd.version == kVersion, "{}: unsupported BLR version {} (this build reads {})",
                 what, hd.version, kVersion);
    CORTIQ_CHECK(hd.paths == 1 || hd.paths == 2, "{}: {} paths (must be 1 or 2)", what, hd.paths);
    CORTIQ_CHECK(hd.m >= 1 && hd.n >= 1 && hd.r >= 1, "{}: empty shape m={} n={} r={}", what, hd.m,
                 hd.n, hd.r);
    CORTIQ_CHECK(hd.r <= std::min(hd.m, hd.n), "{}: rank {} exceeds min(m={}, n={})", what, hd.r,
                 hd.m, hd.n);
    CORTIQ_CHECK(hd.words_u == words_for(hd.r) && hd.words_v == words_for(hd.n),
                 "{}: row word counts {}/{} do not match r={} n={}", what, hd.words_u, hd.words_v,
                 hd.r, hd.n);
    CORTIQ_CHECK(hd.reserved == 0, "{}: reserved header field is {} (must be 0)", what,
                 hd.reserved);
    if (expect_m >= 0)
        CORTIQ_CHECK(hd.m == expect_m && hd.n == expect_n, "{}: payload is {}x{}, expected {}x{}",
                     what, hd.m, hd.n, expect_m, expect_n);
    const uint64_t m = hd.m, n = hd.n, r = hd.r;
    const uint64_t want = payload_bytes(m, n, r, hd.paths);
    CORTIQ_CHECK(bytes.size() == want, "{}: {} bytes, a {}x{} rank-{} {}-path payload has {}", what,
                 bytes.size(), m, n, r, hd.paths, want);
    for (uint64_t p = 0; p < hd.paths; ++p) {
        const uint8_t* base = bytes.data() + sizeof(Header) + p * path_bytes(m, n, r);
        for (uint64_t i = 0; i < m + r + n; ++i) {
            const float v = half_to_float(get_u16(base + 2 * i));
            CORTIQ_CHECK(std::isfinite(v), "{}: path {} has a non-finite {} scale at index {}",
                         what, p,
                         i < m       ? "output (h)"
                         : i < m + r ? "latent (l)"
                                     : "input (g)",
                         i < m       ? i
                         : i < m + r ? i - m
                                     : i - m - r);
        }
        for (uint64_t b = 2 * (m + n + r); b < scales_bytes(m, n, r); ++b)
            CORTIQ_CHECK(base[b] == 0, "{}: path {} scale padding byte is non-zero", what, p);
        auto check_pad = [&](const uint8_t* rows, uint64_t nrows, uint64_t words, uint64_t used,
                             const char* name) {
            if (used % 64 == 0) return;
            const uint64_t mask = ~((uint64_t{1} << (used % 64)) - 1);
            for (uint64_t i = 0; i < nrows; ++i) {
                const uint64_t last = get_u64(rows + 8 * (i * words + words - 1));
                CORTIQ_CHECK((last & mask) == 0, "{}: path {} {} row {} has padding bits set", what,
                             p, name, i);
            }
        };
        check_pad(base + off_su(m, n, r), m, words_for(r), r, "S_U");
        check_pad(base + off_svt(m, n, r), r, words_for(n), n, "S_V");
    }
}

Info info(std::span<const uint8_t> bytes) {
    validate(bytes);
    Header hd;
    std::memcpy(&hd, bytes.data(), sizeof hd);
    return {hd.m, hd.n, hd.r, hd.paths};
}

Model unpack(std::span<const uint8_t> bytes) {
    const Info in = info(bytes);
    const uint64_t m = in.m, n = in.n, r = in.r;
    Model md;
    md.m = in.m;
    md.n = in.n;
    md.r = in.r;
    for (int p = 0; p < in.paths; ++p) {
        const uint8_t* base = bytes.data() + sizeof(Header) + p * path_bytes(m, n, r);
        Path q;
        q.h.resize(m);
        q.l.resize(r);
        q.g.resize(n);
        for (uint64_t i = 0; i < m; ++i) q.h[i] = half_to_float(get_u16(base + off_h() + 2 * i));
        for (uint64_t k = 0; k < r; ++k) q.l[k] = half_to_float(get_u16(base + off_l(m) + 2 * k));
        for (uint64_t j = 0; j < n; ++j)
            q.g[j] = half_to_float(get_u16(base + off_g(m, r) + 2 * j));
        q.su = MatD(in.m, in.r);
        q.sv = MatD(in.n, in.r);
        const uint64_t wu = words_for(r), wv = words_for(n);
        const uint8_t* su = base + off_su(m, n, r);
        for (uint64_t i = 0; i < m; ++i)
            for (uint64_t k = 0; k < r; ++k) {
                const uint64_t w = get_u64(su + 8 * (i * wu + k / 64));
                q.su(i, k) = (w >> (k % 64)) & 1 ? -1.0 : 1.0;
            }
        const uint8_t* svt = base + off_svt(m, n, r);
        for (uint64_t k = 0; k < r; ++k)
            for (uint64_t j = 0; j < n; ++j) {
                const uint64_t w = get_u64(svt + 8 * (k * wv + j / 64));
                q.sv(j, k) = (w >> (j % 64)) & 1 ? -1.0 : 1.0;
            }
        md.paths.push_back(std::move(q));
    }
    return md;
}

MatF dequant(std::span<const uint8_t> bytes) {
    return unpack(bytes).dense().cast<float>();
}

void write_scales(std::span<uint8_t> bytes, const Model& model) {
    const Info in = info(bytes);
    CORTIQ_CHECK(in.m == model.m && in.n == model.n && in.r == model.r &&
                     in.paths == static_cast<int>(model.paths.size()),
                 "write_scales: model shape does not match the payload");
    const uint64_t m = in.m, n = in.n, r = in.r;
    for (int p = 0; p < in.paths; ++p) {
        uint8_t* base = bytes.data() + sizeof(Header) + p * path_bytes(m, n, r);
        const Path& q = model.paths[p];
        for (uint64_t i = 0; i < m; ++i)
            put_u16(base + off_h() + 2 * i, float_to_half(static_cast<float>(q.h[i])));
        for (uint64_t k = 0; k < r; ++k)
            put_u16(base + off_l(m) + 2 * k, float_to_half(static_cast<float>(q.l[k])));
        for (uint64_t j = 0; j < n; ++j)
            put_u16(base + off_g(m, r) + 2 * j, float_to_half(static_cast<float>(q.g[j])));
    }
    validate(bytes);
}

}  // namespace cortiq::blr
