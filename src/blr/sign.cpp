#include "blr/sign.hpp"

#include <cmath>
#include <cstring>

#include "blr/gauge.hpp"
#include "blr/layout.hpp"
#include "blr/model.hpp"
#include "core/error.hpp"
#include "core/half.hpp"

namespace cortiq::blr {

namespace {

struct SignHeader {
    uint32_t magic;
    uint16_t version, zero;
    uint32_t m, n, words;
    uint32_t reserved[3];
};
static_assert(sizeof(SignHeader) == 32, "sign header must be 32 bytes");

uint64_t sign_payload_bytes(uint64_t m, uint64_t n) {
    return sizeof(SignHeader) + pad8(2 * (m + n)) + 8 * m * words_for(n);
}

}  // namespace

int64_t sign_bits(int64_t m, int64_t n) {
    return 8 * static_cast<int64_t>(sign_payload_bytes(m, n));
}

std::vector<uint8_t> pack_sign(const MatD& s, const VecD& h, const VecD& g) {
    const uint64_t m = s.rows(), n = s.cols(), words = words_for(n);
    CORTIQ_ASSERT(h.size() == m && g.size() == n);
    std::vector<uint8_t> out(sign_payload_bytes(m, n), 0);
    SignHeader hd{kSignMagic,
                  1,
                  0,
                  static_cast<uint32_t>(m),
                  static_cast<uint32_t>(n),
                  static_cast<uint32_t>(words),
                  {0, 0, 0}};
    std::memcpy(out.data(), &hd, sizeof hd);
    uint8_t* p = out.data() + sizeof hd;
    const double a = f16_balance(h, g);  // 1 unless h or g would leave f16's range
    auto put = [&](double x, uint64_t at) {
        const uint16_t v = float_to_half(static_cast<float>(x));
        CORTIQ_ASSERT(std::isfinite(half_to_float(v)) && (x == 0 || half_to_float(v) != 0),
                      "sign scale {} does not fit f16", x);
        std::memcpy(p + 2 * at, &v, 2);
    };
    for (uint64_t i = 0; i < m; ++i) put(h[i] * a, i);
    for (uint64_t j = 0; j < n; ++j) put(g[j] / a, m + j);
    uint8_t* bits = p + pad8(2 * (m + n));
    for (uint64_t i = 0; i < m; ++i)
        for (uint64_t w = 0; w < words; ++w) {
            uint64_t b = 0;
            for (uint64_t j = w * 64; j < std::min(n, w * 64 + 64); ++j)
                if (s(i, j) < 0) b |= uint64_t{1} << (j - w * 64);
            std::memcpy(bits + 8 * (i * words + w), &b, 8);
        }
    return out;
}

void validate_sign(std::span<const uint8_t> bytes, const std::string& what, int64_t expect_m,
                   int64_t expect_n) {
    CORTIQ_CHECK(bytes.size() >= sizeof(SignHeader), "{}: {} bytes, shorter than the header", what,
                 bytes.size());
    SignHeader hd;
    std::memcpy(&hd, bytes.data(), sizeof hd);
    CORTIQ_CHECK(hd.magic == kSignMagic, "{}: bad magic (not a sign payload)", what);
    CORTIQ_CHECK(hd.version == 1 && hd.zero == 0, "{}: unsupported sign payload version {}", what,
                 hd.version);
    CORTIQ_CHECK(hd.m >= 1 && hd.n >= 1 && hd.words == words_for(hd.n) && hd.reserved[0] == 0 &&
                     hd.reserved[1] == 0 && hd.reserved[2] == 0,
                 "{}: malformed sign payload header", what);
    if (expect_m >= 0)
        CORTIQ_CHECK(hd.m == expect_m && hd.n == expect_n, "{}: payload is {}x{}, expected {}x{}",
                     what, hd.m, hd.n, expect_m, expect_n);
    CORTIQ_CHECK(bytes.size() == sign_payload_bytes(hd.m, hd.n), "{}: {} bytes, expected {}", what,
                 bytes.size(), sign_payload_bytes(hd.m, hd.n));
    const uint8_t* p = bytes.data() + sizeof hd;
    for (uint64_t i = 0; i < uint64_t{hd.m} + hd.n; ++i) {
        uint16_t v;
        std::memcpy(&v, p + 2 * i, 2);
        CORTIQ_CHECK(std::isfinite(half_to_float(v)), "{}: non-finite scale at {}", what, i);
    }
    if (hd.n % 64) {
        const uint8_t* bits = p + pad8(2 * (uint64_t{hd.m} + hd.n));
        const uint64_t mask = ~((uint64_t{1} << (hd.n % 64)) - 1);
        for (uint64_t i = 0; i < hd.m; ++i) {
            uint64_t b;
            std::memcpy(&b, bits + 8 * (i * hd.words + hd.words - 1), 8);
            CORTIQ_CHECK((b & mask) == 0, "{}: row {} has padding bits set", what, i);
        }
    }
}

MatF dequant_sign(std::span<const uint8_t> bytes) {
    validate_sign(bytes);
    SignHeader hd;
    std::memcpy(&hd, bytes.data(), sizeof hd);
    const uint64_t m = hd.m, n = hd.n;
    const uint8_t* p = bytes.data() + sizeof hd;
    const uint8_t* bits = p + pad8(2 * (m + n));
    MatF w(static_cast<int64_t>(m), static_cast<int64_t>(n));
    for (uint64_t i = 0; i < m; ++i) {
        uint16_t hv;
        std::memcpy(&hv, p + 2 * i, 2);
        const float h = half_to_float(hv);
        for (uint64_t j = 0; j < n; ++j) {
            uint16_t gv;
            std::memcpy(&gv, p + 2 * (m + j), 2);
            uint64_t b;
            std::memcpy(&b, bits + 8 * (i * hd.words + j / 64), 8);
            w(i, j) = ((b >> (j % 64)) & 1 ? -1.0f : 1.0f) * h * half_to_float(gv);
        }
    }
    return w;
}

bool is_sign_payload(std::span<const uint8_t> bytes) {
    uint32_t magic = 0;
    if (bytes.size() >= 4) std::memcpy(&magic, bytes.data(), 4);
    return magic == kSignMagic;
}

void validate_any(std::span<const uint8_t> bytes, const std::string& what, int64_t expect_m,
                  int64_t expect_n) {
    if (is_sign_payload(bytes))
        validate_sign(bytes, what, expect_m, expect_n);
    else
        validate(bytes, what, expect_m, expect_n);
}

MatF dequant_any(std::span<const uint8_t> bytes) {
    return is_sign_payload(bytes) ? dequant_sign(bytes) : dequant(bytes);
}

PayloadShape payload_shape(std::span<const uint8_t> bytes, const std::string& what) {
    validate_any(bytes, what);
    if (is_sign_payload(bytes)) {
        SignHeader hd;
        std::memcpy(&hd, bytes.data(), sizeof hd);
        return {hd.m, hd.n, sign_bits(hd.m, hd.n), 0, 0};
    }
    const Info in = info(bytes);
    return {in.m, in.n, 8 * static_cast<int64_t>(bytes.size()), in.r, in.paths};
}

}  // namespace cortiq::blr
