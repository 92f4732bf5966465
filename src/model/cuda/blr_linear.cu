#include <cuda_fp16.h>

#include <algorithm>

#include "blr/layout.hpp"
#include "core/error.hpp"
#include "model/cuda/blr_linear.hpp"

namespace cortiq::model::cuda {

namespace ec = cortiq::cuda;

namespace {

// Rows of sign bits in the stream (blr::SignRows on the device).
struct Rows {
    const uint32_t* words;
    uint64_t first, stride;
    int64_t rows, cols;
};

Rows svt_of(const DevicePacked& w, int p) {
    if (w.sign) return {w.bits.get(), 0, 64 * blr::words_for(static_cast<uint64_t>(w.n)), w.m, w.n};
    const uint64_t m = w.m, n = w.n, r = w.r;
    return {w.bits.get(), blr::bit_svt(m, n, r, p), n, w.r, w.n};
}
Rows sut_of(const DevicePacked& w, int p) {
    const uint64_t m = w.m, n = w.n, r = w.r;
    return {w.bits.get(), blr::bit_sut(m, n, r, p), m, w.r, w.m};
}

// 32 bits of the stream from bit b (the stream has a guard word).
__device__ __forceinline__ uint32_t bits32(const uint32_t* w, uint64_t b) {
    const uint64_t q = b >> 5;
    const uint32_t s = static_cast<uint32_t>(b & 31);
    return s ? __funnelshift_r(__ldg(w + q), __ldg(w + q + 1), s) : __ldg(w + q);
}
__device__ __forceinline__ float flip(float v, uint32_t bit) {
    return __uint_as_float(__float_as_uint(v) ^ (bit << 31));
}
__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// t[i, k] = scale_k · Σ_j s(k,j) · xg[i, j] for R rows i (xg = g ∘ x, padded
// with zeros to a multiple of 1024 columns). A block of 4 warps takes one row
// k of S; warp w takes the 1024-column spans it ≡ w (mod 4). For each span the
// warp loads the row's 32 words of bits at once (one coalesced 128-byte
// load); lane L then takes columns 128q + 4L .. + 3 (coalesced float4 reads
// of xg, from L1: every row reads all of xg), their four bits fetched from
// the lane that loaded that word. Bits past a row's end belong to the next
// row; they meet the zeros of xg.
template <int R>
__global__ void __launch_bounds__(128)
    dot_decode(Rows s, const float* __restrict__ xg, int64_t ld_xg,
               const __half* __restrict__ scale, float* __restrict__ t, int64_t ldt) {
    __shared__ float red[4][R];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int cols = static_cast<int>(s.cols), iters = (cols + 1023) / 1024;
    for (int64_t k = blockIdx.x; k < s.rows; k += gridDim.x) {
        const uint64_t base = s.first + static_cast<uint64_t>(k) * s.stride;
        float acc[R];
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] = 0.0f;
        for (int it = warp; it < iters; it += 4) {
            const int c = 1024 * it + 32 * lane;
            const uint32_t mine = c < cols ? bits32(s.words, base + c) : 0u;
            float4 v[R][8];
#pragma unroll
            for (int r = 0; r < R; ++r)
#pragma unroll
                for (int q = 0; q < 8; ++q)
                    v[r][q] = __ldg(reinterpret_cast<const float4*>(xg + r * ld_xg + 1024 * it +
                                                                    128 * q + 4 * lane));
#pragma unroll
            for (int q = 0; q < 8; ++q) {
                const uint32_t nib =
                    __shfl_sync(0xffffffffu, mine, 4 * q + (lane >> 3)) >> (4 * (lane & 7));
#pragma unroll
                for (int r = 0; r < R; ++r)
                    acc[r] += (flip(v[r][q].x, nib & 1u) + flip(v[r][q].y, (nib >> 1) & 1u)) +
                              (flip(v[r][q].z, (nib >> 2) & 1u) + flip(v[r][q].w, (nib >> 3) & 1u));
            }
        }
#pragma unroll
        for (int r = 0; r < R; ++r) {
            const float w = warp_sum(acc[r]);
            if (lane == 0) red[warp][r] = w;
        }
        __syncthreads();
        if (threadIdx.x < R) {
            const int r = threadIdx.x;
            const float v = (red[0][r] + red[1][r]) + (red[2][r] + red[3][r]);
            t[r * ldt + k] = scale ? v * __half2float(scale[k]) : v;
        }
        __syncthreads();
    }
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

// y[i, j] += h_j · Σ_k s(k,j) t[i,k] for R rows i. A warp owns 256
// consecutive columns (lane L: 8 of them, one byte of bits per k; the warp's
// 32 bytes are one sector), its block's 8 warps share them and split the
// block's chunk of k round-robin, loading 8 latents' bytes before using any;
// the warps' sums meet in shared memory and the chunks in y (atomics: y was
// set to β·y + bias before).
template <int R>
__global__ void __launch_bounds__(256)
    axpy_decode(Rows s, const float* __restrict__ t, const __half* __restrict__ h,
                float* __restrict__ y, int64_t kchunk) {
    __shared__ float part[8][R * 256 + 8];
    __shared__ float tk[R * 1024];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int64_t k0 = blockIdx.y * kchunk, k1 = min(s.rows, k0 + kchunk);
    const int64_t j0 = blockIdx.x * int64_t{256} + 8 * lane;
    const bool live = j0 < s.cols;
    float acc[R][8];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int b = 0; b < 8; ++b) acc[r][b] = 0.0f;
    for (int64_t kb = k0; kb < k1; kb += 1024) {  // t of up to 1024 latents in shared memory
        const int kn = static_cast<int>(min(int64_t{1024}, k1 - kb));
        __syncthreads();
        for (int i = threadIdx.x; i < R * kn; i += 256) tk[i] = t[(i / kn) * s.rows + kb + i % kn];
        __syncthreads();
        if (!live) continue;
        for (int k = warp; k < kn; k += 64) {
            uint32_t bytes[8];
            float tv[8][R];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int ku = k + 8 * u;
                const bool in = ku < kn;
                bytes[u] =
                    in ? bits32(s.words, s.first + static_cast<uint64_t>(kb + ku) * s.stride + j0)
                       : 0u;
#pragma unroll
                for (int r = 0; r < R; ++r) tv[u][r] = in ? tk[r * kn + ku] : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u)
#pragma unroll
                for (int r = 0; r < R; ++r)
#pragma unroll
                    for (int q = 0; q < 8; ++q) acc[r][q] += flip(tv[u][r], (bytes[u] >> q) & 1u);
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int q = 0; q < 8; ++q) part[warp][r * 256 + 8 * lane + q] = acc[r][q];
    __syncthreads();
    for (int i = threadIdx.x; i < R * 256; i += 256) {
        const int r = i / 256, c = i % 256;
        const int64_t j = blockIdx.x * int64_t{256} + c;
        if (j >= s.cols) continue;
        float v = 0.0f;
#pragma unroll
        for (int w = 0; w < 8; ++w) v += part[w][i];
        atomicAdd(y + r * s.cols + j, v * __half2float(h[j]));
    }
}

// dst (k1 − k0) × len = ±1.0f from rows k0.. of S, columns 0..len.
__global__ void expand_tile(Rows s, int64_t k0, int64_t k1, float* __restrict__ dst) {
    const int64_t len = s.cols, n = (k1 - k0) * len;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
        const int64_t k = k0 + i / len, j = i % len;
        const uint64_t b = s.first + static_cast<uint64_t>(k) * s.stride + j;
        const uint32_t bit = (__ldg(s.words + (b >> 5)) >> (b & 31)) & 1u;
        dst[i] = flip(1.0f, bit);
    }
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

// xg = g ∘ x staged once (R × n padded to 1024), then the rows of S.
template <int R>
void dot_decode_launch(const Rows& s, const float* x, const __half* g, const __half* scale,
                       float* t, int64_t ldt, ec::DVec& xg, cudaStream_t stream) {
    const int64_t ld = (s.cols + 1023) / 1024 * 1024;
    ensure(xg, R * ld, stream);
    stage_xg<<<blocks_for(R * ld), 256, 0, stream>>>(x, g, R, s.cols, ld, xg.get());
    CUDA_LAUNCH_CHECK();
    const int64_t blocks = std::clamp<int64_t>(s.rows, 1, 65535);
    dot_decode<R>
        <<<static_cast<unsigned>(blocks), 128, 0, stream>>>(s, xg.get(), ld, scale, t, ldt);
    CUDA_LAUNCH_CHECK();
}

template <int R>
void axpy_decode_launch(const Rows& s, const float* t, const __half* h, float* y, int sms,
                        cudaStream_t stream) {
    const int64_t col_blocks = (s.cols + 255) / 256;
    // about four blocks per SM, each warp at least 8 latents
    const int64_t splits =
        std::clamp<int64_t>(4 * sms / col_blocks, 1, std::max<int64_t>(1, s.rows / 64));
    const int64_t kchunk = (s.rows + splits - 1) / splits;
    const dim3 grid(static_cast<unsigned>(col_blocks),
                    static_cast<unsigned>((s.rows + kchunk - 1) / kchunk));
    axpy_decode<R><<<grid, 256, 0, stream>>>(s, t, h, y, kchunk);
    CUDA_LAUNCH_CHECK();
}

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        CUDA_CHECK(cudaGetDevice(&dev));
        CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
        return v;
    }();
    return n;
}

