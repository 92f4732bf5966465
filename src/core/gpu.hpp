// Whether this build can use a GPU: one answer for every layer (the encoder,
// the runtime, the calibration). Defined in core/cuda/gpu.cpp with CUDA, in
// core/gpu.cpp without.
#pragma once

#include <cstdint>
#include <string>

namespace cortiq {

// True when this build has CUDA and a GPU is visible.
bool gpu_available();
// Why not, in one line ("this cortiq was built without CUDA", "no CUDA device
// visible ..."); empty when one is.
std::string gpu_unavailable_reason();
// The number of CUDA devices visible (0 without CUDA or without a device).
int gpu_count();
// Makes CUDA device `id` the calling thread's current device (quantize
// --gpus: its first GPU runs what one GPU runs); a clear error when it does
// not exist or this build has no CUDA.
void use_gpu(int id);
// The most device memory this process's allocations from the stream-ordered
// pools (cudaMallocAsync, every DeviceBuffer) have held at once, summed over
// the visible devices (cudaMemPoolAttrUsedMemHigh); libraries' own
// workspaces (cuBLAS, cuSOLVER) are not in it. 0 without CUDA.
int64_t gpu_pool_peak_bytes();
// The current device's memory in all (cudaMemGetInfo's total; not what is
// free, which other work changes). 0 without CUDA or a device.
int64_t gpu_total_bytes();

}  // namespace cortiq
