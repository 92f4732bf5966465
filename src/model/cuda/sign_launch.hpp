// What the two decode kernels of sign products share (sign_gemv.cu,
// sign_rows.cu; included by CUDA sources only): a warp's sum, a word copied
// to shared memory with cp.async and the SM count; the knobs a benchmark
// sets from the environment are knob.hpp's, the launch with programmatic
// dependent launch pdl.cuh's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "core/cuda/device.hpp"
#include "model/cuda/knob.hpp"
#include "model/cuda/pdl.cuh"

namespace cortiq::model::cuda::sign_detail {

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// The 16 signed sums of 4 inputs, e(nib) = Σ_b (bit b of nib ? −v_b : v_b),
// each from the one with its highest set bit clear (15 adds after the first).
__device__ __forceinline__ void signed_sums(const float (&v)[4], float (&e)[16]) {
    e[0] = (v[0] + v[1]) + (v[2] + v[3]);
#pragma unroll
    for (int nib = 1; nib < 16; ++nib) {
        const int hb = nib >= 8 ? 3 : nib >= 4 ? 2 : nib >= 2 ? 1 : 0;
        e[nib] = e[nib ^ (1 << hb)] - 2.0f * v[hb];
    }
}

// cp.async of one 32-bit word into shared memory (sm_80+).
__device__ __forceinline__ void copy_word_async(uint32_t* dst, const uint32_t* src) {
    const unsigned d = static_cast<unsigned>(__cvta_generic_to_shared(dst));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(d), "l"(src));
}

// Sign words are read once: 16 bytes past L1.
__device__ __forceinline__ uint4 load_stream(const uint32_t* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

__device__ __forceinline__ void commit_copies() {
    asm volatile("cp.async.commit_group;\n" ::);
}

inline int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return v;
    }();
    return n;
}

inline int64_t ceil_div(int64_t a, int64_t b) {
    return (a + b - 1) / b;
}

// Programmatic dependent launch (pdl.cuh: launch_pdl) is on by default since
// the bits come through shared memory: on the H200 at 1 bpw, 4096×11008
// 16.3 → 14.3 µs and a 32-layer model's linears 3.017 → 2.608 ms per token
// with sign_gemv. With loads into registers it had been slower (29.6 against
// 17.1 µs), the waiting blocks holding their SMs.

}  // namespace cortiq::model::cuda::sign_detail