// y = β·y + bias (either may be absent) before the atomics add the products.
__global__ void init_output(float* __restrict__ y, const float* __restrict__ bias, int64_t rows,
                            int64_t m, float beta) {
    const int64_t n = rows * m;
    for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
         i += static_cast<int64_t>(gridDim.x) * blockDim.x)
        y[i] = (beta == 0.0f ? 0.0f : beta * y[i]) + (bias ? bias[i % m] : 0.0f);
}

void init_output_launch(float* y, const float* bias, int64_t rows, int64_t m, float beta,
                        cudaStream_t stream) {
    if (beta == 1.0f && !bias) return;  // a residual stream: nothing to do
    if (beta == 0.0f && !bias) {
        CUDA_CHECK(cudaMemsetAsync(y, 0, sizeof(float) * static_cast<size_t>(rows * m), stream));
        return;
    }
    init_output<<<blocks_for(rows * m), 256, 0, stream>>>(y, bias, rows, m, beta);
    CUDA_LAUNCH_CHECK();
}

template <int R>
void decode_path(const DevicePacked& w, PackedScratch& ws, const float* x, float* y, float beta,
                 const float* bias, cudaStream_t stream) {
    const auto* hs = reinterpret_cast<const __half*>(w.h.get());
    const auto* ls = reinterpret_cast<const __half*>(w.l.get());
    const auto* gs = reinterpret_cast<const __half*>(w.g.get());
    if (w.sign) {
        ensure(ws.u, R * w.m, stream);
        dot_decode_launch<R>(svt_of(w, 0), x, gs, nullptr, ws.u.get(), w.m, ws.xg, stream);
        epilogue<<<blocks_for(R * w.m), 256, 0, stream>>>(y, ws.u.get(), hs, bias, R, w.m, beta,
                                                          true, true);
        CUDA_LAUNCH_CHECK();
        return;
    }
    ensure(ws.t, R * w.r, stream);
    init_output_launch(y, bias, R, w.m, beta, stream);
    for (int p = 0; p < w.paths; ++p) {
        dot_decode_launch<R>(svt_of(w, p), x, gs + p * w.n, ls + p * w.r, ws.t.get(), w.r, ws.xg,
                             stream);
        axpy_decode_launch<R>(sut_of(w, p), ws.t.get(), hs + p * w.m, y, sm_count(), stream);
    }
}

