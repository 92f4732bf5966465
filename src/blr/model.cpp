#include "blr/model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>

#include "blr/gauge.hpp"
#include "blr/layout.hpp"
#include "core/half.hpp"
#include "linalg/blas.hpp"

namespace cortiq::blr {

static_assert(std::endian::native == std::endian::little, "cortiq assumes a little-endian host");

MatD Factors::left(size_t p) const {
    const Path& q = paths[p];
    MatD o(m, r);
    for (int64_t i = 0; i < m; ++i)
        for (int64_t k = 0; k < r; ++k) o(i, k) = q.h[i] * q.su(i, k) * q.l[k];
    return o;
}

MatD Factors::right(size_t p) const {
    const Path& q = paths[p];
    MatD o(n, r);
    for (int64_t j = 0; j < n; ++j)
        for (int64_t k = 0; k < r; ++k) o(j, k) = q.g[j] * q.sv(j, k);
    return o;
}

MatD Factors::dense() const {
    MatD w(m, n);
    for (size_t p = 0; p < paths.size(); ++p)
        la::gemm_into(1.0, left(p), false, right(p), true, 1.0, w);
    return w;
}

int64_t bits(int64_t m, int64_t n, int64_t r, int paths) {
    return 8 * static_cast<int64_t>(payload_bytes(m, n, r, paths));
}

int64_t ideal_bits(int64_t m, int64_t n, int64_t r, int paths) {
    return static_cast<int64_t>(paths) * (r * (m + n) + 16 * (m + n + r));
}

int64_t rank_for(int64_t m, int64_t n, double bpw, int paths) {
    const double budget = bpw * static_cast<double>(m) * static_cast<double>(n);
    // bits is increasing in r; the ideal count is below it, so start from the
    // ideal rank r ≤ (budget/P − 16(m+n)) / (m+n+16) and step down to the
    // stored bytes.
    const double rf =
        (budget / paths - 16.0 * static_cast<double>(m + n)) / static_cast<double>(m + n + 16);
    if (rf < 1) return 0;
    int64_t r = std::min<int64_t>(static_cast<int64_t>(rf), std::min(m, n));
    while (r > 0 && static_cast<double>(bits(m, n, r, paths)) > budget) --r;
    while (r < std::min(m, n) && static_cast<double>(bits(m, n, r + 1, paths)) <= budget) ++r;
    return r;
}

namespace {

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

namespace {

bool get_bit(const uint8_t* stream, uint64_t b) {
    return (stream[b / 8] >> (b % 8)) & 1;
}
void set_bit(uint8_t* stream, uint64_t b) {
    stream[b / 8] |= static_cast<uint8_t>(1u << (b % 8));
}

// Where path p's scales and sign bits lie in a validated payload of either
// version.
struct PayloadView {
    const uint8_t* data;
    uint64_t m, n, r, paths;
    int version;

