// The BLR payload layout (SPEC §4), described once for host and device code.
//
// Version 2 (written by this build):
//   header (32 bytes, little-endian; words_u = words_v = reserved = 0)
//   scales, per path p = 0..P-1: h (m × f16), ℓ (r × f16), g (n × f16);
//     zero padding to a multiple of 8 bytes
//   signs: one bit stream, per path p: S_Vᵀ as r rows of n bits, then S_Uᵀ
//     as r rows of m bits, rows back to back with no padding between them;
//     bit b of the stream is bit b % 64 of u64 word b / 64; a set bit means −1:
//       S_V[j,k] of path p ↔ bit p·r·(m+n) + k·n + j
//       S_U[i,k] of path p ↔ bit p·r·(m+n) + r·n + k·m + i
//     zero padding bits to a multiple of 64.
//   So the only padding is the header and at most 7 + 7 bytes: the stored
//   bits are the ideal P·(r·(m+n) + 16·(m+n+r)) plus at most 368.
//
// Version 1 (still read): per path: h, ℓ, g (f16), zero padding to 8 bytes,
//   S_U as m rows of words_u = ceil(r/64) u64 words (bit k of row i ⇔
//   S_U[i,k] = −1), S_Vᵀ as r rows of words_v = ceil(n/64) words. Padding bits
//   are zero. At small ranks the row padding of S_U cost up to 80 % extra.
#pragma once

#include <cstdint>

namespace cortiq::blr {

constexpr uint32_t kMagic = 0x42515443u;  // "CTQB" read as little-endian u32
constexpr uint16_t kVersion = 2;          // written
constexpr uint16_t kVersion1 = 1;         // read

struct Header {
    uint32_t magic;
    uint16_t version;
    uint16_t paths;
    uint32_t m, n, r;
    uint32_t words_u;   // v1: u64 words per S_U row; v2: 0
    uint32_t words_v;   // v1: u64 words per S_Vᵀ row; v2: 0
    uint32_t reserved;  // zero
};
static_assert(sizeof(Header) == 32, "BLR header must be 32 bytes");

constexpr uint64_t words_for(uint64_t bits) {
    return (bits + 63) / 64;
}
constexpr uint64_t pad8(uint64_t bytes) {
    return (bytes + 7) & ~uint64_t{7};
}

// ---- version 2 ----
constexpr uint64_t scales_bytes(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return pad8(2 * p * (m + n + r));
}
constexpr uint64_t sign_bits_total(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return p * r * (m + n);
}
constexpr uint64_t payload_bytes(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return 32 + scales_bytes(m, n, r, p) + 8 * words_for(sign_bits_total(m, n, r, p));
}
// Byte offset of path p's scales (h at +0, ℓ at +2m, g at +2(m + r)).
constexpr uint64_t off_scales(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return 32 + 2 * p * (m + n + r);
}
constexpr uint64_t off_h() {
    return 0;
}
constexpr uint64_t off_l(uint64_t m) {
    return 2 * m;
}
constexpr uint64_t off_g(uint64_t m, uint64_t r) {
    return 2 * (m + r);
}
// Byte offset of the sign bit stream.
constexpr uint64_t off_signs(uint64_t m, uint64_t n, uint64_t r, uint64_t p_total) {
    return 32 + scales_bytes(m, n, r, p_total);
}
// Bit offsets inside the stream of path p's S_Vᵀ and S_Uᵀ.
constexpr uint64_t bit_svt(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return p * r * (m + n);
}
constexpr uint64_t bit_sut(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return p * r * (m + n) + r * n;
}
static_assert(payload_bytes(1, 1, 1, 1) == 32 + 8 + 8, "layout arithmetic");

// ---- version 1 (read only) ----
namespace v1 {
constexpr uint64_t scales_bytes(uint64_t m, uint64_t n, uint64_t r) {
    return pad8(2 * (m + n + r));
}
constexpr uint64_t signs_bytes(uint64_t m, uint64_t n, uint64_t r) {
    return 8 * (m * words_for(r) + r * words_for(n));
}
constexpr uint64_t path_bytes(uint64_t m, uint64_t n, uint64_t r) {
    return scales_bytes(m, n, r) + signs_bytes(m, n, r);
}
constexpr uint64_t payload_bytes(uint64_t m, uint64_t n, uint64_t r, uint64_t p) {
    return 32 + p * path_bytes(m, n, r);
}
constexpr uint64_t off_su(uint64_t m, uint64_t n, uint64_t r) {
    return scales_bytes(m, n, r);
}
constexpr uint64_t off_svt(uint64_t m, uint64_t n, uint64_t r) {
    return scales_bytes(m, n, r) + 8 * m * words_for(r);
}
static_assert(payload_bytes(1, 1, 1, 1) == 32 + 8 + 16, "layout arithmetic");
}  // namespace v1

}  // namespace cortiq::blr