// Rows of S per expanded tile: up to 16 M floats (64 MB).
int64_t tile_rows(const Rows& s) {
    return std::clamp<int64_t>((int64_t{1} << 24) / std::max<int64_t>(s.cols, 1), 1, s.rows);
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

// With `dot`: out (rows × s.rows, ld s.rows) = in (rows × s.cols) · Sᵀ;
// else: out (rows × s.cols) = in (rows × s.rows) · S. S goes through tiles of
// its rows expanded to ±1.0f.
void tiled_product(cublasHandle_t blas, cudaStream_t stream, const Rows& s, PackedScratch& ws,
                   bool dot, const float* in, int64_t rows, float* out) {
    const int64_t kb = tile_rows(s);
    ensure(ws.tile, kb * s.cols, stream);
    for (int64_t k0 = 0; k0 < s.rows; k0 += kb) {
        const int64_t k1 = std::min(s.rows, k0 + kb);
        expand_tile<<<blocks_for((k1 - k0) * s.cols), 256, 0, stream>>>(s, k0, k1, ws.tile.get());
        CUDA_LAUNCH_CHECK();
        if (dot)  // col-major: out[k0:k1, :] (kb × rows, ld s.rows) = tileᵀ · inᵀ
            gemm_tf32(blas, CUBLAS_OP_T, k1 - k0, rows, s.cols, ws.tile.get(), s.cols, in, s.cols,
                      0.0f, out + k0, s.rows);
        else  // col-major: outᵀ (cols × rows) += tile-as-stored (cols × kb) · in[:, k0:k1]ᵀ
            gemm_tf32(blas, CUBLAS_OP_N, s.cols, rows, k1 - k0, ws.tile.get(), s.cols, in + k0,
                      s.rows, k0 == 0 ? 0.0f : 1.0f, out, s.cols);
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
            tiled_product(blas, stream, svt_of(w, 0), ws, true, ws.xg.get(), rows, ws.u.get());
        } else {
            ensure(ws.t, rows * w.r, stream);
            tiled_product(blas, stream, svt_of(w, p), ws, true, ws.xg.get(), rows, ws.t.get());
            scale_rows_by<<<blocks_for(rows * w.r), 256, 0, stream>>>(ws.t.get(), ls + p * w.r,
                                                                      rows, w.r);
            CUDA_LAUNCH_CHECK();
            tiled_product(blas, stream, sut_of(w, p), ws, false, ws.t.get(), rows, ws.u.get());
        }
        epilogue<<<blocks_for(rows * w.m), 256, 0, stream>>>(
            y, ws.u.get(), hs + p * w.m, bias, rows, w.m, beta, p == 0, p + 1 == w.paths);
        CUDA_LAUNCH_CHECK();
    }
}

}  // namespace

