// Programmatic dependent launch (Hopper): a kernel of the decode chain lets
// the next kernel of its stream be scheduled while it still runs, so that the
// next one's launch, and whatever it does before it waits (the sign products
// load their bits), overlaps this one. Included by CUDA sources only.
//
// The rule every kernel launched with launch_pdl keeps: call pdl_start (or
// cudaGridDependencySynchronize) before it reads anything an earlier kernel
// wrote and before it writes anything. The wait holds until every earlier
// kernel of the stream has completed and its writes are visible; the trigger
// only lets the next kernel be scheduled early.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "core/cuda/device.hpp"
#include "model/cuda/knob.hpp"

namespace cortiq::model::cuda {

// Trigger at once, then wait: for the small kernels between the products,
// which have nothing to do before their inputs exist.
__device__ __forceinline__ void pdl_start() {
#if __CUDA_ARCH__ >= 900
    cudaTriggerProgrammaticLaunchCompletion();
    cudaGridDependencySynchronize();
#endif
}

// CORTIQ_GEMV_PDL=0 turns it off (a benchmark's knob).
inline bool pdl_allowed() {
    static const bool on = knob("CORTIQ_GEMV_PDL", 1, 0, 1) == 1;
    return on;
}

// kernel<<<grid, threads, smem, stream>>>(args...) with programmatic
// dependent launch allowed.
template <class... Params, class... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, int threads, size_t smem, cudaStream_t stream,
                Args&&... args) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(threads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1] = {};
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = pdl_allowed() ? 1 : 0;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace cortiq::model::cuda
