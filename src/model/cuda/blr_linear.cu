#include <cuda_fp16.h>

#include <algorithm>

#include "blr/sign_layout.hpp"
#include "core/error.hpp"
#include "model/cuda/blr_linear.hpp"

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

// y[i, j] = (first ? beta·y : y) + h_j · u[i, j] (+ bias_j when last)
__global__ void epilogue(float* __restrict__ y, const float* __restrict__ u,
                         const __half* __restrict__ h, const float* __restrict__ bias, int64_t rows,
                         int64_t m, float beta, bool first, bool last) {
    const int64_t n = rows * m;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t j = i % m;
        float v = first ? (beta == 0.0f ? 0.0f : beta * y[i]) : y[i];
        v += __half2float(h[j]) * u[i];
        if (last && bias) v += bias[j];
        y[i] = v;
    }
}

unsigned blocks_for(int64_t n) {
    return static_cast<unsigned>(std::clamp<int64_t>((n + 255) / 256, 1, 65536));
}

void ensure(ec::DVec& b, int64_t n, cudaStream_t stream) {
    if (b.size() < n) b = ec::DVec(n, stream);
}

// Decode: sign_gemv per product, g and the scales folded in; the first
// product of a path writes t, the second adds into y (β and the bias once).
void decode_path(const DevicePacked& w, PackedScratch& ws, const float* x, int rows, float* y,
                 float beta, const float* bias, cudaStream_t stream) {
    const auto* hs = reinterpret_cast<const __half*>(w.h.get());
    const auto* ls = reinterpret_cast<const __half*>(w.l.get());
    const auto* gs = reinterpret_cast<const __half*>(w.g.get());
    if (w.sign) {
        sign_gemv(w.svt(0), {x, w.n, gs, hs, y, w.m, beta, bias}, rows, ws.gemv, stream);
        return;
    }
    ensure(ws.t, rows * w.r, stream);
    for (int p = 0; p < w.paths; ++p) {
        sign_gemv(w.svt(p), {x, w.n, gs + p * w.n, ls + p * w.r, ws.t.get(), w.r, 0.0f, nullptr},
                  rows, ws.gemv, stream);
        sign_gemv(w.s_u(p),
                  {ws.t.get(), w.r, nullptr, hs + p * w.m, y, w.m, p == 0 ? beta : 1.0f,
                   p == 0 ? bias : nullptr},
                  rows, ws.gemv, stream);
    }
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

void batch_path(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w, PackedScratch& ws,
                const float* x, int64_t rows, float* y, float beta, const float* bias) {
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
        epilogue<<<blocks_for(rows * w.m), 256, 0, stream>>>(
            y, ws.u.get(), hs + p * w.m, bias, rows, w.m, beta, p == 0, p + 1 == w.paths);
        CUDA_LAUNCH_CHECK();
    }
}

}  // namespace

SignMatrix DevicePacked::svt(int p) const {
    const int64_t rows = sign ? m : r;
    return {sv.get() + p * rows * ld_v, ld_v, rows, n};
}
SignMatrix DevicePacked::s_u(int p) const {
    return {su.get() + p * m * ld_u, ld_u, m, r};
}

DevicePacked upload_packed(const blr::PackedWeight& w, cudaStream_t stream) {
    DevicePacked d;
    d.m = w.m;
    d.n = w.n;
    d.r = w.r;
    d.paths = w.paths;
    d.sign = w.sign;
    d.ld_v = blr::words32_for(w.n);
    d.ld_u = w.sign ? 0 : blr::words32_for(w.r);
    std::vector<uint32_t> sv, su;
    for (int p = 0; p < w.paths; ++p) {
        const auto a = blr::aligned_rows(w.svt(p));
        sv.insert(sv.end(), a.begin(), a.end());
        if (w.sign) continue;
        const auto t = blr::transposed_rows(w.sut(p));
        su.insert(su.end(), t.begin(), t.end());
    }
    auto up = [&](auto& dst, const auto* src, int64_t count) {
        using T = std::remove_pointer_t<decltype(dst.get())>;
        dst = ec::DeviceBuffer<T>(count, stream);
        if (count > 0)
            CUDA_CHECK(cudaMemcpyAsync(dst.get(), src, sizeof(T) * static_cast<size_t>(count),
                                       cudaMemcpyHostToDevice, stream));
    };
    up(d.sv, sv.data(), static_cast<int64_t>(sv.size()));
    up(d.su, su.data(), static_cast<int64_t>(su.size()));
    up(d.h, w.h.data(), static_cast<int64_t>(w.h.size()));
    up(d.l, w.l.data(), static_cast<int64_t>(w.l.size()));
    up(d.g, w.g.data(), static_cast<int64_t>(w.g.size()));
    CUDA_CHECK(cudaStreamSynchronize(stream));  // the host vectors may go
    return d;
}

void packed_linear(cublasHandle_t blas, cudaStream_t stream, const DevicePacked& w,
                   PackedScratch& ws, const float* x, int64_t rows, float* y, float beta,
                   const float* bias) {
    if (rows == 0) return;
    static_assert(kDecodeRows == 2, "sign_gemv takes 1 or 2 rows");
    if (rows <= kDecodeRows)
        return decode_path(w, ws, x, static_cast<int>(rows), y, beta, bias, stream);
    return batch_path(blas, stream, w, ws, x, rows, y, beta, bias);
}

}  // namespace cortiq::model::cuda
