// The BLR payload layout (SPEC §4), described once for host and device code.
//
//   header (32 bytes, little-endian)
//   per path p = 0..P-1:
//     h  : m   × f16   output scales
//     ℓ  : r   × f16   latent scales
//     g  : n   × f16   input scales
//     zero padding to a multiple of 8 bytes
//     S_U: m rows of words_u = ceil(r/64) u64 words; bit k of row i set ⇔ S_U[i,k] = −1
//     S_Vᵀ: r rows of words_v = ceil(n/64) u64 words; bit j of row k set ⇔ S_V[j,k] = −1
//   Padding bits past r (S_U) or n (S_Vᵀ) are zero.
#pragma once

#include <cstdint>

namespace cortiq::blr {

constexpr uint32_t kMagic = 0x42515443u;  // "CTQB" read as little-endian u32
constexpr uint16_t kVersion = 1;

struct Header {
    uint32_t magic;
    uint16_t version;
    uint16_t paths;
    uint32_t m, n, r;
    uint32_t words_u;   // u64 words per S_U row
    uint32_t words_v;   // u64 words per S_Vᵀ row
    uint32_t reserved;  // zero
};
static_assert(sizeof(Header) == 32, "BLR header must be 32 bytes");

constexpr uint64_t words_for(uint64_t bits) {
    return (bits + 63) / 64;
}
constexpr uint64_t pad8(uint64_t bytes) {
    return (bytes + 7) & ~uint64_t{7};
}
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
    return sizeof(Header) + p * path_bytes(m, n, r);
}
// Byte offsets inside one path block.
constexpr uint64_t off_h() {
    return 0;
}
constexpr uint64_t off_l(uint64_t m) {
    return 2 * m;
}
constexpr uint64_t off_g(uint64_t m, uint64_t r) {
    return 2 * (m + r);
}
constexpr uint64_t off_su(uint64_t m, uint64_t n, uint64_t r) {
    return scales_bytes(m, n, r);
}
constexpr uint64_t off_svt(uint64_t m, uint64_t n, uint64_t r) {
    return scales_bytes(m, n, r) + 8 * m * words_for(r);
}
static_assert(payload_bytes(1, 1, 1, 1) == 32 + 8 + 16, "layout arithmetic");

}  // namespace cortiq::blr
