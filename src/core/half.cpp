#include "core/half.hpp"

#include <cpuid.h>
#include <immintrin.h>

#include <bit>
#include <cstring>

namespace cortiq {

uint16_t float_to_half(float f) {
    const uint32_t x = std::bit_cast<uint32_t>(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t exp = (x >> 23) & 0xffu;
    uint32_t mant = x & 0x7fffffu;
    if (exp == 0xff) {  // inf or NaN: keep NaN quiet and non-zero
        return static_cast<uint16_t>(sign | 0x7c00u | (mant ? (0x200u | (mant >> 13)) : 0u));
    }
    const int e = static_cast<int>(exp) - 127 + 15;
    if (e >= 0x1f) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow -> inf
    if (e <= 0) {
        // Subnormal half (or zero): shift the full significand, round to nearest even.
        if (e < -10) return static_cast<uint16_t>(sign);
        mant |= 0x800000u;
        const int shift = 14 - e;  // 1 - e + 13
        uint32_t h = mant >> shift;
        const uint32_t rem = mant & ((1u << shift) - 1u);
        const uint32_t halfway = 1u << (shift - 1);
        if (rem > halfway || (rem == halfway && (h & 1u))) ++h;
        return static_cast<uint16_t>(sign | h);
    }
    uint32_t h = (static_cast<uint32_t>(e) << 10) | (mant >> 13);
    const uint32_t rem = mant & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // may carry into exponent: correct
    return static_cast<uint16_t>(sign | h);
}

float half_to_float(uint16_t h) {
    const uint32_t sign = (static_cast<uint32_t>(h) & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t x;
    if (exp == 0) {
        if (mant == 0) {
            x = sign;
        } else {  // subnormal: normalise
            int e = -1;
            do {
                ++e;
                mant <<= 1;
            } while ((mant & 0x400u) == 0);
            x = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3ffu) << 13);
        }
    } else if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant << 13);
    } else {
        x = sign | ((exp + 127 - 15) << 23) | (mant << 13);
    }
    return std::bit_cast<float>(x);
}

namespace {

__attribute__((target("avx,f16c"))) void halves_to_floats_f16c(const uint16_t* in, int64_t n,
                                                               float* out) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(
            out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
    for (; i < n; ++i) out[i] = half_to_float(in[i]);
}

}  // namespace

void halves_to_floats(const uint16_t* in, int64_t n, float* out) {
    // AVX enabled by the OS, and F16C (CPUID leaf 1, ECX bit 29: not a
    // feature every compiler's __builtin_cpu_supports names)
    static const bool f16c = [] {
        unsigned a = 0, b = 0, c = 0, d = 0;
        return __builtin_cpu_supports("avx") && __get_cpuid(1, &a, &b, &c, &d) &&
               (c & (1u << 29)) != 0;
    }();
    if (f16c) return halves_to_floats_f16c(in, n, out);
    for (int64_t i = 0; i < n; ++i) out[i] = half_to_float(in[i]);
}

uint16_t float_to_bf16(float f) {
    uint32_t x = std::bit_cast<uint32_t>(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
    x += 0x7fffu + ((x >> 16) & 1u);
    return static_cast<uint16_t>(x >> 16);
}

float bf16_to_float(uint16_t b) {
    return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

}  // namespace cortiq
