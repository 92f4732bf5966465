// A compressed weight as the packed kernels read it (SPEC §9): the scales in
// float32 and the sign bits in the version-2 bit stream, whatever version or
// kind of payload it came from. The dense weight is never formed.
//
//   BLR:  Ŵ = Σ_p diag(h_p) S_U,p diag(ℓ_p) S_V,pᵀ diag(g_p)
//   sign: Ŵ = diag(h) S diag(g)   (held as one "path" whose S_Vᵀ is S, m rows
//         of n bits, and no S_U / ℓ)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "blr/model.hpp"

namespace cortiq::blr {

// Rows of sign bits inside a bit stream: row k starts at bit `first + k·stride`
// and holds `cols` bits; a set bit means −1.
struct SignRows {
    const uint64_t* words = nullptr;  // the stream, readable one word past its last bit
    uint64_t first = 0, stride = 0;
    int64_t rows = 0, cols = 0;
    // Bit (k, j): set means −1.
    bool at(int64_t k, int64_t j) const {
        const uint64_t b = first + static_cast<uint64_t>(k) * stride + static_cast<uint64_t>(j);
        return (words[b / 64] >> (b % 64)) & 1;
    }
};

struct PackedWeight {
    int64_t m = 0, n = 0, r = 0;
    int paths = 0;      // 1 or 2; a sign payload is one path with r = 0
    bool sign = false;  // a sign (rtn-sign) payload
    // f16 bits as stored (so a layer holds what its payload holds): paths·m,
    // paths·r, paths·n
    std::vector<uint16_t> h, l, g;
    std::vector<uint64_t> bits;  // the sign stream plus one zero guard word

    // Validates (errors name `what`) and converts.
    static PackedWeight from_payload(std::span<const uint8_t> bytes, const std::string& what);

    // S_Vᵀ (r rows of n bits; for a sign payload: S, m rows of n bits) and
    // S_Uᵀ (r rows of m bits) of path p.
    SignRows svt(int p) const;
    SignRows sut(int p) const;
    // Path p's scales in float32, into buffers that keep their storage.
    void scales(int p, std::vector<float>& h, std::vector<float>& l, std::vector<float>& g) const;
    // Path p's sign matrices as ±1 values (a BLR weight only): S_U into su
    // (m × r row-major), S_V into sv (n × r), written row by row (the bits
    // stay in cache) with the rows spread over the OpenMP threads.
    void signs_into(int p, float* su, float* sv) const;
    void signs_into(int p, double* su, double* sv) const;
    // The float64 factors (a BLR weight only): what blr::unpack gives for the
    // payload this came from, so to_factors().dense() is blr::dequant's.
    Factors to_factors() const;
    // A sign payload's S[i, j] is −1.
    bool sign_at(int64_t i, int64_t j) const;
    // Bytes held in memory (scales, bits, the guard word).
    int64_t resident_bytes() const;
};

}  // namespace cortiq::blr
