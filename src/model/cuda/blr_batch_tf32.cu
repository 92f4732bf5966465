// The batch path as it was before the fp16 one (BatchMath::tf32, to compare
// against; model/cuda/blr_linear.hpp): tiles of S's rows expanded to ±1.0f and
// multiplied by cuBLAS with TF32 tensor cores.
#include <algorithm>

#include "core/cuda/device.hpp"
#include "model/cuda/blr_batch.hpp"

namespace cortiq::model::cuda {

namespace ec = cortiq::cuda;

namespace {

__device__ __forceinline__ float flip(float v, uint32_t bit) {
    return __uint_as_float(__float_as_uint(v) ^ (bit << 31));
}

// xg[i, j] = x[i, j] · g_j for j < cols, 0 for cols ≤ j < ld (R rows).
__global__ void stage_xg(const float* __restrict__ x, const __half* __restrict__ g, int64_t rows,
                         int64_t cols, int64_t ld, float* __restrict__ xg) {
    const int64_t n = rows * ld;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t r = i / ld, j = i - r * ld;
        xg[i] = j < cols ? x[r * cols + j] * __half2float(g[j]) : 0.0f;
    }
}

// dst ((k1 − k0) × s.cols) = ±1.0f from rows k0.. of S: thread j of block row
// k (grid.y) expands bit j of row k0 + k.
__global__ void expand_tile(SignMatrix s, int64_t k0, float* __restrict__ dst) {
    const int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
    if (j >= s.cols) return;
    const int64_t k = k0 + blockIdx.y;
    const uint32_t bit = (__ldg(s.words + k * s.ld + j / 32) >> (j % 32)) & 1u;
    dst[blockIdx.y * s.cols + j] = flip(1.0f, bit);
}

void ensure(ec::DVec& b, int64_t n, cudaStream_t stream) {
    if (b.size() < n) b = ec::DVec(n, stream);
}

// Rows of S per expanded tile: up to 16 M floats (64 MB), 65535 rows.
int64_t tile_rows(const SignMatrix& s) {
    return std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(s.cols, 1), 1,
                               std::min<int64_t>(s.rows, 65535));
}

// C (col-major) = alpha·op(A)·B + beta·C with TF32 tensor cores, float32 in and out.
void gemm_tf32(cublasHandle_t blas, cublasOperation_t op_a, int64_t M, int64_t N, int64_t K,
               const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c,
               int64_t ldc) {
    const float one = 1.0f;
    CUBLAS_CHECK(cublasGemmEx(
        blas, op_a, CUBLAS_OP_N, static_cast<int>(M), static_cast<int>(N), static_cast<int>(K),
        &one, a, CUDA_R_32F, static_cast<int>(lda), b, CUDA_R_32F, static_cast<int>(ldb), &beta, c,
        CUDA_R_32F, static_cast<int>(ldc), CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT));
}

// out (rows × s.rows, ld s.rows) = in (rows × s.cols) · Sᵀ, S through tiles
// of its rows expanded to ±1.0f.
void tiled_product(cublasHandle_t blas, cudaStream_t stream, const SignMatrix& s, PackedScratch& ws,
                   const float* in, int64_t rows, float* out) {
    const int64_t kb = tile_rows(s);
    ensure(ws.tile, kb * s.cols, stream);
    for (int64_t k0 = 0; k0 < s.rows; k0 += kb) {
        const int64_t k1 = std::min(s.rows, k0 + kb);
        const dim3 grid(static_cast<unsigned>((s.cols + 255) / 256),
                        static_cast<unsigned>(k1 - k0));
        expand_tile<<<grid, 256, 0, stream>>>(s, k0, ws.tile.get());
        CUDA_LAUNCH_CHECK();
        // col-major: out[k0:k1, :] (kb × rows, ld s.rows) = tileᵀ · inᵀ
        gemm_tf32(blas, CUBLAS_OP_T, k1 - k0, rows, s.cols, ws.tile.get(), s.cols, in, s.cols, 0.0f,
                  out + k0, s.rows);
    }
}

__global__ void scale_rows_by(float* __restrict__ t, const __half* __restrict__ l, int64_t rows,
                              int64_t r) {
    const int64_t n = rows * r;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        t[i] *= __half2float(l[i % r]);
}

}  // namespace

void batch_path_tf32(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                     PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                     const float* bias) {
    const auto* hs = reinterpret_cast<const __half*>(w.h.get());
    const auto* ls = reinterpret_cast<const __half*>(w.l.get());
    const auto* gs = reinterpret_cast<const __half*>(w.g.get());
    ensure(ws.xg, rows * w.n, stream);
    ensure(ws.u, rows * w.m, stream);
    for (int p = 0; p < w.paths; ++p) {
        stage_xg<<<blocks_for(rows * w.n), 256, 0, stream>>>(x, gs + p * w.n, rows, w.n, w.n,
                                                             ws.xg.get());
        CUDA_LAUNCH_CHECK();
        if (w.sign) {
            tiled_product(blas, stream, w.svt(0), ws, ws.xg.get(), rows, ws.u.get());
        } else {
            ensure(ws.t, rows * w.r, stream);
            tiled_product(blas, stream, w.svt(p), ws, ws.xg.get(), rows, ws.t.get());
            scale_rows_by<<<blocks_for(rows * w.r), 256, 0, stream>>>(ws.t.get(), ls + p * w.r,
                                                                      rows, w.r);
            CUDA_LAUNCH_CHECK();
            tiled_product(blas, stream, w.s_u(p), ws, ws.t.get(), rows, ws.u.get());
        }
        blr_epilogue({.y = y,
                      .u = ws.u.get(),
                      .h = hs + p * w.m,
                      .bias = bias,
                      .rows = rows,
                      .m = w.m,
                      .beta = beta,
                      .first = p == 0,
                      .last = p + 1 == w.paths},
                     stream);
    }
}

}  // namespace cortiq::model::cuda
