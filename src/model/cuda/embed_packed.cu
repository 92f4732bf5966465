// Rows of a compressed embedding (the CUDA twin of model::Embedding::row):
// one block per token; per path the block forms c[k] = h[t]·ℓ[k]·S_U[t, k] in
// shared memory, then each thread sums c against its columns of S_Vᵀ's rows,
// k in order (deterministic), and adds g[j]·(S_V c)[j]. r·n adds per token.
#include <cuda_fp16.h>

#include "core/cuda/device.hpp"
#include "model/cuda/blr_linear.hpp"

namespace cortiq::model::cuda {

namespace {

struct EmbedArgs {
    const int32_t* tokens;
    const uint32_t* sv;  // per path r rows of ld_v words (a sign payload: m rows)
    const uint32_t* su;  // per path m rows of ld_u words
    const __half *h, *l;
    const float* g32;
    int64_t m, n, r, ld_v, ld_u;
    int paths;
    bool sign;
    float* out;
};

__device__ inline bool bit_of(const uint32_t* row, int64_t j) {
    return (row[j / 32] >> (j % 32)) & 1u;
}

__global__ void embed_packed_kernel(EmbedArgs a) {
    extern __shared__ float c[];  // r values
    const int64_t t = a.tokens[blockIdx.x];
    float* out = a.out + static_cast<int64_t>(blockIdx.x) * a.n;
    if (a.sign) {  // h[t] · S[t, :] ∘ g
        const float h = __half2float(a.h[t]);
        const uint32_t* row = a.sv + t * a.ld_v;
        for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x)
            out[j] = (bit_of(row, j) ? -h : h) * a.g32[j];
        return;
    }
    for (int p = 0; p < a.paths; ++p) {
        const float h = __half2float(a.h[p * a.m + t]);
        const uint32_t* su_row = a.su + (p * a.m + t) * a.ld_u;
        for (int64_t k = threadIdx.x; k < a.r; k += blockDim.x) {
            const float v = h * __half2float(a.l[p * a.r + k]);
            c[k] = bit_of(su_row, k) ? -v : v;
        }
        __syncthreads();
        const uint32_t* sv = a.sv + p * a.r * a.ld_v;
        for (int64_t j = threadIdx.x; j < a.n; j += blockDim.x) {
            float acc = 0.0f;
            for (int64_t k = 0; k < a.r; ++k) acc += bit_of(sv + k * a.ld_v, j) ? -c[k] : c[k];
            const float v = a.g32[p * a.n + j] * acc;
            out[j] = p == 0 ? v : out[j] + v;
        }
        __syncthreads();  // c is rewritten by the next path
    }
}

}  // namespace

void embed_packed(const int32_t* tokens, const DevicePacked& e, int64_t rows, float* out,
                  cudaStream_t stream) {
    if (rows == 0) return;
    EmbedArgs a{tokens,
                e.sv.get(),
                e.su.get(),
                reinterpret_cast<const __half*>(e.h.get()),
                reinterpret_cast<const __half*>(e.l.get()),
                e.g32.get(),
                e.m,
                e.n,
                e.r,
                e.ld_v,
                e.ld_u,
                e.paths,
                e.sign,
                out};
    const size_t shared = e.sign ? 0 : static_cast<size_t>(e.r) * sizeof(float);
    CORTIQ_CHECK(shared <= 48 * 1024,
                 "a compressed embedding of rank {} exceeds the lookup's {} KB", e.r, 48);
    embed_packed_kernel<<<static_cast<unsigned>(rows), 256, shared, stream>>>(a);
    CUDA_LAUNCH_CHECK();
}

}  // namespace cortiq::model::cuda
