#include "blr/sign_kernels.hpp"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <vector>

#include "core/blas_threads.hpp"
#include "core/error.hpp"
#include "core/parallel.hpp"
#include "linalg/panel_gemm.hpp"

namespace cortiq::blr {

namespace {

// 64 bits of a stream starting at bit b (the stream has a guard word).
inline uint64_t bits64(const uint64_t* w, uint64_t b) {
    const uint64_t q = b >> 6, s = b & 63;
    return s ? (w[q] >> s) | (w[q + 1] << (64 - s)) : w[q];
}
inline uint64_t low_mask(int64_t n) {
    return n >= 64 ? ~uint64_t{0} : (uint64_t{1} << n) - 1;
}
inline float flip(float x, uint64_t bit) {
    return std::bit_cast<float>(std::bit_cast<uint32_t>(x) ^ static_cast<uint32_t>(bit) << 31);
}

// A table turns each byte of bits into eight float sign masks (portable, AVX2).
const std::array<std::array<uint32_t, 8>, 256>& sign_table() {
    static const auto table = [] {
        std::array<std::array<uint32_t, 8>, 256> t{};
        for (int v = 0; v < 256; ++v)
            for (int b = 0; b < 8; ++b) t[v][b] = (v >> b) & 1 ? 0x80000000u : 0u;
        return t;
    }();
    return table;
}

// ---- portable: sign flips by the table, eight lanes the compiler vectorises ----
float dot_row_portable(const SignRows& s, int64_t k, const float* x) {
    const auto& lut = sign_table();
    const uint64_t base = s.first + static_cast<uint64_t>(k) * s.stride;
    float acc[8] = {};
    for (int64_t j = 0; j < s.cols; j += 64) {
        const int64_t len = std::min<int64_t>(64, s.cols - j);
        const uint64_t w = bits64(s.words, base + j) & low_mask(len);
        for (int64_t q = 0; q < len; q += 8) {
            const uint32_t* m = lut[(w >> q) & 255].data();
            if (len - q >= 8) {
                for (int b = 0; b < 8; ++b)
                    acc[b] += std::bit_cast<float>(std::bit_cast<uint32_t>(x[j + q + b]) ^ m[b]);
            } else {
                for (int64_t b = 0; b < len - q; ++b)
                    acc[b] += std::bit_cast<float>(std::bit_cast<uint32_t>(x[j + q + b]) ^ m[b]);
            }
        }
    }
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
void axpy_chunk_portable(const SignRows& s, const float* c, float* out, int64_t j0, int64_t len) {
    const auto& lut = sign_table();
    float acc[64] = {};
    for (int64_t k = 0; k < s.rows; ++k) {
        const uint64_t w = bits64(s.words, s.first + static_cast<uint64_t>(k) * s.stride + j0);
        const uint32_t ck = std::bit_cast<uint32_t>(c[k]);
        for (int q = 0; q < 64; q += 8) {
            const uint32_t* m = lut[(w >> q) & 255].data();
            for (int b = 0; b < 8; ++b) acc[q + b] += std::bit_cast<float>(ck ^ m[b]);
        }
    }
    for (int64_t b = 0; b < len; ++b) out[j0 + b] += acc[b];
}

__attribute__((target("avx2,fma"))) float dot_row_avx2(const SignRows& s, int64_t k,
                                                       const float* x) {
    const auto& lut = sign_table();
    const uint64_t base = s.first + static_cast<uint64_t>(k) * s.stride;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 64 <= s.cols; j += 64) {
        const uint64_t w = bits64(s.words, base + j);
        for (int g = 0; g < 8; g += 2) {
            const __m256 m0 =
                _mm256_loadu_ps(reinterpret_cast<const float*>(lut[(w >> (8 * g)) & 255].data()));
            const __m256 m1 = _mm256_loadu_ps(
                reinterpret_cast<const float*>(lut[(w >> (8 * g + 8)) & 255].data()));
            a0 = _mm256_add_ps(a0, _mm256_xor_ps(_mm256_loadu_ps(x + j + 8 * g), m0));
            a1 = _mm256_add_ps(a1, _mm256_xor_ps(_mm256_loadu_ps(x + j + 8 * g + 8), m1));
        }
    }
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, _mm256_add_ps(a0, a1));
    float acc = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
    if (j < s.cols) {
        const uint64_t w = bits64(s.words, base + j);
        for (int64_t b = 0; b < s.cols - j; ++b) acc += flip(x[j + b], (w >> b) & 1);
    }
    return acc;
}
__attribute__((target("avx2,fma"))) void axpy_chunk_avx2(const SignRows& s, const float* c,
                                                         float* out, int64_t j0, int64_t len) {
    if (len < 64) return axpy_chunk_portable(s, c, out, j0, len);
    const auto& lut = sign_table();
    __m256 acc[8];
    for (auto& a : acc) a = _mm256_setzero_ps();
    for (int64_t k = 0; k < s.rows; ++k) {
        const uint64_t w = bits64(s.words, s.first + static_cast<uint64_t>(k) * s.stride + j0);
        const __m256 cb = _mm256_set1_ps(c[k]);
        for (int g = 0; g < 8; ++g) {
            const __m256 m =
                _mm256_loadu_ps(reinterpret_cast<const float*>(lut[(w >> (8 * g)) & 255].data()));
            acc[g] = _mm256_add_ps(acc[g], _mm256_xor_ps(cb, m));
        }
    }
    for (int g = 0; g < 8; ++g)
        _mm256_storeu_ps(out + j0 + 8 * g,
                         _mm256_add_ps(_mm256_loadu_ps(out + j0 + 8 * g), acc[g]));
}

// ---- AVX-512: the bits are the lane masks of a masked negation ----
__attribute__((target("avx512f"))) float dot_row_avx512(const SignRows& s, int64_t k,
                                                        const float* x) {
    const uint64_t base = s.first + static_cast<uint64_t>(k) * s.stride;
    const __m512 zero = _mm512_setzero_ps();
    __m512 a0 = zero, a1 = zero, a2 = zero, a3 = zero;
    int64_t j = 0;
    // four independent sums hide the latency of the adds
    for (; j + 64 <= s.cols; j += 64) {
        const uint64_t w = bits64(s.words, base + j);
        const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);
        const __m512 x2 = _mm512_loadu_ps(x + j + 32), x3 = _mm512_loadu_ps(x + j + 48);
        a0 = _mm512_add_ps(a0, _mm512_mask_sub_ps(x0, static_cast<__mmask16>(w), zero, x0));
        a1 = _mm512_add_ps(a1, _mm512_mask_sub_ps(x1, static_cast<__mmask16>(w >> 16), zero, x1));
        a2 = _mm512_add_ps(a2, _mm512_mask_sub_ps(x2, static_cast<__mmask16>(w >> 32), zero, x2));
        a3 = _mm512_add_ps(a3, _mm512_mask_sub_ps(x3, static_cast<__mmask16>(w >> 48), zero, x3));
    }
    if (j < s.cols) {
        const uint64_t w = bits64(s.words, base + j), valid = low_mask(s.cols - j);
        for (int g = 0; g < 4; ++g) {
            const __mmask16 v = static_cast<__mmask16>(valid >> (16 * g));
            const __m512 xg = _mm512_maskz_loadu_ps(v, x + j + 16 * g);
            a0 = _mm512_add_ps(
                a0, _mm512_mask_sub_ps(xg, static_cast<__mmask16>(w >> (16 * g)), zero, xg));
        }
    }
    // (GCC 12's _mm512_reduce_add_ps warns about its own header)
    alignas(64) float lanes[16];
    _mm512_store_ps(lanes, _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)));
    float sum = 0.0f;
    for (float v : lanes) sum += v;
    return sum;
}

