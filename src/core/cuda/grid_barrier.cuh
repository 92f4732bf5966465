// A barrier over every block of a launch whose blocks are all resident at
// once (a persistent grid no larger than the occupancy allows). Two words in
// global memory, zero at first: the arrivals and a generation. Thread 0 of
// each block reads the generation, then arrives; the last to arrive resets
// the arrivals and bumps the generation, which the others poll (acquire).
// Both words are back to a reusable state after each barrier, so one pair
// serves any number of barriers and launches on a stream. A block that
// polls for ~2^31 rounds traps instead of hanging (a grid that was not
// resident). Included by CUDA sources only.
#pragma once

#include <cstdint>

namespace cortiq::cuda {

__device__ __forceinline__ unsigned load_acquire_gpu(const unsigned* p) {
    unsigned v;
    asm volatile("ld.acquire.gpu.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

__device__ inline void grid_barrier(unsigned* words) {
    __syncthreads();
    if (threadIdx.x == 0) {
        const unsigned gen = load_acquire_gpu(words + 1);
        __threadfence();  // this block's writes before its arrival
        if (atomicAdd(words, 1u) == gridDim.x * gridDim.y * gridDim.z - 1) {
            words[0] = 0;
            __threadfence();
            atomicAdd(words + 1, 1u);
        } else {
            for (uint32_t spins = 0; load_acquire_gpu(words + 1) == gen; ++spins)
                if (spins == 0x80000000u) __trap();
        }
        __threadfence();
    }
    __syncthreads();
}

}  // namespace cortiq::cuda
