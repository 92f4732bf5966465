// The BLR model of one weight (SPEC §1) in float64, the bit budget and the
// rank rule, and the payload: pack, validate, unpack, dequant.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/matrix.hpp"

namespace cortiq::blr {

// One path: Ŵ_p = diag(h) S_U diag(ℓ) S_Vᵀ diag(g).
struct Path {
    VecD h;   // m output scales
    VecD l;   // r latent scales
    VecD g;   // n input scales
    MatD su;  // m × r, entries ±1
    MatD sv;  // n × r, entries ±1
};

struct Factors {
    int64_t m = 0, n = 0, r = 0;
    std::vector<Path> paths;

    // diag(h) S_U diag(ℓ) (m × r) and diag(g) S_V (n × r) of path p.
    MatD left(size_t p) const;
    MatD right(size_t p) const;
    MatD dense() const;  // Σ_p left_p right_pᵀ
};

// The stored bits of a (version 2) payload: 8 × its bytes, header and
// padding included (SPEC §1). Every bpw cortiq reports is bits / (m·n).
int64_t bits(int64_t m, int64_t n, int64_t r, int paths);
// The ideal count P · (r·(m+n) + 16·(m+n+r)), for comparison: bits() exceeds
// it by the 256-bit header and at most 112 bits of padding.
int64_t ideal_bits(int64_t m, int64_t n, int64_t r, int paths);
// Largest r ≥ 1 (≤ min(m,n)) whose payload bytes fit bpw·m·n bits; 0 if even
// r = 1 exceeds it.
int64_t rank_for(int64_t m, int64_t n, double bpw, int paths);

// Rebalance the per-path scale gauge (h·a, g·b, ℓ/(ab) leaves Ŵ unchanged) so
// the three vectors share one geometric-mean magnitude, round them to f16 and
// write the payload. `stored` (optional) receives the model with the stored,
// f16-rounded scales.
std::vector<uint8_t> pack(const Factors& model, Factors* stored = nullptr);
// pack without the signs: the header and the scales, the sign stream left
// zero (model's su and sv are not read; pack = this + write_signs per path).
// A device packs its signs into the stream itself (encode/cuda/pack_signs.cu).
std::vector<uint8_t> pack_scales(const Factors& model, Factors* stored = nullptr);

// Throws cortiq::Error with a message naming what is wrong (`what` is put in
// front, e.g. the tensor name). expect_m/expect_n < 0: not checked.
void validate(std::span<const uint8_t> bytes, const std::string& what = "BLR payload",
              int64_t expect_m = -1, int64_t expect_n = -1);

struct Info {
    int64_t m, n, r;
    int paths;
    int version;
};
Info info(std::span<const uint8_t> bytes);  // validates first

Factors unpack(std::span<const uint8_t> bytes);  // validates first

// Sets the bits of path p's S_V and S_U (the −1 entries of q) in a version-2
// sign stream of an m × n, rank-r payload (SPEC §4; the stream starts zeroed).
void write_signs(const Path& q, uint64_t m, uint64_t n, uint64_t r, uint64_t p, uint8_t* stream);
// The same from float sign matrices, su m × r and sv n × r row-major (a value
// below 0 is −1, any other +1): tuning's layers packed without a float64 copy.
void write_signs(const float* su, const float* sv, uint64_t m, uint64_t n, uint64_t r, uint64_t p,
                 uint8_t* stream);
MatF dequant(std::span<const uint8_t> bytes);  // validates first

// Scales are editable after encoding (SPEC §8): rewrite the f16 scales of a
// payload in place from a model with the same shape and signs.
void write_scales(std::span<uint8_t> bytes, const Factors& model);

}  // namespace cortiq::blr
