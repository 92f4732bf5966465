#include "blr/sign_layout.hpp"

namespace cortiq::blr {

namespace {

// 64 bits of the stream from bit b (the stream is readable one word past its
// last bit, so b's word and the next exist).
uint64_t bits64(const uint64_t* w, uint64_t b) {
    const uint64_t q = b / 64, s = b % 64;
    return s ? (w[q] >> s) | (w[q + 1] << (64 - s)) : w[q];
}

}  // namespace

std::vector<uint32_t> aligned_rows(const SignRows& s) {
    const int64_t ld = words32_for(s.cols);
    std::vector<uint32_t> out(static_cast<size_t>(s.rows * ld), 0u);
    for (int64_t k = 0; k < s.rows; ++k) {
        const uint64_t row = s.first + static_cast<uint64_t>(k) * s.stride;
        uint32_t* dst = out.data() + k * ld;
        for (int64_t w = 0; w < ld; ++w) {
            const int64_t left = s.cols - 32 * w;  // bits of the row from this word on
            uint32_t v =
                static_cast<uint32_t>(bits64(s.words, row + 32 * static_cast<uint64_t>(w)));
            if (left < 32) v &= (1u << left) - 1u;
            dst[w] = v;
        }
    }
    return out;
}

std::vector<uint32_t> transposed_rows(const SignRows& s) {
    const int64_t ld = words32_for(s.rows);
    std::vector<uint32_t> out(static_cast<size_t>(s.cols * ld), 0u);
    for (int64_t k = 0; k < s.rows; ++k) {
        const uint64_t row = s.first + static_cast<uint64_t>(k) * s.stride;
        const uint32_t bit = 1u << (k % 32);
        uint32_t* col = out.data() + k / 32;
        // set bits only, 64 columns at a time
        for (int64_t j0 = 0; j0 < s.cols; j0 += 64) {
            uint64_t v = bits64(s.words, row + static_cast<uint64_t>(j0));
            if (s.cols - j0 < 64) v &= (uint64_t{1} << (s.cols - j0)) - 1;
            while (v) {
                const int64_t j = j0 + __builtin_ctzll(v);
                col[j * ld] |= bit;
                v &= v - 1;
            }
        }
    }
    return out;
}

}  // namespace cortiq::blr
