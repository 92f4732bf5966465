#include "model/vec_exp.hpp"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string_view>

// GCC 12 warns inside its own avx512fintrin.h (the undefined vectors some
// intrinsics start from, e.g. in _mm512_abs_ps and the reductions).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace cortiq::model {

float exp_nonpositive(float x) {
    const bool under = x < -87.0f;
    x = under ? -87.0f : x;
    const float fn = static_cast<float>(static_cast<int32_t>(x * 1.44269504088896341f - 0.5f));
    const float r = x - fn * 0.693359375f + fn * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.0f;
    const int32_t bits = (static_cast<int32_t>(fn) + 127) << 23;
    float two_n;
    std::memcpy(&two_n, &bits, sizeof two_n);
    return under ? 0.0f : p * two_n;
}

namespace {

// ── AVX-512: 16 lanes ──────────────────────────────────────────────────────────
__attribute__((target("avx512f"))) inline __m512 exp16(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_LT_OQ);
    x = _mm512_max_ps(x, _mm512_set1_ps(-87.0f));
    const __m512i n = _mm512_cvttps_epi32(_mm512_sub_ps(
        _mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), _mm512_set1_ps(0.5f)));
    const __m512 fn = _mm512_cvtepi32_ps(n);
    const __m512 r =
        _mm512_add_ps(_mm512_sub_ps(x, _mm512_mul_ps(fn, _mm512_set1_ps(0.693359375f))),
                      _mm512_mul_ps(fn, _mm512_set1_ps(2.12194440e-4f)));
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    const __m512 two_n =
        _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_add_epi32(n, _mm512_set1_epi32(127)), 23));
    return _mm512_maskz_mul_ps(static_cast<__mmask16>(~under), p, two_n);
}

__attribute__((target("avx512f"))) float exp_shifted_inplace_512(float* s, int64_t n, float shift) {
    const __m512 sh = _mm512_set1_ps(shift);
    __m512 acc = _mm512_setzero_ps();
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(s + j), sh));
        _mm512_storeu_ps(s + j, e);
        acc = _mm512_add_ps(acc, e);
    }
    if (j < n) {
        const __mmask16 m = static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, s + j), sh));
        _mm512_mask_storeu_ps(s + j, m, e);
        acc = _mm512_add_ps(acc, _mm512_maskz_mov_ps(m, e));
    }
    return _mm512_reduce_add_ps(acc);
}

__attribute__((target("avx512f"))) void silu_mul_512(const float* gate, const float* up, int64_t n,
                                                     float* y) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (int64_t j = 0; j < n; j += 16) {
        const __mmask16 m = n - j >= 16 ? static_cast<__mmask16>(0xffff)
                                        : static_cast<__mmask16>((1u << (n - j)) - 1);
        const __m512 z = _mm512_maskz_loadu_ps(m, gate + j);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(z)));
        const __mmask16 pos = _mm512_cmp_ps_mask(z, _mm512_setzero_ps(), _CMP_GE_OQ);
        const __m512 num = _mm512_mask_blend_ps(pos, e, one);  // σ(z) = (z ≥ 0 ? 1 : e) / (1 + e)
        const __m512 sig = _mm512_div_ps(num, _mm512_add_ps(one, e));
        const __m512 out = _mm512_mul_ps(_mm512_mul_ps(z, sig), _mm512_maskz_loadu_ps(m, up + j));
        _mm512_mask_storeu_ps(y + j, m, out);
    }
}

__attribute__((target("avx512f"))) float max_of_512(const float* s, int64_t n) {
    __m512 mx = _mm512_set1_ps(-INFINITY);
    int64_t j = 0;
    for (; j + 16 <= n; j += 16) mx = _mm512_max_ps(mx, _mm512_loadu_ps(s + j));
    float r = _mm512_reduce_max_ps(mx);
    for (; j < n; ++j) r = std::max(r, s[j]);
    return r;
}

bool cpu_has_avx512() {
    static const bool yes = __builtin_cpu_supports("avx512f");
    return yes;
}

// CORTIQ_PORTABLE_EXP=1 in the environment picks the portable loops (for side-by-side timings).
bool portable_from_env() {
    static const bool yes = [] {
        const char* e = std::getenv("CORTIQ_PORTABLE_EXP");
        return e && *e && std::string_view(e) != "0";
    }();
    return yes;
}

bool use_portable = false;  // set_portable_exp

bool has_avx512() {
    return cpu_has_avx512() && !use_portable && !portable_from_env();
}

}  // namespace

bool simd_exp_available() {
    return cpu_has_avx512();
}
void set_portable_exp(bool portable) {
    use_portable = portable;
}

float exp_shifted_inplace(float* s, int64_t n, float shift) {
    if (has_avx512()) return exp_shifted_inplace_512(s, n, shift);
    float sum = 0;
    for (int64_t j = 0; j < n; ++j) {
        s[j] = exp_nonpositive(s[j] - shift);
        sum += s[j];
    }
    return sum;
}

double sum_exp_shifted(const float* l, int64_t n, float shift) {
    double total = 0;
    float buf[256];
    for (int64_t b = 0; b < n; b += 256) {
        const int64_t len = std::min<int64_t>(256, n - b);
        std::copy(l + b, l + b + len, buf);
        total += exp_shifted_inplace(buf, len, shift);
    }
    return total;
}

void silu_mul(const float* gate, const float* up, int64_t n, float* y) {
    if (has_avx512()) return silu_mul_512(gate, up, n, y);
    for (int64_t i = 0; i < n; ++i) {
        const float z = gate[i];
        const float e = exp_nonpositive(-std::fabs(z));
        const float sig = (z >= 0 ? 1.0f : e) / (1.0f + e);
        y[i] = z * sig * up[i];
    }
}

float max_of(const float* s, int64_t n) {
    if (has_avx512()) return max_of_512(s, n);
    float mx = s[0];
    for (int64_t j = 1; j < n; ++j) mx = std::max(mx, s[j]);
    return mx;
}

}  // namespace cortiq::model