// 128 outputs: eight independent sums.
__attribute__((target("avx512f"))) void axpy_chunk_avx512(const SignRows& s, const float* c,
                                                          float* out, int64_t j0, int64_t len) {
    const __m512 zero = _mm512_setzero_ps();
    __m512 a[8] = {zero, zero, zero, zero, zero, zero, zero, zero};
    uint64_t b = s.first + static_cast<uint64_t>(j0);
    // (the second word is read only when the chunk has it: past the last
    // row's end lies only the guard word)
    const bool two = len > 64;
    for (int64_t k = 0; k < s.rows; ++k, b += s.stride) {
        const uint64_t w0 = bits64(s.words, b), w1 = two ? bits64(s.words, b + 64) : 0;
        const __m512 cb = _mm512_set1_ps(c[k]);
#pragma GCC unroll 4
        for (int g = 0; g < 4; ++g) {
            a[g] = _mm512_add_ps(
                a[g], _mm512_mask_sub_ps(cb, static_cast<__mmask16>(w0 >> (16 * g)), zero, cb));
            a[g + 4] = _mm512_add_ps(
                a[g + 4], _mm512_mask_sub_ps(cb, static_cast<__mmask16>(w1 >> (16 * g)), zero, cb));
        }
    }
    for (int g = 0; g < 8; ++g) {
        const int64_t lo = 16 * g;
        if (lo >= len) break;
        const __mmask16 v = static_cast<__mmask16>(low_mask(len - lo));
        float* o = out + j0 + lo;
        _mm512_mask_storeu_ps(o, v, _mm512_add_ps(_mm512_maskz_loadu_ps(v, o), a[g]));
    }
}

std::atomic<SignIsa>& current_isa() {
    static std::atomic<SignIsa> isa{best_sign_isa()};
    return isa;
}

float dot_row(SignIsa isa, const SignRows& s, int64_t k, const float* x) {
    switch (isa) {
        case SignIsa::avx512:
            return dot_row_avx512(s, k, x);
        case SignIsa::avx2:
            return dot_row_avx2(s, k, x);
        default:
            return dot_row_portable(s, k, x);
    }
}
void axpy_chunk(SignIsa isa, const SignRows& s, const float* c, float* out, int64_t j0,
                int64_t len) {
    switch (isa) {
        case SignIsa::avx512:
            return axpy_chunk_avx512(s, c, out, j0, len);
        case SignIsa::avx2:
            return axpy_chunk_avx2(s, c, out, j0, len);
        default:
            return axpy_chunk_portable(s, c, out, j0, len);
    }
}

