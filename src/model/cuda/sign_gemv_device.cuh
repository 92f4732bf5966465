// Device pieces of the decode products (SPEC §9), shared by one product per
// kernel (sign_gemv.cu) and a whole layer per kernel (blr_decode.cu):
//
// - tabulate: for each 4 inputs of a span of 1024·G columns, the 16 signed
//   sums e(nib) = Σ_b (bit b of nib ? −v_b : v_b) (the lookup method of
//   bitnet.cpp and T-MAC), in shared memory indexed [nibble group q][nibble]
//   [lane], so the 32 lanes of a lookup hit 32 different banks;
// - copy_slab: the bits of up to kSlabRows<G> rows into shared memory with
//   cp.async (each lane copies the words it will read, 128-byte rows per
//   warp), so a block keeps a whole slab of loads in flight;
// - slab_rows: a warp takes rows of a slab kRowsPerWarpStep at a time, lane L
//   reads word 32g + L of a row and adds 8 table entries per word, one per
//   nibble (a bit costs a quarter of a shift, mask, load and add);
// - sum_rows: the slabs of a chunk of rows, double-buffered (the next slab
//   flies while one is summed).
// A block has kThreads threads (8 warps: warp q tabulates nibble group q).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cortiq::model::cuda::gemv {

constexpr int kGroupCols = 1024;     // columns a warp covers with one word per lane
constexpr int kLut = 8 * 16 * 32;    // table floats per group and row: [q][nibble][lane]
constexpr int kThreads = 256;        // 8 warps
constexpr int kRowsPerWarpStep = 4;  // rows a warp sums side by side
constexpr int kSlabWords = 8192;     // 32 KB of bits per slab buffer
template <int G>
constexpr int64_t kSlabRows = kSlabWords / (32 * G);  // rows of 32·G words per slab

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Thread (warp q, lane L) tabulates, for each of the R input rows and each
// group g, the 4 inputs value(i, 1024g + 32L + 4q + b), b < 4, columns
// counted from the span's start (value returns zero past the last column):
// the nibble q of lane L's word g.
template <int R, int G, class Value>
__device__ __forceinline__ void tabulate(Value value, float* lut) {
    const int lane = threadIdx.x & 31, q = threadIdx.x >> 5;
#pragma unroll
    for (int i = 0; i < R; ++i)
#pragma unroll
        for (int g = 0; g < G; ++g) {
            float v[4];
#pragma unroll
            for (int b = 0; b < 4; ++b) v[b] = value(i, kGroupCols * g + 32 * lane + 4 * q + b);
            float e[16];
            e[0] = (v[0] + v[1]) + (v[2] + v[3]);
#pragma unroll
            for (int nib = 1; nib < 16; ++nib) {
                const int hb = nib >= 8 ? 3 : nib >= 4 ? 2 : nib >= 2 ? 1 : 0;
                e[nib] = e[nib ^ (1 << hb)] - 2.0f * v[hb];
            }
            float* dst = lut + (i * G + g) * kLut + q * 512 + lane;
#pragma unroll
            for (int nib = 0; nib < 16; ++nib) dst[nib * 32] = e[nib];
        }
}

// cp.async of one 32-bit word into shared memory (sm_80+).
__device__ __forceinline__ void copy_word_async(uint32_t* dst, const uint32_t* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}
__device__ __forceinline__ void commit_copies() {
    asm volatile("cp.async.commit_group;\n" ::);
}
template <int N>
__device__ __forceinline__ void wait_copies() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Lane `lane` of warp `warp` copies its words of the slab's rows s0 + warp,
// s0 + warp + 8, ... (< k1) into buf (row-major, 32·G words a row); `bits`
// points at this lane's first word of row 0, rows `ld` words apart. A lane
// later reads only the words it copied, so its own wait suffices.
template <int G>
__device__ __forceinline__ void copy_slab(const uint32_t* bits, int64_t ld, const bool live[G],
                                          int64_t s0, int64_t k1, uint32_t* buf) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t s1 = min(k1, s0 + kSlabRows<G>);
    for (int64_t k = s0 + warp; k < s1; k += 8)
#pragma unroll
        for (int g = 0; g < G; ++g)
            if (live[g])
                copy_word_async(buf + (k - s0) * 32 * G + 32 * g + lane, bits + k * ld + 32 * g);
    commit_copies();
}

// The rows of one slab that this warp owns, kRowsPerWarpStep at a time (the
// warp sums of several rows overlap); emit(i, k, sum) on lane 0 for each
// input row i and matrix row k. tab: the table plus this lane.
template <int R, int G, class Emit>
__device__ __forceinline__ void slab_rows(const float* tab, const bool live[G], const uint32_t* buf,
                                          int64_t s0, int64_t k1, Emit emit) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t s1 = min(k1, s0 + kSlabRows<G>);
    for (int64_t k = s0 + warp; k < s1; k += 8 * kRowsPerWarpStep) {
        float acc[kRowsPerWarpStep][R];
#pragma unroll
        for (int u = 0; u < kRowsPerWarpStep; ++u) {
            const int64_t ku = k + 8 * u;
#pragma unroll
            for (int i = 0; i < R; ++i) acc[u][i] = 0.0f;
#pragma unroll
            for (int g = 0; g < G; ++g) {
                const uint32_t w =
                    live[g] && ku < s1 ? buf[(ku - s0) * 32 * G + 32 * g + lane] : 0u;
#pragma unroll
                for (int q = 0; q < 8; ++q) {
                    const uint32_t nib = (w >> (4 * q)) & 15u;
#pragma unroll
                    for (int i = 0; i < R; ++i)
                        acc[u][i] += tab[(i * G + g) * kLut + q * 512 + nib * 32];
                }
            }
        }
#pragma unroll
        for (int u = 0; u < kRowsPerWarpStep; ++u) {
            const int64_t ku = k + 8 * u;
#pragma unroll
            for (int i = 0; i < R; ++i) {
                const float sum = warp_sum(acc[u][i]);
                if (lane == 0 && ku < s1) emit(i, ku, sum);
            }
        }
    }
}

// Rows [k0, k1) against the table, slab by slab. The caller has already
// issued (copy_slab) the first slab into bufs[0], so that it flies while the
// table is built; bufs[1] takes every other slab.
template <int R, int G, class Emit>
__device__ __forceinline__ void sum_rows(const uint32_t* bits, int64_t ld, const bool live[G],
                                         int64_t k0, int64_t k1, const float* tab,
                                         uint32_t* const bufs[2], Emit emit) {
    int b = 0;
    for (int64_t s0 = k0; s0 < k1; s0 += kSlabRows<G>, b ^= 1) {
        if (s0 + kSlabRows<G> < k1) {  // the next slab flies while this one is summed
            copy_slab<G>(bits, ld, live, s0 + kSlabRows<G>, k1, bufs[b ^ 1]);
            wait_copies<1>();
        } else {
            wait_copies<0>();
        }
        slab_rows<R, G>(tab, live, bufs[b], s0, k1, emit);
    }
}

}  // namespace cortiq::model::cuda::gemv