    static PayloadView of(std::span<const uint8_t> bytes) {
        Header hd;
        std::memcpy(&hd, bytes.data(), sizeof hd);
        return {bytes.data(), hd.m, hd.n, hd.r, hd.paths, hd.version};
    }
    uint64_t scales_off(uint64_t p) const {
        return version == 1 ? 32 + p * v1::path_bytes(m, n, r) : off_scales(m, n, r, p);
    }
    float scale(uint64_t p, uint64_t off_in_path) const {
        return half_to_float(get_u16(data + scales_off(p) + off_in_path));
    }
    // true ⇔ the entry is −1
    bool su(uint64_t p, uint64_t i, uint64_t k) const {
        if (version == 1) {
            const uint8_t* rows = data + 32 + p * v1::path_bytes(m, n, r) + v1::off_su(m, n, r);
            return (get_u64(rows + 8 * (i * words_for(r) + k / 64)) >> (k % 64)) & 1;
        }
        return get_bit(data + off_signs(m, n, r, paths), bit_sut(m, n, r, p) + k * m + i);
    }
    bool sv(uint64_t p, uint64_t j, uint64_t k) const {
        if (version == 1) {
            const uint8_t* rows = data + 32 + p * v1::path_bytes(m, n, r) + v1::off_svt(m, n, r);
            return (get_u64(rows + 8 * (k * words_for(n) + j / 64)) >> (j % 64)) & 1;
        }
        return get_bit(data + off_signs(m, n, r, paths), bit_svt(m, n, r, p) + k * n + j);
    }
};

}  // namespace

std::vector<uint8_t> pack_scales(const Factors& model, Factors* stored) {
    const uint64_t m = model.m, n = model.n, r = model.r, np = model.paths.size();
    CORTIQ_ASSERT(np >= 1 && np <= 2 && r >= 1, "pack: {} paths, rank {}", np, r);
    std::vector<uint8_t> out(payload_bytes(m, n, r, np), 0);
    Header hd{kMagic,
              kVersion,
              static_cast<uint16_t>(np),
              static_cast<uint32_t>(m),
              static_cast<uint32_t>(n),
              static_cast<uint32_t>(r),
              0,
              0,
              0};
    std::memcpy(out.data(), &hd, sizeof hd);
    if (stored) *stored = model;
    for (uint64_t p = 0; p < np; ++p) {
        const Path& q = model.paths[p];
        CORTIQ_ASSERT(q.h.size() == m && q.l.size() == r && q.g.size() == n);
        // Gauge: the three vectors centred on one magnitude, moved where
        // needed so that every scale fits f16 (blr/gauge.hpp).
        const Gauge gauge = f16_gauge(q.h, q.l, q.g);
        const double a = gauge.a, b = gauge.b, c = 1.0 / (a * b);
        uint8_t* base = out.data() + off_scales(m, n, r, p);
        Path* sp = stored ? &stored->paths[p] : nullptr;
        auto put = [&](const VecD& v, double s, uint64_t off, VecD* dst) {
            for (size_t i = 0; i < v.size(); ++i) {
                const uint16_t hv = float_to_half(static_cast<float>(v[i] * s));
                CORTIQ_ASSERT(std::isfinite(half_to_float(hv)), "scale {} overflows f16", v[i] * s);
                CORTIQ_ASSERT(v[i] == 0 || half_to_float(hv) != 0, "scale {} underflows f16",
                              v[i] * s);
                put_u16(base + off + 2 * i, hv);
                if (dst) (*dst)[i] = half_to_float(hv);
            }
        };
        put(q.h, a, off_h(), sp ? &sp->h : nullptr);
        put(q.l, c, off_l(m), sp ? &sp->l : nullptr);
        put(q.g, b, off_g(m, r), sp ? &sp->g : nullptr);
    }
    return out;
}

std::vector<uint8_t> pack(const Factors& model, Factors* stored) {
    const uint64_t m = model.m, n = model.n, r = model.r, np = model.paths.size();
    std::vector<uint8_t> out = pack_scales(model, stored);
    uint8_t* stream = out.data() + off_signs(m, n, r, np);
    for (uint64_t p = 0; p < np; ++p) {
        const Path& q = model.paths[p];
        CORTIQ_ASSERT(q.su.rows() == static_cast<int64_t>(m) &&
                      q.su.cols() == static_cast<int64_t>(r));
        CORTIQ_ASSERT(q.sv.rows() == static_cast<int64_t>(n) &&
                      q.sv.cols() == static_cast<int64_t>(r));
        write_signs(q, m, n, r, p, stream);
    }
    return out;
}

namespace {

// The sign matrices are read row by row (in memory order) and their bits
// set across the stream's rows: the stream (r (m + n) bits) stays in cache,
// while reading the matrices by column missed it at every entry. su is
// m × r and sv n × r, row-major, float64 (an encoder's factors) or float32
// (tuning's layers).
template <class T>
void write_sign_bits(const T* su, const T* sv, uint64_t m, uint64_t n, uint64_t r, uint64_t p,
                     uint8_t* stream) {
    const uint64_t first_v = bit_svt(m, n, r, p), first_u = bit_sut(m, n, r, p);
    for (uint64_t j = 0; j < n; ++j)
        for (uint64_t k = 0; k < r; ++k)
            if (sv[j * r + k] < 0) set_bit(stream, first_v + k * n + j);
    for (uint64_t i = 0; i < m; ++i)
        for (uint64_t k = 0; k < r; ++k)
            if (su[i * r + k] < 0) set_bit(stream, first_u + k * m + i);
}

}  // namespace

void write_signs(const Path& q, uint64_t m, uint64_t n, uint64_t r, uint64_t p, uint8_t* stream) {
    CORTIQ_ASSERT(q.su.cols() == static_cast<int64_t>(r) && q.sv.cols() == static_cast<int64_t>(r),
                  "sign matrices of {} and {} columns for rank {}", q.su.cols(), q.sv.cols(), r);
    write_sign_bits(q.su.data(), q.sv.data(), m, n, r, p, stream);
}

void write_signs(const float* su, const float* sv, uint64_t m, uint64_t n, uint64_t r, uint64_t p,
                 uint8_t* stream) {
    write_sign_bits(su, sv, m, n, r, p, stream);
}

namespace {

void check_header(const Header& hd, size_t size, const std::string& what) {
    CORTIQ_CHECK(hd.magic == kMagic, "{}: bad magic 0x{:08x} (not a BLR payload)", what, hd.magic);
    CORTIQ_CHECK(hd.version == kVersion || hd.version == kVersion1,
                 "{}: unsupported BLR version {} (this build reads 1 and 2)", what, hd.version);
    CORTIQ_CHECK(hd.paths == 1 || hd.paths == 2, "{}: {} paths (must be 1 or 2)", what, hd.paths);
    CORTIQ_CHECK(hd.m >= 1 && hd.n >= 1 && hd.r >= 1, "{}: empty shape m={} n={} r={}", what, hd.m,
                 hd.n, hd.r);
    CORTIQ_CHECK(hd.r <= std::min(hd.m, hd.n), "{}: rank {} exceeds min(m={}, n={})", what, hd.r,
                 hd.m, hd.n);
    if (hd.version == kVersion1)
        CORTIQ_CHECK(hd.words_u == words_for(hd.r) && hd.words_v == words_for(hd.n),
                     "{}: row word counts {}/{} do not match r={} n={}", what, hd.words_u,
                     hd.words_v, hd.r, hd.n);
    else
        CORTIQ_CHECK(hd.words_u == 0 && hd.words_v == 0,
                     "{}: version 2 row word fields are {}/{} (must be 0)", what, hd.words_u,
                     hd.words_v);
    CORTIQ_CHECK(hd.reserved == 0, "{}: reserved header field is {} (must be 0)", what,
                 hd.reserved);
    const uint64_t m = hd.m, n = hd.n, r = hd.r;
    const uint64_t want = hd.version == kVersion1 ? v1::payload_bytes(m, n, r, hd.paths)
                                                  : payload_bytes(m, n, r, hd.paths);
    CORTIQ_CHECK(size == want, "{}: {} bytes, a {}x{} rank-{} {}-path version-{} payload has {}",
                 what, size, m, n, r, hd.paths, hd.version, want);
}

void check_scales(const PayloadView& v, uint64_t p, const std::string& what) {
    const uint64_t m = v.m, n = v.n, r = v.r;
    for (uint64_t i = 0; i < m + r + n; ++i) {
        const float x = v.scale(p, 2 * i);
        CORTIQ_CHECK(std::isfinite(x), "{}: path {} has a non-finite {} scale at index {}", what, p,
                     i < m       ? "output (h)"
                     : i < m + r ? "latent (l)"
                                 : "input (g)",
                     i < m       ? i
                     : i < m + r ? i - m
                                 : i - m - r);
    }
}

// Padding must be zero so that a payload has one byte form.
void check_padding(const PayloadView& v, size_t size, const std::string& what) {
    const uint64_t m = v.m, n = v.n, r = v.r;
    if (v.version == kVersion1) {
        for (uint64_t p = 0; p < v.paths; ++p) {
            const uint8_t* base = v.data + v.scales_off(p);
            for (uint64_t b = 2 * (m + n + r); b < v1::scales_bytes(m, n, r); ++b)
                CORTIQ_CHECK(base[b] == 0, "{}: path {} scale padding byte is non-zero", what, p);
            auto check_rows = [&](const uint8_t* rows, uint64_t nrows, uint64_t used,
                                  const char* name) {
                if (used % 64 == 0) return;
                const uint64_t words = words_for(used), mask = ~((uint64_t{1} << (used % 64)) - 1);
                for (uint64_t i = 0; i < nrows; ++i)
                    CORTIQ_CHECK((get_u64(rows + 8 * (i * words + words - 1)) & mask) == 0,
                                 "{}: path {} {} row {} has padding bits set", what, p, name, i);
            };
            check_rows(base + v1::off_su(m, n, r), m, r, "S_U");
            check_rows(base + v1::off_svt(m, n, r), r, n, "S_V");
        }
        return;
    }
    for (uint64_t b = 32 + 2 * v.paths * (m + n + r); b < off_signs(m, n, r, v.paths); ++b)
        CORTIQ_CHECK(v.data[b] == 0, "{}: scale padding byte {} is non-zero", what, b);
    const uint8_t* stream = v.data + off_signs(m, n, r, v.paths);
    const uint64_t used = sign_bits_total(m, n, r, v.paths);
    const uint64_t stream_bytes = size - off_signs(m, n, r, v.paths);
    for (uint64_t b = used; b < 8 * stream_bytes; ++b)
        CORTIQ_CHECK(!get_bit(stream, b), "{}: sign stream padding bits set (bit {})", what, b);
}

}  // namespace

void validate(std::span<const uint8_t> bytes, const std::string& what, int64_t expect_m,
              int64_t expect_n) {
    CORTIQ_CHECK(bytes.size() >= sizeof(Header), "{}: {} bytes, shorter than the 32-byte header",
                 what, bytes.size());
    Header hd;
    std::memcpy(&hd, bytes.data(), sizeof hd);
    check_header(hd, bytes.size(), what);
    if (expect_m >= 0)
        CORTIQ_CHECK(hd.m == expect_m && hd.n == expect_n, "{}: payload is {}x{}, expected {}x{}",
                     what, hd.m, hd.n, expect_m, expect_n);
    const PayloadView v = PayloadView::of(bytes);
    for (uint64_t p = 0; p < hd.paths; ++p) check_scales(v, p, what);
    check_padding(v, bytes.size(), what);
}

Info info(std::span<const uint8_t> bytes) {
    validate(bytes);
    Header hd;
    std::memcpy(&hd, bytes.data(), sizeof hd);
    return {hd.m, hd.n, hd.r, hd.paths, hd.version};
}

Factors unpack(std::span<const uint8_t> bytes) {
    const Info in = info(bytes);
    const PayloadView v = PayloadView::of(bytes);
    const uint64_t m = in.m, n = in.n, r = in.r;
    Factors md;
    md.m = in.m;
    md.n = in.n;
    md.r = in.r;
    for (uint64_t p = 0; p < v.paths; ++p) {
        Path q;
        q.h.resize(m);
        q.l.resize(r);
        q.g.resize(n);
        for (uint64_t i = 0; i < m; ++i) q.h[i] = v.scale(p, off_h() + 2 * i);
        for (uint64_t k = 0; k < r; ++k) q.l[k] = v.scale(p, off_l(m) + 2 * k);
        for (uint64_t j = 0; j < n; ++j) q.g[j] = v.scale(p, off_g(m, r) + 2 * j);
        q.su = MatD(in.m, in.r);
        q.sv = MatD(in.n, in.r);
        for (uint64_t i = 0; i < m; ++i)
            for (uint64_t k = 0; k < r; ++k) q.su(i, k) = v.su(p, i, k) ? -1.0 : 1.0;
        for (uint64_t j = 0; j < n; ++j)  // row by row: the matrix is read in order
            for (uint64_t k = 0; k < r; ++k) q.sv(j, k) = v.sv(p, j, k) ? -1.0 : 1.0;
        md.paths.push_back(std::move(q));
    }
    return md;
}

MatF dequant(std::span<const uint8_t> bytes) {
    return unpack(bytes).dense().cast<float>();
}

void write_scales(std::span<uint8_t> bytes, const Factors& model) {
    const Info in = info(bytes);
    CORTIQ_CHECK(in.m == model.m && in.n == model.n && in.r == model.r &&
                     in.paths == static_cast<int>(model.paths.size()),
                 "write_scales: model shape does not match the payload");
    const PayloadView v = PayloadView::of(bytes);
    const uint64_t m = in.m, r = in.r;
    for (uint64_t p = 0; p < v.paths; ++p) {
        uint8_t* base = bytes.data() + v.scales_off(p);
        const Path& q = model.paths[p];
        for (uint64_t i = 0; i < m; ++i)
            put_u16(base + off_h() + 2 * i, float_to_half(static_cast<float>(q.h[i])));
        for (uint64_t k = 0; k < r; ++k)
            put_u16(base + off_l(m) + 2 * k, float_to_half(static_cast<float>(q.l[k])));
        for (uint64_t j = 0; j < q.g.size(); ++j)
            put_u16(base + off_g(m, r) + 2 * j, float_to_half(static_cast<float>(q.g[j])));
    }
    validate(bytes);
}

}  // namespace cortiq::blr