DevicePacked upload_packed(const blr::PackedWeight& w, cudaStream_t stream) {
    DevicePacked d;
    d.m = w.m;
    d.n = w.n;
    d.r = w.r;
    d.paths = w.paths;
    d.sign = w.sign;
    auto up = [&](auto& dst, const auto* src, int64_t count) {
        using T = std::remove_pointer_t<decltype(dst.get())>;
        dst = ec::DeviceBuffer<T>(count, stream);
        if (count > 0)
            CUDA_CHECK(cudaMemcpyAsync(dst.get(), src, sizeof(T) * static_cast<size_t>(count),
                                       cudaMemcpyHostToDevice, stream));
    };
    // the host vector of u64 words (with its guard word) read as u32 words
    up(d.bits, reinterpret_cast<const uint32_t*>(w.bits.data()),
       2 * static_cast<int64_t>(w.bits.size()));
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
    static_assert(kDecodeRows == 2, "decode_path is instantiated for 1 and 2 rows");
    if (rows == 1) return decode_path<1>(w, ws, x, y, beta, bias, stream);
    if (rows == 2) return decode_path<2>(w, ws, x, y, beta, bias, stream);
    return batch_path(blas, stream, w, ws, x, rows, y, beta, bias);
}

}  // namespace cortiq::model::cuda
