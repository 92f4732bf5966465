// Packed signs of tuning's BLR layers (tune/cuda/grad_ops.hpp, DBlrPath): a
// warp's ballot packs 32 consecutive signs into a word; the expansion writes
// four floats a thread, ±1 for j < r and 0 in the padding columns.
#include "core/error.hpp"
#include "tune/cuda/grad_ops.hpp"
#include "tune/cuda/sign_quad.cuh"

namespace cortiq::tune::cuda {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 65535 * 16 ? b : 65535 * 16);
}

// bits[w] = the signs of v[32w … 32w + 31] (v > 0 → 1); whole warps run every
// step of the loop, so every lane takes part in each ballot.
__global__ void pack_kernel(const float* v, int64_t n, uint32_t* bits) {
    const int64_t words = (n + 31) / 32;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < words * 32;
         i += stride) {
        const bool plus = i < n && v[i] > 0.0f;
        const unsigned word = __ballot_sync(0xffffffffu, plus);
        if ((threadIdx.x & 31) == 0) bits[i / 32] = word;
    }
}

// out[i, j] for 4 consecutive j (rp is a multiple of 4, so they share a row).
__global__ void expand_kernel(const uint32_t* bits, int64_t rows, int64_t r, int64_t rp,
                              float4* out) {
    const int64_t quads = rows * rp / 4;
    for (int64_t q = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; q < quads;
         q += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t i = q * 4;
        out[q] = sign_quad(bits, i, i % rp, r);
    }
}

}  // namespace

void pack_signs(const Gpu& g, const float* v, int64_t n, uint32_t* bits) {
    if (n <= 0) return;
    pack_kernel<<<grid_for((n + 31) / 32 * 32), kThreads, 0, g.stream()>>>(v, n, bits);
    CUDA_LAUNCH_CHECK();
}

void expand_signs(const Gpu& g, const uint32_t* bits, int64_t rows, int64_t r, int64_t rp,
                  float* out) {
    CORTIQ_ASSERT(rp % 4 == 0 && r <= rp, "signs of rank {} padded to {}", r, rp);
    if (rows * rp == 0) return;
    expand_kernel<<<grid_for(rows * rp / 4), kThreads, 0, g.stream()>>>(
        bits, rows, r, rp, reinterpret_cast<float4*>(out));
    CUDA_LAUNCH_CHECK();
}

void pack_path_signs(const Gpu& g, const DBlr& w, DBlrPath& p) {
    const cudaStream_t st = g.stream();
    const auto pack = [&](DVec& f, DeviceBuffer<uint32_t>& bits) {
        bits = DeviceBuffer<uint32_t>((f.size() + 31) / 32, st);
        pack_signs(g, f.get(), f.size(), bits.get());
        f.reset();  // freed in stream order, after the packing
    };
    CORTIQ_ASSERT(p.su.size() == w.m * w.rp && p.sv.size() == w.n * w.rp,
                  "packing signs of {} and {} values for a {} × {} layer of rank {}", p.su.size(),
                  p.sv.size(), w.m, w.n, w.rp);
    pack(p.su, p.su_bits);
    pack(p.sv, p.sv_bits);
}

}  // namespace cortiq::tune::cuda
