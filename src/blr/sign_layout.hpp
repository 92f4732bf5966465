// Sign rows re-laid for the device (SPEC §9): every row starts on a 32-bit
// word, so a warp reads a row's bits with plain coalesced loads. The payload
// keeps its dense stream (blr/layout.hpp); these copies are what a runtime
// holds, at most 31 padding bits per row more.
#pragma once

#include <cstdint>
#include <vector>

#include "blr/packed.hpp"

namespace cortiq::blr {

// u32 words a row of `cols` bits takes.
constexpr int64_t words32_for(int64_t cols) {
    return (cols + 31) / 32;
}

// s.rows rows of words32_for(s.cols) words: bit j % 32 of word j / 32 of row k
// is s's bit (k, j); padding bits are zero.
std::vector<uint32_t> aligned_rows(const SignRows& s);

// The transpose: s.cols rows of words32_for(s.rows) words, bit k of row j is
// s's bit (k, j). S_Uᵀ (r rows of m bits) becomes S_U, m rows of r bits, so
// u = S_U t is a product of rows, like t = S_Vᵀ x.
std::vector<uint32_t> transposed_rows(const SignRows& s);

}  // namespace cortiq::blr