// dst[0..s.cols) = ±1.0f from the bits of row k.
void expand_row(const SignRows& s, int64_t k, float* dst) {
    const uint64_t base = s.first + static_cast<uint64_t>(k) * s.stride;
    for (int64_t j = 0; j < s.cols; j += 64) {
        const uint64_t w = bits64(s.words, base + j);
        const int64_t e = std::min<int64_t>(64, s.cols - j);
        for (int64_t b = 0; b < e; ++b) dst[j + b] = flip(1.0f, (w >> b) & 1);
    }
}

}  // namespace

SignIsa best_sign_isa() {
    if (__builtin_cpu_supports("avx512f")) return SignIsa::avx512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return SignIsa::avx2;
    return SignIsa::portable;
}
SignIsa set_sign_isa(SignIsa isa) {
    CORTIQ_CHECK(
        isa == SignIsa::portable || static_cast<int>(isa) <= static_cast<int>(best_sign_isa()),
        "this CPU does not support {}", isa_name(isa));
    return current_isa().exchange(isa);
}
SignIsa sign_isa() {
    return current_isa().load();
}
std::string isa_name(SignIsa isa) {
    return isa == SignIsa::avx512 ? "avx512" : isa == SignIsa::avx2 ? "avx2" : "portable";
}

void sign_dot(const SignRows& s, const float* x, float* out) {
    const SignIsa isa = sign_isa();
    constexpr int64_t kRows = 32;  // rows per task
    const int64_t tasks = (s.rows + kRows - 1) / kRows;
    parallel_for(
        0, tasks,
        [&](int64_t b) {
            for (int64_t k = b * kRows; k < std::min(s.rows, (b + 1) * kRows); ++k)
                out[k] = dot_row(isa, s, k, x);
        },
        min_per_thread_for(tasks, s.rows * s.cols));
}

void sign_axpy(const SignRows& s, const float* c, float* out) {
    const SignIsa isa = sign_isa();
    const int64_t width = isa == SignIsa::avx512 ? 128 : 64;  // columns per kernel call
    constexpr int64_t kChunks = 2;                            // calls per task
    const int64_t chunks = (s.cols + width - 1) / width;
    const int64_t tasks = (chunks + kChunks - 1) / kChunks;
    parallel_for(
        0, tasks,
        [&](int64_t b) {
            for (int64_t q = b * kChunks; q < std::min(chunks, (b + 1) * kChunks); ++q)
                axpy_chunk(isa, s, c, out, width * q, std::min(width, s.cols - width * q));
        },
        min_per_thread_for(tasks, s.rows * s.cols));
}

namespace {

// Rows of S per tile: about 4 MB of ±1.0f, and at least 512 rows: each tile
// is one product over the whole input (T × cols), which BLAS packs again for
// every tile, so wide rows need tall tiles. With at least 32 rows, 4096×11008
// at 1 bpw (95 rows a tile, 32 tiles) took 315 ms for 512 tokens on this
// project's 2-core machine, with at least 512 (22 MB, 6 tiles) 261 ms
// (bench_blr_cpu, two runs each; OpenBLAS sgemm 240 ms).
int64_t tile_rows(const SignRows& s) {
    return std::min(std::max<int64_t>((int64_t{1} << 20) / std::max<int64_t>(s.cols, 1), 512),
                    s.rows);
}

// With `dot`: out (T × s.rows) = in (T × s.cols) · Sᵀ; else out (T × s.cols)
// += in (T × s.rows) · S. S goes through tiles of its rows expanded to ±1.0f
// in parallel, then OpenMP over panels with single-threaded BLAS inside.
void tiled_product(const SignRows& s, bool dot, const float* in, int64_t T, float* out) {
    SingleThreadedBlas single_blas;
    thread_local std::vector<float> tile;
    const int64_t kb = tile_rows(s);
    for (int64_t k0 = 0; k0 < s.rows; k0 += kb) {
        const int64_t k1 = std::min(s.rows, k0 + kb);
        tile.resize(static_cast<size_t>((k1 - k0) * s.cols));
        float* dst = tile.data();  // this thread's tile, also for the workers
        parallel_for(k0, k1, [&](int64_t k) { expand_row(s, k, dst + (k - k0) * s.cols); });
        if (dot)  // out[:, k0:k1] = in · tileᵀ
            la::panel_sgemm(true, T, k1 - k0, s.cols, in, s.cols, tile.data(), 0.0f, out + k0,
                            s.rows);
        else  // out += in[:, k0:k1] · tile
            la::panel_sgemm(false, T, s.cols, k1 - k0, in + k0, s.rows, tile.data(), 1.0f, out,
                            s.cols);
    }
}

}  // namespace

void sign_dot_batch(const SignRows& s, const float* x, int64_t T, float* out) {
    tiled_product(s, true, x, T, out);
}

void sign_axpy_batch(const SignRows& s, const float* c, int64_t T, float* out) {
    tiled_product(s, false, c, T, out);
}

}  // namespace cortiq::blr
