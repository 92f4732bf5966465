// The rtn-sign baseline's payload: Ŵ = diag(h) S diag(g), S ∈ {±1}^{m×n}.
//   header (32 bytes): magic "CTQS", version u16, zero u16, m, n u32,
//   words = ceil(n/64) u32, three reserved u32 (zero);
//   h: m × f16, g: n × f16, zero padding to 8 bytes;
//   S: m rows of `words` u64, bit j of row i set ⇔ S[i,j] = −1, padding bits zero.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::blr {

constexpr uint32_t kSignMagic = 0x53515443u;  // "CTQS"

int64_t sign_bits(int64_t m, int64_t n);  // 8 × payload bytes (ideal: m·n + 16(m + n))
// `s` holds ±1 (m × n); h, g are rounded to f16.
std::vector<uint8_t> pack_sign(const MatD& s, const VecD& h, const VecD& g);
void validate_sign(std::span<const uint8_t> bytes, const std::string& what = "sign payload",
                   int64_t expect_m = -1, int64_t expect_n = -1);
MatF dequant_sign(std::span<const uint8_t> bytes);

// Either payload kind, told apart by the magic.
bool is_sign_payload(std::span<const uint8_t> bytes);
void validate_any(std::span<const uint8_t> bytes, const std::string& what, int64_t expect_m = -1,
                  int64_t expect_n = -1);
MatF dequant_any(std::span<const uint8_t> bytes);
// m, n and the stored bits of either kind (after validation).
struct PayloadShape {
    int64_t m, n, bits, rank;
    int paths;  // 0 for a sign payload
};
PayloadShape payload_shape(std::span<const uint8_t> bytes, const std::string& what);

}  // namespace cortiq::blr
