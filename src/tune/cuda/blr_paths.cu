// The element-wise steps of a BLR layer's forward and backward for all of its
// paths in one launch each (grad_ops.hpp, "BLR steps over the paths"). The
// products between them are batched over the paths, and each of them takes
// the 3xTF32 split of its inexact operand (the activations) along its inner
// dimension: [lo | hi] (rows × 2k) times the sign matrix stacked twice
// (2k × n), which is lo S + hi S = the two passes of a product whose other
// operand is exact (gemm_tf32.hpp) in one. A layer of two paths launches 7
// kernels forward and 10 backward instead of 22 and 28.
#include "core/cuda/tf32_round.cuh"
#include "core/error.hpp"
#include "tune/cuda/grad_ops.hpp"
#include "tune/cuda/sign_quad.cuh"

namespace cortiq::tune::cuda {

namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
    const int64_t b = (n + kThreads - 1) / kThreads;
    return static_cast<unsigned>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

__global__ void split_scaled_kernel(const float* in, int64_t in_stride, PathVecs s, int paths,
                                    int64_t rows, int64_t cols, float* out) {
    const int64_t per = rows * cols;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         idx < paths * per; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int p = static_cast<int>(idx / per);
        const int64_t e = idx - p * per, i = e / cols, j = e - i * cols;
        const float v = in[p * in_stride + e] * s.v[p][j];
        const float h = cortiq::cuda::tf32_high(v);
        float* o = out + p * 2 * per + i * 2 * cols;
        o[j] = v - h;
        o[cols + j] = h;
    }
}

// Four consecutive columns j of row i of path p's signs (rp is a multiple of 4).
__device__ float4 signs_at(const PathSigns& s, int p, int64_t i, int64_t j, int64_t r, int64_t rp) {
    if (s.f[p]) return *reinterpret_cast<const float4*>(s.f[p] + i * rp + j);
    return sign_quad(s.bits[p], i * rp + j, j, r);
}

__global__ void stack_signs_kernel(PathSigns s, int paths, int64_t rows, int64_t r, int64_t rp,
                                   bool side_by_side, float* out) {
    const int64_t quads = rows * rp / 4;
    for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
         idx < paths * quads; idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int p = static_cast<int>(idx / quads);
        const int64_t e = (idx - p * quads) * 4, i = e / rp, j = e - i * rp;
        const float4 v = signs_at(s, p, i, j, r, rp);
        float* o = out + p * 2 * rows * rp;
        if (side_by_side) {
            *reinterpret_cast<float4*>(o + i * 2 * rp + j) = v;
            *reinterpret_cast<float4*>(o + i * 2 * rp + rp + j) = v;
        } else {
            *reinterpret_cast<float4*>(o + e) = v;
            *reinterpret_cast<float4*>(o + rows * rp + e) = v;
        }
    }
}

__global__ void sum_scaled_kernel(const float* in, int64_t in_stride, PathVecs s, int paths,
                                  int64_t rows, int64_t cols, float* out, bool accumulate) {
    for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < rows * cols;
         e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t j = e % cols;
        float v = in[e] * s.v[0][j];
        if (accumulate) v = out[e] + v;
        for (int p = 1; p < paths; ++p) v = v + in[p * in_stride + e] * s.v[p][j];
        out[e] = v;
    }
}

void check_paths(int paths) {
    CORTIQ_ASSERT(paths >= 1 && paths <= kMaxBlrPaths, "a BLR layer of {} paths (1 to {})", paths,
                  kMaxBlrPaths);
}

}  // namespace

void split_scaled_paths(const Gpu& g, const float* in, int64_t in_stride, const PathVecs& s,
                        int paths, int64_t rows, int64_t cols, float* out) {
    check_paths(paths);
    if (rows * cols == 0) return;
    split_scaled_kernel<<<grid_for(paths * rows * cols), kThreads, 0, g.stream()>>>(
        in, in_stride, s, paths, rows, cols, out);
    CUDA_LAUNCH_CHECK();
}

void stack_signs_paths(const Gpu& g, const PathSigns& s, int paths, int64_t rows, int64_t r,
                       int64_t rp, bool side_by_side, float* out) {
    check_paths(paths);
    CORTIQ_ASSERT(rp % 4 == 0 && r <= rp, "signs of rank {} padded to {}", r, rp);
    if (rows * rp == 0) return;
    stack_signs_kernel<<<grid_for(paths * rows * rp / 4), kThreads, 0, g.stream()>>>(
        s, paths, rows, r, rp, side_by_side, out);
    CUDA_LAUNCH_CHECK();
}

void sum_scaled_paths(const Gpu& g, const float* in, int64_t in_stride, const PathVecs& s,
                      int paths, int64_t rows, int64_t cols, float* out, bool accumulate) {
    check_paths(paths);
    if (rows * cols == 0) return;
    sum_scaled_kernel<<<grid_for(rows * cols), kThreads, 0, g.stream()>>>(
        in, in_stride, s, paths, rows, cols, out, accumulate);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::tune::cuda
